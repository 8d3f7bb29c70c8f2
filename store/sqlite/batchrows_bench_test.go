package sqlite

import (
	"context"
	"testing"

	"github.com/modelgateway/caddy-modelgateway/store"
	"github.com/modelgateway/caddy-modelgateway/store/storetest"
)

// benchBatch records a batch of n rows in writes of 100, as chunks of a batch do.
func benchBatch(b *testing.B, s *Store, id string, n int) {
	b.Helper()
	rows := make([]store.BatchRow, 0, 100)
	for i := range n {
		rows = append(rows, store.BatchRow{BatchID: id, Index: i, CustomID: "req", StatusCode: 200, RequestID: "gen",
			Body: []byte(`{"id":"chatcmpl","choices":[{"message":{"content":"an answer of some length"}}]}`), CostNanos: 25})
		if len(rows) == cap(rows) || i == n-1 {
			if _, err := s.RecordBatchRows(context.Background(), rows); err != nil {
				b.Fatal(err)
			}
			rows = rows[:0]
		}
	}
}

// BenchmarkCountBatchRows reads the counts of a batch of 50,000 rows (its job's poll,
// once a second while it runs), beside the COUNT/SUM over its rows they replace.
func BenchmarkCountBatchRows(b *testing.B) {
	s := openBenchStore(b)
	benchBatch(b, s, "batch_bench", 50_000)
	ctx := context.Background()
	b.Run("counts", func(b *testing.B) {
		for b.Loop() {
			if c, err := s.CountBatchRows(ctx, "batch_bench"); err != nil || c.Done != 50_000 {
				b.Fatal(c, err)
			}
		}
	})
	b.Run("rows", func(b *testing.B) {
		for b.Loop() {
			var done, completed int
			var cost int64
			if err := s.r.QueryRowContext(ctx, `SELECT COUNT(*),
				COALESCE(SUM(CASE WHEN status_code >= 200 AND status_code < 300 THEN 1 ELSE 0 END), 0),
				COALESCE(SUM(cost_nanos), 0) FROM batch_rows WHERE batch_id = ?`, "batch_bench").Scan(&done, &completed, &cost); err != nil || done != 50_000 {
				b.Fatal(done, err)
			}
		}
	})
}

// BenchmarkDeleteBatchRows deletes a batch of 50,000 rows, store.BatchRowDeletePage a
// write; ns/op over pages is one write's hold of the writer.
func BenchmarkDeleteBatchRows(b *testing.B) {
	s := openBenchStore(b)
	ctx := context.Background()
	const n = 50_000
	for b.Loop() {
		b.StopTimer()
		benchBatch(b, s, "batch_bench", n)
		b.StartTimer()
		if err := s.DeleteBatchRows(ctx, "batch_bench"); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/(n/store.BatchRowDeletePage), "ns/page")
}

// BenchmarkRecordBatchRows records a batch's rows in writes of 100 new rows, as a
// batch's chunks do (storetest.BenchRecordBatchRows).
func BenchmarkRecordBatchRows(b *testing.B) {
	storetest.BenchRecordBatchRows(b, openBenchStore(b))
}
