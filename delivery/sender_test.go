package delivery_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/modelgateway/caddy-modelgateway/delivery"
	"github.com/modelgateway/caddy-modelgateway/internal/ids"
	"github.com/modelgateway/caddy-modelgateway/store"
	"github.com/modelgateway/caddy-modelgateway/store/sqlite"
)

// receiver is a webhook receiver that verifies every request with the Standard Webhooks
// library, given the secrets it knows (independently of the gateway's Signer), and answers
// with the statuses it is given in turn (the last one from then on).
type receiver struct {
	t   *testing.T
	srv *httptest.Server

	mu       sync.Mutex
	secrets  []string
	answers  []answer
	got      []received
	requests atomic.Int32
}

type answer struct {
	status     int
	body       string
	retryAfter string
}

type received struct {
	id         string
	signatures int
	// verifiedBy lists, for each secret the receiver knows, whether it verified the request.
	verifiedBy []bool
	body       []byte
}

func newReceiver(t *testing.T, answers ...answer) *receiver {
	r := &receiver{t: t, answers: answers}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) knows(secrets ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.secrets = secrets
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	r.requests.Add(1)
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	rec := received{id: req.Header.Get("webhook-id"), body: body,
		signatures: len(strings.Fields(req.Header.Get("webhook-signature")))}
	for _, secret := range r.secrets {
		hook, err := standardwebhooks.NewWebhook(secret)
		if err != nil {
			r.t.Errorf("receiver secret: %v", err)
		}
		rec.verifiedBy = append(rec.verifiedBy, err == nil && hook.Verify(body, req.Header) == nil)
	}
	r.got = append(r.got, rec)
	a := answer{status: http.StatusOK, body: "ok"}
	if len(r.answers) > 0 {
		a = r.answers[0]
		if len(r.answers) > 1 {
			r.answers = r.answers[1:]
		}
	}
	r.mu.Unlock()
	if a.retryAfter != "" {
		w.Header().Set("Retry-After", a.retryAfter)
	}
	w.WriteHeader(a.status)
	_, _ = io.WriteString(w, a.body)
}

func (r *receiver) received() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]received(nil), r.got...)
}

// fixture is a store with a workspace, a sealer, and the means to make endpoints and
// deliveries.
type fixture struct {
	t      *testing.T
	s      store.Store
	ws     string
	sealer *delivery.Sealer
}

func newFixture(t *testing.T, s store.Store) *fixture {
	t.Helper()
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	sealer, err := delivery.NewSealer(base64.StdEncoding.EncodeToString(key))
	if err != nil {
		t.Fatal(err)
	}
	ws := ids.New("ws")
	if err := s.CreateWorkspace(context.Background(), store.Workspace{ID: ws, Name: "test"}); err != nil {
		t.Fatalf("CreateWorkspace: %v", err)
	}
	return &fixture{t: t, s: s, ws: ws, sealer: sealer}
}

func openSQLite(t *testing.T) store.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "gw.db"))
	if err != nil {
		t.Fatalf("sqlite.Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func (f *fixture) seal(id, secret string) []byte {
	f.t.Helper()
	sealed, err := f.sealer.Seal([]byte(secret), []byte(id))
	if err != nil {
		f.t.Fatal(err)
	}
	return sealed
}

// endpoint creates an endpoint to url subscribed to events (all when none) and returns its
// id and secret.
func (f *fixture) endpoint(url string, events ...string) (string, string) {
	f.t.Helper()
	secret, err := delivery.NewSecret()
	if err != nil {
		f.t.Fatal(err)
	}
	id := ids.New("we")
	_, err = f.s.CreateWebhookEndpoint(context.Background(), store.WebhookEndpoint{
		ID: id, WorkspaceID: f.ws, Name: "test", URL: url, Events: events, Secret: f.seal(id, secret),
	})
	if err != nil {
		f.t.Fatalf("CreateWebhookEndpoint: %v", err)
	}
	return id, secret
}

// deliver puts an event of type typ for endpoint in the outbox, the way the jobs engine
// does (with a job's change), and returns its id.
func (f *fixture) deliver(endpoint, typ string) string {
	f.t.Helper()
	return f.deliverOfJob(nil, endpoint, typ)
}

// deliverOfJob is deliver for target of a job whose webhook configuration is webhook.
func (f *fixture) deliverOfJob(webhook json.RawMessage, endpoint, typ string) string {
	f.t.Helper()
	ctx := context.Background()
	job := store.Job{ID: ids.New("video"), WorkspaceID: f.ws, Kind: store.JobVideo, Model: "m", Provider: "p",
		Status: "queued", Lifecycle: "submitted", Webhook: webhook}
	if err := f.s.CreateJob(ctx, job, time.Time{}, nil); err != nil {
		f.t.Fatalf("CreateJob: %v", err)
	}
	var poll store.ClaimedItem
	for _, it := range f.claim(store.JobQueue(store.JobVideo), "engine", time.Minute) {
		if it.ID == job.ID {
			poll = it
		}
	}
	ev := store.Event{ID: ids.New("evt"), Type: typ, Target: endpoint, Payload: json.RawMessage(`{"type":"` + typ + `"}`)}
	if err := f.s.AdvanceJob(ctx, poll.Claim, store.JobUpdate{}, []store.Event{ev}, time.Time{}); err != nil {
		f.t.Fatalf("AdvanceJob: %v", err)
	}
	return ev.ID
}

func (f *fixture) claim(queue, owner string, lease time.Duration) []store.ClaimedItem {
	f.t.Helper()
	items, err := f.s.Claim(context.Background(), store.ClaimParams{Queue: queue, Owner: owner, Lease: lease, Limit: 10})
	if err != nil {
		f.t.Fatalf("Claim: %v", err)
	}
	return items
}

// sender is a Sender on the fixture's store with a short schedule, reaching loopback.
func (f *fixture) sender(schedule ...time.Duration) *delivery.Sender {
	if schedule == nil {
		schedule = []time.Duration{20 * time.Millisecond, 20 * time.Millisecond, 20 * time.Millisecond, 20 * time.Millisecond}
	}
	return &delivery.Sender{
		Store: f.s, Sealer: f.sealer, Logger: zaptest.NewLogger(f.t, zaptest.Level(zap.WarnLevel)), Owner: "sender_" + ids.Token(6),
		Client:   delivery.NewClient(delivery.ClientOptions{AllowHTTP: true, Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}),
		Schedule: schedule, Jitter: -1, Pace: delivery.Pace{Idle: 10 * time.Millisecond, Lease: 5 * time.Second},
	}
}

// run runs s until every delivery of ids is final, and returns them.
func (f *fixture) run(s *delivery.Sender, ids ...string) []store.Delivery {
	f.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			f.t.Errorf("Run: %v", err)
		}
	}()
	deadline := time.Now().Add(15 * time.Second)
	for {
		var out []store.Delivery
		for _, id := range ids {
			d, err := f.s.GetDelivery(context.Background(), f.ws, id)
			if err != nil {
				f.t.Fatalf("GetDelivery: %v", err)
			}
			if d.Status != store.DeliveryPending {
				out = append(out, d)
			}
		}
		if len(out) == len(ids) {
			return out
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("deliveries not final after 15 s: %+v", out)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (f *fixture) attempts(id string) []store.DeliveryAttempt {
	f.t.Helper()
	as, err := f.s.ListAttempts(context.Background(), store.AttemptQuery{WorkspaceID: f.ws, DeliveryID: id})
	if err != nil {
		f.t.Fatalf("ListAttempts: %v", err)
	}
	return as
}

func (f *fixture) getEndpoint(id string) store.WebhookEndpoint {
	f.t.Helper()
	ep, err := f.s.GetWebhookEndpoint(context.Background(), f.ws, id)
	if err != nil {
		f.t.Fatalf("GetWebhookEndpoint: %v", err)
	}
	return ep
}

// wantAttempts checks the status code, delivered flag and preview of each attempt.
func wantAttempts(t *testing.T, got []store.DeliveryAttempt, want ...store.DeliveryAttempt) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d attempts %+v, want %d", len(got), got, len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.Number != i+1 || g.StatusCode != w.StatusCode || g.Delivered != w.Delivered || g.ResponsePreview != w.ResponsePreview ||
			!strings.Contains(g.Error, w.Error) || (w.Error == "" && g.Error != "") {
			t.Errorf("attempt %d = %+v, want %+v", i+1, g, w)
		}
	}
}

func testDeliveredFirstTry(t *testing.T, s store.Store) {
	f := newFixture(t, s)
	r := newReceiver(t, answer{status: 204})
	ep, secret := f.endpoint(r.srv.URL)
	r.knows(secret)
	id := f.deliver(ep, "video.completed")
	d := f.run(f.sender(), id)[0]
	if d.Status != store.DeliveryDelivered || d.Attempts != 1 {
		t.Fatalf("delivery %+v", d)
	}
	got := r.received()
	if len(got) != 1 || got[0].id != id || !got[0].verifiedBy[0] || string(got[0].body) != `{"type":"video.completed"}` {
		t.Fatalf("receiver got %+v", got)
	}
	wantAttempts(t, f.attempts(id), store.DeliveryAttempt{StatusCode: 204, Delivered: true})
}

func TestSenderDeliversFirstTry(t *testing.T) { testDeliveredFirstTry(t, openSQLite(t)) }

func TestSenderRetriesServerErrors(t *testing.T) {
	f := newFixture(t, openSQLite(t))
	r := newReceiver(t, answer{status: 500, body: "busy"}, answer{status: 503, body: "still busy"}, answer{status: 200, body: "ok"})
	ep, secret := f.endpoint(r.srv.URL)
	r.knows(secret)
	id := f.deliver(ep, "video.completed")
	if d := f.run(f.sender(), id)[0]; d.Status != store.DeliveryDelivered || d.Attempts != 3 {
		t.Fatalf("delivery %+v", d)
	}
	wantAttempts(t, f.attempts(id),
		store.DeliveryAttempt{StatusCode: 500, Error: "HTTP 500", ResponsePreview: "busy"},
		store.DeliveryAttempt{StatusCode: 503, Error: "HTTP 503", ResponsePreview: "still busy"},
		store.DeliveryAttempt{StatusCode: 200, Delivered: true, ResponsePreview: "ok"})
	for _, got := range r.received() {
		if got.id != id || !got.verifiedBy[0] {
			t.Fatalf("a retry was not the same signed event: %+v", got)
		}
	}
	if ep := f.getEndpoint(ep); ep.ConsecutiveFailures != 0 || ep.Status != store.WebhookActive {
		t.Fatalf("endpoint after a delivery: %+v", ep)
	}
}

func TestSenderGivesUpAfterTheSchedule(t *testing.T) {
	f := newFixture(t, openSQLite(t))
	r := newReceiver(t, answer{status: 502})
	ep, _ := f.endpoint(r.srv.URL)
	id := f.deliver(ep, "video.completed")
	s := f.sender(10*time.Millisecond, 10*time.Millisecond)
	if d := f.run(s, id)[0]; d.Status != store.DeliveryFailed || d.Attempts != 3 || s.MaxAttempts() != 3 {
		t.Fatalf("delivery %+v", d)
	}
	if n := r.requests.Load(); n != 3 {
		t.Fatalf("receiver got %d requests, want 3", n)
	}
	if ep := f.getEndpoint(ep); ep.ConsecutiveFailures != 1 {
		t.Fatalf("endpoint after a failed delivery: %+v", ep)
	}
}

func TestSenderHonoursRetryAfter(t *testing.T) {
	f := newFixture(t, openSQLite(t))
	r := newReceiver(t, answer{status: 429, body: "slow down", retryAfter: "1"}, answer{status: 200, body: "ok"})
	ep, _ := f.endpoint(r.srv.URL)
	id := f.deliver(ep, "video.completed")
	// The schedule would wait an hour: only the receiver's Retry-After brings the retry in
	// time, and not before it.
	start := time.Now()
	if d := f.run(f.sender(time.Hour), id)[0]; d.Status != store.DeliveryDelivered {
		t.Fatalf("delivery %+v", d)
	}
	if took := time.Since(start); took < time.Second {
		t.Fatalf("retried after %v, before the receiver's Retry-After of 1 s", took)
	}
	as := f.attempts(id)
	wantAttempts(t, as, store.DeliveryAttempt{StatusCode: 429, Error: "HTTP 429", ResponsePreview: "slow down"},
		store.DeliveryAttempt{StatusCode: 200, Delivered: true, ResponsePreview: "ok"})
	if wait := as[0].NextAt.Sub(as[0].At); wait < 990*time.Millisecond || wait > 2*time.Second {
		t.Fatalf("retry scheduled %v after the 429, want the Retry-After's 1 s", wait)
	}
}

func TestSenderGivesUpOnClientErrors(t *testing.T) {
	f := newFixture(t, openSQLite(t))
	r := newReceiver(t, answer{status: 404, body: "no such hook"})
	ep, _ := f.endpoint(r.srv.URL)
	id := f.deliver(ep, "video.completed")
	if d := f.run(f.sender(), id)[0]; d.Status != store.DeliveryFailed || d.Attempts != 1 {
		t.Fatalf("delivery %+v", d)
	}
	wantAttempts(t, f.attempts(id), store.DeliveryAttempt{StatusCode: 404, Error: "HTTP 404", ResponsePreview: "no such hook"})

	// A redirect is an answer that failed, never followed.
	moved := newReceiver(t)
	redirect := newReceiver(t, answer{status: http.StatusFound})
	redirect.srv.Config.Handler = http.RedirectHandler(moved.srv.URL, http.StatusFound)
	ep3, _ := f.endpoint(redirect.srv.URL)
	id3 := f.deliver(ep3, "video.completed")
	if d := f.run(f.sender(), id3)[0]; d.Status != store.DeliveryFailed || moved.requests.Load() != 0 {
		t.Fatalf("redirected delivery %+v, %d requests followed it", d, moved.requests.Load())
	}

	// 410: the endpoint is gone, and disabled at once.
	gone := newReceiver(t, answer{status: http.StatusGone})
	ep2, _ := f.endpoint(gone.srv.URL)
	f.run(f.sender(), f.deliver(ep2, "video.completed"))
	if ep := f.getEndpoint(ep2); ep.Status != store.WebhookDisabled || ep.DisabledReason != delivery.ReasonGone {
		t.Fatalf("endpoint after a 410: %+v", ep)
	}
}

func TestSenderSignsWithBothSecretsWithinTheGrace(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, openSQLite(t))
	r := newReceiver(t)
	ep, old := f.endpoint(r.srv.URL)
	fresh, err := delivery.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	grace := 3 * time.Second
	if _, err := f.s.RotateWebhookSecret(ctx, f.ws, ep, f.seal(ep, fresh), time.Now().Add(grace)); err != nil {
		t.Fatalf("RotateWebhookSecret: %v", err)
	}
	r.knows(old, fresh)
	f.run(f.sender(), f.deliver(ep, "video.completed"))
	got := r.received()
	if len(got) != 1 || got[0].signatures != 2 || !got[0].verifiedBy[0] || !got[0].verifiedBy[1] {
		t.Fatalf("within the grace: %+v, want two signatures, each secret verifying", got)
	}
	// A receiver that knows only the old secret still verifies.
	r.knows(old)
	f.run(f.sender(), f.deliver(ep, "video.completed"))
	if got := r.received(); !got[1].verifiedBy[0] {
		t.Fatal("a receiver that knows only the old secret refused the event within the grace")
	}

	time.Sleep(grace)
	r.knows(old, fresh)
	f.run(f.sender(), f.deliver(ep, "video.completed"))
	if got := r.received()[2]; got.signatures != 1 || got.verifiedBy[0] || !got.verifiedBy[1] {
		t.Fatalf("after the grace: %+v, want the new secret's signature only", got)
	}
}

func TestSenderDisablesAFailingEndpoint(t *testing.T) {
	f := newFixture(t, openSQLite(t))
	r := newReceiver(t, answer{status: 400})
	ep, _ := f.endpoint(r.srv.URL)
	s := f.sender()
	s.DisableAfter = 3
	var told []store.WebhookEndpoint
	s.Disabled = func(ep store.WebhookEndpoint) { told = append(told, ep) }
	for i := range 3 {
		f.run(s, f.deliver(ep, "video.completed"))
		want := store.WebhookActive
		if i == 2 {
			want = store.WebhookDisabled
		}
		if got := f.getEndpoint(ep); got.Status != want || got.ConsecutiveFailures != i+1 {
			t.Fatalf("after %d failed deliveries: %+v", i+1, got)
		}
	}
	if got := f.getEndpoint(ep); got.DisabledReason != delivery.ReasonConsecutiveFailures {
		t.Fatalf("disabled endpoint %+v", got)
	}
	// The disabling is told once (the workspace's webhook_endpoint.disabled), with the
	// endpoint as disabled.
	if len(told) != 1 || told[0].ID != ep || told[0].Status != store.WebhookDisabled || told[0].ConsecutiveFailures != 3 {
		t.Fatalf("Disabled told %+v, want the endpoint once, as disabled", told)
	}
	// A disabled endpoint's deliveries end failed, unsent, saying why.
	id := f.deliver(ep, "video.completed")
	if d := f.run(s, id)[0]; d.Status != store.DeliveryFailed {
		t.Fatalf("delivery to a disabled endpoint %+v", d)
	}
	wantAttempts(t, f.attempts(id), store.DeliveryAttempt{Error: "disabled (" + delivery.ReasonConsecutiveFailures + ")"})
	if n := r.requests.Load(); n != 3 {
		t.Fatalf("receiver got %d requests, want 3 (none once disabled)", n)
	}
	if len(told) != 1 {
		t.Fatalf("Disabled told %d times, want once", len(told))
	}
}

func TestSenderEndsDeliveriesItCannotMake(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, openSQLite(t))
	r := newReceiver(t)
	// A deleted endpoint: failed, unsent.
	ep, _ := f.endpoint(r.srv.URL)
	id := f.deliver(ep, "video.completed")
	if _, err := f.s.DeleteWebhookEndpoint(ctx, f.ws, ep); err != nil {
		t.Fatal(err)
	}
	if d := f.run(f.sender(), id)[0]; d.Status != store.DeliveryFailed {
		t.Fatalf("delivery to a deleted endpoint %+v", d)
	}
	wantAttempts(t, f.attempts(id), store.DeliveryAttempt{Error: "no longer exists"})

	// An endpoint not subscribed to the type: no POST, no attempt, the item gone, the
	// delivery skipped.
	ep2, _ := f.endpoint(r.srv.URL, "video.failed")
	skipped := f.deliver(ep2, "video.completed")
	if d := f.run(f.sender(), skipped)[0]; d.Status != store.DeliverySkipped || d.Attempts != 0 || !d.NextAt.IsZero() {
		t.Fatalf("delivery of an event its endpoint is not subscribed to %+v, want skipped", d)
	}
	wantAttempts(t, f.attempts(skipped))
	if n := r.requests.Load(); n != 0 {
		t.Fatalf("unsubscribed or deleted endpoints got %d requests", n)
	}
	if items := f.claim(store.DeliveryQueue, "probe", time.Minute); len(items) != 0 {
		t.Fatalf("a skipped delivery is still queued: %+v", items)
	}
}

// panicky is a transport whose first call panics.
type panicky struct {
	next  http.RoundTripper
	calls atomic.Int32
}

func (p *panicky) RoundTrip(req *http.Request) (*http.Response, error) {
	if p.calls.Add(1) == 1 {
		panic("transport exploded")
	}
	return p.next.RoundTrip(req)
}

func TestSenderRecoversAPanicAndRetries(t *testing.T) {
	f := newFixture(t, openSQLite(t))
	r := newReceiver(t)
	ep, secret := f.endpoint(r.srv.URL)
	r.knows(secret)
	id := f.deliver(ep, "video.completed")
	s := f.sender()
	s.Client.HTTP.Transport = &panicky{next: s.Client.HTTP.Transport}
	if d := f.run(s, id)[0]; d.Status != store.DeliveryDelivered || d.Attempts != 2 {
		t.Fatalf("delivery %+v", d)
	}
	wantAttempts(t, f.attempts(id), store.DeliveryAttempt{Error: "transport exploded"},
		store.DeliveryAttempt{StatusCode: 200, Delivered: true, ResponsePreview: "ok"})
	if got := r.received(); len(got) != 1 || !got[0].verifiedBy[0] {
		t.Fatalf("receiver got %+v", got)
	}
}

func TestSenderTakesOverADeadSendersDelivery(t *testing.T) {
	f := newFixture(t, openSQLite(t))
	r := newReceiver(t)
	ep, secret := f.endpoint(r.srv.URL)
	r.knows(secret)
	id := f.deliver(ep, "video.completed")
	// A sender claims it and dies before recording anything.
	dead := f.claim(store.DeliveryQueue, "dead_sender", 300*time.Millisecond)
	if len(dead) != 1 || dead[0].ID != id {
		t.Fatalf("the dead sender claimed %+v", dead)
	}
	// A new sender delivers it once the lease ran out.
	start := time.Now()
	if d := f.run(f.sender(), id)[0]; d.Status != store.DeliveryDelivered {
		t.Fatalf("delivery %+v", d)
	}
	if took := time.Since(start); took < 250*time.Millisecond {
		t.Fatalf("delivered after %v, while the dead sender's lease still ran", took)
	}
	if got := r.received(); len(got) != 1 || got[0].id != id || !got[0].verifiedBy[0] {
		t.Fatalf("receiver got %+v", got)
	}
	// The dead sender's claim can record nothing now.
	err := f.s.RecordAttempt(context.Background(), dead[0].Claim, store.DeliveryAttempt{Delivered: true, StatusCode: 200}, time.Time{})
	if !errors.Is(err, store.ErrClaimLost) {
		t.Fatalf("RecordAttempt of the dead claim: %v, want ErrClaimLost", err)
	}
}

func TestSenderWithoutSealerGivesUp(t *testing.T) {
	f := newFixture(t, openSQLite(t))
	r := newReceiver(t)
	ep, _ := f.endpoint(r.srv.URL)
	id := f.deliver(ep, "video.completed")
	s := f.sender()
	other, err := delivery.NewSealer(base64.StdEncoding.EncodeToString(make([]byte, 32)))
	if err != nil {
		t.Fatal(err)
	}
	s.Sealer = other
	if d := f.run(s, id)[0]; d.Status != store.DeliveryFailed || r.requests.Load() != 0 {
		t.Fatalf("a secret another key sealed: %+v, %d requests", d, r.requests.Load())
	}
	wantAttempts(t, f.attempts(id), store.DeliveryAttempt{Error: "opening the signing secret"})
}

// ownURL is the webhook configuration of a job with its own receiver url, its secret
// sealed for sealedFor (its target when empty).
func (f *fixture) ownURL(url, secret, sealedFor string) (json.RawMessage, string) {
	f.t.Helper()
	w := delivery.JobWebhook{URL: url, Target: delivery.NewInlineTarget()}
	if sealedFor == "" {
		sealedFor = w.Target
	}
	w.Secret = f.seal(sealedFor, secret)
	raw, err := json.Marshal(w)
	if err != nil {
		f.t.Fatal(err)
	}
	return raw, w.Target
}

// TestSenderDeliversToAJobsOwnURL: a job's own URL is sent its events signed with the
// job's secret; a delivery whose job no longer names its target, or whose secret does not
// open for it, is given up without a request; an endpoint subscribed to "*" takes every type.
func TestSenderDeliversToAJobsOwnURL(t *testing.T) {
	f := newFixture(t, openSQLite(t))
	r := newReceiver(t, answer{status: 503}, answer{status: 200, body: "ok"})
	secret, _ := delivery.NewSecret()
	r.knows(secret)
	webhook, target := f.ownURL(r.srv.URL+"/own", secret, "")
	id := f.deliverOfJob(webhook, target, "video.completed")
	other, _ := f.ownURL(r.srv.URL+"/own", secret, "")
	stray := f.deliverOfJob(other, delivery.NewInlineTarget(), "video.completed")
	misSealed, misTarget := f.ownURL(r.srv.URL+"/own", secret, "whurl_another")
	unopened := f.deliverOfJob(misSealed, misTarget, "video.completed")
	everything := newReceiver(t, answer{status: 204})
	all, allSecret := f.endpoint(everything.srv.URL+"/all", "*")
	everything.knows(allSecret)
	toAll := f.deliverOfJob(nil, all, "music.progress")

	got := f.run(f.sender(), id, stray, unopened, toAll)
	if got[0].Status != store.DeliveryDelivered || got[0].Attempts != 2 || got[1].Status != store.DeliveryFailed ||
		got[2].Status != store.DeliveryFailed || got[3].Status != store.DeliveryDelivered {
		t.Fatalf("deliveries %+v", got)
	}
	wantAttempts(t, f.attempts(id), store.DeliveryAttempt{StatusCode: 503, Error: "HTTP 503"},
		store.DeliveryAttempt{StatusCode: 200, Delivered: true, ResponsePreview: "ok"})
	wantAttempts(t, f.attempts(stray), store.DeliveryAttempt{Error: "no longer names this webhook receiver"})
	wantAttempts(t, f.attempts(unopened), store.DeliveryAttempt{Error: "opening the signing secret"})
	received := r.received()
	if len(received) != 2 {
		t.Fatalf("the job's receiver got %d requests, want two of the job's event: %+v", len(received), received)
	}
	for _, h := range received {
		if h.id != id || !h.verifiedBy[0] || h.signatures != 1 {
			t.Fatalf("the job's event came as %+v", h)
		}
	}
	if got := everything.received(); len(got) != 1 || got[0].id != toAll || !got[0].verifiedBy[0] {
		t.Fatalf("the endpoint subscribed to every event got %+v", got)
	}
}
