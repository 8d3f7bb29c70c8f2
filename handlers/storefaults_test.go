package handlers

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/mock"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// faultyStore is a store that can stop answering (a call then waits for its context, as
// over a cut connection), refuse pings, and fail settlements as a lost connection does,
// after applying them or not.
type faultyStore struct {
	store.Store
	pings                   atomic.Int64
	pingErr                 atomic.Pointer[error]
	hangPing, hangKeys      atomic.Bool
	hangWallet              atomic.Bool
	settleTries             atomic.Int64
	failSettles             atomic.Int64 // settlements still to fail
	applyThenFail           atomic.Bool  // a failing settlement is applied first
	owners                  sync.Map     // reservation id → owner
	reserves, leaseReserves atomic.Int64
}

var errConnLost = fmt.Errorf("%w: connection lost (secret-db-host:5432)", store.ErrUnavailable)

func hang(ctx context.Context) error {
	<-ctx.Done()
	return fmt.Errorf("%w: %w", store.ErrUnavailable, ctx.Err())
}

func (f *faultyStore) Ping(ctx context.Context) error {
	f.pings.Add(1)
	if f.hangPing.Load() {
		return hang(ctx)
	}
	if p := f.pingErr.Load(); p != nil {
		return *p
	}
	return f.Store.Ping(ctx)
}

func (f *faultyStore) GetKey(ctx context.Context, id string) (store.Key, error) {
	if f.hangKeys.Load() {
		return store.Key{}, hang(ctx)
	}
	return f.Store.GetKey(ctx, id)
}

func (f *faultyStore) Reserve(ctx context.Context, p store.ReserveParams) (store.Reservation, error) {
	if f.hangWallet.Load() {
		return store.Reservation{}, hang(ctx)
	}
	res, err := f.Store.Reserve(ctx, p)
	if err == nil {
		f.owners.Store(res.ID, p.Owner)
		if f.reserves.Add(1); p.AmountNanos > 10*usdNanos/100 {
			f.leaseReserves.Add(1)
		}
	}
	return res, err
}

func (f *faultyStore) GetBalance(ctx context.Context, ws string) (store.Balance, error) {
	if f.hangWallet.Load() {
		return store.Balance{}, hang(ctx)
	}
	return f.Store.GetBalance(ctx, ws)
}

// settle runs one settlement try through the faults.
func (f *faultyStore) settle(apply func() (store.Generation, error)) (store.Generation, error) {
	f.settleTries.Add(1)
	if f.failSettles.Add(-1) < 0 {
		f.failSettles.Add(1)
		return apply()
	}
	if f.applyThenFail.Load() {
		if _, err := apply(); err != nil {
			return store.Generation{}, err
		}
	}
	return store.Generation{}, errConnLost
}

func (f *faultyStore) Settle(ctx context.Context, p store.SettleParams) (store.Generation, error) {
	return f.settle(func() (store.Generation, error) { return f.Store.Settle(ctx, p) })
}

func (f *faultyStore) SettleLease(ctx context.Context, p store.SettleLeaseParams) (store.Generation, error) {
	return f.settle(func() (store.Generation, error) { return f.Store.SettleLease(ctx, p) })
}

// countingProvider counts the calls that reach the upstream.
type countingProvider struct {
	providers.ChatProvider
	name  string
	calls atomic.Int64
}

func (p *countingProvider) Name() string { return p.name }

func (p *countingProvider) Chat(ctx context.Context, req *providers.Request) (*providers.Response, error) {
	p.calls.Add(1)
	return p.ChatProvider.Chat(ctx, req)
}

func (p *countingProvider) ChatStream(ctx context.Context, req *providers.Request) (providers.Stream, error) {
	p.calls.Add(1)
	return p.ChatProvider.ChatStream(ctx, req)
}

// faultyGateway is a Gateway over a faultyStore, with a priced model on a counted mock.
func faultyGateway(t *testing.T, setup func(g *Gateway)) (*adminGateway, *faultyStore, *countingProvider) {
	t.Helper()
	up := &countingProvider{ChatProvider: mock.New(mock.Config{Name: "mock", Text: "the answer"}), name: "mock"}
	rt := route("mock", "m-1", "1", "2")
	rt.Provider = up
	rt.MaxOutputTokens = 1000
	a := newAdminGateway(t, []*Model{{Name: "m", Routes: []Route{rt}}}, setup)
	fs := &faultyStore{Store: a.s}
	a.g.Store = fs
	t.Cleanup(func() { _ = a.g.Close() })
	return a, fs, up
}

const chatM = `{"model":"m","messages":[{"role":"user","content":"hi"}]}`

func wantStoreUnavailable(t *testing.T, what string, status int, v map[string]any) {
	t.Helper()
	wantError(t, what, status, v, http.StatusServiceUnavailable, CodeStoreUnavailable, "")
	if v["error_type"] != "system" || v["error_origin"] != "gateway" {
		t.Fatalf("%s: %v, want a system error of the gateway", what, v)
	}
	if strings.Contains(fmt.Sprint(v), "secret-db-host") {
		t.Fatalf("%s: the store's own error reached the client: %v", what, v)
	}
}

// GET /health probes the store once for any number of polls within healthCacheTTL, answers
// 503 store_unavailable (with the reason, not the store's words) while the store fails or
// does not answer within the probe's bound, and 200 again once it answers; /health/live
// answers 200 throughout.
func TestHealthIsReadiness(t *testing.T) {
	a, fs, _ := faultyGateway(t, func(g *Gateway) { g.StoreTimeout = 200 * time.Millisecond })
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			if status, _ := a.do(http.MethodGet, "/health", "", ""); status != 200 {
				t.Errorf("/health: %d", status)
			}
		})
	}
	wg.Wait()
	if n := fs.pings.Load(); n != 1 {
		t.Fatalf("50 polls at once made %d probes, want 1", n)
	}
	time.Sleep(healthCacheTTL)
	a.mustDo(200, http.MethodGet, "/health", "", "")
	if n := fs.pings.Load(); n != 2 {
		t.Fatalf("%d probes, want one more once the answer is older than %v", n, healthCacheTTL)
	}

	fs.pingErr.Store(&errConnLost)
	time.Sleep(healthCacheTTL)
	status, v := a.do(http.MethodGet, "/health", "", "")
	wantStoreUnavailable(t, "/health with the store failing", status, v)
	if !strings.Contains(v["message"].(string), "cannot be reached") {
		t.Fatalf("message %q", v["message"])
	}
	a.mustDo(200, http.MethodGet, "/health/live", "", "")

	fs.pingErr.Store(nil)
	fs.hangPing.Store(true)
	time.Sleep(healthCacheTTL)
	began := time.Now()
	status, v = a.do(http.MethodGet, "/health", "", "")
	wantStoreUnavailable(t, "/health with the store silent", status, v)
	if d := time.Since(began); d > time.Second || !strings.Contains(v["message"].(string), "within 200ms") {
		t.Fatalf("%v: %v, want an answer within the probe's bound of 200ms", d, v["message"])
	}

	fs.hangPing.Store(false)
	time.Sleep(healthCacheTTL)
	a.mustDo(200, http.MethodGet, "/health", "", "")
}

// A request whose key lookup, or whose credit reservation, gets no answer within
// StoreTimeout is answered 503 store_unavailable at that bound, and the upstream is not
// called.
func TestStoreWaitsAreBounded(t *testing.T) {
	a, fs, up := faultyGateway(t, func(g *Gateway) { g.StoreTimeout = 150 * time.Millisecond })
	_, small, _ := a.workspace(2 * usdNanos)    // reserves per request
	_, leased, _ := a.workspace(100 * usdNanos) // takes a credit lease

	for _, tc := range []struct {
		name string
		key  string
		hang *atomic.Bool
	}{
		{"key lookup", small, &fs.hangKeys},
		{"reservation", small, &fs.hangWallet},
		{"credit lease", leased, &fs.hangWallet},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.hang.Store(true)
			defer tc.hang.Store(false)
			a.g.forgetKey(strings.Split(tc.key, "_")[3])
			if tc.hang == &fs.hangWallet {
				// The key is looked up (and cached) before the wallet stops answering.
				tc.hang.Store(false)
				a.mustDo(200, http.MethodPost, "/chat/completions", tc.key, chatM)
				tc.hang.Store(true)
			}
			calls := up.calls.Load()
			began := time.Now()
			status, v := a.do(http.MethodPost, "/chat/completions", tc.key, chatM)
			wantStoreUnavailable(t, tc.name, status, v)
			if d := time.Since(began); d > time.Second {
				t.Fatalf("answered after %v, want about StoreTimeout (150ms)", d)
			}
			if up.calls.Load() != calls {
				t.Fatal("the upstream was called")
			}
		})
	}
	// Back to normal, no restart.
	a.mustDo(200, http.MethodPost, "/chat/completions", small, chatM)
	a.mustDo(200, http.MethodPost, "/chat/completions", leased, chatM)
}

// A settlement that fails without the store's answer is tried again until it lands (the
// answer is delivered, charged once), also when a failed try had landed all the same; one
// that cannot land within SettleTimeout withholds the answer, uncharged.
func TestSettlementRetriedWithinItsBound(t *testing.T) {
	// A wallet just above the 1.00 USD preflight reserves per request; a large one takes a
	// credit lease.
	for _, credits := range []int64{usdNanos + 5_000_000, 100 * usdNanos} {
		t.Run(fmt.Sprintf("wallet %d nanos", credits), func(t *testing.T) {
			// Three failed tries wait 50 + 100 + 200 ms: the bound leaves room for a loaded
			// machine before the fourth.
			a, fs, _ := faultyGateway(t, func(g *Gateway) { g.SettleTimeout = 1200 * time.Millisecond })
			ws, key, _ := a.workspace(credits)
			charged := func() int64 {
				t.Helper()
				b, err := a.s.GetBalance(context.Background(), ws)
				if err != nil {
					t.Fatal(err)
				}
				return credits - b.BalanceNanos
			}
			one := func() int64 {
				t.Helper()
				before := charged()
				a.mustDo(200, http.MethodPost, "/chat/completions", key, chatM)
				return charged() - before
			}
			want := one()
			if want <= 0 {
				t.Fatalf("a request charged %d", want)
			}

			fs.failSettles.Store(3)
			tries := fs.settleTries.Load()
			if got := one(); got != want {
				t.Fatalf("after three failed tries: charged %d, want %d", got, want)
			}
			if n := fs.settleTries.Load() - tries; n != 4 {
				t.Fatalf("%d tries, want 4", n)
			}

			fs.failSettles.Store(1)
			fs.applyThenFail.Store(true)
			if got := one(); got != want {
				t.Fatalf("a try that landed unanswered: charged %d, want %d once", got, want)
			}
			fs.applyThenFail.Store(false)

			fs.failSettles.Store(1 << 30)
			before := charged()
			began := time.Now()
			status, v := a.do(http.MethodPost, "/chat/completions", key, chatM)
			d := time.Since(began)
			if status != 503 || v["error"].(map[string]any)["code"] != CodeStoreUnavailable || !strings.Contains(fmt.Sprint(v), "could not record") {
				t.Fatalf("%d %v", status, v)
			}
			if d < 1200*time.Millisecond || d > 4*time.Second {
				t.Fatalf("withheld after %v, want at SettleTimeout (1.2s)", d)
			}
			if charged() != before {
				t.Fatal("a withheld answer was charged")
			}
			if leased := fs.leaseReserves.Load() > 0; leased != (credits > 2*usdNanos) {
				t.Fatalf("credit leases taken: %v, want them only for the large wallet", leased)
			}
		})
	}
}

// Credit leases belong to their owner instance: reservations name it; none admits until it
// has recorded a heartbeat, or once it has been taken for dead (its leases' reservations
// were released by another instance), when a new lease is taken instead.
func TestLeasesFollowTheirOwner(t *testing.T) {
	a, fs, _ := faultyGateway(t, func(g *Gateway) { g.LeaseLinger = time.Minute })
	owner := store.NewInstance(a.s, "inst_test", store.InstanceOptions{Heartbeat: 20 * time.Millisecond, Timeout: 200 * time.Millisecond})
	a.g.Owner = owner
	_, key, _ := a.workspace(100 * usdNanos)

	for range 3 {
		a.mustDo(200, http.MethodPost, "/chat/completions", key, chatM)
	}
	if fs.leaseReserves.Load() != 0 || fs.reserves.Load() != 3 {
		t.Fatalf("before the owner's first heartbeat: %d leases of %d reservations, want a reservation per request", fs.leaseReserves.Load(), fs.reserves.Load())
	}

	if err := owner.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = owner.Stop(context.Background()) })
	for range 3 {
		a.mustDo(200, http.MethodPost, "/chat/completions", key, chatM)
	}
	if fs.leaseReserves.Load() != 1 || fs.reserves.Load() != 4 {
		t.Fatalf("with the owner beating: %d leases of %d reservations, want one lease", fs.leaseReserves.Load(), fs.reserves.Load())
	}
	fs.owners.Range(func(id, o any) bool {
		if o != "inst_test" {
			t.Errorf("reservation %v owned by %q", id, o)
		}
		return true
	})

	// What a sweep of another instance does to one it finds dead.
	if _, err := a.s.RetireInstance(context.Background(), "inst_test"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { gen, ok := owner.Holds(); return gen == 1 && ok })
	a.mustDo(200, http.MethodPost, "/chat/completions", key, chatM)
	if fs.leaseReserves.Load() != 2 {
		t.Fatalf("after the owner was taken for dead: %d leases, want a new one", fs.leaseReserves.Load())
	}
}

// The store reads of the administration and discovery routes are bounded like a request's:
// a store that does not answer is 503 store_unavailable at StoreTimeout.
func TestAdminReadsAreBounded(t *testing.T) {
	a, fs, _ := faultyGateway(t, func(g *Gateway) { g.StoreTimeout = 150 * time.Millisecond })
	_, std, mgmt := a.workspace(2 * usdNanos)
	a.mustDo(200, http.MethodGet, "/credits", mgmt, "")
	fs.hangWallet.Store(true)
	for _, tc := range []struct{ path, key string }{{"/credits", mgmt}, {"/gateway/models/me", std}} {
		began := time.Now()
		status, v := a.do(http.MethodGet, tc.path, tc.key, "")
		wantStoreUnavailable(t, "GET "+tc.path, status, v)
		if d := time.Since(began); d > time.Second || !strings.Contains(v["message"].(string), "within 150ms") {
			t.Fatalf("GET %s: %v after %v, want an answer at StoreTimeout (150ms)", tc.path, v["message"], d)
		}
	}
	fs.hangWallet.Store(false)
	a.mustDo(200, http.MethodGet, "/credits", mgmt, "")
}
