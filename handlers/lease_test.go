package handlers

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/billing"
	"github.com/modelgateway/caddy-modelgateway/internal/ids"
	"github.com/modelgateway/caddy-modelgateway/providers/mock"
	"github.com/modelgateway/caddy-modelgateway/store"
	"github.com/modelgateway/caddy-modelgateway/store/postgres"
)

// countingStore counts the wallet writes a Gateway makes and can make lease writes fail.
type countingStore struct {
	store.Store
	reserves, settles, leaseSettles, releases atomic.Int64
	// smallLeases counts small-wallet leases granted (reserved leaving the preflight).
	smallLeases                               atomic.Int64
	failLeaseSettle, failRelease, failReserve atomic.Bool
}

func (s *countingStore) Reserve(ctx context.Context, p store.ReserveParams) (store.Reservation, error) {
	s.reserves.Add(1)
	if s.failReserve.Load() {
		return store.Reservation{}, errors.New("disk I/O error")
	}
	res, err := s.Store.Reserve(ctx, p)
	if err == nil && p.MinAvailableNanos == p.AmountNanos+MinPreflightNanos {
		s.smallLeases.Add(1)
	}
	return res, err
}

func (s *countingStore) Settle(ctx context.Context, p store.SettleParams) (store.Generation, error) {
	s.settles.Add(1)
	return s.Store.Settle(ctx, p)
}

func (s *countingStore) SettleLease(ctx context.Context, p store.SettleLeaseParams) (store.Generation, error) {
	s.leaseSettles.Add(1)
	if s.failLeaseSettle.Load() {
		return store.Generation{}, errors.New("disk I/O error")
	}
	return s.Store.SettleLease(ctx, p)
}

func (s *countingStore) ReleaseReservation(ctx context.Context, id string) (int64, error) {
	s.releases.Add(1)
	if s.failRelease.Load() {
		return 0, errors.New("disk I/O error")
	}
	return s.Store.ReleaseReservation(ctx, id)
}

func leaseGateway(t *testing.T) (*adminGateway, *countingStore) {
	t.Helper()
	mk := mock.New(mock.Config{Name: "mock", Latency: 2 * time.Millisecond, Text: "a short answer"})
	rt := route("mock", "m-1", "1", "2")
	rt.Provider = mk
	rt.MaxOutputTokens = 1000
	rt.Price.PerRequest = 150_000_000 // 0.15 USD: a wallet runs dry in a test's time
	a := newAdminGateway(t, []*Model{{Name: "m", Routes: []Route{rt}}}, nil)
	cs := &countingStore{Store: a.s}
	a.g.Store = cs
	t.Cleanup(func() { _ = a.g.Close() })
	return a, cs
}

// leasedHolds sums remaining + in-flight W of the Gateway's leases that still exist.
func leasedHolds(g *Gateway) (sum int64, leases int) {
	st := g.ledger.LeaseStats()
	return st.HeldNanos, st.Leases
}

// admitLease admits a request of worst case w from the key's lease; nil when no lease
// admits it.
func admitLease(g *Gateway, ctx context.Context, ws, kid string, w int64) billing.Hold {
	h, err := g.ledger.KeyLease().Admit(ctx, billing.Request{WorkspaceID: ws, KeyID: kid, Most: w, Model: "m", Start: time.Now()})
	if err != nil {
		return nil
	}
	return h
}

// leaseOf is the reservation of the lease h was admitted from.
func leaseOf(h billing.Hold) string { return h.(*billing.LeaseHold).ReservationID() }

// The invariant of lease.go, under many concurrent requests of several keys: whenever no
// store call is under way, what the store holds for a key is exactly the remaining credit
// of its leases plus the worst cases of their requests in flight; the balance is the
// initial one minus every recorded charge; and once everything settled nothing is held.
func TestLeaseInvariantUnderConcurrency(t *testing.T) {
	t.Run("dropped when idle", func(t *testing.T) { leaseInvariantUnderConcurrency(t, 0) })
	// Lingering leases are renewed ahead, in the background (renewLease).
	t.Run("lingering", func(t *testing.T) { leaseInvariantUnderConcurrency(t, time.Minute) })
}

func leaseInvariantUnderConcurrency(t *testing.T, linger time.Duration) {
	a, cs := leaseGateway(t)
	a.g.LeaseLinger = linger
	const initial = 1000 * usdNanos
	ws, std, _ := a.workspace(initial)
	keys := []string{kidOf(t, std), kidOf(t, a.key(ws, store.KeyStandard, 0, "")), kidOf(t, a.key(ws, store.KeyStandard, 0, ""))}
	ctx := context.Background()

	// Workers hold gate.RLock around each step that touches the store (an admission, a
	// settlement); the checker takes gate.Lock, so it sees no store call half done, while
	// requests are in flight between their two steps.
	var gate sync.RWMutex
	var charged atomic.Int64
	var admitted atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range 48 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			kid := keys[w%len(keys)]
			for i := 0; i < 60; i++ {
				worst := int64(1+rng.IntN(50)) * 1_000_000 // 0.001 to 0.05 USD
				gate.RLock()
				l := admitLease(a.g, ctx, ws, kid, worst)
				gate.RUnlock()
				if l == nil {
					t.Error("a rich wallet got no lease")
					return
				}
				admitted.Add(1)
				time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
				cost := rng.Int64N(worst * 3 / 2) // sometimes above the worst case
				gate.RLock()
				g, err := l.Settle(ctx, &store.Generation{WorkspaceID: ws, KeyID: kid, Model: "m", Status: 200, CostNanos: cost})
				charged.Add(g.CostNanos) // inside the gate: the checker sees both or neither
				gate.RUnlock()
				if err != nil {
					t.Errorf("settleLease: %v", err)
					return
				}
			}
		}()
	}
	checks, skipped := 0, 0
	var checkWG sync.WaitGroup
	checkWG.Add(1)
	go func() {
		defer checkWG.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(3 * time.Millisecond):
			}
			gate.Lock()
			// A renewal under way has a Reserve the leases do not show yet; none starts
			// while the gate is held (only admissions start them).
			renewing := a.g.ledger.LeaseStats().Acquiring > 0
			if renewing {
				skipped++
				gate.Unlock()
				continue
			}
			held, _ := leasedHolds(a.g)
			var perKey int64
			for _, kid := range keys {
				sp, err := a.s.KeySpend(ctx, kid, time.Time{})
				if err != nil {
					t.Error(err)
				}
				perKey += sp.ReservedNanos
			}
			b, err := a.s.GetBalance(ctx, ws)
			if err != nil {
				t.Error(err)
			}
			if b.ReservedNanos != held || perKey != held || b.BalanceNanos != initial-charged.Load() {
				t.Errorf("store %+v (keys reserve %d), leases hold %d, charged %d", b, perKey, held, charged.Load())
			}
			checks++
			gate.Unlock()
		}
	}()
	wg.Wait()
	close(stop)
	checkWG.Wait()
	if t.Failed() {
		return
	}
	if linger > 0 {
		if err := a.g.Close(); err != nil { // the current leases linger until then
			t.Fatal(err)
		}
	}
	b, _ := a.s.GetBalance(ctx, ws)
	if held, n := leasedHolds(a.g); b.ReservedNanos != 0 || held != 0 || n != 0 || b.BalanceNanos != initial-charged.Load() {
		t.Fatalf("after the last settlement: %+v, %d leases holding %d", b, n, held)
	}
	n := admitted.Load()
	t.Logf("%d checks, %d skipped during renewals; %d requests, %d lease reservations, %d releases", checks, skipped, n, cs.reserves.Load(), cs.releases.Load())
	if checks == 0 || cs.reserves.Load()*4 > n {
		t.Fatalf("leases did not spare writes: %d reservations for %d requests", cs.reserves.Load(), n)
	}
}

// Through the API, concurrent requests run a wallet dry: full leases while it is rich, small
// leases or exact reservations below 10 USD, and the 1.00 USD preflight at the end. The balance never goes
// below zero and always equals the initial credit minus the recorded charges.
//
// From 40 USD the key's full leases soon hold what is left, so it falls back to
// reservations of its own; from 9 USD it takes small leases (at most half of what is above
// the preflight) until even those no longer fit.
func TestLeaseWalletNeverOverspent(t *testing.T) {
	for _, initial := range []int64{40 * usdNanos, 9 * usdNanos} {
		// Lingering leases are renewed ahead, in the background (renewLease).
		for _, linger := range []time.Duration{0, time.Minute} {
			t.Run(fmt.Sprintf("%d USD, linger %v", initial/usdNanos, linger), func(t *testing.T) {
				cs := drainWallet(t, initial, linger)
				if initial < billing.LeaseMinAvailableNanos && cs.smallLeases.Load() == 0 {
					t.Fatal("a small wallet drained without a small-wallet lease")
				}
			})
		}
	}
}

// drainWallet sends requests from 16 clients until every one gets a 402, and checks the
// wallet against the recorded charges. Lingering leases still hold their rest when the
// last request is refused: they are released (Close) before the wallet is checked.
func drainWallet(t *testing.T, initial int64, linger time.Duration) *countingStore {
	a, cs := leaseGateway(t)
	a.g.LeaseLinger = linger
	ws, std, _ := a.workspace(initial)
	var mu sync.Mutex
	var genIDs []string
	statuses := map[int]int{}
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				status, hdr, _ := a.doHeader(http.MethodPost, "/chat/completions", std, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
				mu.Lock()
				statuses[status]++
				if status == 200 {
					genIDs = append(genIDs, hdr.Get("X-Generation-Id"))
				}
				mu.Unlock()
				if status != 200 {
					return
				}
			}
		}()
	}
	wg.Wait()
	if statuses[200] == 0 || statuses[402] != 16 || statuses[200]+statuses[402] != len(genIDs)+16 {
		t.Fatalf("statuses %v", statuses)
	}
	held, _ := leasedHolds(a.g)
	if linger > 0 {
		if err := a.g.Close(); err != nil {
			t.Fatal(err)
		}
	}
	var spent int64
	for _, id := range genIDs {
		g, err := a.s.GetGeneration(context.Background(), ws, id)
		if err != nil {
			t.Fatal(err)
		}
		spent += g.CostNanos
	}
	b, _ := a.s.GetBalance(context.Background(), ws)
	if b.BalanceNanos < 0 || b.ReservedNanos != 0 || b.BalanceNanos != initial-spent {
		t.Fatalf("balance %+v, spent %d over %d requests", b, spent, len(genIDs))
	}
	// The last refusals are the preflight's: less than 1.00 USD available, besides what the
	// lingering leases held then.
	if b.BalanceNanos-held >= MinPreflightNanos {
		t.Fatalf("stopped with %d available (%d held by leases)", b.BalanceNanos-held, held)
	}
	if cs.leaseSettles.Load() == 0 || cs.settles.Load() == 0 {
		t.Fatalf("want both lease and exact settlements: %d and %d", cs.leaseSettles.Load(), cs.settles.Load())
	}
	t.Logf("%d requests: %d reservations (%d small leases), %d lease settlements, %d exact settlements, %d releases",
		len(genIDs), cs.reserves.Load(), cs.smallLeases.Load(), cs.leaseSettles.Load(), cs.settles.Load(), cs.releases.Load())
	return cs
}

// A wallet under the 10 USD a lease needs takes a small one: at most half of what it has
// above the 1.00 USD preflight, so the preflight holds for every request the lease admits
// and other keys keep the rest. A wallet too small even for that reserves per request.
func TestLeaseSmallWallet(t *testing.T) {
	a, cs := leaseGateway(t)
	a.g.LeaseLinger = time.Minute
	ws, std, _ := a.workspace(5 * usdNanos)
	for range 3 {
		a.mustDo(200, http.MethodPost, "/chat/completions", std, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	}
	// One lease: the 10 USD lease refused, then the small one; no exact settlement.
	if cs.reserves.Load() != 2 || cs.leaseSettles.Load() != 3 || cs.settles.Load() != 0 {
		t.Fatalf("reservations %d, lease settlements %d, exact %d", cs.reserves.Load(), cs.leaseSettles.Load(), cs.settles.Load())
	}
	b, err := a.s.GetBalance(context.Background(), ws)
	if err != nil {
		t.Fatal(err)
	}
	if held, n := leasedHolds(a.g); n != 1 || held != b.ReservedNanos || held > (5*usdNanos-MinPreflightNanos)/2 {
		t.Fatalf("%d leases holding %d of %+v", n, held, b)
	}
	if b.Available() < MinPreflightNanos+b.ReservedNanos {
		t.Fatalf("the lease left %d available, want at least the preflight plus as much as it holds", b.Available())
	}

	// The lease, once retired, is followed by another sized from the balance, without asking
	// for a full one first.
	a.g.ledger.RetireLeases()
	reserves := cs.reserves.Load()
	a.mustDo(200, http.MethodPost, "/chat/completions", std, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	if got := cs.reserves.Load() - reserves; got != 1 || cs.settles.Load() != 0 {
		t.Fatalf("next lease: %d reservations, %d exact settlements", got, cs.settles.Load())
	}

	// Topped up, the wallet is no longer small: the next lease is sized as usual and the key
	// is forgotten as small.
	if _, err := a.s.AddCredits(context.Background(), ws, 100*usdNanos, "top-up"); err != nil {
		t.Fatal(err)
	}
	a.g.ledger.RetireLeases()
	a.mustDo(200, http.MethodPost, "/chat/completions", std, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	small := a.g.ledger.LeaseStats().SmallKeys
	if small != 0 {
		t.Fatal("a topped-up wallet is still taken for a small one")
	}

	// 1.20 USD: half of the 0.20 above the preflight is less than two requests' worst case.
	_, tiny, _ := a.workspace(MinPreflightNanos + 200_000_000)
	settles := cs.settles.Load()
	a.mustDo(200, http.MethodPost, "/chat/completions", tiny, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	if cs.settles.Load() != settles+1 {
		t.Fatal("a wallet too small for a lease did not reserve for its request alone")
	}

	// A rich wallet whose key's limit cannot take a lease: exact reservations and the 429.
	rich, _, _ := a.workspace(100 * usdNanos)
	limited := a.key(rich, store.KeyStandard, 400_000_000, store.ResetMonthly)
	leaseSettles := cs.leaseSettles.Load()
	for range 2 {
		a.mustDo(200, http.MethodPost, "/chat/completions", limited, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	}
	status, v := a.do(http.MethodPost, "/chat/completions", limited, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	wantError(t, "over the key's limit", status, v, 429, "key_limit_exceeded", "")
	if n := cs.leaseSettles.Load() - leaseSettles; n != 0 {
		t.Fatalf("a limited key settled %d requests on leases", n)
	}
}

// Close releases leases with nothing in flight at once, and the others when their last
// request settles; afterwards requests reserve for themselves.
func TestLeasesReleasedOnClose(t *testing.T) {
	a, cs := leaseGateway(t)
	ws, std, _ := a.workspace(100 * usdNanos)
	kid := kidOf(t, std)
	ctx := context.Background()
	gen := func() *store.Generation {
		return &store.Generation{WorkspaceID: ws, KeyID: kid, Model: "m", Status: 200, CostNanos: 1_000_000}
	}
	l1 := admitLease(a.g, ctx, ws, kid, 10_000_000)
	l2 := admitLease(a.g, ctx, ws, kid, 10_000_000)
	if l1 == nil || l2 == nil || leaseOf(l1) != leaseOf(l2) {
		t.Fatal("two requests did not share a lease")
	}
	if _, err := l2.Settle(ctx, gen()); err != nil {
		t.Fatal(err)
	}
	// The last settlement fails and so does the release after it: the lease is left idle
	// and held, for the janitor or Close.
	cs.failRelease.Store(true)
	cs.failLeaseSettle.Store(true)
	if _, err := l1.Settle(ctx, gen()); err == nil {
		t.Fatal("settlement did not fail")
	}
	cs.failLeaseSettle.Store(false)
	// Another key's lease with a request still in flight at Close.
	std2 := a.key(ws, store.KeyStandard, 0, "")
	kid2 := kidOf(t, std2)
	l3 := admitLease(a.g, ctx, ws, kid2, 10_000_000)
	if b, _ := a.s.GetBalance(ctx, ws); b.ReservedNanos != 2*billing.LeaseSize(10_000_000)-1_000_000 {
		t.Fatalf("before Close: %+v", b)
	}
	cs.failRelease.Store(false)
	if err := a.g.Close(); err != nil {
		t.Fatal(err)
	}
	if b, _ := a.s.GetBalance(ctx, ws); b.ReservedNanos != billing.LeaseSize(10_000_000) {
		t.Fatalf("after Close, one lease in flight: %+v", b)
	}
	if admitLease(a.g, ctx, ws, kid2, 10_000_000) != nil {
		t.Fatal("a closed Gateway took a lease")
	}
	if _, err := l3.Settle(ctx, gen()); err != nil {
		t.Fatal(err)
	}
	if b, _ := a.s.GetBalance(ctx, ws); b.ReservedNanos != 0 || b.BalanceNanos != 100*usdNanos-2_000_000 {
		t.Fatalf("after the last settlement: %+v", b)
	}
	// After Close, requests still work, each with a reservation of its own.
	before := cs.settles.Load()
	a.mustDo(200, http.MethodPost, "/chat/completions", std, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	if cs.settles.Load() != before+1 {
		t.Fatal("a request after Close was not settled exactly")
	}
}

// The janitor releases a lease whose release failed, and then stops.
func TestLeaseJanitorReleasesAndStops(t *testing.T) {
	a, cs := leaseGateway(t)
	ws, std, _ := a.workspace(100 * usdNanos)
	kid := kidOf(t, std)
	ctx := context.Background()
	l := admitLease(a.g, ctx, ws, kid, 10_000_000)
	cs.failRelease.Store(true)
	cs.failLeaseSettle.Store(true)
	_, _ = l.Settle(ctx, &store.Generation{WorkspaceID: ws, KeyID: kid, Status: 200})
	cs.failRelease.Store(false)
	cs.failLeaseSettle.Store(false)
	waitLeasesDropped(t, a, ws)
}

// waitLeasesDropped waits until the workspace holds nothing and the janitor has stopped.
func waitLeasesDropped(t *testing.T, a *adminGateway, ws string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := a.s.GetBalance(context.Background(), ws)
		running := a.g.ledger.LeaseStats().JanitorRunning
		if b.ReservedNanos == 0 && !running {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("leases not dropped: held %+v, janitor running %v", b, running)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// An answer whose lease settlement fails is not delivered, and its lease is released.
func TestLeaseAnswerNotDeliveredWhenItCannotBeRecorded(t *testing.T) {
	a, cs := leaseGateway(t)
	ws, std, _ := a.workspace(100 * usdNanos)
	cs.failLeaseSettle.Store(true)
	status, v := a.do(http.MethodPost, "/chat/completions", std, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	if status != 503 || v["error"].(map[string]any)["code"] != CodeStoreUnavailable || cs.leaseSettles.Load() != 1 {
		t.Fatalf("%d %v", status, v)
	}
	if b, _ := a.s.GetBalance(context.Background(), ws); b.ReservedNanos != 0 || b.BalanceNanos != 100*usdNanos {
		t.Fatalf("balance %+v", b)
	}
}

// Two instances over one PostgreSQL wallet, each with its own leases, run it dry with
// concurrent requests: never overspent, nothing left held.
func TestTwoInstancesShareOneWalletWithLeases(t *testing.T) {
	dsn := pgSchemaDSN(t)
	ctx := context.Background()
	var gws []*Gateway
	var counts []*countingStore
	for range 2 {
		s, err := postgres.Open(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		rt := route("mock", "m-1", "1", "2")
		rt.Provider = mock.New(mock.Config{Name: "mock", Latency: 2 * time.Millisecond})
		rt.MaxOutputTokens = 1000
		rt.Price.PerRequest = 150_000_000
		reg, err := NewRegistry([]*Model{{Name: "m", Routes: []Route{rt}}})
		if err != nil {
			t.Fatal(err)
		}
		cs := &countingStore{Store: s}
		g := &Gateway{Config: billing.Config{Store: cs}, Registry: reg}
		g.Init()
		t.Cleanup(func() { _ = g.Close() })
		gws, counts = append(gws, g), append(counts, cs)
	}
	s := counts[0].Store
	const initial = 25 * store.NanosPerUSD
	ws := ids.New("ws")
	if err := s.CreateWorkspace(ctx, store.Workspace{ID: ws, Name: "shared"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddCredits(ctx, ws, initial, "test"); err != nil {
		t.Fatal(err)
	}
	k, plain, _ := NewKey(ws, store.KeyStandard, "k")
	if err := s.CreateKey(ctx, k); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[int]int{}
	var genIDs []string
	for i := range 16 {
		wg.Add(1)
		go func(g *Gateway) {
			defer wg.Done()
			for {
				req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hello there"}]}`))
				req.Header.Set("Authorization", "Bearer "+plain)
				rec := httptest.NewRecorder()
				g.ServeHTTP(rec, req, "/chat/completions")
				mu.Lock()
				statuses[rec.Code]++
				if rec.Code == 200 {
					genIDs = append(genIDs, rec.Header().Get("X-Generation-Id"))
				}
				mu.Unlock()
				if rec.Code != 200 {
					return
				}
			}
		}(gws[i%2])
	}
	wg.Wait()
	if statuses[402] != 16 || statuses[200] != len(genIDs) || len(statuses) != 2 {
		t.Fatalf("statuses %v", statuses)
	}
	var spent int64
	for _, id := range genIDs {
		g, err := s.GetGeneration(ctx, ws, id)
		if err != nil {
			t.Fatal(err)
		}
		spent += g.CostNanos
	}
	b, err := s.GetBalance(ctx, ws)
	if err != nil {
		t.Fatal(err)
	}
	if b.BalanceNanos < 0 || b.BalanceNanos >= MinPreflightNanos || b.ReservedNanos != 0 || b.BalanceNanos != initial-spent {
		t.Fatalf("balance %+v, spent %d over %d answers", b, spent, len(genIDs))
	}
	for i, cs := range counts {
		if cs.leaseSettles.Load() == 0 {
			t.Errorf("instance %d settled nothing on a lease", i)
		}
	}
}

// With LeaseLinger, a key sending one request at a time keeps its lease between requests
// (one Reserve for all of them), and the lease is dropped once the key is idle for the
// linger.
func TestLeaseLingers(t *testing.T) {
	a, cs := leaseGateway(t)
	a.g.LeaseLinger = 300 * time.Millisecond
	ws, std, _ := a.workspace(100 * usdNanos)
	ctx := context.Background()
	const n = 5
	for range n {
		a.mustDo(200, http.MethodPost, "/chat/completions", std, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	}
	if got := cs.reserves.Load(); got != 1 {
		t.Errorf("%d Reserves for %d sequential requests, want 1 (the lease lingers)", got, n)
	}
	if got := cs.leaseSettles.Load(); got != n {
		t.Errorf("%d lease settlements, want %d", got, n)
	}
	b, err := a.s.GetBalance(ctx, ws)
	if err != nil {
		t.Fatal(err)
	}
	if b.ReservedNanos == 0 {
		t.Error("nothing held right after the requests: the lease did not linger")
	}
	// Each request: 0.15 USD plus a few tokens at 1 and 2 USD per million.
	if spent := 100*usdNanos - b.BalanceNanos; spent < n*150_000_000 || spent > n*150_100_000 {
		t.Errorf("spent %d nanos on %d requests of 0.15 USD and a few tokens", spent, n)
	}
	waitLeasesDropped(t, a, ws)
	if got := cs.releases.Load(); got != 1 {
		t.Errorf("%d releases, want the janitor's one", got)
	}
}

// gatedStore holds every Reserve after the first until gate is closed, telling entered.
type gatedStore struct {
	*countingStore
	gate    chan struct{}
	entered chan struct{}
}

func (s *gatedStore) Reserve(ctx context.Context, p store.ReserveParams) (store.Reservation, error) {
	if s.countingStore.reserves.Load() > 0 {
		s.entered <- struct{}{}
		<-s.gate
	}
	return s.countingStore.Reserve(ctx, p)
}

func gatedLeaseGateway(t *testing.T) (*adminGateway, *countingStore, *gatedStore) {
	a, cs := leaseGateway(t)
	a.g.LeaseLinger = time.Minute
	gs := &gatedStore{countingStore: cs, gate: make(chan struct{}), entered: make(chan struct{}, 4)}
	a.g.Store = gs
	return a, cs, gs
}

const leaseChat = `{"model":"m","messages":[{"role":"user","content":"hi"}]}`

// chatNotWaiting sends one chat request, which must be answered 200 without waiting for
// a held renewal (10 s at most).
func chatNotWaiting(t *testing.T, a *adminGateway, key, what string) {
	t.Helper()
	done := make(chan int, 1)
	go func() {
		status, _ := a.do(http.MethodPost, "/chat/completions", key, leaseChat)
		done <- status
	}()
	select {
	case status := <-done:
		if status != 200 {
			t.Fatalf("%s: status %d", what, status)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s waited for the renewal", what)
	}
}

// sendUntilRenewal sends requests one at a time until a second Reserve (the renewal) is
// held in gs, and returns how many were sent; they must all have been admitted.
func sendUntilRenewal(t *testing.T, a *adminGateway, gs *gatedStore, key string) int {
	t.Helper()
	for i := 1; i <= 200; i++ {
		chatNotWaiting(t, a, key, fmt.Sprintf("request %d", i))
		select {
		case <-gs.entered:
			return i
		default:
		}
	}
	t.Fatal("the lease was never renewed ahead")
	return 0
}

// TestLeaseRenewedAhead: a lingering lease is renewed in the background once it is down
// to a quarter: requests meanwhile are admitted from it without waiting for the renewal's
// Reserve, the new lease then replaces it, and the old one's rest is released.
func TestLeaseRenewedAhead(t *testing.T) {
	a, cs, gs := gatedLeaseGateway(t)
	ws, std, _ := a.workspace(100 * usdNanos)
	// A request's worst case is 0.15 USD and 0.002 of output: a lease of 64 of them is due
	// for renewal below a quarter, after about 48.
	n := sendUntilRenewal(t, a, gs, std)
	if n < 40 || n > 60 {
		t.Errorf("renewal started after %d requests, want about 50 of a lease of about 65", n)
	}
	// The renewal is held: the next requests are admitted from the current lease's rest.
	for i := range 10 {
		chatNotWaiting(t, a, std, fmt.Sprintf("request %d during the renewal", i))
	}
	if got := cs.reserves.Load(); got != 1 {
		t.Fatalf("%d Reserves done while the renewal is held, want only the first lease's", got)
	}
	close(gs.gate)
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := a.s.GetBalance(context.Background(), ws)
		if err != nil {
			t.Fatal(err)
		}
		held, leases := leasedHolds(a.g)
		amount := a.g.ledger.LeaseStats().CurrentNanos // one key
		// Nothing in flight: the old lease's rest is released, the new one holds its amount.
		if cs.reserves.Load() == 2 && leases == 1 && amount > 0 && held == amount && b.ReservedNanos == held {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the renewal: %d Reserves, %d leases holding %d, the store holds %d", cs.reserves.Load(), leases, held, b.ReservedNanos)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := cs.releases.Load(); got != 1 {
		t.Errorf("%d releases, want the replaced lease's", got)
	}
	a.mustDo(200, http.MethodPost, "/chat/completions", std, leaseChat)
	if got := cs.reserves.Load(); got != 2 {
		t.Errorf("%d Reserves, want 2: the next request is admitted from the new lease", got)
	}
	spent := 100*usdNanos - mustBalance(t, a, ws).BalanceNanos
	if want := int64(n+11) * 150_000_000; spent < want || spent > want+int64(n+11)*100_000 {
		t.Errorf("spent %d nanos on %d requests of 0.15 USD and a few tokens", spent, n+11)
	}
	if err := a.g.Close(); err != nil {
		t.Fatal(err)
	}
	if b := mustBalance(t, a, ws); b.ReservedNanos != 0 {
		t.Errorf("%d nanos held after Close", b.ReservedNanos)
	}
}

// TestLeaseCloseWaitsForRenewal: Close returns only once a renewal under way is done, and
// what it reserved is released.
func TestLeaseCloseWaitsForRenewal(t *testing.T) {
	a, _, gs := gatedLeaseGateway(t)
	ws, std, _ := a.workspace(100 * usdNanos)
	sendUntilRenewal(t, a, gs, std)
	closed := make(chan error, 1)
	go func() { closed <- a.g.Close() }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) during a renewal", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(gs.gate)
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return after the renewal")
	}
	if b := mustBalance(t, a, ws); b.ReservedNanos != 0 {
		t.Errorf("%d nanos held after Close", b.ReservedNanos)
	}
}

func mustBalance(t *testing.T, a *adminGateway, ws string) store.Balance {
	t.Helper()
	b, err := a.s.GetBalance(context.Background(), ws)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestLeaseRenewalFailureBacksOff: a renewal ahead that fails is not tried again by every
// request admitted after it: the current lease admits on, one more try after the backoff.
func TestLeaseRenewalFailureBacksOff(t *testing.T) {
	a, cs := leaseGateway(t)
	a.g.LeaseLinger = time.Minute
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	a.g.Now = func() time.Time { return time.Unix(0, now.Load()) }
	_, std, _ := a.workspace(100 * usdNanos)
	a.mustDo(200, http.MethodPost, "/chat/completions", std, leaseChat) // takes the lease
	cs.failReserve.Store(true)
	// Down to a quarter after about 48 requests; 10 more are admitted from the rest.
	for i := range 58 {
		if status, v := a.do(http.MethodPost, "/chat/completions", std, leaseChat); status != 200 {
			t.Fatalf("request %d: %d %v", i, status, v)
		}
	}
	waitFor(t, func() bool { return a.g.ledger.LeaseStats().Acquiring == 0 })
	if got := cs.reserves.Load(); got != 2 {
		t.Fatalf("%d Reserves, want the lease's and one failed renewal", got)
	}
	now.Add(int64(billing.LeaseRefusalBackoff))
	a.mustDo(200, http.MethodPost, "/chat/completions", std, leaseChat)
	waitFor(t, func() bool { return cs.reserves.Load() == 3 })
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10 s")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestLeaseRenewedAheadOfItsAge: a lease still well stocked is renewed ahead once it is
// leaseRenewAhead short of its maximum age, in the background like a short one.
func TestLeaseRenewedAheadOfItsAge(t *testing.T) {
	a, cs, gs := gatedLeaseGateway(t)
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	a.g.Now = func() time.Time { return time.Unix(0, now.Load()) }
	_, std, _ := a.workspace(100 * usdNanos)
	chatNotWaiting(t, a, std, "the request that takes the lease")
	// Steps shorter than the janitor's idle limit, each with a request, until the age at
	// which the lease is due; a dozen requests leave it far above a quarter.
	const step = 5 * time.Second
	for age := step; age < billing.LeaseMaxAge-billing.LeaseRenewAhead; age += step {
		now.Add(int64(step))
		chatNotWaiting(t, a, std, fmt.Sprintf("a request at %v", age))
	}
	if got := cs.reserves.Load(); got != 1 {
		t.Fatalf("%d Reserves before the lease is due, want 1", got)
	}
	now.Add(int64(step))
	chatNotWaiting(t, a, std, "the request that finds the lease due")
	select {
	case <-gs.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("no renewal ahead of the lease's age")
	}
	close(gs.gate)
	waitFor(t, func() bool { return cs.reserves.Load() == 2 && cs.releases.Load() == 1 })
}
