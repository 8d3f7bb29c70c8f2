package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/store"
)

// testBatchRows checks the batch rows role: a row is recorded once (a second record of
// its index, even a different one, changes nothing and says so), even when many writers
// race for it; done indexes, counts and the ordered scan see exactly what was recorded;
// batches do not see each other's rows; deletion removes a batch's rows only.
func testBatchRows(t *testing.T, s store.Store, c *Clock) {
	ctx := context.Background()
	row := func(batch string, i, status int, cost int64) store.BatchRow {
		r := store.BatchRow{BatchID: batch, Index: i, CustomID: fmt.Sprintf("req-%d", i), StatusCode: status,
			RequestID: fmt.Sprintf("gen_%s_%d", batch, i), CostNanos: cost}
		if status == 0 {
			r.ErrorCode, r.ErrorMessage = "batch_expired", "the row was not run"
		} else {
			r.Body = json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))
		}
		return r
	}
	first := row("batch_a", 3, 200, 7)
	ok, err := s.RecordBatchRow(ctx, first)
	if err != nil || !ok {
		t.Fatalf("RecordBatchRow: %v, %v", ok, err)
	}
	again := row("batch_a", 3, 500, 99)
	if ok, err := s.RecordBatchRow(ctx, again); err != nil || ok {
		t.Fatalf("recording row 3 again: %v, %v; want false, nil", ok, err)
	}
	for _, r := range []store.BatchRow{row("batch_a", 0, 200, 5), row("batch_a", 1, 429, 0), row("batch_a", 7, 0, 0), row("batch_b", 0, 200, 1000)} {
		if ok, err := s.RecordBatchRow(ctx, r); err != nil || !ok {
			t.Fatalf("RecordBatchRow %d of %s: %v, %v", r.Index, r.BatchID, ok, err)
		}
	}
	done, err := s.BatchRowsDone(ctx, "batch_a", 1, 7)
	if err != nil || !reflect.DeepEqual(done, []int{1, 3}) {
		t.Fatalf("BatchRowsDone [1,7): %v, %v", done, err)
	}
	counts, err := s.CountBatchRows(ctx, "batch_a")
	want := store.BatchRowCounts{Done: 4, Completed: 2, Failed: 2, CostNanos: 12}
	if err != nil || counts != want {
		t.Fatalf("CountBatchRows: %+v, %v; want %+v", counts, err, want)
	}
	if counts, err := s.CountBatchRows(ctx, "batch_none"); err != nil || counts != (store.BatchRowCounts{}) {
		t.Fatalf("CountBatchRows of no rows: %+v, %v", counts, err)
	}
	page, err := s.ListBatchRows(ctx, "batch_a", -1, 2)
	if err != nil || len(page) != 2 || page[0].Index != 0 || page[1].Index != 1 {
		t.Fatalf("ListBatchRows first page: %+v, %v", page, err)
	}
	page, err = s.ListBatchRows(ctx, "batch_a", 1, 10)
	if err != nil || len(page) != 2 {
		t.Fatalf("ListBatchRows after 1: %+v, %v", page, err)
	}
	wantFirst := first
	wantFirst.CreatedAt = c.Now()
	if !reflect.DeepEqual(page[0], wantFirst) {
		t.Fatalf("row 3 read back:\n got %+v\nwant %+v (the first record)", page[0], wantFirst)
	}
	if page[1].Index != 7 || page[1].Body != nil || page[1].ErrorCode != "batch_expired" || page[1].Succeeded() {
		t.Fatalf("row 7 read back: %+v", page[1])
	}

	// Writers racing for the same rows record each once.
	var wg sync.WaitGroup
	var recorded atomic.Int64
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				ok, err := s.RecordBatchRow(ctx, row("batch_race", i, 200, 1))
				if err != nil {
					t.Errorf("RecordBatchRow in a race: %v", err)
					return
				}
				if ok {
					recorded.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if n := recorded.Load(); n != 20 {
		t.Fatalf("racing writers recorded %d rows, want 20", n)
	}
	if counts, err := s.CountBatchRows(ctx, "batch_race"); err != nil || counts.Done != 20 || counts.CostNanos != 20 {
		t.Fatalf("counts after the race: %+v, %v", counts, err)
	}

	if at, err := s.BatchCancelRequested(ctx, "batch_a"); err != nil || !at.IsZero() {
		t.Fatalf("BatchCancelRequested before any: %v, %v", at, err)
	}
	asked := c.Now()
	if at, err := s.RequestBatchCancel(ctx, "batch_a"); err != nil || !at.Equal(asked) {
		t.Fatalf("RequestBatchCancel: %v, %v; want %v", at, err, asked)
	}
	c.Set(asked.Add(time.Minute))
	if at, err := s.RequestBatchCancel(ctx, "batch_a"); err != nil || !at.Equal(asked) {
		t.Fatalf("RequestBatchCancel again: %v, %v; want the first time, %v", at, err, asked)
	}
	if at, err := s.BatchCancelRequested(ctx, "batch_a"); err != nil || !at.Equal(asked) {
		t.Fatalf("BatchCancelRequested: %v, %v; want %v", at, err, asked)
	}
	if at, err := s.BatchCancelRequested(ctx, "batch_b"); err != nil || !at.IsZero() {
		t.Fatalf("BatchCancelRequested of another batch: %v, %v", at, err)
	}

	if err := s.DeleteBatchRows(ctx, "batch_a"); err != nil {
		t.Fatalf("DeleteBatchRows: %v", err)
	}
	if counts, err := s.CountBatchRows(ctx, "batch_a"); err != nil || counts.Done != 0 {
		t.Fatalf("after DeleteBatchRows: %+v, %v", counts, err)
	}
	if counts, err := s.CountBatchRows(ctx, "batch_b"); err != nil || counts.Done != 1 {
		t.Fatalf("another batch after DeleteBatchRows: %+v, %v", counts, err)
	}
	if _, err := s.RecordBatchRow(ctx, store.BatchRow{BatchID: "batch_a", Index: -1}); err == nil {
		t.Fatal("a negative index was recorded")
	}
}
