//go:build !linux

package sqlite

import "sync/atomic"

// runLowered calls run: where the priority of one thread cannot be set apart from the
// process's (setpriority applies to whole processes there), the writer keeps the usual one.
func runLowered(_ *atomic.Int64, run func()) { run() }
