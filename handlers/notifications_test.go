package handlers

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/modelgateway/caddy-modelgateway/notify"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// queuedNotifications reads, without sending them, the notifications queued for delivery.
func queuedNotifications(t *testing.T, s store.Store) []notify.Item {
	t.Helper()
	items, err := s.Claim(context.Background(), store.ClaimParams{Queue: notify.Queue, Owner: "test", Lease: time.Minute, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var out []notify.Item
	for _, it := range items {
		x, err := notify.ItemOf(it)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, x)
		if err := s.Complete(context.Background(), it.Claim); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// A request refused by its key's spending limit tells the workspace's key.limit_reached
// destinations, once per key and period however many requests are refused.
func TestKeyLimitReachedNotifies(t *testing.T) {
	a, _ := leaseGateway(t)
	a.g.Notifications = &notify.Outbox{Store: a.s, Logger: zap.NewNop()}
	ws, _, _ := a.workspace(100 * usdNanos)
	ctx := context.Background()
	if _, err := a.s.CreateNotificationDestination(ctx, store.NotificationDestination{ID: "ntd_1", WorkspaceID: ws, Kind: "slack",
		Name: "ops", Target: []byte("sealed"), Preview: "p"}); err != nil {
		t.Fatal(err)
	}
	if err := a.s.SetNotificationRoute(ctx, ws, notify.EventKeyLimitReached, []string{"ntd_1"}); err != nil {
		t.Fatal(err)
	}
	limited := a.key(ws, store.KeyStandard, 200_000_000, store.ResetMonthly)
	const chat = `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	a.mustDo(200, http.MethodPost, "/chat/completions", limited, chat)
	for range 3 {
		status, v := a.do(http.MethodPost, "/chat/completions", limited, chat)
		wantError(t, "over the key's limit", status, v, 429, "key_limit_exceeded", "")
	}
	var got []notify.Item
	deadline := time.Now().Add(20 * time.Second)
	for len(got) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // the notification is queued in the background
		got = queuedNotifications(t, a.s)
	}
	if len(got) != 1 {
		t.Fatalf("queued %d notifications, want 1", len(got))
	}
	n := got[0]
	if n.DestinationID != "ntd_1" || n.Notification.Event != notify.EventKeyLimitReached || n.Notification.WorkspaceID != ws ||
		n.Notification.Fields[1].Value != "0.2 USD" {
		t.Fatalf("queued %+v", n)
	}
	// A key within its limit, and other refusals, tell nobody.
	_, std, _ := a.workspace(100 * usdNanos)
	a.mustDo(200, http.MethodPost, "/chat/completions", std, chat)
	status, v := a.do(http.MethodPost, "/chat/completions", limited, chat)
	wantError(t, "still over the key's limit", status, v, 429, "key_limit_exceeded", "")
	// Only a first refusal of a key and period emits (the emission itself is in the
	// background): one noted, for the four refusals.
	a.g.keyLimitNotes.mu.Lock()
	noted := len(a.g.keyLimitNotes.seen)
	a.g.keyLimitNotes.mu.Unlock()
	if noted != 1 {
		t.Fatalf("%d key limits noted, want the one key's period", noted)
	}
	if again := queuedNotifications(t, a.s); len(again) != 0 {
		t.Fatalf("queued %+v again within the same period", again)
	}
}

// The settings take the threshold in USD or nanos, exactly, and refuse nonsense naming the
// field; a route refuses an unknown event naming it.
func TestNotificationSettingsAndRoutesValidation(t *testing.T) {
	a := newAdminGateway(t, nil, nil)
	_, _, mgmt := a.workspace(0)
	for _, tc := range []struct {
		body, want string
	}{
		{`{"low_balance_threshold_usd": "5.25"}`, "5.25"},
		{`{"low_balance_threshold_usd": 12}`, "12"},
		{`{"low_balance_threshold_nanos": 1500000000}`, "1.5"},
	} {
		v := data(a.mustDo(200, http.MethodPatch, "/notifications/settings", mgmt, tc.body))
		if v["low_balance_threshold_usd"] != tc.want || v["low_balance_armed"] != true {
			t.Fatalf("%s: %v", tc.body, v)
		}
	}
	for _, tc := range []struct{ body, param string }{
		{`{"low_balance_threshold_usd": "-1"}`, "low_balance_threshold_usd"},
		{`{"low_balance_threshold_usd": "1", "low_balance_threshold_nanos": 1}`, "low_balance_threshold_usd"},
		{`{"low_balance_threshold_nanos": 0}`, "low_balance_threshold_nanos"},
		{`{"threshold": "1"}`, "threshold"},
	} {
		status, v := a.do(http.MethodPatch, "/notifications/settings", mgmt, tc.body)
		wantError(t, tc.body, status, v, 400, CodeValidation, tc.param)
	}
	if v := data(a.mustDo(200, http.MethodGet, "/notifications/settings", mgmt, "")); v["low_balance_threshold_nanos"] != float64(1_500_000_000) {
		t.Fatalf("a refused change changed the settings: %v", v)
	}
	status, v := a.do(http.MethodPut, "/notifications/routes/balance.high", mgmt, `{"destination_ids": []}`)
	wantError(t, "unknown event", status, v, 400, CodeValidation, "event")
	if msg, _ := v["message"].(string); !strings.Contains(msg, "balance.high") {
		t.Fatalf("the refusal does not name the event: %v", v)
	}
	// Without a secret key no target can be sealed: the destination routes that seal or
	// open one say so.
	status, v = a.do(http.MethodPost, "/notifications/destinations", mgmt, `{"kind": "slack", "name": "x", "target": {}}`)
	wantError(t, "no secret key", status, v, 503, CodeNotConfigured, "")
}

// A key's period is noted once per keyLimitQuiet; the notes stay bounded.
func TestKeyLimitNotes(t *testing.T) {
	var k keyLimitNotes
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if !k.first("a", t0) || k.first("a", t0.Add(keyLimitQuiet-time.Second)) || !k.first("b", t0) {
		t.Fatal("a key's period told twice within the quiet time, or another key not told")
	}
	if !k.first("a", t0.Add(keyLimitQuiet)) {
		t.Fatal("a key's period not told again after the quiet time")
	}
	for i := range 2 * maxKeyLimitNotes {
		k.first(string(rune('A'+i%26))+time.Duration(i).String(), t0.Add(2*keyLimitQuiet))
	}
	if len(k.seen) > maxKeyLimitNotes {
		t.Fatalf("%d notes kept, at most %d", len(k.seen), maxKeyLimitNotes)
	}
}
