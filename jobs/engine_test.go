package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/modelgateway/caddy-modelgateway/billing"
	"github.com/modelgateway/caddy-modelgateway/internal/ids"
	"github.com/modelgateway/caddy-modelgateway/internal/meter"
	"github.com/modelgateway/caddy-modelgateway/internal/pricing"
	"github.com/modelgateway/caddy-modelgateway/store"
	"github.com/modelgateway/caddy-modelgateway/store/sqlite"
)

const usd = store.NanosPerUSD

// scriptedKind answers each poll with the next step of its script, by job id; a step
// with panic set panics, one with err returns it.
type scriptedKind struct {
	mu     sync.Mutex
	script map[string][]step
	polls  map[string]int
}

type step struct {
	rep   Report
	err   error
	panic bool
}

func (k *scriptedKind) Poll(_ context.Context, _ Env, j store.Job) (Report, error) {
	k.mu.Lock()
	n := k.polls[j.ID]
	k.polls[j.ID]++
	s := k.script[j.ID]
	k.mu.Unlock()
	if n >= len(s) {
		n = len(s) - 1
	}
	st := s[n]
	if st.panic {
		panic("scripted panic")
	}
	return st.rep, st.err
}

var testKind = &scriptedKind{script: map[string][]step{}, polls: map[string]int{}}

func init() { Register("enginetest", testKind) }

// flakyStore fails the next AdvanceJob that ends a job, once, after the settlement: the
// instance died between settling the job and completing its claim.
type flakyStore struct {
	store.Store
	mu       sync.Mutex
	failEnds int
}

func (s *flakyStore) AdvanceJob(ctx context.Context, c store.Claim, u store.JobUpdate, ev []store.Event, next time.Time) error {
	s.mu.Lock()
	fail := next.IsZero() && s.failEnds > 0
	if fail {
		s.failEnds--
	}
	s.mu.Unlock()
	if fail {
		return store.ErrUnavailable
	}
	return s.Store.AdvanceJob(ctx, c, u, ev, next)
}

type fixture struct {
	t      *testing.T
	s      *flakyStore
	e      *Engine
	ws, kd string
	price  pricing.Price
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx := context.Background()
	s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "jobs.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	w := store.Workspace{ID: ids.New("ws"), Name: "jobs"}
	if err := s.CreateWorkspace(ctx, w); err != nil {
		t.Fatal(err)
	}
	k := store.Key{ID: ids.New("key"), WorkspaceID: w.ID, Kind: store.KeyStandard, Name: "k", SecretHash: make([]byte, 32), CreatedAt: time.Now()}
	if err := s.CreateKey(ctx, k); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddCredits(ctx, w.ID, 10*usd, "test"); err != nil {
		t.Fatal(err)
	}
	price, err := pricing.Price{}.WithVideoSeconds(pricing.VideoPrice{Resolution: "720p", Nanos: usd / 10})
	if err != nil {
		t.Fatal(err)
	}
	fs := &flakyStore{Store: s}
	lg := billing.NewLedger(&billing.Config{Store: fs, Logger: zap.NewNop(), Now: time.Now, ReservationTTL: time.Hour,
		StoreTimeout: 2 * time.Second, SettleTimeout: 5 * time.Second})
	t.Cleanup(func() { _ = lg.Close() })
	f := &fixture{t: t, s: fs, ws: w.ID, kd: k.ID, price: price}
	f.e = &Engine{
		Store: fs, Ledger: lg, Logger: zap.NewNop(), Owner: "test", MinPoll: time.Millisecond,
		Env: func() Env {
			return Env{Route: func(j store.Job) (Route, bool) {
				return Route{Price: f.price}, j.Provider == "up" && j.UpstreamModel == "vid-1"
			}}
		},
	}
	return f
}

// submit creates job id under a hold of most, scripted to answer polls with steps.
func (f *fixture) submit(id string, most int64, expires time.Time, steps ...step) store.Job {
	f.t.Helper()
	testKind.mu.Lock()
	testKind.script[id] = steps
	testKind.mu.Unlock()
	j, err := f.e.Submit(context.Background(), Submission{
		Job: store.Job{ID: id, WorkspaceID: f.ws, Kind: "enginetest", KeyID: f.kd, Model: "video", Provider: "up",
			UpstreamModel: "vid-1", ExpiresAt: expires},
		Most: most, Endpoint: "/videos",
		Start: func(context.Context) (string, Report, error) {
			return "native_" + id, Report{Status: StatusQueued, PollAfter: time.Millisecond}, nil
		},
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return j
}

// pollDue claims the due polls and polls them, as Run does; it returns how many it polled.
func (f *fixture) pollDue() int {
	f.t.Helper()
	time.Sleep(5 * time.Millisecond) // past the pace of the last poll
	items, err := f.s.Claim(context.Background(), store.ClaimParams{Queue: store.JobQueue("enginetest"), Owner: "test", Lease: time.Minute, Limit: 10})
	if err != nil {
		f.t.Fatal(err)
	}
	for _, it := range items {
		f.e.PollClaimed(context.Background(), it)
	}
	return len(items)
}

func (f *fixture) job(id string) store.Job {
	f.t.Helper()
	j, err := f.s.GetJob(context.Background(), f.ws, id)
	if err != nil {
		f.t.Fatal(err)
	}
	return j
}

func (f *fixture) wallet() store.Balance {
	f.t.Helper()
	b, err := f.s.GetBalance(context.Background(), f.ws)
	if err != nil {
		f.t.Fatal(err)
	}
	return b
}

var (
	running  = step{rep: Report{Status: StatusInProgress, Progress: 40, PollAfter: time.Millisecond}}
	finished = step{rep: Report{Status: StatusCompleted, Usage: meter.Usage{OutputVideo: 4 * time.Second, VideoResolution: "720p"}}}
)

// A completed job is settled at its usage's price once, even when the instance that
// settled it died before completing its claim: the next claim settles again and the store
// answers with the first settlement.
func TestJobSettledOnceAcrossACrash(t *testing.T) {
	f := newFixture(t)
	f.submit("job_once", 2*usd, time.Now().Add(time.Hour), running, finished)
	if b := f.wallet(); b.ReservedNanos != 2*usd {
		t.Fatalf("wallet %+v; want the job's 2 USD held", b)
	}
	f.pollDue()
	if j := f.job("job_once"); j.Status != StatusInProgress || j.Progress != 40 || j.Lifecycle != LifecyclePolling {
		t.Fatalf("job %+v; want in progress at 40%%", j)
	}
	f.s.failEnds = 1
	f.pollDue() // settles, then cannot complete
	if j := f.job("job_once"); Terminal(j.Status) {
		t.Fatalf("job %+v ended though its advance failed", j)
	}
	for i := 0; i < 50 && !Terminal(f.job("job_once").Status); i++ {
		f.pollDue()
	}
	j := f.job("job_once")
	if j.Status != StatusCompleted || j.Lifecycle != LifecycleSettled || j.Progress != 100 {
		t.Fatalf("job %+v; want completed and settled", j)
	}
	const cost = 4 * usd / 10
	if b := f.wallet(); b.BalanceNanos != 10*usd-cost || b.ReservedNanos != 0 {
		t.Errorf("wallet %+v; want %d charged once, nothing held", b, cost)
	}
	g, err := f.s.GetGeneration(context.Background(), f.ws, GenerationID("job_once"))
	if err != nil || g.CostNanos != cost || g.OutputVideoMs != 4000 || g.UpstreamID != "native_job_once" {
		t.Errorf("generation %+v, %v", g, err)
	}
	if n := f.pollDue(); n != 0 {
		t.Errorf("%d polls of an ended job", n)
	}
}

// A job that fails upstream charges nothing and frees its hold; so does one that expires.
func TestJobFailedOrExpiredReleasesItsHold(t *testing.T) {
	f := newFixture(t)
	f.submit("job_refused", usd, time.Now().Add(time.Hour), step{err: &Failure{Code: "content_policy_violation", Message: "refused"}})
	f.submit("job_late", usd, time.Now().Add(20*time.Millisecond), running)
	time.Sleep(30 * time.Millisecond)
	f.pollDue()
	for id, want := range map[string]string{"job_refused": StatusFailed, "job_late": StatusExpired} {
		j := f.job(id)
		if j.Status != want || j.Lifecycle != LifecycleReleased || j.ErrorCode == "" {
			t.Errorf("%s: %+v; want %s, released, with its error", id, j, want)
		}
		g, err := f.s.GetGeneration(context.Background(), f.ws, GenerationID(id))
		if err != nil || g.CostNanos != 0 || g.ErrorCode != j.ErrorCode {
			t.Errorf("%s: generation %+v, %v; want the failure recorded, free", id, g, err)
		}
	}
	if b := f.wallet(); b.BalanceNanos != 10*usd || b.ReservedNanos != 0 {
		t.Errorf("wallet %+v; want untouched and nothing held", b)
	}
}

// A usage the route cannot price is charged the worst case the job held, never nothing.
func TestJobUnpriceableChargedItsHold(t *testing.T) {
	f := newFixture(t)
	f.submit("job_4k", 3*usd, time.Now().Add(time.Hour),
		step{rep: Report{Status: StatusCompleted, Usage: meter.Usage{OutputVideo: 4 * time.Second, VideoResolution: "2160p"}}})
	f.pollDue()
	if j := f.job("job_4k"); j.Status != StatusCompleted {
		t.Fatalf("job %+v", j)
	}
	if b := f.wallet(); b.BalanceNanos != 7*usd || b.ReservedNanos != 0 {
		t.Errorf("wallet %+v; want the 3 USD held charged", b)
	}
}

// A poll that panics or fails is retried later as a failed attempt; too many failures in
// a row end the job as failed, its hold released.
func TestJobPollFailuresRetriedThenGivenUp(t *testing.T) {
	f := newFixture(t)
	f.e.MaxAttempts = 3
	f.submit("job_panics", usd, time.Now().Add(time.Hour), step{panic: true}, finished)
	f.submit("job_down", usd, time.Now().Add(time.Hour), step{err: errors.New("connection refused")})
	deadline := time.Now().Add(10 * time.Second)
	for (!Terminal(f.job("job_panics").Status) || !Terminal(f.job("job_down").Status)) && time.Now().Before(deadline) {
		f.pollDue()
	}
	if j := f.job("job_panics"); j.Status != StatusCompleted {
		t.Errorf("the job whose poll panicked: %+v; want completed on its next poll", j)
	}
	if j := f.job("job_down"); j.Status != StatusFailed || j.ErrorCode != "upstream_unavailable" || j.Lifecycle != LifecycleReleased {
		t.Errorf("the job whose upstream is down: %+v; want failed after 3 attempts", j)
	}
	if b := f.wallet(); b.BalanceNanos != 10*usd-4*usd/10 || b.ReservedNanos != 0 {
		t.Errorf("wallet %+v", b)
	}
}

// Submit releases the hold when the upstream refuses to start the job, and refuses a job
// the wallet cannot hold.
func TestSubmitReleasesOnFailure(t *testing.T) {
	f := newFixture(t)
	_, err := f.e.Submit(context.Background(), Submission{
		Job:  store.Job{ID: "job_nostart", WorkspaceID: f.ws, Kind: "enginetest", KeyID: f.kd, ExpiresAt: time.Now().Add(time.Hour)},
		Most: usd,
		Start: func(context.Context) (string, Report, error) {
			return "", Report{}, errors.New("upstream said no")
		},
	})
	if err == nil || err.Error() != "upstream said no" {
		t.Fatalf("Submit: %v", err)
	}
	if b := f.wallet(); b.ReservedNanos != 0 {
		t.Errorf("wallet %+v; want the hold released", b)
	}
	_, err = f.e.Submit(context.Background(), Submission{
		Job:  store.Job{ID: "job_dear", WorkspaceID: f.ws, Kind: "enginetest", KeyID: f.kd, ExpiresAt: time.Now().Add(time.Hour)},
		Most: 100 * usd,
	})
	if !errors.Is(err, store.ErrInsufficientFunds) {
		t.Errorf("Submit beyond the wallet: %v; want insufficient funds", err)
	}
	if _, err := f.s.GetJob(context.Background(), f.ws, "job_dear"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a refused job was stored: %v", err)
	}
}

// TestSubmitKeepsTheFirstResult: the result of the first report (what a kind keeps of its
// start, the upstream's pace) is stored with the job, and left as it is by the polls
// until the job's end.
func TestSubmitKeepsTheFirstResult(t *testing.T) {
	f := newFixture(t)
	j, err := f.e.Submit(context.Background(), Submission{
		Job: store.Job{ID: ids.New("video"), WorkspaceID: f.ws, Kind: "enginetest", KeyID: f.kd, Model: "video",
			Provider: "up", UpstreamModel: "vid-1", ExpiresAt: time.Now().Add(time.Hour)},
		Most: usd, Endpoint: "/videos",
		Start: func(context.Context) (string, Report, error) {
			return "native", Report{Status: StatusQueued, Result: json.RawMessage(`{"poll_after_ms":1500}`)}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		PollAfterMs int `json:"poll_after_ms"`
	}
	if got := f.job(j.ID).Result; json.Unmarshal(got, &res) != nil || res.PollAfterMs != 1500 {
		t.Fatalf("stored result %s", got)
	}
}

// TestSubmitEnqueuesCreatedEvent: with the Events hook set, a job whose webhook names an
// endpoint is stored with one created event telling of the job as stored; one without a
// webhook gets none.
func TestSubmitEnqueuesCreatedEvent(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	f.e.Events = WebhookEvents(zap.NewNop(), nil)
	start := func(context.Context) (string, Report, error) {
		return "native", Report{Status: StatusQueued, PollAfter: time.Hour}, nil
	}
	j, err := f.e.Submit(ctx, Submission{
		Job: store.Job{ID: ids.New("video"), WorkspaceID: f.ws, Kind: "enginetest", KeyID: f.kd, Model: "video",
			Provider: "up", UpstreamModel: "vid-1", ExpiresAt: time.Now().Add(time.Hour),
			Webhook: json.RawMessage(`{"endpoint_id":"we_1"}`)},
		Most: usd, Endpoint: "/videos", Start: start,
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.e.Submit(ctx, Submission{
		Job: store.Job{ID: ids.New("video"), WorkspaceID: f.ws, Kind: "enginetest", KeyID: f.kd, Model: "video",
			Provider: "up", UpstreamModel: "vid-1", ExpiresAt: time.Now().Add(time.Hour)},
		Most: usd, Endpoint: "/videos", Start: start,
	}); err != nil {
		t.Fatal(err)
	}
	items, err := f.s.Claim(ctx, store.ClaimParams{Queue: store.DeliveryQueue, Owner: "t", Lease: time.Minute, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 1 {
		t.Fatalf("%d deliveries queued, want the created event of the job with a webhook", len(items))
	}
	d, err := store.DeliveryOf(items[0])
	if err != nil {
		t.Fatal(err)
	}
	var ev Event
	if err := json.Unmarshal(d.Payload, &ev); err != nil || ev.ID != d.ID || d.EventType != "enginetest.created" ||
		ev.Type != d.EventType || d.Target != "we_1" || d.JobID != j.ID || d.Status != store.DeliveryPending {
		t.Fatalf("delivery %+v: event %+v, %v", d, ev, err)
	}
	stored := f.job(j.ID)
	if ev.Data.ID != j.ID || ev.Data.Status != StatusQueued || ev.Data.CreatedAt != stored.CreatedAt.Unix() || ev.Data.CompletedAt != nil {
		t.Fatalf("created event tells of %+v, want the job %+v as stored", ev.Data, stored)
	}
}

// A live job whose poll is gone (a database restored from a backup) is found by
// ReconcileJobs, polled again and ended, its hold settled; a job still queued, or ended,
// is left as it is.
func TestReconcileJobsPollsALostJobToItsEnd(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.submit("job_lost", 2*usd, time.Now().Add(time.Hour), running, finished)
	f.submit("job_queued", usd, time.Now().Add(time.Hour), running, finished)
	if err := f.s.Remove(ctx, store.JobQueue("enginetest"), "job_lost"); err != nil {
		t.Fatal(err)
	}
	n, err := f.e.ReconcileJobs(ctx)
	if err != nil || n != 1 {
		t.Fatalf("ReconcileJobs = %d, %v; want the lost job queued again", n, err)
	}
	for i := 0; i < 20 && !(Terminal(f.job("job_lost").Status) && Terminal(f.job("job_queued").Status)); i++ {
		f.pollDue()
	}
	for _, id := range []string{"job_lost", "job_queued"} {
		if j := f.job(id); j.Status != StatusCompleted || j.Lifecycle != LifecycleSettled {
			t.Fatalf("%s: %+v; want completed and settled", id, j)
		}
	}
	const cost = 2 * 4 * usd / 10
	if b := f.wallet(); b.BalanceNanos != 10*usd-cost || b.ReservedNanos != 0 {
		t.Errorf("wallet %+v; want both jobs charged and nothing held", b)
	}
	if n, err := f.e.ReconcileJobs(ctx); err != nil || n != 0 {
		t.Errorf("ReconcileJobs after the end = %d, %v; want nothing to do", n, err)
	}
}

// longKind's polls last longPoll, longer than the engine's bound of a poll, and say they
// are allowed to (LongPoller).
type longKind struct{}

const longPoll = 300 * time.Millisecond

func (longKind) Poll(ctx context.Context, _ Env, _ store.Job) (Report, error) {
	select {
	case <-ctx.Done():
		return Report{}, ctx.Err()
	case <-time.After(longPoll):
	}
	return finished.rep, nil
}

func (longKind) PollTimeout(store.Job) time.Duration { return 10 * longPoll }

func init() { Register("longtest", longKind{}) }

// A LongPoller's poll runs past half the engine's lease, its claim extended: no other
// instance claims the job meanwhile, and the poll's result ends the job.
func TestLongPollExtendsItsClaim(t *testing.T) {
	f := newFixture(t)
	f.e.Lease = 100 * time.Millisecond
	j, err := f.e.Submit(context.Background(), Submission{
		Job: store.Job{ID: "job_long", WorkspaceID: f.ws, Kind: "longtest", KeyID: f.kd, Model: "video", Provider: "up",
			UpstreamModel: "vid-1", ExpiresAt: time.Now().Add(time.Hour)},
		Most: usd, Endpoint: "/videos",
		Start: func(context.Context) (string, Report, error) {
			return "", Report{Status: StatusQueued, PollAfter: time.Millisecond}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	items, err := f.s.Claim(context.Background(), store.ClaimParams{Queue: store.JobQueue("longtest"), Owner: "test", Lease: f.e.Lease, Limit: 1})
	if err != nil || len(items) != 1 {
		t.Fatalf("claim %v, %v", items, err)
	}
	done := make(chan struct{})
	go func() { defer close(done); f.e.PollClaimed(context.Background(), items[0]) }()
	time.Sleep(2 * f.e.Lease) // the first lease has run out
	other, err := f.s.Claim(context.Background(), store.ClaimParams{Queue: store.JobQueue("longtest"), Owner: "other", Lease: time.Minute, Limit: 1})
	if err != nil || len(other) != 0 {
		t.Fatalf("another instance claimed the job mid-poll: %v, %v", other, err)
	}
	<-done
	if got := f.job(j.ID); got.Status != StatusCompleted || got.Lifecycle != LifecycleSettled {
		t.Fatalf("job %+v; want completed by the long poll", got)
	}
}

// A free model's job (Route.Free) is charged nothing, though its usage has no price: not
// the worst case held, and no price of a paid model on the same route.
func TestFreeJobChargedNothing(t *testing.T) {
	f := newFixture(t)
	f.e.Env = func() Env {
		return Env{Route: func(j store.Job) (Route, bool) {
			return Route{Free: true}, j.Provider == "up" && j.UpstreamModel == "vid-1"
		}}
	}
	f.submit("job_free", 2*usd, time.Now().Add(time.Hour), finished)
	f.pollDue()
	j := f.job("job_free")
	if j.Status != StatusCompleted {
		t.Fatalf("job %+v", j)
	}
	if b := f.wallet(); b.BalanceNanos != 10*usd || b.ReservedNanos != 0 {
		t.Errorf("wallet %+v; want nothing charged and nothing held", b)
	}
	g, err := f.s.GetGeneration(context.Background(), f.ws, GenerationID("job_free"))
	if err != nil || g.CostNanos != 0 || g.OutputVideoMs != 4000 {
		t.Fatalf("generation %+v, %v; want the usage recorded at no cost", g, err)
	}
}
