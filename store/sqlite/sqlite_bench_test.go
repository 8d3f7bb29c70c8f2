package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/store"
)

// BenchmarkReserveSettle measures a request's two wallet writes, Reserve then Settle, from
// par×GOMAXPROCS goroutines at once, as a gateway under load makes them, with group
// commit (batch=256, the default) and without (batch=1: one transaction, one fsync per
// write). ns/op is the wall time of one Reserve+Settle pair divided among the goroutines,
// so its inverse is the throughput. Run it with -cpu to set GOMAXPROCS:
//
//	go test -run '^$' -bench ReserveSettle -cpu 2 ./store/sqlite
func BenchmarkReserveSettle(b *testing.B) {
	for _, limit := range []int{1, batchLimit} {
		for _, par := range []int{1, 8, 32} {
			b.Run(fmt.Sprintf("batch=%d/par=%d", limit, par), func(b *testing.B) {
				benchReserveSettle(b, limit, par)
			})
		}
	}
}

func benchReserveSettle(b *testing.B, limit, par int) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(b.TempDir(), "gateway.db"), withBatchLimit(limit))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if err := s.CreateWorkspace(ctx, store.Workspace{ID: "ws_bench"}); err != nil {
		b.Fatal(err)
	}
	if _, err := s.AddCredits(ctx, "ws_bench", 1_000_000*store.NanosPerUSD, ""); err != nil {
		b.Fatal(err)
	}
	commits := s.wr.commits.Load()
	b.SetParallelism(par)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r, err := s.Reserve(ctx, store.ReserveParams{
				WorkspaceID: "ws_bench", AmountNanos: store.NanosPerUSD / 100, ExpiresAt: time.Now().Add(time.Hour),
			})
			if err != nil {
				b.Error(err)
				return
			}
			if _, err := s.Settle(ctx, store.SettleParams{ReservationID: r.ID, Generation: &store.Generation{
				WorkspaceID: "ws_bench", Model: "m", Status: 200, CostNanos: store.NanosPerUSD / 200,
			}}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	if n := s.wr.commits.Load() - commits; n > 0 {
		b.ReportMetric(float64(2*b.N)/float64(n), "writes/commit")
	}
}
