package module

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/modelgateway/caddy-modelgateway/delivery"
	"github.com/modelgateway/caddy-modelgateway/internal/ids"
	"github.com/modelgateway/caddy-modelgateway/store"
	"github.com/modelgateway/caddy-modelgateway/store/sqlite"
)

// fakeRuntime is a workers.Runtime whose configuration a test swaps, as a reload does.
type fakeRuntime struct {
	s   store.Store
	cur atomic.Pointer[appRuntime]
	log *zap.Logger
}

func (r *fakeRuntime) Store() store.Store   { return r.s }
func (r *fakeRuntime) Current() *appRuntime { return r.cur.Load() }
func (r *fakeRuntime) Logger() *zap.Logger  { return r.log }

// TestDeliveriesWorkerWaitsForAKey: without a secret key the worker says once that
// webhooks are off and leaves the outbox alone; a reload that brings a key starts the
// sending, through the guarded client (which refuses the loopback receiver).
func TestDeliveriesWorkerWaitsForAKey(t *testing.T) {
	saved := sealerCheck.Swap(int64(10 * time.Millisecond))
	t.Cleanup(func() { sealerCheck.Store(saved) })
	ctx := context.Background()
	s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "gw.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	core, logs := observer.New(zapcore.DebugLevel)
	rt := &fakeRuntime{s: s, log: zap.New(core)}
	rt.cur.Store(&appRuntime{})

	key := make([]byte, 32)
	_, _ = rand.Read(key)
	sealer, err := delivery.NewSealer(base64.StdEncoding.EncodeToString(key))
	if err != nil {
		t.Fatal(err)
	}
	ws := ids.New("ws")
	if err := s.CreateWorkspace(ctx, store.Workspace{ID: ws, Name: "w"}); err != nil {
		t.Fatal(err)
	}
	secret, _ := delivery.NewSecret()
	sealed, _ := sealer.Seal([]byte(secret), []byte("we_1"))
	if _, err := s.CreateWebhookEndpoint(ctx, store.WebhookEndpoint{ID: "we_1", WorkspaceID: ws, Name: "n",
		URL: "https://127.0.0.1:9/hook", Secret: sealed}); err != nil {
		t.Fatal(err)
	}
	job := store.Job{ID: ids.New("video"), WorkspaceID: ws, Kind: store.JobVideo, Status: "queued", Lifecycle: "submitted"}
	if err := s.CreateJob(ctx, job, time.Time{}, nil); err != nil {
		t.Fatal(err)
	}
	polls, err := s.Claim(ctx, store.ClaimParams{Queue: store.JobQueue(store.JobVideo), Owner: "t", Lease: time.Minute, Limit: 1})
	if err != nil || len(polls) != 1 {
		t.Fatalf("claiming the job: %v, %v", polls, err)
	}
	ev := store.Event{ID: ids.New("evt"), Type: "video.completed", Target: "we_1", Payload: json.RawMessage(`{}`)}
	if err := s.AdvanceJob(ctx, polls[0].Claim, store.JobUpdate{}, []store.Event{ev}, time.Time{}); err != nil {
		t.Fatal(err)
	}

	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- runDeliveries(runCtx, rt) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("runDeliveries: %v", err)
		}
	}()
	time.Sleep(200 * time.Millisecond)
	if n := logs.FilterMessageSnippet("webhooks are off").Len(); n != 1 {
		t.Fatalf("said %d times that webhooks are off, want once", n)
	}
	if d, err := s.GetDelivery(ctx, ws, ev.ID); err != nil || d.Status != store.DeliveryPending || d.Attempts != 0 {
		t.Fatalf("without a key the delivery was touched: %+v, %v", d, err)
	}

	rt.cur.Store(&appRuntime{Sealer: sealer})
	deadline := time.Now().Add(10 * time.Second)
	for {
		d, err := s.GetDelivery(ctx, ws, ev.ID)
		if err != nil {
			t.Fatal(err)
		}
		if d.Status != store.DeliveryPending {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("with a key the delivery was not attempted: %+v", d)
		}
		time.Sleep(10 * time.Millisecond)
	}
	as, err := s.ListAttempts(ctx, store.AttemptQuery{WorkspaceID: ws, DeliveryID: ev.ID})
	if err != nil || len(as) != 1 || !strings.Contains(as[0].Error, "loopback") {
		t.Fatalf("attempts %+v, %v: want one refused by the guarded client", as, err)
	}
}
