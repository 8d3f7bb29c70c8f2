//go:build !gatewaybench

package sqlite

import "time"

// recordTxSpan is a no-op outside cmd/gatewaybench's builds (the gatewaybench build tag):
// only the benchmark reads the writer's transaction spans.
func recordTxSpan(start, end time.Time) {}
