//go:build unix

package module

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"go.uber.org/zap"

	"github.com/modelgateway/caddy-modelgateway/billing"
	"github.com/modelgateway/caddy-modelgateway/delivery"
	"github.com/modelgateway/caddy-modelgateway/handlers"
	"github.com/modelgateway/caddy-modelgateway/internal/ids"
	"github.com/modelgateway/caddy-modelgateway/jobs"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// deliveryWaitEnv makes a gateway in a child process (startCrashChild) wait this long (a
// Go duration) before each retry of a delivery, as tuneDeliveries does in this process.
const deliveryWaitEnv = "GATEWAY_TEST_DELIVERY_WAIT"

func init() {
	if wait, err := time.ParseDuration(os.Getenv(deliveryWaitEnv)); err == nil {
		deliveryTuning.Store(deliveryTuneOf(wait, nil))
	}
}

// tuneDeliveries makes the senders of gateways started from now on retry after wait (as
// many times as the default schedule), on the clock now (nil: the real one), poll their
// outbox often and reach receivers over plain http (webhook_allow still admits loopback).
func tuneDeliveries(t *testing.T, wait time.Duration, now func() time.Time) {
	deliveryTuning.Store(deliveryTuneOf(wait, now))
	t.Cleanup(func() { deliveryTuning.Store(nil) })
}

func deliveryTuneOf(wait time.Duration, now func() time.Time) *deliveryTune {
	schedule := make([]time.Duration, len(delivery.DefaultSchedule))
	for i := range schedule {
		schedule[i] = wait
	}
	return &deliveryTune{
		client: func(o *delivery.ClientOptions) { o.AllowHTTP = true },
		sender: func(s *delivery.Sender) {
			s.Schedule, s.Jitter, s.Idle, s.Lease = schedule, -1, 20*time.Millisecond, 3*time.Second
			if now != nil {
				s.Now = now
			}
		},
	}
}

// webhookGatewayBlock is the gateway's options for the webhook tests: a secret key (from
// GATEWAY_TEST_SECRET_KEY), receivers on loopback admitted, and the test job kind's route.
func webhookGatewayBlock(upstream string) string {
	return "\t\tsecret_key {env.GATEWAY_TEST_SECRET_KEY}\n\t\twebhook_allow 127.0.0.1\n" + `
		provider vidup {
			type openai
			base_url ` + upstream + `/v1
			api_key sk-upstream
		}
		model test-video {
			route vidup vid-1 {
				output_video_seconds 0.10 resolution 720p
			}
		}`
}

// receivedHook is one request a webhook receiver was sent.
type receivedHook struct {
	id     string // webhook-id
	header http.Header
	body   []byte
	// at is when it came; senderNow the senders' clock then, which verifies its timestamp.
	at, senderNow time.Time
	// try is how many requests with this id came, this one included; status the answer.
	try, status int
}

// hookReceiver is a receiver that records what it is sent and answers as answer decides
// (by the request's try of its id).
type hookReceiver struct {
	*httptest.Server
	mu  sync.Mutex
	got []receivedHook
}

func newHookReceiver(t *testing.T, now func() time.Time, answer func(h receivedHook) int) *hookReceiver {
	t.Helper()
	if now == nil {
		now = time.Now
	}
	r := &hookReceiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		h := receivedHook{id: req.Header.Get("webhook-id"), header: req.Header.Clone(), body: body, at: time.Now(), senderNow: now()}
		r.mu.Lock()
		h.try = 1
		for _, g := range r.got {
			if g.id == h.id {
				h.try++
			}
		}
		h.status = answer(h)
		r.got = append(r.got, h)
		r.mu.Unlock()
		w.WriteHeader(h.status)
		_, _ = fmt.Fprintf(w, "answer %d", h.status)
	}))
	t.Cleanup(r.Close)
	return r
}

// hooks returns what came, in order; of event id only when id is not empty.
func (r *hookReceiver) hooks(id string) []receivedHook {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []receivedHook
	for _, h := range r.got {
		if id == "" || h.id == id {
			out = append(out, h)
		}
	}
	return out
}

// hookOfJob returns the first request whose event tells of job jobID, and whether one came.
func (r *hookReceiver) hookOfJob(jobID string) (receivedHook, bool) {
	for _, h := range r.hooks("") {
		var ev jobs.Event
		if json.Unmarshal(h.body, &ev) == nil && ev.Data.ID == jobID {
			return h, true
		}
	}
	return receivedHook{}, false
}

// verifyHook checks h's signature with secret as a receiver written with openai-go does,
// at the senders' clock.
func verifyHook(h receivedHook, secret string) error {
	client := openai.NewClient(option.WithAPIKey("unused"), option.WithWebhookSecret(secret))
	return client.Webhooks.VerifySignatureWithToleranceAndTime(h.body, h.header, 5*time.Minute, h.senderNow)
}

// testClock is the senders' clock in a test: the real one, moved on by offset.
type testClock struct{ offset atomic.Int64 }

func (c *testClock) Now() time.Time           { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *testClock) Set(offset time.Duration) { c.offset.Store(int64(offset)) }

// inlineWebhook is the stored webhook of a job that names its own receiver url, with
// secret sealed under the operator's key, as handlers' parseJobWebhook stores it.
func inlineWebhook(t *testing.T, key, url, secret string, events ...string) json.RawMessage {
	t.Helper()
	sealer, err := delivery.NewSealer(key)
	if err != nil {
		t.Fatal(err)
	}
	w := delivery.JobWebhook{URL: url, Target: delivery.NewInlineTarget(), Events: events}
	if w.Secret, err = sealer.Seal([]byte(secret), []byte(w.Target)); err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// jobWebhookObject is the webhook object the job's public object shows, as JSON.
func jobWebhookObject(t *testing.T, s store.Store, ws, jobID string) map[string]any {
	t.Helper()
	ctx := context.Background()
	j, err := s.GetJob(ctx, ws, jobID)
	if err != nil {
		t.Fatal(err)
	}
	g := &handlers.Gateway{Config: billing.Config{Store: s}}
	v, err := g.JobWebhook(ctx, j)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func webhookEvents() func(store.Job, string) []store.Event {
	return jobs.WebhookEvents(zap.NewNop(), time.Now)
}

// TestJobWebhookRotationVerifiedByOpenAI: a job's events to a webhook endpoint verify with
// openai-go's own verification (independent of the gateway's signer), before a rotation
// with the old secret, within the 24 h overlap with the old and the new one, and after it
// with the new one only; the senders' clock is moved, as the overlap is the senders' to keep.
func TestJobWebhookRotationVerifiedByOpenAI(t *testing.T) {
	t.Setenv("GATEWAY_TEST_SECRET_KEY", newSecretKey(t))
	var clock testClock
	tuneDeliveries(t, 200*time.Millisecond, clock.Now)
	up := newFakeJobUpstream(t, time.Hour, 0)
	rcv := newHookReceiver(t, clock.Now, func(receivedHook) int { return http.StatusNoContent })
	env := startGateway(t, webhookGatewayBlock(up.URL), "")
	tm := env.team(10 * usd)
	created := env.expect(201, http.MethodPost, tm.mgmt, "/webhook-endpoints",
		`{"name": "receiver", "url": "`+rcv.URL+`/hook", "events": ["*"]}`)
	endpoint, oldSecret := created["id"].(string), created["signing_secret"].(string)
	webhook := json.RawMessage(`{"endpoint_id": "` + endpoint + `", "events": ["testjob.created"]}`)

	// eventOfNewJob creates a job and returns its created event as the receiver got it.
	eventOfNewJob := func(what string) receivedHook {
		t.Helper()
		job := submitTestJobTo(t, env.store, tm, up.URL, store.Job{ID: ids.New("job"), Webhook: webhook}, usd/10, time.Hour, webhookEvents())
		var h receivedHook
		waitFor(t, what, func() bool {
			var ok bool
			h, ok = rcv.hookOfJob(job.ID)
			return ok
		})
		ts := h.header.Get("webhook-timestamp")
		if want := h.senderNow.Unix(); ts < fmt.Sprint(want-2) || ts > fmt.Sprint(want) {
			t.Fatalf("%s: webhook-timestamp %s, want the senders' clock %d", what, ts, want)
		}
		return h
	}
	signatures := func(h receivedHook) int { return len(strings.Fields(h.header.Get("webhook-signature"))) }

	before := eventOfNewJob("an event before the rotation")
	if err := verifyHook(before, oldSecret); err != nil || signatures(before) != 1 {
		t.Fatalf("before the rotation: %v, %d signatures", err, signatures(before))
	}

	if _, err := env.store.SetWorkspaceAsyncAccess(context.Background(), tm.ws, true); err != nil {
		t.Fatal(err)
	}
	newSecret := env.expect(200, http.MethodPost, tm.mgmt, "/webhook-endpoints/"+endpoint+"/rotate-secret", "")["signing_secret"].(string)

	clock.Set(23 * time.Hour)
	within := eventOfNewJob("an event within the overlap")
	if errOld, errNew := verifyHook(within, oldSecret), verifyHook(within, newSecret); errOld != nil || errNew != nil || signatures(within) != 2 {
		t.Fatalf("within the overlap: old secret %v, new secret %v, %d signatures", errOld, errNew, signatures(within))
	}

	clock.Set(delivery.RotationGrace + time.Minute)
	after := eventOfNewJob("an event after the overlap")
	if errOld, errNew := verifyHook(after, oldSecret), verifyHook(after, newSecret); errOld == nil || errNew != nil || signatures(after) != 1 {
		t.Fatalf("after the overlap: old secret %v (want refused), new secret %v, %d signatures", errOld, errNew, signatures(after))
	}
	// The verification reads the clock: the same request is too new for the real one.
	after.senderNow = time.Now()
	if err := verifyHook(after, newSecret); err == nil {
		t.Fatal("a timestamp a day ahead verifies at the real time")
	}
}

// TestJobWebhookRetriesAsDocumented: a receiver that fails three times then takes the
// event gets exactly four attempts; one that always fails gets exactly the five the
// schedule allows, then nothing; each wait is the schedule's; every attempt is signed with
// the job's secret (an endpoint's, or the job's own for a URL); and the job object's
// webhook delivery state and attempts are what the receivers saw.
func TestJobWebhookRetriesAsDocumented(t *testing.T) {
	key := newSecretKey(t)
	t.Setenv("GATEWAY_TEST_SECRET_KEY", key)
	const wait = 300 * time.Millisecond
	tuneDeliveries(t, wait, nil)
	up := newFakeJobUpstream(t, time.Hour, 0)
	flaky := newHookReceiver(t, nil, func(h receivedHook) int {
		if h.try <= 3 {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	down := newHookReceiver(t, nil, func(receivedHook) int { return http.StatusInternalServerError })
	env := startGateway(t, webhookGatewayBlock(up.URL), "")
	tm := env.team(10 * usd)
	created := env.expect(201, http.MethodPost, tm.mgmt, "/webhook-endpoints", `{"name": "flaky", "url": "`+flaky.URL+`/hook", "events": ["*"]}`)
	endpoint, endpointSecret := created["id"].(string), created["signing_secret"].(string)
	ownSecret, err := delivery.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	jobA := submitTestJobTo(t, env.store, tm, up.URL, store.Job{ID: ids.New("job"),
		Webhook: json.RawMessage(`{"endpoint_id": "` + endpoint + `", "events": ["testjob.created"]}`)}, usd/10, time.Hour, webhookEvents())
	jobB := submitTestJobTo(t, env.store, tm, up.URL, store.Job{ID: ids.New("job"),
		Webhook: inlineWebhook(t, key, down.URL+"/own", ownSecret, "testjob.created")}, usd/10, time.Hour, webhookEvents())

	most := len(delivery.DefaultSchedule) + 1
	waitFor(t, "the flaky receiver's fourth request", func() bool { return len(flaky.hooks("")) >= 4 })
	waitFor(t, "the down receiver's last request", func() bool { return len(down.hooks("")) >= most })
	time.Sleep(3 * wait) // anything more would have come by now
	check := func(what string, got []receivedHook, n int, secret string) {
		t.Helper()
		if len(got) != n {
			t.Fatalf("%s: %d requests, want %d", what, len(got), n)
		}
		for i, h := range got {
			if h.id != got[0].id || h.try != i+1 {
				t.Fatalf("%s: request %d is of event %s (try %d), want every one of %s", what, i+1, h.id, h.try, got[0].id)
			}
			if err := verifyHook(h, secret); err != nil {
				t.Fatalf("%s: request %d does not verify: %v", what, i+1, err)
			}
			if i > 0 {
				if gap := h.at.Sub(got[i-1].at); gap < wait-20*time.Millisecond {
					t.Fatalf("%s: request %d came %v after the one before, the schedule waits %v", what, i+1, gap, wait)
				}
			}
		}
	}
	check("the flaky receiver", flaky.hooks(""), 4, endpointSecret)
	check("the down receiver", down.hooks(""), most, ownSecret)

	// The job objects show what the receivers saw.
	shown := func(what string, got []receivedHook, obj map[string]any, delivered bool) {
		t.Helper()
		d := obj["delivery"].(map[string]any)
		attempts := obj["attempts"].([]any)
		last := got[len(got)-1]
		wantTypes, lastFailure := []any{}, got[len(got)-1]
		if delivered {
			wantTypes, lastFailure = []any{"testjob.created"}, got[len(got)-2]
		}
		if d["total_attempts"] != float64(len(got)) || d["pending_retries"] != 0.0 || d["next_retry_at"] != nil ||
			d["max_attempts"] != float64(most) || d["last_response_status"] != float64(last.status) ||
			d["last_error_message"] != fmt.Sprintf("HTTP %d", lastFailure.status) ||
			!slices.Equal(d["delivered_event_types"].([]any), wantTypes) || d["delivered_events"] != float64(len(wantTypes)) ||
			len(attempts) != len(got) || obj["has_secret"] != true || fmt.Sprint(obj["events"]) != "[testjob.created]" {
			t.Fatalf("%s: webhook object %v", what, obj)
		}
		near := func(field any, at time.Time) bool {
			s, _ := field.(string)
			tm, err := time.Parse(time.RFC3339, s)
			return err == nil && tm.After(at.Add(-2*time.Second)) && tm.Before(at.Add(time.Second))
		}
		if !near(d["last_attempt_at"], last.at) || !near(d["last_failure_at"], lastFailure.at) ||
			(delivered && !near(d["last_delivered_at"], last.at)) || (!delivered && d["last_delivered_at"] != nil) {
			t.Fatalf("%s: times of %v", what, d)
		}
		for i, raw := range attempts {
			a, h := raw.(map[string]any), got[i]
			if a["delivery_key"] != h.id || a["event_type"] != "testjob.created" || a["attempt_number"] != float64(i+1) ||
				a["max_attempts"] != float64(most) || a["response_status"] != float64(h.status) ||
				a["response_body_preview"] != fmt.Sprintf("answer %d", h.status) || !near(a["tried_at"], h.at) {
				t.Fatalf("%s: attempt %d %v, the receiver saw %s try %d answered %d", what, i+1, a, h.id, h.try, h.status)
			}
			final := i == len(attempts)-1
			if (a["next_retry_at"] == nil) != final || (a["delivered_at"] != nil) != (final && delivered) ||
				(a["error_message"] == nil) != (final && delivered) {
				t.Fatalf("%s: attempt %d %v", what, i+1, a)
			}
		}
	}
	objA := jobWebhookObject(t, env.store, tm.ws, jobA.ID)
	shown("the endpoint's job", flaky.hooks(""), objA, true)
	if objA["endpoint_id"] != endpoint || objA["url"] != flaky.URL+"/hook" {
		t.Fatalf("the endpoint's job shows %v", objA)
	}
	objB := jobWebhookObject(t, env.store, tm.ws, jobB.ID)
	shown("the job's own url", down.hooks(""), objB, false)
	if objB["endpoint_id"] != nil || objB["url"] != down.URL+"/own" {
		t.Fatalf("the job with its own url shows %v", objB)
	}
	// A job's own URL is no endpoint: its failures disable nothing; the endpoint's
	// delivery in the end cleared its failures.
	ep, err := env.store.GetWebhookEndpoint(context.Background(), tm.ws, endpoint)
	if err != nil || ep.Status != store.WebhookActive || ep.ConsecutiveFailures != 0 {
		t.Fatalf("endpoint %+v, %v", ep, err)
	}
}

// sqliteDeliveryAttempts reads how many attempts the deliveries of a job have had, from
// the database file a gateway in another process writes.
func sqliteDeliveryAttempts(t *testing.T, dbPath, jobID string) int {
	t.Helper()
	db, err := sql.Open("sqlite3", "file:"+dbPath+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(`SELECT COALESCE(SUM(attempts), 0) FROM deliveries WHERE job_id = ?`, jobID).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestJobWebhookSurvivesKillNine: a gateway killed with SIGKILL between two attempts at
// an event leaves it in the outbox with its retry; the gateway restarted on the database
// makes the retry when it is due, and the receiver gets the event, signed alike.
func TestJobWebhookSurvivesKillNine(t *testing.T) {
	key := newSecretKey(t)
	t.Setenv("GATEWAY_TEST_SECRET_KEY", key)
	const wait = 1500 * time.Millisecond
	t.Setenv(deliveryWaitEnv, wait.String())
	up := newFakeJobUpstream(t, time.Hour, 0)
	rcv := newHookReceiver(t, nil, func(h receivedHook) int {
		if h.try == 1 {
			return http.StatusBadGateway
		}
		return http.StatusOK
	})
	dir := t.TempDir()
	setup := startGatewayFiles(t, dir)
	tm := setup.team(10 * usd)
	secret, err := delivery.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	block := webhookGatewayBlock(up.URL)
	job := submitTestJobTo(t, setup.store, tm, up.URL, store.Job{ID: ids.New("job"),
		Webhook: inlineWebhook(t, key, rcv.URL+"/hook", secret, "testjob.created")}, usd/10, time.Hour, webhookEvents())
	if err := setup.store.Close(); err != nil { // the child's journal is its own
		t.Fatal(err)
	}

	child := startCrashChild(t, gatewayCaddyfileOn(freePort(t), "sqlite "+setup.dbPath, block, ""))
	waitFor(t, "the first attempt, recorded", func() bool { return sqliteDeliveryAttempts(t, setup.dbPath, job.ID) == 1 })
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	if got := rcv.hooks(""); len(got) != 1 || got[0].status != http.StatusBadGateway {
		t.Fatalf("before the kill the receiver got %d requests", len(got))
	}

	tuneDeliveries(t, wait, nil)
	env := startGatewayIn(t, dir, block, "")
	waitFor(t, "the retry by the restarted gateway", func() bool { return len(rcv.hooks("")) >= 2 })
	time.Sleep(2 * wait)
	got := rcv.hooks("")
	if len(got) != 2 || got[1].id != got[0].id || got[1].status != http.StatusOK {
		t.Fatalf("the receiver got %+v; want the event twice, taken the second time", got)
	}
	if gap := got[1].at.Sub(got[0].at); gap < wait-20*time.Millisecond {
		t.Fatalf("the retry came %v after the first attempt; the schedule waits %v", gap, wait)
	}
	for i, h := range got {
		if err := verifyHook(h, secret); err != nil {
			t.Fatalf("request %d does not verify: %v", i+1, err)
		}
	}
	obj := jobWebhookObject(t, env.store, tm.ws, job.ID)
	d := obj["delivery"].(map[string]any)
	attempts := obj["attempts"].([]any)
	if d["total_attempts"] != 2.0 || d["delivered_events"] != 1.0 || d["pending_retries"] != 0.0 || len(attempts) != 2 ||
		attempts[0].(map[string]any)["response_status"] != 502.0 || attempts[1].(map[string]any)["response_status"] != 200.0 {
		t.Fatalf("webhook object %v", obj)
	}
}

// multiJobUpstream runs any number of test jobs until done is closed: each poll takes a
// while, and a poll of a job that comes while another of the same job is in flight is
// counted as an overlap.
type multiJobUpstream struct {
	*httptest.Server
	done chan struct{}

	mu       sync.Mutex
	next     int
	polls    map[string]int
	inFlight map[string]int
	overlaps int
}

func newMultiJobUpstream(t *testing.T, pace, pollTakes time.Duration) *multiJobUpstream {
	f := &multiJobUpstream{done: make(chan struct{}), polls: map[string]int{}, inFlight: map[string]int{}}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if r.Method == http.MethodPost && r.URL.Path == "/jobs" {
			f.next++
			_, _ = fmt.Fprintf(w, `{"id":"native_%d"}`, f.next)
			return
		}
		id, ok := strings.CutPrefix(r.URL.Path, "/jobs/")
		if r.Method != http.MethodGet || !ok {
			http.NotFound(w, r)
			return
		}
		f.polls[id]++
		n := f.polls[id]
		f.inFlight[id]++
		if f.inFlight[id] > 1 {
			f.overlaps++
		}
		f.mu.Unlock()
		time.Sleep(pollTakes)
		f.mu.Lock()
		f.inFlight[id]--
		st := testJobStatus{Status: jobs.StatusInProgress, Progress: min(10*n, 90), PollAfterMs: pace.Milliseconds()}
		select {
		case <-f.done:
			st = testJobStatus{Status: jobs.StatusCompleted, Progress: 100, Seconds: 1, Resolution: "720p"}
		default:
		}
		_ = json.NewEncoder(w).Encode(st)
	}))
	t.Cleanup(f.Close)
	return f
}

// TestJobWebhooksTwoInstancesOnPostgres runs two gateways on one PostgreSQL database, one
// in a child process: every job is polled by one of them at a time (the upstream sees no
// poll of a job while another is in flight), and every event of every job reaches its
// receiver at least once (each one's first attempt fails, so that retries cross between
// the instances), none lost.
func TestJobWebhooksTwoInstancesOnPostgres(t *testing.T) {
	dsn := postgresSchema(t)
	t.Setenv("GATEWAY_TEST_PG_DSN", dsn)
	key := newSecretKey(t)
	t.Setenv("GATEWAY_TEST_SECRET_KEY", key)
	const wait = 200 * time.Millisecond
	t.Setenv(deliveryWaitEnv, wait.String())
	tuneDeliveries(t, wait, nil)
	up := newMultiJobUpstream(t, 50*time.Millisecond, 30*time.Millisecond)
	rcv := newHookReceiver(t, nil, func(h receivedHook) int {
		if h.try == 1 {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	block := webhookGatewayBlock(up.URL) + "\n\t\tinstance_heartbeat 100ms\n\t\tinstance_timeout 2s\n"
	s := openPostgres(t, dsn)
	child := startCrashChild(t, gatewayCaddyfileOn(freePort(t), "postgres {env.GATEWAY_TEST_PG_DSN}", block, ""))
	env := startPostgresGateway(t, dsn, block)
	env.store = s
	tm := env.team(100 * usd)
	endpoint := env.expect(201, http.MethodPost, tm.mgmt, "/webhook-endpoints", `{"name": "r", "url": "`+rcv.URL+`/ep", "events": ["*"]}`)["id"].(string)

	// Which instances hold claims (of polls and of deliveries), sampled as the test runs:
	// both must take part, or the test proves nothing about two of them.
	owners := sampleClaimOwners(t, dsn, `SELECT DISTINCT owner FROM queue_items WHERE owner <> ''`)

	var jobIDs []string
	for i := range 6 {
		webhook := json.RawMessage(`{"endpoint_id": "` + endpoint + `"}`)
		if i%2 == 1 {
			secret, _ := delivery.NewSecret()
			webhook = inlineWebhook(t, key, fmt.Sprintf("%s/own/%d", rcv.URL, i), secret)
		}
		j := submitTestJobTo(t, s, tm, up.URL, store.Job{ID: ids.New("job"), Webhook: webhook}, usd, 50*time.Millisecond, webhookEvents())
		jobIDs = append(jobIDs, j.ID)
	}
	waitFor(t, "a few polls of every job", func() bool {
		up.mu.Lock()
		defer up.mu.Unlock()
		for i := 1; i <= len(jobIDs); i++ {
			if up.polls[fmt.Sprintf("native_%d", i)] < 4 {
				return false
			}
		}
		return true
	})
	close(up.done)
	ctx := context.Background()
	waitFor(t, "every job's end", func() bool {
		for _, id := range jobIDs {
			j, err := s.GetJob(ctx, tm.ws, id)
			if err != nil || !jobs.Terminal(j.Status) || j.Lifecycle != jobs.LifecycleSettled {
				return false
			}
		}
		return true
	})
	pending := func() []string {
		return postgresStrings(t, dsn, `SELECT id FROM deliveries WHERE workspace_id = $1 AND status <> 'delivered'`, tm.ws)
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(pending()) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if p := pending(); len(p) > 0 {
		t.Fatalf("deliveries not delivered after 30 s: %v", p)
	}
	held := owners()
	_ = child.Process.Kill()
	if len(held) < 2 {
		t.Fatalf("claims were held by %v; want both instances", held)
	}
	t.Logf("claims held by %v", held)

	up.mu.Lock()
	overlaps := up.overlaps
	up.mu.Unlock()
	if overlaps != 0 {
		t.Fatalf("%d polls of a job came while another poll of it was in flight", overlaps)
	}
	taken := map[string]bool{}
	for _, h := range rcv.hooks("") {
		if h.status == http.StatusOK {
			taken[h.id] = true
		}
	}
	for _, id := range jobIDs {
		events := postgresStrings(t, dsn, `SELECT id FROM deliveries WHERE workspace_id = $1 AND job_id = $2`, tm.ws, id)
		types := postgresStrings(t, dsn, `SELECT DISTINCT event_type FROM deliveries WHERE workspace_id = $1 AND job_id = $2 ORDER BY event_type`, tm.ws, id)
		if !slices.Equal(types, []string{"testjob.completed", "testjob.created", "testjob.progress", "testjob.status_changed"}) {
			t.Fatalf("job %s made events of types %v", id, types)
		}
		for _, ev := range events {
			if !taken[ev] {
				t.Fatalf("event %s of job %s never reached its receiver", ev, id)
			}
		}
		obj := jobWebhookObject(t, s, tm.ws, id)
		if d := obj["delivery"].(map[string]any); d["delivered_events"] != float64(len(events)) || d["total_attempts"] != float64(2*len(events)) {
			t.Fatalf("job %s: %d events, webhook delivery %v", id, len(events), d)
		}
	}
}

// sampleClaimOwners samples, every 10 ms from now on, which owners hold the claims query
// (with args) selects on PostgreSQL at dsn; the function it returns stops the sampling and
// returns every owner seen, so that a test of several instances can check that each took
// part.
func sampleClaimOwners(t *testing.T, dsn, query string, args ...any) func() map[string]bool {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	owners := map[string]bool{}
	var mu sync.Mutex
	sampling, stop := context.WithCancel(context.Background())
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		defer func() { _ = conn.Close(context.Background()) }()
		for sampling.Err() == nil {
			rows, err := conn.Query(sampling, query, args...)
			if err == nil {
				held, _ := pgx.CollectRows(rows, pgx.RowTo[string])
				mu.Lock()
				for _, o := range held {
					owners[o] = true
				}
				mu.Unlock()
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	t.Cleanup(stop)
	return func() map[string]bool {
		stop()
		<-sampled
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(owners)
	}
}
