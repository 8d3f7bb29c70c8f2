package batch

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/store"
	"github.com/modelgateway/caddy-modelgateway/store/sqlite"
)

// TestSweepRows: the sweep clears the ended batches a page at a time, those that ended
// first first, each whole (rows, counts, cancellation); a running batch, and one that
// ended within the grace, keep their rows; a row recorded after its batch was cleared is
// cleared by the next sweep.
func TestSweepRows(t *testing.T) {
	ctx := context.Background()
	s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "b.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.CreateWorkspace(ctx, store.Workspace{ID: "ws_sweep", Name: "sweep"}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	grace := time.Minute
	batch := func(id string, ended time.Duration, rows int) {
		t.Helper()
		j := store.Job{ID: id, WorkspaceID: "ws_sweep", Kind: store.JobBatch, Status: StatusCompleted, CreatedAt: now.Add(-time.Hour)}
		if ended == 0 {
			j.Status = StatusInProgress
		} else {
			j.CompletedAt = now.Add(-ended)
		}
		if err := s.CreateJob(ctx, j, now.Add(time.Hour), nil); err != nil {
			t.Fatal(err)
		}
		record(t, s, id, 0, rows)
	}
	batch("batch_running", 0, 300)
	batch("batch_recent", grace/2, 300)
	var ended []string
	for i := range 5 {
		id := fmt.Sprintf("batch_ended_%d", i)
		batch(id, grace+time.Duration(5-i)*time.Minute, 150*i) // the first ended first, and has no row
		if _, err := s.RequestBatchCancel(ctx, id); err != nil {
			t.Fatal(err)
		}
		ended = append(ended, id)
	}

	for i, want := range []int{2, 2, 1, 0} {
		n, err := SweepRows(ctx, s, now.Add(-grace), 2)
		if err != nil || n != want {
			t.Fatalf("sweep %d: %d, %v; want %d cleared", i, n, err, want)
		}
		for k, id := range ended {
			cleared := k < 2*i+want
			if got := recordsOf(t, s, id); cleared != (got == "") {
				t.Fatalf("after sweep %d, %s has %s; want it cleared: %v", i, id, got, cleared)
			}
		}
	}
	for _, id := range []string{"batch_running", "batch_recent"} {
		if c, err := s.CountBatchRows(ctx, id); err != nil || c.Done != 300 {
			t.Fatalf("%s after the sweeps: %+v, %v; want its 300 rows counted", id, c, err)
		}
		if rows, err := s.ListBatchRows(ctx, id, 249, 100); err != nil || len(rows) != 50 {
			t.Fatalf("%s after the sweeps: rows from 250: %d, %v; want 50", id, len(rows), err)
		}
	}

	// A row in flight when its batch ended, recorded after the batch was cleared.
	record(t, s, ended[3], 1000, 1)
	if n, err := SweepRows(ctx, s, now.Add(-grace), 2); err != nil || n != 1 || recordsOf(t, s, ended[3]) != "" {
		t.Fatalf("sweep after a late row: %d, %v, and %s has %s", n, err, ended[3], recordsOf(t, s, ended[3]))
	}
	// Once the grace is over for the recent one, it goes too.
	if n, err := SweepRows(ctx, s, now, 2); err != nil || n != 1 || recordsOf(t, s, "batch_recent") != "" {
		t.Fatalf("sweep past the recent batch's grace: %d, %v", n, err)
	}
}

// record records rows [from, from+n) of batch id, answered with 200 at 1 nanodollar each.
func record(t *testing.T, s store.Store, id string, from, n int) {
	t.Helper()
	rows := make([]store.BatchRow, n)
	for i := range rows {
		rows[i] = store.BatchRow{BatchID: id, Index: from + i, CustomID: "req", StatusCode: 200, CostNanos: 1}
	}
	if _, err := s.RecordBatchRows(context.Background(), rows); err != nil {
		t.Fatal(err)
	}
}

// recordsOf says what batch id still has of its row records: "" when nothing.
func recordsOf(t *testing.T, s store.Store, id string) string {
	t.Helper()
	ctx := context.Background()
	rows, err := s.ListBatchRows(ctx, id, -1, 1)
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.CountBatchRows(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	at, err := s.BatchCancelRequested(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var has string
	if len(rows) > 0 {
		has += " rows"
	}
	if c != (store.BatchRowCounts{}) {
		has += " counts"
	}
	if !at.IsZero() {
		has += " a cancellation"
	}
	return has
}
