package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/modelgateway/caddy-modelgateway/billing"

	"github.com/modelgateway/caddy-modelgateway/jobs"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// liveKind is a job kind of these tests whose family renders its own object, with only
// the fields below: a change of anything else (its usage, its lifecycle) does not show.
const liveKind = "livetest"

// livePanicKind is a job kind whose renderer panics at progress 13.
const livePanicKind = "livepanic"

func init() {
	registerJobRenderer(liveKind, func(g *Gateway, r *http.Request, j store.Job) (any, error) {
		_, ws := g.jobURLs(r, "/livetests/"+j.ID, j.Kind, j.ID)
		return map[string]any{"id": j.ID, "object": "livetest", "status": j.Status, "progress": j.Progress, "websocket_url": ws}, nil
	})
	registerJobRenderer(livePanicKind, func(g *Gateway, r *http.Request, j store.Job) (any, error) {
		if j.Progress == 13 {
			panic("the test renderer panics at 13")
		}
		return map[string]any{"id": j.ID, "progress": j.Progress}, nil
	})
}

// liveEnv is a Gateway over a fresh SQLite store, served at /v1 by an httptest server.
type liveEnv struct {
	*adminGateway
	srv *httptest.Server
}

func newLiveEnv(t *testing.T, live LiveSettings) *liveEnv {
	t.Helper()
	a := newAdminGateway(t, nil, func(g *Gateway) { g.BasePath, g.Live = "/v1", live })
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.g.ServeHTTP(w, r, strings.TrimPrefix(r.URL.Path, "/v1"))
	}))
	t.Cleanup(srv.Close)
	return &liveEnv{adminGateway: a, srv: srv}
}

// job stores a queued job of kind in workspace ws, its first poll due now.
func (e *liveEnv) job(ws, kind, id string) store.Job {
	e.t.Helper()
	j := store.Job{
		ID: id, WorkspaceID: ws, Kind: kind, Model: "m", Provider: "p", UpstreamModel: "u",
		Status: jobs.StatusQueued, Lifecycle: jobs.LifecycleSubmitted,
	}
	if err := e.s.CreateJob(context.Background(), j, time.Now(), nil); err != nil {
		e.t.Fatal(err)
	}
	return j
}

// advance applies u to job j as a worker does: it claims the job's poll, advances the job
// and requeues the poll, due now.
func (e *liveEnv) advance(j store.Job, u store.JobUpdate) {
	e.t.Helper()
	ctx := context.Background()
	items, err := e.s.Claim(ctx, store.ClaimParams{Queue: store.JobQueue(j.Kind), Owner: "test", Lease: time.Minute, Limit: 1})
	if err != nil || len(items) != 1 || items[0].ID != j.ID {
		e.t.Fatalf("claiming the poll of %s: %v %+v", j.ID, err, items)
	}
	if err := e.s.AdvanceJob(ctx, items[0].Claim, u, nil, time.Now()); err != nil {
		e.t.Fatal(err)
	}
}

func (e *liveEnv) wsURL(kind, id string) string {
	return "ws" + strings.TrimPrefix(e.srv.URL, "http") + "/v1/async/" + kind + "/" + id + "/ws"
}

// dial connects to the live updates of job id of kind with key in the Authorization header.
func (e *liveEnv) dial(kind, id, key string) *websocket.Conn {
	e.t.Helper()
	c, _, err := e.dialWith(kind, id, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + key}}})
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

func (e *liveEnv) dialWith(kind, id string, opts *websocket.DialOptions) (*websocket.Conn, *http.Response, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, e.wsURL(kind, id), opts)
	if err == nil {
		e.t.Cleanup(func() { _ = c.CloseNow() })
	}
	return c, resp, err
}

// liveMsg is a message of the live updates.
type liveMsg struct {
	Type string         `json:"type"`
	Data map[string]any `json:"data"`
}

// liveNext reads the next message; it fails the test when none comes within 5 s.
func liveNext(t *testing.T, c *websocket.Conn) liveMsg {
	t.Helper()
	m, err := liveRead(c)
	if err != nil {
		t.Fatalf("reading a message: %v", err)
	}
	return m
}

func liveRead(c *websocket.Conn) (liveMsg, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	typ, data, err := c.Read(ctx)
	if err != nil {
		return liveMsg{}, err
	}
	var m liveMsg
	if typ != websocket.MessageText {
		return m, errors.New("a binary message")
	}
	return m, json.Unmarshal(data, &m)
}

// closedWith fails the test unless the connection's next read is its close with code and
// reason.
func closedWith(t *testing.T, c *websocket.Conn, code websocket.StatusCode, reason string) {
	t.Helper()
	m, err := liveRead(c)
	var ce websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != code || ce.Reason != reason {
		t.Fatalf("read %+v, %v; want the close %d %q", m, err, code, reason)
	}
}

func ptrTo[T any](v T) *T { return &v }

// The websocket sends the snapshot, then the job's object each time it changes (a change
// that its object does not show sends nothing), and closes with 1000 once the job ended.
func TestLiveJobSnapshotUpdatesAndEnd(t *testing.T) {
	e := newLiveEnv(t, LiveSettings{})
	ws, std, _ := e.workspace(0)
	j := e.job(ws, liveKind, "job_live1")
	c := e.dial(liveKind, j.ID, std)

	snap := liveNext(t, c)
	if snap.Type != "snapshot" || snap.Data["id"] != j.ID || snap.Data["status"] != jobs.StatusQueued || snap.Data["progress"] != 0.0 ||
		snap.Data["websocket_url"] != e.wsURL(liveKind, j.ID) {
		t.Fatalf("snapshot %+v", snap)
	}
	e.advance(j, store.JobUpdate{Status: ptrTo(jobs.StatusInProgress), Progress: ptrTo(40)})
	if m := liveNext(t, c); m.Type != "update" || m.Data["status"] != jobs.StatusInProgress || m.Data["progress"] != 40.0 {
		t.Fatalf("first update %+v", m)
	}
	// Invisible in the object: nothing is sent for it.
	e.advance(j, store.JobUpdate{Lifecycle: ptrTo(jobs.LifecyclePolling), Usage: json.RawMessage(`{"seconds":1}`)})
	e.advance(j, store.JobUpdate{Progress: ptrTo(70)})
	if m := liveNext(t, c); m.Type != "update" || m.Data["progress"] != 70.0 {
		t.Fatalf("second update %+v; want progress 70 and nothing for the invisible change", m)
	}
	e.advance(j, store.JobUpdate{Status: ptrTo(jobs.StatusCompleted), Progress: ptrTo(100), CompletedAt: ptrTo(time.Now())})
	if m := liveNext(t, c); m.Type != "update" || m.Data["status"] != jobs.StatusCompleted || m.Data["progress"] != 100.0 {
		t.Fatalf("final update %+v", m)
	}
	closedWith(t, c, websocket.StatusNormalClosure, "job completed")
	waitFeedStopped(t, e.g)
}

// waitFeedStopped waits until the gateway no longer watches the store: its connections
// have all ended, and their subscriptions with them.
func waitFeedStopped(t *testing.T, g *Gateway) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		g.jobFeed.mu.Lock()
		run := g.jobFeed.run
		g.jobFeed.mu.Unlock()
		if run == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the gateway still watches the store for %d connections", run.n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A browser cannot set a header on a websocket: it offers the key as the protocol after
// model-gateway.bearer, and the server selects model-gateway.bearer alone, never echoing
// the key. A job that has ended is its snapshot, then the close.
func TestLiveJobBearerSubprotocol(t *testing.T) {
	e := newLiveEnv(t, LiveSettings{})
	ws, std, _ := e.workspace(0)
	j := e.job(ws, liveKind, "job_live_sub")
	e.advance(j, store.JobUpdate{Status: ptrTo(jobs.StatusFailed), ErrorCode: ptrTo("boom")})
	c, resp, err := e.dialWith(liveKind, j.ID, &websocket.DialOptions{Subprotocols: []string{bearerSubprotocol, std}})
	if err != nil {
		t.Fatal(err)
	}
	if c.Subprotocol() != bearerSubprotocol || resp.Header.Get("Sec-Websocket-Protocol") != bearerSubprotocol {
		t.Fatalf("selected %q (header %q); want %q", c.Subprotocol(), resp.Header.Get("Sec-Websocket-Protocol"), bearerSubprotocol)
	}
	if m := liveNext(t, c); m.Type != "snapshot" || m.Data["status"] != jobs.StatusFailed {
		t.Fatalf("snapshot %+v", m)
	}
	closedWith(t, c, websocket.StatusNormalClosure, "job failed")
}

// Everything that can be refused is refused before the upgrade, in the gateway's error
// shape: no key or a wrong one (401), a management key (403), another workspace's job, a
// job of another kind or none (404), a request that is no websocket handshake (426). The
// bearer subprotocol is read on a websocket handshake only.
func TestLiveJobRefusals(t *testing.T) {
	e := newLiveEnv(t, LiveSettings{})
	ws, std, mgmt := e.workspace(0)
	_, otherStd, _ := e.workspace(0)
	j := e.job(ws, liveKind, "job_live_mine")
	// wrong is key with its last character changed: never the key itself.
	wrong := func(key string) string {
		last := byte('q')
		if key[len(key)-1] == last {
			last = 'r'
		}
		return key[:len(key)-1] + string(last)
	}
	bearer := func(key string) *websocket.DialOptions {
		return &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + key}}}
	}
	cases := []struct {
		name     string
		kind, id string
		opts     *websocket.DialOptions
		status   int
		code     string
	}{
		{"no key", liveKind, j.ID, nil, http.StatusUnauthorized, CodeUnauthorised},
		{"a wrong key", liveKind, j.ID, bearer(std + "x"), http.StatusUnauthorized, CodeUnauthorised},
		{"a wrong key as the subprotocol", liveKind, j.ID, &websocket.DialOptions{Subprotocols: []string{bearerSubprotocol, wrong(otherStd)}}, http.StatusUnauthorized, CodeUnauthorised},
		{"a management key", liveKind, j.ID, bearer(mgmt), http.StatusForbidden, CodeForbidden},
		{"another workspace's job", liveKind, j.ID, bearer(otherStd), http.StatusNotFound, CodeNotFound},
		{"another workspace's job, key as the subprotocol", liveKind, j.ID, &websocket.DialOptions{Subprotocols: []string{bearerSubprotocol, otherStd}}, http.StatusNotFound, CodeNotFound},
		{"another kind", "video", j.ID, bearer(std), http.StatusNotFound, CodeNotFound},
		{"no such job", liveKind, "job_none", bearer(std), http.StatusNotFound, CodeNotFound},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, resp, err := e.dialWith(tc.kind, tc.id, tc.opts)
			if err == nil {
				t.Fatalf("connected (%q)", c.Subprotocol())
			}
			if resp == nil || resp.StatusCode != tc.status {
				t.Fatalf("%v, %+v; want %d", err, resp, tc.status)
			}
			assertErrorShape(t, resp, tc.code)
		})
	}

	t.Run("not a websocket", func(t *testing.T) {
		for _, hdr := range []http.Header{
			{"Authorization": {"Bearer " + std}},
			// The subprotocol pair outside a handshake is no credential.
			{"Sec-Websocket-Protocol": {bearerSubprotocol + ", " + std}},
		} {
			req, _ := http.NewRequest(http.MethodGet, e.srv.URL+"/v1/async/"+liveKind+"/"+j.ID+"/ws", nil)
			req.Header = hdr
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			want, code := http.StatusUpgradeRequired, CodeValidation
			if hdr.Get("Authorization") == "" {
				want, code = http.StatusUnauthorized, CodeUnauthorised
			}
			if resp.StatusCode != want {
				t.Fatalf("headers %v: %d; want %d", hdr, resp.StatusCode, want)
			}
			if want == http.StatusUpgradeRequired && resp.Header.Get("Upgrade") != "websocket" {
				t.Fatalf("426 without Upgrade: websocket: %v", resp.Header)
			}
			assertErrorShape(t, resp, code)
		}
	})
	waitFeedStopped(t, e.g)
}

func assertErrorShape(t *testing.T, resp *http.Response, code string) {
	t.Helper()
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var v struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &v); err != nil || v.Error.Code != code || v.Error.Message == "" {
		t.Fatalf("body %s; want the error shape with code %q", body, code)
	}
}

// A kind whose family registered no renderer shows the job's public fields.
func TestLiveJobGenericObject(t *testing.T) {
	e := newLiveEnv(t, LiveSettings{})
	ws, std, _ := e.workspace(0)
	j := e.job(ws, "livebare", "job_live_bare")
	c := e.dial("livebare", j.ID, std)
	snap := liveNext(t, c)
	if snap.Type != "snapshot" || snap.Data["id"] != j.ID || snap.Data["object"] != "livebare" || snap.Data["status"] != jobs.StatusQueued ||
		snap.Data["lifecycle_status"] != "pending" || snap.Data["model"] != "m" || snap.Data["progress"] != 0.0 ||
		snap.Data["created_at"] == nil || snap.Data["completed_at"] != nil || snap.Data["error"] != nil {
		t.Fatalf("snapshot %+v", snap)
	}
	done := time.Now()
	e.advance(j, store.JobUpdate{
		Status: ptrTo(jobs.StatusFailed), Lifecycle: ptrTo(jobs.LifecycleReleased),
		ErrorCode: ptrTo("upstream_failed"), ErrorMessage: ptrTo("it broke"), CompletedAt: &done,
	})
	m := liveNext(t, c)
	errObj, _ := m.Data["error"].(map[string]any)
	if m.Type != "update" || m.Data["status"] != jobs.StatusFailed || m.Data["lifecycle_status"] != jobs.StatusFailed ||
		m.Data["completed_at"] != float64(done.Unix()) || errObj["code"] != "upstream_failed" || errObj["message"] != "it broke" {
		t.Fatalf("update %+v", m)
	}
	closedWith(t, c, websocket.StatusNormalClosure, "job failed")
}

// A client that reads nothing holds up none of the other connections to the same job; once
// it reads, it gets the job's changes in order, up to where the job is now.
func TestLiveJobSlowClient(t *testing.T) {
	e := newLiveEnv(t, LiveSettings{})
	ws, std, _ := e.workspace(0)
	j := e.job(ws, liveKind, "job_live_slow")
	slow, fast := e.dial(liveKind, j.ID, std), e.dial(liveKind, j.ID, std)
	liveNext(t, slow)
	liveNext(t, fast)
	const steps = 30
	for p := 1; p <= steps; p++ {
		e.advance(j, store.JobUpdate{Status: ptrTo(jobs.StatusInProgress), Progress: ptrTo(p)})
		if m := liveNext(t, fast); m.Data["progress"] != float64(p) {
			t.Fatalf("the reading client got %+v; want progress %d", m, p)
		}
	}
	last, got := 0.0, 0
	for last != steps {
		m := liveNext(t, slow)
		p := m.Data["progress"].(float64)
		if p <= last {
			t.Fatalf("progress %v after %v", p, last)
		}
		last = p
		got++
	}
	t.Logf("the slow client got %d updates for %d changes", got, steps)
}

// A connection lives MaxDuration at most, then is closed with 1013 so that its client
// connects again; it is pinged meanwhile. Its end frees its subscription.
func TestLiveJobLifetime(t *testing.T) {
	e := newLiveEnv(t, LiveSettings{MaxDuration: 300 * time.Millisecond, PingInterval: 50 * time.Millisecond})
	ws, std, _ := e.workspace(0)
	j := e.job(ws, liveKind, "job_live_life")
	pongs := 0
	began := time.Now()
	c, _, err := e.dialWith(liveKind, j.ID, &websocket.DialOptions{
		HTTPHeader:     http.Header{"Authorization": {"Bearer " + std}},
		OnPingReceived: func(context.Context, []byte) bool { pongs++; return true },
	})
	if err != nil {
		t.Fatal(err)
	}
	liveNext(t, c)
	closedWith(t, c, websocket.StatusTryAgainLater, liveReasonLifetime)
	if d := time.Since(began); d < 250*time.Millisecond {
		t.Fatalf("closed after %v; want its lifetime, 300ms", d)
	}
	if pongs < 2 {
		t.Fatalf("%d pings in 300ms; want one every 50ms", pongs)
	}
	waitFeedStopped(t, e.g)
}

// A client that leaves frees its subscription, and with the last one the gateway stops
// watching the store; the store closing closes the connections left with 1012.
func TestLiveJobClientGoneAndStoreClosed(t *testing.T) {
	e := newLiveEnv(t, LiveSettings{})
	ws, std, _ := e.workspace(0)
	j := e.job(ws, liveKind, "job_live_gone")
	c := e.dial(liveKind, j.ID, std)
	liveNext(t, c)
	_ = c.Close(websocket.StatusGoingAway, "bye")
	waitFeedStopped(t, e.g)

	c = e.dial(liveKind, j.ID, std)
	liveNext(t, c)
	if err := e.s.Close(); err != nil {
		t.Fatal(err)
	}
	closedWith(t, c, websocket.StatusServiceRestart, liveReasonFeedEnd)
	waitFeedStopped(t, e.g)
}

// watchOnly is a store whose change feed the test writes; nothing else of it is used.
type watchOnly struct {
	store.Store
	changes chan store.JobChange
}

func (w watchOnly) Watch(context.Context) (<-chan store.JobChange, error) { return w.changes, nil }

// The feed never waits for a connection: changes to a job whose connection takes none
// coalesce into the one signal it has room for, while every change reaches the other
// jobs' connections; the feed's end ends every subscription.
func TestJobFeedCoalesces(t *testing.T) {
	changes := make(chan store.JobChange)
	g := &Gateway{Config: billing.Config{Store: watchOnly{changes: changes}, Logger: zap.NewNop()}}
	idle, err := g.jobFeed.subscribe(g, "job_idle")
	if err != nil {
		t.Fatal(err)
	}
	busy, _ := g.jobFeed.subscribe(g, "job_busy")
	other, _ := g.jobFeed.subscribe(g, "job_other")
	for i := range 1000 {
		select {
		case changes <- store.JobChange{JobID: "job_idle"}: // unbuffered: taken by the feed
		case <-time.After(5 * time.Second):
			t.Fatalf("the feed waited at change %d for a connection that takes none", i)
		}
		changes <- store.JobChange{JobID: "job_busy"}
		select {
		case <-busy.changed:
		case <-time.After(5 * time.Second):
			t.Fatalf("change %d of job_busy was not signalled", i)
		}
	}
	if len(idle.changed) != 1 || len(other.changed) != 0 {
		t.Fatalf("signals pending: %d for the idle connection, %d for another job's", len(idle.changed), len(other.changed))
	}
	close(changes)
	for _, s := range []*jobSub{idle, busy, other} {
		select {
		case <-s.ended:
		case <-time.After(5 * time.Second):
			t.Fatalf("the subscription to %s did not end with the feed", s.jobID)
		}
		g.jobFeed.unsubscribe(s)
	}
	if g.jobFeed.run != nil {
		t.Fatal("an ended feed is still the gateway's")
	}
}

// The client sends nothing but control frames: a message from it closes the connection
// with 1008.
func TestLiveJobClientMessageCloses(t *testing.T) {
	e := newLiveEnv(t, LiveSettings{})
	ws, std, _ := e.workspace(0)
	j := e.job(ws, liveKind, "job_live_talk")
	c := e.dial(liveKind, j.ID, std)
	liveNext(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Write(ctx, websocket.MessageText, []byte(`{"type":"subscribe"}`)); err != nil {
		t.Fatal(err)
	}
	_, err := liveRead(c)
	if websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
		t.Fatalf("read %v; want the close 1008", err)
	}
	waitFeedStopped(t, e.g)
}

// A panic while a connection runs is recovered and logged with its stack: the connection
// is closed with 1011, its subscription freed, and the gateway serves on.
func TestLiveJobPanicRecovered(t *testing.T) {
	e := newLiveEnv(t, LiveSettings{})
	core, logs := observer.New(zap.ErrorLevel)
	e.g.Logger = zap.New(core)
	ws, std, _ := e.workspace(0)
	j := e.job(ws, livePanicKind, "job_live_panic")
	c := e.dial(livePanicKind, j.ID, std)
	liveNext(t, c)
	e.advance(j, store.JobUpdate{Progress: ptrTo(13)})
	closedWith(t, c, websocket.StatusInternalError, "the gateway failed")
	waitFeedStopped(t, e.g)
	entries := logs.FilterMessage("live updates of a job panicked").All()
	if len(entries) != 1 || !strings.Contains(fmt.Sprintf("%+v", entries[0].ContextMap()["errorVerbose"]), "live_test.go") {
		t.Fatalf("logged %+v; want the panic with its stack", logs.All())
	}
	e.advance(j, store.JobUpdate{Progress: ptrTo(14)})
	c = e.dial(livePanicKind, j.ID, std)
	if m := liveNext(t, c); m.Data["progress"] != 14.0 {
		t.Fatalf("after the panic: %+v", m)
	}
}
