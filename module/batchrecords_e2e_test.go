//go:build unix

package module

import (
	"context"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/store"
)

// TestBatchRowRecordsGoAfterTheEnd runs a gateway-run batch to completed and cancels
// another: once their grace after the end is over, neither has a row, counts or a
// cancellation left in the store, and GET /batches/{id} answers exactly as it did before
// they went (request_counts, billing, files), the output file still whole. The completed
// batch's records are still there right after its end (the grace).
func TestBatchRowRecordsGoAfterTheEnd(t *testing.T) {
	prevEvery, prevGrace := batchRowSweepEvery.Load(), batchRowGrace.Load()
	batchRowSweepEvery.Store(int64(100 * time.Millisecond))
	batchRowGrace.Store(int64(3 * time.Second))
	t.Cleanup(func() {
		batchRowSweepEvery.Store(prevEvery)
		batchRowGrace.Store(prevGrace)
	})
	up := newBatchUpstream(t)
	env := startGateway(t, batchGatewayBlock(up.URL, "\t\tbatches {\n\t\t\trows_per_chunk 3\n\t\t\tbatch_chunks 1\n\t\t}"), "")
	_, key := env.workspace(10 * usd)
	client := env.openai(key)
	ctx := context.Background()
	records := func(id string) (rows int, counts store.BatchRowCounts, cancelled time.Time, listed bool) {
		t.Helper()
		page, err := env.store.ListBatchRows(ctx, id, -1, store.MaxBatchRowPage)
		if err != nil {
			t.Fatal(err)
		}
		if counts, err = env.store.CountBatchRows(ctx, id); err != nil {
			t.Fatal(err)
		}
		if cancelled, err = env.store.BatchCancelRequested(ctx, id); err != nil {
			t.Fatal(err)
		}
		ended, err := env.store.EndedBatchesWithRows(ctx, time.Now().Add(time.Hour), store.MaxBatchRowPage)
		if err != nil {
			t.Fatal(err)
		}
		return len(page), counts, cancelled, slices.Contains(ended, id)
	}
	gone := func(id string) bool {
		rows, counts, cancelled, listed := records(id)
		return rows == 0 && counts == (store.BatchRowCounts{}) && cancelled.IsZero() && !listed
	}

	const rows = 20
	completed := waitBatch(t, client, newBatch(t, client, uploadBatchFile(t, client, batchRows(rows))).ID, "completed")
	completedBefore := batchRaw(t, completed)
	if n, counts, _, listed := records(completed.ID); n != rows || counts.Done != rows || counts.Completed != rows || !listed {
		t.Fatalf("right after its end, the completed batch has %d rows, counts %+v, listed %v; want its %d rows kept for the grace",
			n, counts, listed, rows)
	}

	up.delay.Store(int64(200 * time.Millisecond))
	slow := newBatch(t, client, uploadBatchFile(t, client, batchRows(40)))
	waitFor(t, "a row of the slow batch answered", func() bool { return len(up.seen) > rows })
	if _, err := client.Batches.Cancel(ctx, slow.ID); err != nil {
		t.Fatal(err)
	}
	cancelled := waitBatch(t, client, slow.ID, "cancelled")
	up.delay.Store(0)
	cancelledBefore := batchRaw(t, cancelled)
	if cancelled.RequestCounts.Completed == 0 || cancelled.RequestCounts.Failed == 0 {
		t.Fatalf("cancelled: %s", cancelled.RawJSON())
	}

	waitFor(t, "both batches' row records removed", func() bool { return gone(completed.ID) && gone(slow.ID) })
	for _, b := range []struct {
		id     string
		before map[string]any
	}{{completed.ID, completedBefore}, {slow.ID, cancelledBefore}} {
		after, err := client.Batches.Get(ctx, b.id)
		if err != nil {
			t.Fatal(err)
		}
		if raw := batchRaw(t, after); !reflect.DeepEqual(raw, b.before) {
			t.Fatalf("batch %s once its records went:\n%v\nbefore:\n%v", b.id, raw, b.before)
		}
	}
	if lines := outputLines(t, client, completed.OutputFileID); len(lines) != rows {
		t.Fatalf("the output file has %d lines once the records went; want %d", len(lines), rows)
	}
}
