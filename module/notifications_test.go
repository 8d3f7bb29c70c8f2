package module

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/modelgateway/caddy-modelgateway/delivery"
	"github.com/modelgateway/caddy-modelgateway/internal/ids"
	"github.com/modelgateway/caddy-modelgateway/notify"
	"github.com/modelgateway/caddy-modelgateway/store"
	"github.com/modelgateway/caddy-modelgateway/store/sqlite"
	"github.com/modelgateway/caddy-modelgateway/store/storetest"
)

// notifyFixture is a store on a clock the test moves, with a workspace whose events of
// every kind are routed to one destination.
type notifyFixture struct {
	t      *testing.T
	s      store.Store
	clock  *storetest.Clock
	ws     string
	outbox *notify.Outbox
}

func newNotifyFixture(t *testing.T, balance int64) *notifyFixture {
	t.Helper()
	ctx := context.Background()
	clock := storetest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "gw.db"), sqlite.WithClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ws := ids.New("ws")
	if err := s.CreateWorkspace(ctx, store.Workspace{ID: ws, Name: "w"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddCredits(ctx, ws, balance, "funding"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateNotificationDestination(ctx, store.NotificationDestination{ID: "ntd_1", WorkspaceID: ws, Kind: "slack",
		Name: "ops", Target: []byte("sealed"), Preview: "p"}); err != nil {
		t.Fatal(err)
	}
	for _, e := range notify.Events {
		if err := s.SetNotificationRoute(ctx, ws, e, []string{"ntd_1"}); err != nil {
			t.Fatal(err)
		}
	}
	return &notifyFixture{t: t, s: s, clock: clock, ws: ws, outbox: &notify.Outbox{Store: s, Logger: zap.NewNop(), Now: clock.Now}}
}

// queued takes the notifications queued, returning their events, and completes them.
func (f *notifyFixture) queued() []string { return f.claimQueued(true) }

// claimQueued takes the notifications queued, returning their events; unless complete,
// they stay in the queue, leased, so that an occurrence's key still holds.
func (f *notifyFixture) claimQueued(complete bool) []string {
	f.t.Helper()
	items, err := f.s.Claim(context.Background(), store.ClaimParams{Queue: notify.Queue, Owner: "t", Lease: time.Minute, Limit: 100})
	if err != nil {
		f.t.Fatal(err)
	}
	var out []string
	for _, it := range items {
		x, err := notify.ItemOf(it)
		if err != nil {
			f.t.Fatal(err)
		}
		out = append(out, x.Notification.Event)
		if complete {
			_ = f.s.Complete(context.Background(), it.Claim)
		}
	}
	return out
}

func (f *notifyFixture) spend(nanos int64) {
	f.t.Helper()
	if _, err := f.s.AddCredits(context.Background(), f.ws, -nanos, "spent"); err != nil {
		f.t.Fatal(err)
	}
}

// The low-balance sweep tells a workspace once when its balance crosses the threshold,
// not again within 6 h while it stays below, again after 6 h, and at once after a top-up
// above the threshold and a new crossing.
func TestLowBalanceSweep(t *testing.T) {
	f := newNotifyFixture(t, 10*store.NanosPerUSD)
	ctx := context.Background()
	threshold := 5 * store.NanosPerUSD
	if _, err := f.s.SetLowBalanceThreshold(ctx, f.ws, &threshold); err != nil {
		t.Fatal(err)
	}
	sweep := func(what string, want int) {
		t.Helper()
		if err := sweepLowBalance(ctx, f.s, f.outbox, zap.NewNop()); err != nil {
			t.Fatal(err)
		}
		if got := f.queued(); len(got) != want || (want == 1 && got[0] != notify.EventBalanceLow) {
			t.Fatalf("%s: queued %v, want %d balance.low", what, got, want)
		}
	}
	sweep("above the threshold", 0)
	f.spend(6 * store.NanosPerUSD)
	sweep("crossing", 1)
	start := f.clock.Now()
	for _, after := range []time.Duration{time.Minute, time.Hour, 6*time.Hour - time.Second} {
		f.clock.Set(start.Add(after))
		sweep("still below, within 6 h", 0)
	}
	f.clock.Set(start.Add(6 * time.Hour))
	sweep("still below, 6 h on", 1)
	f.clock.Set(start.Add(6*time.Hour + time.Minute))
	if _, err := f.s.AddCredits(ctx, f.ws, 3*store.NanosPerUSD, "top-up"); err != nil {
		t.Fatal(err)
	}
	sweep("topped up above", 0)
	f.spend(3 * store.NanosPerUSD)
	sweep("a new crossing, 1 min after the last", 1)
	sweep("and not twice", 0)
}

// A batch or video job that ends failed tells the workspace; any other change, or any
// other kind's failure, tells nobody.
func TestJobFailedNotifies(t *testing.T) {
	f := newNotifyFixture(t, 0)
	cur := &appRuntime{Notifications: f.outbox}
	failed := func(kind string) store.Job {
		return store.Job{ID: ids.New(kind), WorkspaceID: f.ws, Kind: kind, Model: "m", Status: "failed", ErrorMessage: "upstream refused"}
	}
	for _, j := range []store.Job{
		failed(store.JobVideo), failed(store.JobBatch), failed(store.JobMusic),
		{ID: "video_ok", WorkspaceID: f.ws, Kind: store.JobVideo, Status: "completed"},
	} {
		notifyJobFailed(cur, j)
		notifyJobFailed(cur, j) // the engine's hook may see a change twice: told once
	}
	var got []string
	deadline := time.Now().Add(20 * time.Second)
	for len(got) < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // emitted in the background
		got = append(got, f.claimQueued(false)...)
	}
	if len(got) != 2 || !(got[0] == notify.EventVideoFailed && got[1] == notify.EventBatchFailed ||
		got[0] == notify.EventBatchFailed && got[1] == notify.EventVideoFailed) {
		t.Fatalf("queued %v, want video.failed and batch.failed", got)
	}
	notifyJobFailed(nil, failed(store.JobVideo)) // no configuration: nothing, no panic
}

// The deliveries worker's sender tells the workspace when it disables a webhook endpoint:
// an endpoint answering 410 is disabled, and webhook_endpoint.disabled is queued once.
func TestDisabledWebhookEndpointNotifies(t *testing.T) {
	saved := sealerCheck.Swap(int64(10 * time.Millisecond))
	t.Cleanup(func() { sealerCheck.Store(saved) })
	f := newNotifyFixture(t, 0)
	ctx := context.Background()
	gone := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusGone) }))
	t.Cleanup(gone.Close)
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	sealer, err := delivery.NewSealer(base64.StdEncoding.EncodeToString(key))
	if err != nil {
		t.Fatal(err)
	}
	secret, _ := delivery.NewSecret()
	sealed, _ := sealer.Seal([]byte(secret), []byte("we_1"))
	if _, err := f.s.CreateWebhookEndpoint(ctx, store.WebhookEndpoint{ID: "we_1", WorkspaceID: f.ws, Name: "n",
		URL: gone.URL + "/hook", Secret: sealed}); err != nil {
		t.Fatal(err)
	}
	job := store.Job{ID: ids.New("video"), WorkspaceID: f.ws, Kind: store.JobVideo, Status: "queued", Lifecycle: "submitted"}
	if err := f.s.CreateJob(ctx, job, time.Time{}, nil); err != nil {
		t.Fatal(err)
	}
	polls, err := f.s.Claim(ctx, store.ClaimParams{Queue: store.JobQueue(store.JobVideo), Owner: "t", Lease: time.Minute, Limit: 1})
	if err != nil || len(polls) != 1 {
		t.Fatalf("claiming the job: %v, %v", polls, err)
	}
	ev := store.Event{ID: ids.New("evt"), Type: "video.completed", Target: "we_1", Payload: json.RawMessage(`{}`)}
	if err := f.s.AdvanceJob(ctx, polls[0].Claim, store.JobUpdate{}, []store.Event{ev}, time.Time{}); err != nil {
		t.Fatal(err)
	}
	allow, _ := netip.ParsePrefix("127.0.0.1/32")
	rt := &fakeRuntime{s: f.s, log: zap.NewNop()}
	rt.cur.Store(&appRuntime{Sealer: sealer, Notifications: f.outbox,
		Outbound: delivery.NewClient(delivery.ClientOptions{AllowHTTP: true, Allow: []netip.Prefix{allow}})})
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- runDeliveries(runCtx, rt) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("runDeliveries: %v", err)
		}
	}()
	var got []string
	deadline := time.Now().Add(20 * time.Second)
	for len(got) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		got = f.claimQueued(false)
	}
	if len(got) != 1 || got[0] != notify.EventWebhookEndpointDisabled {
		t.Fatalf("queued %v, want webhook_endpoint.disabled", got)
	}
	if ep, _ := f.s.GetWebhookEndpoint(ctx, f.ws, "we_1"); ep.Status != store.WebhookDisabled || ep.DisabledReason != delivery.ReasonGone {
		t.Fatalf("endpoint %+v", ep)
	}
}
