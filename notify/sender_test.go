package notify_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
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

// scriptKind answers each Send with the next of its statuses (the last one repeats): a
// status outside 2xx is a *notify.SendError, and 0 an unreachable service.
type scriptKind struct {
	mu       sync.Mutex
	statuses []int
	sent     []notify.Notification
	targets  []string
}

func (k *scriptKind) Check(raw json.RawMessage) ([]byte, string, error) { return raw, "preview", nil }

func (k *scriptKind) Send(_ context.Context, _ notify.Env, target []byte, n notify.Notification) (int, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	status := k.statuses[min(len(k.sent), len(k.statuses)-1)]
	k.sent = append(k.sent, n)
	k.targets = append(k.targets, string(target))
	switch {
	case status == 0:
		return 0, &url.Error{Op: "Post", URL: string(target), Err: errors.New("connection refused")}
	case status >= 300:
		return status, &notify.SendError{Status: status, Message: "no"}
	}
	return status, nil
}

func (k *scriptKind) count() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.sent)
}

type fixture struct {
	t      *testing.T
	s      *sqlite.Store
	clock  *storetest.Clock
	sealer *delivery.Sealer
	ws     string
	kind   *scriptKind
	sender *notify.Sender
	outbox *notify.Outbox
}

func newFixture(t *testing.T, kindName string, statuses ...int) *fixture {
	t.Helper()
	clock := storetest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "gw.db"), sqlite.WithClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	sealer, err := delivery.NewSealer(base64.StdEncoding.EncodeToString(key))
	if err != nil {
		t.Fatal(err)
	}
	ws := ids.New("ws")
	if err := s.CreateWorkspace(context.Background(), store.Workspace{ID: ws, Name: "w"}); err != nil {
		t.Fatal(err)
	}
	k := &scriptKind{statuses: statuses}
	var kind notify.Kind = k
	if kindName == "email" {
		// The script answers with SMTP reply codes, judged by the email kind's own policy.
		kind = smtpScript{k}
	}
	f := &fixture{t: t, s: s, clock: clock, sealer: sealer, ws: ws, kind: k}
	f.sender = &notify.Sender{
		Store: s, Sealer: sealer, Client: delivery.NewClient(delivery.ClientOptions{}), Logger: zap.NewNop(), Owner: "test",
		Now: clock.Now, Kinds: func() map[string]notify.Kind { return map[string]notify.Kind{kindName: kind} },
		Schedule: []time.Duration{time.Minute, time.Hour}, Jitter: -1,
	}
	f.outbox = &notify.Outbox{Store: s, Logger: zap.NewNop(), Now: clock.Now}
	return f
}

// smtpScript is a scripted kind whose statuses are SMTP reply codes.
type smtpScript struct{ *scriptKind }

func (smtpScript) Retryable(status int) bool { return (*notify.Email)(nil).Retryable(status) }

// destination creates a destination of kind routed balance.low, its target sealed.
func (f *fixture) destination(kind, target string) string {
	f.t.Helper()
	ctx := context.Background()
	id := ids.New("ntd")
	sealed, err := f.sealer.Seal([]byte(target), notify.SealContext(f.ws, id))
	if err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.s.CreateNotificationDestination(ctx, store.NotificationDestination{ID: id, WorkspaceID: f.ws, Kind: kind,
		Name: "d", Target: sealed, Preview: "p"}); err != nil {
		f.t.Fatal(err)
	}
	routes, _ := f.s.NotificationRoutes(ctx, f.ws)
	if err := f.s.SetNotificationRoute(ctx, f.ws, notify.EventBalanceLow, append(routes[notify.EventBalanceLow], id)); err != nil {
		f.t.Fatal(err)
	}
	return id
}

func (f *fixture) emit(key string) int {
	f.t.Helper()
	n, err := f.outbox.Emit(context.Background(), notify.Notification{Event: notify.EventBalanceLow, WorkspaceID: f.ws, Title: "low"}, key)
	if err != nil {
		f.t.Fatal(err)
	}
	return n
}

// sendDue claims what is due now and sends it, returning how many items it took.
func (f *fixture) sendDue() int {
	f.t.Helper()
	items, err := f.s.Claim(context.Background(), store.ClaimParams{Queue: notify.Queue, Owner: "test", Lease: time.Minute, Limit: 10})
	if err != nil {
		f.t.Fatal(err)
	}
	for _, it := range items {
		f.sender.Send(context.Background(), it)
	}
	return len(items)
}

func (f *fixture) get(id string) store.NotificationDestination {
	f.t.Helper()
	d, err := f.s.GetNotificationDestination(context.Background(), f.ws, id)
	if err != nil {
		f.t.Fatal(err)
	}
	return d
}

// A failure worth retrying is tried again after the schedule's wait, with the same
// notification id, and its delivery is recorded on the destination.
func TestSenderRetriesThenDelivers(t *testing.T) {
	f := newFixture(t, "chat", 503, 200)
	id := f.destination("chat", `{"url": "https://x.example.com/secret"}`)
	if n := f.emit(""); n != 1 {
		t.Fatalf("queued %d", n)
	}
	if f.sendDue() != 1 || f.kind.count() != 1 {
		t.Fatal("the first attempt was not made")
	}
	if d := f.get(id); d.LastStatus != 0 || !d.LastFailureAt.IsZero() {
		t.Fatalf("a failure to be retried was recorded as final: %+v", d)
	}
	f.clock.Set(f.clock.Now().Add(59 * time.Second))
	if f.sendDue() != 0 {
		t.Fatal("retried before the schedule's wait")
	}
	f.clock.Set(f.clock.Now().Add(time.Second))
	if f.sendDue() != 1 || f.kind.count() != 2 {
		t.Fatal("not retried after the schedule's wait")
	}
	if f.kind.sent[0].ID != f.kind.sent[1].ID || !strings.HasPrefix(f.kind.sent[0].ID, "ntf_") {
		t.Fatalf("the attempts carry ids %q and %q, want one ntf_ id", f.kind.sent[0].ID, f.kind.sent[1].ID)
	}
	if f.kind.targets[0] != `{"url": "https://x.example.com/secret"}` {
		t.Fatalf("the kind was given %q, not the opened target", f.kind.targets[0])
	}
	if d := f.get(id); d.LastStatus != 200 || !d.LastDeliveredAt.Equal(f.clock.Now()) {
		t.Fatalf("the delivery is not recorded: %+v", d)
	}
	f.clock.Set(f.clock.Now().Add(24 * time.Hour))
	if f.sendDue() != 0 {
		t.Fatal("a delivered notification stayed queued")
	}
}

// Each way a delivery ends for good: the attempts made, and what is recorded.
func TestSenderGivesUp(t *testing.T) {
	for _, tc := range []struct {
		name     string
		kind     string
		statuses []int
		attempts int
		status   int
	}{
		{"refused at once (404)", "chat", []int{404}, 1, 404},
		{"failing past the schedule (503)", "chat", []int{503}, 3, 503},
		{"unreachable past the schedule", "chat", []int{0}, 3, 0},
		{"email refused for good (550)", "email", []int{550}, 1, 550},
		{"email refused for now (451), then for good", "email", []int{451, 554}, 2, 554},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.kind, tc.statuses...)
			id := f.destination(tc.kind, `{}`)
			f.emit("")
			for range 5 {
				f.sendDue()
				f.clock.Set(f.clock.Now().Add(2 * time.Hour))
			}
			if got := f.kind.count(); got != tc.attempts {
				t.Fatalf("%d attempts, want %d", got, tc.attempts)
			}
			if d := f.get(id); d.LastStatus != tc.status || d.LastFailureAt.IsZero() || !d.LastDeliveredAt.IsZero() {
				t.Fatalf("destination after giving up: %+v", d)
			}
		})
	}
}

// A destination deleted or disabled after its notification was queued is not sent to, and
// the notification leaves the queue; a target that does not open is not retried.
func TestSenderChecksTheDestinationAtSendTime(t *testing.T) {
	f := newFixture(t, "chat", 200)
	deleted := f.destination("chat", `{"d": 1}`)
	disabled := f.destination("chat", `{"d": 2}`)
	if n := f.emit(""); n != 2 {
		t.Fatalf("queued %d", n)
	}
	ctx := context.Background()
	if _, err := f.s.DeleteNotificationDestination(ctx, f.ws, deleted); err != nil {
		t.Fatal(err)
	}
	off := store.DestinationDisabled
	if _, err := f.s.UpdateNotificationDestination(ctx, f.ws, disabled, store.NotificationDestinationUpdate{Status: &off}); err != nil {
		t.Fatal(err)
	}
	if f.sendDue() != 2 || f.kind.count() != 0 {
		t.Fatalf("sent %d notifications to a deleted or disabled destination", f.kind.count())
	}
	f.clock.Set(f.clock.Now().Add(24 * time.Hour))
	if f.sendDue() != 0 {
		t.Fatal("a notification to a deleted or disabled destination stayed queued")
	}

	// Sealed for another row, the target does not open: given up at once.
	other := newFixture(t, "chat", 200)
	id := other.destination("chat", `{}`)
	moved, _ := other.sealer.Seal([]byte(`{}`), notify.SealContext(other.ws, "ntd_elsewhere"))
	preview := "p"
	if _, err := other.s.UpdateNotificationDestination(ctx, other.ws, id, store.NotificationDestinationUpdate{Target: moved, Preview: &preview}); err != nil {
		t.Fatal(err)
	}
	other.emit("")
	other.sendDue()
	other.clock.Set(other.clock.Now().Add(24 * time.Hour))
	if other.sendDue() != 0 || other.kind.count() != 0 || other.get(id).LastFailureAt.IsZero() {
		t.Fatal("a target sealed for another row was sent, or retried")
	}
}

// An occurrence's key queues it once while it waits, whatever number of emits.
func TestOutboxKeyQueuesOnce(t *testing.T) {
	f := newFixture(t, "chat", 200)
	f.destination("chat", `{}`)
	f.destination("chat", `{}`)
	if a, b := f.emit("webhook_endpoint.disabled/we_1/5"), f.emit("webhook_endpoint.disabled/we_1/5"); a != 2 || b != 0 {
		t.Fatalf("queued %d then %d, want 2 then 0", a, b)
	}
	if f.emit("") != 2 {
		t.Fatal("another occurrence was not queued")
	}
	other := newFixture(t, "chat", 200)
	if other.emit("") != 0 {
		t.Fatal("an event routed nowhere queued something")
	}
}

func TestSafeError(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("posting: %w", &url.Error{Op: "Post", URL: "https://hooks.slack.com/services/T/B/secret", Err: errors.New("timeout")}), "Post: timeout"},
		{errors.New("bad answer from https://discord.com/api/webhooks/1/tok: 500"), "bad answer from <url> 500"},
		{&notify.SendError{Status: 550, Message: "mailbox unavailable"}, "the destination answered 550: mailbox unavailable"},
		{nil, ""},
	} {
		if got := notify.SafeError(tc.err); got != tc.want {
			t.Errorf("SafeError(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}
