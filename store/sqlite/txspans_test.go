//go:build gatewaybench

package sqlite

import (
	"path/filepath"
	"testing"
	"time"
)

// TestTxSpans: every write transaction of the writer is noted with its start and end, and
// the ring keeps the last txSpanCount noted, in the order they were noted.
func TestTxSpans(t *testing.T) {
	s := openTemp(t, filepath.Join(t.TempDir(), "g.db"))
	t0 := time.Now().UnixNano()
	fundedWorkspace(t, s, "ws_spans", 1_000_000_000)
	t1 := time.Now().UnixNano()
	after := TxSpans()
	within := 0
	for _, sp := range after {
		if sp[0] > sp[1] {
			t.Fatalf("span %v ends before it starts", sp)
		}
		if sp[0] >= t0 && sp[1] <= t1 {
			within++
		}
	}
	// Creating the workspace and adding its credits: two transactions.
	if within < 2 {
		t.Fatalf("%d transactions noted during the two writes (%d spans in all)", within, len(after))
	}
	for i := 0; i < txSpanCount+10; i++ {
		recordTxSpan(time.Unix(0, int64(i)), time.Unix(0, int64(i)+1))
	}
	got := TxSpans()
	if len(got) != txSpanCount || got[0][0] != 10 || got[len(got)-1][0] != txSpanCount+9 {
		t.Fatalf("ring holds %d spans from %v to %v; want %d, the last ones", len(got), got[0], got[len(got)-1], txSpanCount)
	}
}
