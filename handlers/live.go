package handlers

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/zap"

	"github.com/modelgateway/caddy-modelgateway/internal/background"
	"github.com/modelgateway/caddy-modelgateway/jobs"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// Live updates of a job: GET /async/{kind}/{id}/ws is a websocket that sends the job's
// public object (renderJob) as a snapshot, then again each time it changes, and closes once
// the job has ended. Changes come from the store's change feed (Jobs.Watch), so a client
// connected to one instance sees the changes a worker of another instance makes (on
// PostgreSQL). docs/live-updates.md is the client's side of it.

// LiveSettings bound the live updates' websockets. A zero field takes its default.
type LiveSettings struct {
	// MaxDuration is the longest a connection lives (less up to a tenth, at random): it
	// is then closed with 1013 (try again later), and the client connects again for a
	// fresh snapshot. It bounds how long a connection outlives its key's revocation,
	// which is checked when it connects. Default: DefaultLiveMaxDuration.
	MaxDuration time.Duration
	// PingInterval is how often the connection is pinged, and the job read again in case
	// the change feed lost its change. Default: DefaultLivePingInterval.
	PingInterval time.Duration
	// WriteTimeout bounds each message and each ping's answer: a client that takes longer
	// to read one is gone, and its connection is closed. Default: DefaultLiveWriteTimeout.
	WriteTimeout time.Duration
}

// Defaults of LiveSettings.
const (
	DefaultLiveMaxDuration  = time.Hour
	DefaultLivePingInterval = 30 * time.Second
	DefaultLiveWriteTimeout = 10 * time.Second
)

func (l LiveSettings) maxDuration() time.Duration {
	return cmp.Or(l.MaxDuration, DefaultLiveMaxDuration)
}

func (l LiveSettings) pingInterval() time.Duration {
	return cmp.Or(l.PingInterval, DefaultLivePingInterval)
}

func (l LiveSettings) writeTimeout() time.Duration {
	return cmp.Or(l.WriteTimeout, DefaultLiveWriteTimeout)
}

// Close reasons, as the client reads them with the close code.
const (
	liveReasonLifetime = "connection lifetime reached; reconnect for a fresh snapshot"
	liveReasonFeedEnd  = "the gateway is restarting; reconnect"
	liveReasonGone     = "the job no longer exists"
)

// liveJob serves GET /async/{kind}/{id}/ws. Everything that can be refused is refused
// before the upgrade, in the error shape: a request that is not a websocket handshake
// (426), a job of another workspace, of another kind or none (404), a store that does not
// answer (503). The connection itself runs on the request's goroutine, recovered.
func (g *Gateway) liveJob(w http.ResponseWriter, r *http.Request, c *Caller) error {
	kind, id := r.PathValue("kind"), r.PathValue("id")
	if !isWebsocketUpgrade(r) {
		w.Header().Set("Upgrade", "websocket")
		return newError(http.StatusUpgradeRequired, CodeValidation,
			"GET /async/{kind}/{id}/ws is a websocket: connect with a websocket client (Upgrade: websocket)")
	}
	// Subscribed before the snapshot is read, so that no change between the two is missed.
	sub, err := g.jobFeed.subscribe(g, id)
	if err != nil {
		return g.storeUnavailable("watching the jobs' changes", err)
	}
	defer g.jobFeed.unsubscribe(sub)
	j, err := g.readLiveJob(r.Context(), c, kind, id)
	if err != nil {
		return err
	}
	snapshot, err := g.liveObject(r, j)
	if err != nil {
		return err
	}
	conn, err := websocket.Accept(w, r, &websocket.AcceptOptions{
		Subprotocols: []string{bearerSubprotocol},
		// Any origin may connect: the key is sent explicitly (a header or the bearer
		// subprotocol), never attached by the browser on its own as a cookie is, so a
		// page of another site can follow only the jobs it already holds a key for, and
		// cross-site request forgery has nothing to ride on.
		InsecureSkipVerify: true,
	})
	if err != nil {
		// Accept has answered the handshake's fault itself.
		if ce := g.Logger.Check(zap.DebugLevel, "a live updates handshake failed"); ce != nil {
			ce.Write(zap.String("job_id", id), zapErr(err))
		}
		return nil
	}
	s := &liveSession{g: g, r: r, caller: c, conn: conn, sub: sub, job: j, last: snapshot}
	if p := background.Call("live updates of job "+id, s.run); p != nil {
		g.Logger.Error("live updates of a job panicked", zap.String("job_id", id), zap.Error(p))
		_ = conn.Close(websocket.StatusInternalError, "the gateway failed")
	}
	_ = conn.CloseNow()
	return nil
}

// readLiveJob reads job id of the caller's workspace that the route names with kind: a job
// of another kind is 404, exactly like one of another workspace or none.
func (g *Gateway) readLiveJob(ctx context.Context, c *Caller, kind, id string) (store.Job, error) {
	ctx, cancel := g.storeContext(ctx)
	defer cancel()
	j, err := g.Store.GetJob(ctx, c.Key.WorkspaceID, id)
	switch {
	case errors.Is(err, store.ErrNotFound), err == nil && j.Kind != kind:
		return store.Job{}, newError(http.StatusNotFound, CodeNotFound, fmt.Sprintf("no %s job %q", kind, id))
	case err != nil:
		return store.Job{}, g.storeUnavailable("reading a job", err)
	}
	return j, nil
}

// liveObject is job j's public object, as JSON.
func (g *Gateway) liveObject(r *http.Request, j store.Job) ([]byte, error) {
	v, _, err := g.renderJob(r, j)
	if err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

// liveSession is one connection's live updates of one job.
type liveSession struct {
	g      *Gateway
	r      *http.Request
	caller *Caller
	conn   *websocket.Conn
	sub    *jobSub
	// job is the job as last read, and last its object as last sent.
	job  store.Job
	last []byte
}

// run sends the snapshot, then each change, until the job ends (closed with 1000), the
// client leaves, its connection's life ends (1013), or the change feed does (1012). Its
// caller closes the connection for good.
func (s *liveSession) run() {
	ctx := s.readControl()
	lifetime := time.NewTimer(jittered(s.g.Live.maxDuration()))
	defer lifetime.Stop()
	ping := time.NewTicker(s.g.Live.pingInterval())
	defer ping.Stop()
	if !s.send(ctx, "snapshot", s.last) {
		return
	}
	for !jobs.Terminal(s.job.Status) {
		select {
		case <-ctx.Done():
			return
		case <-s.sub.ended:
			_ = s.conn.Close(websocket.StatusServiceRestart, liveReasonFeedEnd)
			return
		case <-lifetime.C:
			_ = s.conn.Close(websocket.StatusTryAgainLater, liveReasonLifetime)
			return
		case <-ping.C:
			pctx, cancel := context.WithTimeout(ctx, s.g.Live.writeTimeout())
			err := s.conn.Ping(pctx)
			cancel()
			if err != nil || !s.refresh(ctx) {
				return
			}
		case <-s.sub.changed:
			if !s.refresh(ctx) {
				return
			}
		}
	}
	_ = s.conn.Close(websocket.StatusNormalClosure, "job "+s.job.Status)
}

// jittered is d less a random part of it, up to a tenth, so that the connections opened
// together (the clients of an instance that restarted) do not all reconnect together.
func jittered(d time.Duration) time.Duration {
	if d < 10 {
		return d
	}
	return d - rand.N(d/10)
}

// readControl reads what the client sends, which answers its pings and its close, until
// the connection ends, when the returned context ends. The client sends nothing else: a
// message is read whole, so that the close handshake that follows is not held up behind
// it, and the connection closed with 1008. (The library's CloseRead leaves the message
// unread, and its close waits out its handshake's timeout.)
func (s *liveSession) readControl() context.Context {
	ctx, cancel := context.WithCancel(s.r.Context())
	go func() {
		defer cancel()
		if p := background.Call("reading a live updates client", func() {
			if _, _, err := s.conn.Read(ctx); err == nil {
				_ = s.conn.Close(websocket.StatusPolicyViolation, "the client sends no message")
			}
		}); p != nil {
			s.g.Logger.Error("reading a live updates client panicked", zap.Error(p))
			_ = s.conn.CloseNow()
		}
	}()
	return ctx
}

// refresh reads the job again and sends its object when it changed; false when the
// connection is over. A store that does not answer is tried again at the next change or
// ping.
func (s *liveSession) refresh(ctx context.Context) bool {
	rctx, cancel := s.g.storeContext(ctx)
	j, err := s.g.Store.GetJob(rctx, s.caller.Key.WorkspaceID, s.job.ID)
	cancel()
	switch {
	case errors.Is(err, store.ErrNotFound):
		_ = s.conn.Close(websocket.StatusNormalClosure, liveReasonGone)
		return false
	case err != nil:
		if ctx.Err() != nil {
			return false
		}
		s.g.Logger.Warn("reading a job for its live updates failed; read again at its next change",
			zap.String("job_id", s.job.ID), zapErr(err))
		return true
	}
	data, err := s.g.liveObject(s.r, j)
	if err != nil {
		s.g.Logger.Error("rendering a job for its live updates failed", zap.String("job_id", j.ID), zapErr(err))
		_ = s.conn.Close(websocket.StatusInternalError, "the gateway failed to render the job")
		return false
	}
	s.job = j
	if bytes.Equal(data, s.last) {
		return true
	}
	s.last = data
	return s.send(ctx, "update", data)
}

// send writes the message {"type":typ,"data":object}; false when the client did not take
// it within the write timeout, or is gone.
func (s *liveSession) send(ctx context.Context, typ string, object []byte) bool {
	msg := make([]byte, 0, len(`{"type":"","data":}`)+len(typ)+len(object))
	msg = append(append(append(append(msg, `{"type":"`...), typ...), `","data":`...), object...)
	msg = append(msg, '}')
	wctx, cancel := context.WithTimeout(ctx, s.g.Live.writeTimeout())
	defer cancel()
	return s.conn.Write(wctx, websocket.MessageText, msg) == nil
}

// jobFeed fans the store's change feed (Jobs.Watch) out to the live connections of one
// Gateway, by job id: one watch of the store however many connections there are, from the
// first connection to the last. It never waits for a connection: each is signalled through
// a channel of one, so that the changes it has not taken yet coalesce into one, and it
// then reads the job, whose newest state is the one to send whatever it missed. The zero
// jobFeed is ready to use.
type jobFeed struct {
	mu  sync.Mutex
	run *feedRun
}

// feedRun is one watch of the store: from the first connection to the last, or to the
// store's end.
type feedRun struct {
	cancel context.CancelFunc
	subs   map[string]map[*jobSub]struct{}
	n      int
}

// jobSub is a connection's subscription to the changes of one job.
type jobSub struct {
	jobID string
	run   *feedRun
	// changed holds one signal: the job changed since the connection last took it.
	changed chan struct{}
	// ended is closed when the store's feed ended (the store closed): no change will come.
	ended chan struct{}
}

// subscribe signals the returned subscription at each change of job jobID, watching the
// store when nothing watches it yet.
func (f *jobFeed) subscribe(g *Gateway, jobID string) (*jobSub, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.run == nil {
		ctx, cancel := context.WithCancel(context.Background())
		changes, err := g.Store.Watch(ctx)
		if err != nil {
			cancel()
			return nil, err
		}
		run := &feedRun{cancel: cancel, subs: map[string]map[*jobSub]struct{}{}}
		f.run = run
		background.Loop{Name: "live updates' change feed", Report: func(err error) {
			g.Logger.Error("the live updates' change feed panicked", zap.Error(err))
		}}.Go(func() { f.dispatch(run, changes) })
	}
	s := &jobSub{jobID: jobID, run: f.run, changed: make(chan struct{}, 1), ended: make(chan struct{})}
	if f.run.subs[jobID] == nil {
		f.run.subs[jobID] = map[*jobSub]struct{}{}
	}
	f.run.subs[jobID][s] = struct{}{}
	f.run.n++
	return s, nil
}

// unsubscribe ends s, and the watch of the store with its last subscription.
func (f *jobFeed) unsubscribe(s *jobSub) {
	f.mu.Lock()
	defer f.mu.Unlock()
	run := s.run
	if subs := run.subs[s.jobID]; subs != nil {
		delete(subs, s)
		if len(subs) == 0 {
			delete(run.subs, s.jobID)
		}
	}
	if run.n--; run.n == 0 {
		run.cancel()
		if f.run == run {
			f.run = nil
		}
	}
}

// dispatch signals each change of changes to its job's subscriptions until the feed ends:
// its last subscription left, or the store closed, which ends every subscription left.
func (f *jobFeed) dispatch(run *feedRun, changes <-chan store.JobChange) {
	for c := range changes {
		f.signal(run, c.JobID)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.run == run {
		f.run = nil
	}
	for _, subs := range run.subs {
		for s := range subs {
			close(s.ended)
		}
	}
	run.subs = nil
}

func (f *jobFeed) signal(run *feedRun, jobID string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for s := range run.subs[jobID] {
		select {
		case s.changed <- struct{}{}:
		default: // a signal is already waiting: the connection reads the job once for both
		}
	}
}
