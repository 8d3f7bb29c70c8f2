package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/internal/ids"
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
	s := openBenchStore(b, withBatchLimit(limit))
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

// BenchmarkSettleLease measures what a gateway request writes once its key holds a lease:
// one SettleLease, journaled (DurableProcess) or committed (DurablePower), from par×
// GOMAXPROCS goroutines. The journaled figure includes applying every settlement: the
// timer stops only once the writer has caught up.
//
//	go test -run '^$' -bench SettleLease -cpu 2 ./store/sqlite
func BenchmarkSettleLease(b *testing.B) {
	for _, d := range []struct {
		name string
		d    Durability
	}{{"process", DurableProcess}, {"power", DurablePower}} {
		for _, par := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/par=%d", d.name, par), func(b *testing.B) {
				benchSettleLease(b, par, false, WithDurability(d.d))
			})
		}
	}
}

// BenchmarkSettleLeaseGathered measures the writer's cost per journaled settlement by how
// many settlements share a transaction: the callers only append to the journal, so the
// writer is the bottleneck and ns/op is its time per settlement. At 1,000 requests a
// second, the writer's gathering delay (gatherDelay) decides the size.
//
//	go test -run '^$' -bench SettleLeaseGathered -cpu 2 ./store/sqlite
func BenchmarkSettleLeaseGathered(b *testing.B) {
	for _, n := range []int{27, 100, 250} {
		b.Run(fmt.Sprintf("per-transaction=%d", n), func(b *testing.B) {
			benchSettleLease(b, 16, false, withBatchLimit(n), withGatherDelay(0))
		})
	}
	// As the gateway settles a request admitted from a lease: its in-flight trace journaled
	// before, ended after.
	b.Run("per-transaction=100/traced", func(b *testing.B) {
		benchSettleLease(b, 16, true, withBatchLimit(100), withGatherDelay(0))
	})
}

func benchSettleLease(b *testing.B, par int, traced bool, opts ...Option) {
	ctx := context.Background()
	s := openBenchStore(b, opts...)
	if _, err := s.Reserve(ctx, store.ReserveParams{ID: "res_lease", WorkspaceID: "ws_bench",
		AmountNanos: 100_000 * store.NanosPerUSD, ExpiresAt: time.Now().Add(time.Hour)}); err != nil {
		b.Fatal(err)
	}
	gen := func() *store.Generation {
		return &store.Generation{WorkspaceID: "ws_bench", KeyID: "key_bench", Endpoint: "/v1/chat/completions",
			Model: "m", Provider: "p", UpstreamModel: "m-1", Status: 200, InputTokens: 20, OutputTokens: 16,
			CostNanos: 1000, CostLines: []store.CostLine{{Dimension: "input", Quantity: 20, UnitPriceNanos: 150_000_000, Nanos: 3000}},
			Attempts: []store.Attempt{{Provider: "p", UpstreamModel: "m-1", Status: 200, DurationMs: 2}}}
	}
	if _, err := s.SettleLease(ctx, store.SettleLeaseParams{ReservationID: "res_lease", HeldNanos: 10_000, Generation: gen()}); err != nil {
		b.Fatal(err)
	}
	commits, ops := s.wr.commits.Load(), s.wr.ops.Load()
	b.SetParallelism(par)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			g := gen()
			var token uint64
			if traced {
				g.ID = ids.New("gen")
				token = s.BeginInFlight(store.InFlight{GenerationID: g.ID, WorkspaceID: g.WorkspaceID, KeyID: g.KeyID,
					Endpoint: g.Endpoint, Model: g.Model, ReservationID: "res_lease", Owner: "inst_bench", StartedAt: time.Now()})
			}
			if _, err := s.SettleLease(ctx, store.SettleLeaseParams{ReservationID: "res_lease", HeldNanos: 10_000, Generation: g}); err != nil {
				b.Error(err)
				return
			}
			s.EndInFlight(token)
		}
	})
	if _, err := s.GetBalance(ctx, "ws_bench"); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	if n := s.wr.commits.Load() - commits; n > 0 {
		b.ReportMetric(float64(s.wr.ops.Load()-ops)/float64(n), "writes/commit")
	}
}

// openBenchStore opens a store in a temporary directory, closed when the benchmark ends,
// with the workspace ws_bench holding a million dollars.
func openBenchStore(b *testing.B, opts ...Option) *Store {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(b.TempDir(), "gateway.db"), opts...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	if err := s.CreateWorkspace(ctx, store.Workspace{ID: "ws_bench"}); err != nil {
		b.Fatal(err)
	}
	if _, err := s.AddCredits(ctx, "ws_bench", 1_000_000*store.NanosPerUSD, ""); err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkWriterSettleRun is the writer's own cost per settlement, on one goroutine and
// without the journal: transactions of 100 lease settlements, as the writer gathers them at
// 1,000 requests a second, applied by commitBatch directly; paused as the writer runs them
// (pausedRows rows an INSERT, a yield after each statement), and unpaused (64 rows, no
// yield), for what the pauses cost.
func BenchmarkWriterSettleRun(b *testing.B) {
	for _, paused := range []bool{true, false} {
		name := "paused"
		if !paused {
			name = "unpaused"
		}
		b.Run(name, func(b *testing.B) { benchWriterSettleRun(b, paused) })
	}
}

func benchWriterSettleRun(b *testing.B, paused bool) {
	const perTx = 100
	ctx := context.Background()
	s := openBenchStore(b)
	if !paused {
		s.wr.raw.pause = nil
	}
	if _, err := s.Reserve(ctx, store.ReserveParams{ID: "res_lease", WorkspaceID: "ws_bench",
		AmountNanos: 100_000 * store.NanosPerUSD, ExpiresAt: time.Now().Add(time.Hour)}); err != nil {
		b.Fatal(err)
	}
	batch := make([]*writeOp, perTx)
	b.ResetTimer()
	for i := 0; i < b.N; i += perTx {
		b.StopTimer()
		fillLeaseSettlements(ctx, batch, time.Now())
		b.StartTimer()
		if !s.commitBatch(batch) {
			b.Fatal("the batch's transaction failed")
		}
		for _, o := range batch {
			if o.err != nil {
				b.Fatal(o.err)
			}
		}
	}
}

// fillLeaseSettlements fills batch with lease settlements of res_lease in ws_bench, of
// generations shaped like a chat answer's, for commitBatch to apply.
func fillLeaseSettlements(ctx context.Context, batch []*writeOp, now time.Time) {
	for j := range batch {
		g := &store.Generation{ID: ids.New("gen"), WorkspaceID: "ws_bench", KeyID: "key_bench", Endpoint: "/v1/chat/completions",
			Model: "bench-model", Provider: "openai", UpstreamModel: "bench-model-1", UpstreamID: "chatcmpl-0123456789abcdef", Status: 200,
			FinishReason: "stop", InputTokens: 20, OutputTokens: 16, CostNanos: 1000, CreatedAt: now,
			CostLines: []store.CostLine{{Dimension: "input", Quantity: 20, UnitPriceNanos: 150_000_000, Nanos: 3000},
				{Dimension: "output", Quantity: 16, UnitPriceNanos: 600_000_000, Nanos: 9600}},
			Attempts: []store.Attempt{{Provider: "openai", UpstreamModel: "bench-model-1", Status: 200, DurationMs: 2}}}
		req := &settleReq{g: g, cost: 1000, reservationID: "res_lease", lease: true, held: 10_000, now: now}
		batch[j] = &writeOp{ctx: ctx, settle: req, fn: req.apply, done: make(chan struct{})}
	}
}
