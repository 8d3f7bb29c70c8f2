package storetest

import (
	"context"
	"errors"
	"math/rand/v2"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/internal/ids"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// Clock is a settable clock for stores opened with one.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a clock stopped at t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// newKey creates a standard key of ws with a spending limit and returns its id.
func newKey(t *testing.T, s store.Store, ws string, limit int64, reset string) string {
	t.Helper()
	id := ids.Token(12)
	err := s.CreateKey(context.Background(), store.Key{
		ID: id, WorkspaceID: ws, Kind: store.KeyStandard, Name: "limited", SecretHash: []byte{1},
		LimitNanos: limit, LimitReset: reset,
	})
	if err != nil {
		t.Fatalf("CreateKey: %v", err)
	}
	return id
}

func reserveKey(s store.Store, ws, key string, amount int64) (store.Reservation, error) {
	return s.Reserve(context.Background(), store.ReserveParams{
		WorkspaceID: ws, KeyID: key, AmountNanos: amount, ExpiresAt: time.Now().Add(24 * time.Hour * 400),
	})
}

func settleKey(t *testing.T, s store.Store, ws, key, reservation string, cost int64) store.Generation {
	t.Helper()
	g, err := s.Settle(context.Background(), store.SettleParams{ReservationID: reservation, Generation: &store.Generation{
		WorkspaceID: ws, KeyID: key, Model: "m", Status: 200, CostNanos: cost,
	}})
	if err != nil {
		t.Fatalf("Settle: %v", err)
	}
	return g
}

func mustSpend(t *testing.T, s store.Store, key string, since time.Time, spent, reserved int64) {
	t.Helper()
	sp, err := s.KeySpend(context.Background(), key, since)
	if err != nil {
		t.Fatalf("KeySpend: %v", err)
	}
	if sp.SpentNanos != spent || sp.ReservedNanos != reserved {
		t.Fatalf("key %s spent %d reserved %d, want %d and %d", key, sp.SpentNanos, sp.ReservedNanos, spent, reserved)
	}
}

func testChildWorkspaces(t *testing.T, s store.Store) {
	ctx := context.Background()
	parent := newWorkspace(t, s, 0)
	other := newWorkspace(t, s, 0)
	created := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	for i, id := range []string{"ws_child1", "ws_child2"} {
		ws := store.Workspace{ID: id, Name: id, ParentID: parent, CreatedAt: created.Add(time.Duration(i) * time.Second)}
		if err := s.CreateWorkspace(ctx, ws); err != nil {
			t.Fatalf("CreateWorkspace(%s): %v", id, err)
		}
	}
	got, err := s.GetWorkspace(ctx, "ws_child1")
	if err != nil || got.ParentID != parent {
		t.Fatalf("GetWorkspace = %+v, %v; want parent %s", got, err, parent)
	}
	if top, err := s.GetWorkspace(ctx, parent); err != nil || top.ParentID != "" {
		t.Fatalf("GetWorkspace(parent) = %+v, %v; want no parent", top, err)
	}
	children, err := s.ListChildWorkspaces(ctx, parent, store.Page{})
	if err != nil {
		t.Fatalf("ListChildWorkspaces: %v", err)
	}
	if len(children) != 2 || children[0].ID != "ws_child1" || children[1].ID != "ws_child2" || children[1].ParentID != parent {
		t.Errorf("ListChildWorkspaces = %+v, want ws_child1 then ws_child2", children)
	}
	if children, err := s.ListChildWorkspaces(ctx, other, store.Page{}); err != nil || len(children) != 0 {
		t.Errorf("ListChildWorkspaces(other) = %+v, %v; want none", children, err)
	}
	all, err := s.ListWorkspaces(ctx, store.Page{})
	if err != nil || len(all) != 4 {
		t.Fatalf("ListWorkspaces = %+v, %v; want 4", all, err)
	}
	// A child's wallet is its own.
	mustBalance(t, s, "ws_child1", 0, 0)
	err = s.CreateWorkspace(ctx, store.Workspace{ID: "ws_orphan", ParentID: "ws_missing"})
	wantErr(t, "CreateWorkspace with an unknown parent", err, store.ErrNotFound)
	if _, err := s.GetWorkspace(ctx, "ws_orphan"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the refused workspace exists: %v", err)
	}
}

func testKeyLimitFields(t *testing.T, s store.Store) {
	ctx := context.Background()
	ws := newWorkspace(t, s, 0)
	k := store.Key{
		ID: "klimit", WorkspaceID: ws, Kind: store.KeyStandard, Name: "capped", SecretHash: []byte{1, 2},
		CreatedAt: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC), LimitNanos: 5 * usd, LimitReset: store.ResetWeekly,
	}
	if err := s.CreateKey(ctx, k); err != nil {
		t.Fatalf("CreateKey: %v", err)
	}
	got, err := s.GetKey(ctx, "klimit")
	if err != nil {
		t.Fatalf("GetKey: %v", err)
	}
	if !reflect.DeepEqual(got, k) {
		t.Errorf("GetKey = %+v, want %+v", got, k)
	}
	list, err := s.ListKeys(ctx, ws, store.Page{})
	if err != nil || len(list) != 1 || !reflect.DeepEqual(list[0], k) {
		t.Errorf("ListKeys = %+v, %v; want the key", list, err)
	}
	bad := []struct {
		name string
		k    store.Key
	}{
		{"unknown reset", store.Key{ID: "kbad1", WorkspaceID: ws, Kind: store.KeyStandard, SecretHash: []byte{1}, LimitNanos: usd, LimitReset: "hourly"}},
		{"negative limit", store.Key{ID: "kbad2", WorkspaceID: ws, Kind: store.KeyStandard, SecretHash: []byte{1}, LimitNanos: -1}},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			if err := s.CreateKey(ctx, tc.k); err == nil {
				t.Fatal("CreateKey succeeded, want an error")
			}
			if _, err := s.GetKey(ctx, tc.k.ID); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("the refused key exists: %v", err)
			}
		})
	}
}

func testUpdateKey(t *testing.T, s store.Store) {
	ctx := context.Background()
	ws := newWorkspace(t, s, 0)
	other := newWorkspace(t, s, 0)
	orig := store.Key{ID: "kupd", WorkspaceID: ws, Kind: store.KeyManagement, Name: "before", SecretHash: []byte{9},
		CreatedAt: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC), Role: store.RoleOwner, Scopes: []string{"keys:read", "keys:write"}}
	if err := s.CreateKey(ctx, orig); err != nil {
		t.Fatalf("CreateKey: %v", err)
	}
	name, disabled, limit, reset := "after", true, 3*usd, store.ResetMonthly
	zero, never := int64(0), store.ResetNever
	bad, negative := "fortnightly", int64(-5)
	member, noRole, readOnly, malformed := store.RoleMember, store.Role(""), []string{"keys:read", "credits:read"}, []string{"keys:everything"}

	// Each step applies to what the previous steps left.
	want := orig
	steps := []struct {
		name    string
		u       store.KeyUpdate
		apply   func(k *store.Key)
		wantErr bool
	}{
		{"nothing", store.KeyUpdate{}, func(*store.Key) {}, false},
		{"name", store.KeyUpdate{Name: &name}, func(k *store.Key) { k.Name = name }, false},
		{"disable", store.KeyUpdate{Disabled: &disabled}, func(k *store.Key) { k.Disabled = true }, false},
		{"limit and reset", store.KeyUpdate{LimitNanos: &limit, LimitReset: &reset}, func(k *store.Key) { k.LimitNanos, k.LimitReset = limit, reset }, false},
		{"unknown reset", store.KeyUpdate{LimitReset: &bad}, func(*store.Key) {}, true},
		{"negative limit", store.KeyUpdate{LimitNanos: &negative, Name: &bad}, func(*store.Key) {}, true},
		{"limit removed", store.KeyUpdate{LimitNanos: &zero, LimitReset: &never}, func(k *store.Key) { k.LimitNanos, k.LimitReset = 0, "" }, false},
		{"role and scopes", store.KeyUpdate{Role: &member, Scopes: &readOnly}, func(k *store.Key) { k.Role, k.Scopes = member, readOnly }, false},
		{"no role", store.KeyUpdate{Role: &noRole}, func(*store.Key) {}, true},
		{"malformed scope", store.KeyUpdate{Scopes: &malformed}, func(*store.Key) {}, true},
	}
	for _, st := range steps {
		got, err := s.UpdateKey(ctx, ws, "kupd", st.u)
		if st.wantErr {
			if err == nil {
				t.Fatalf("%s: UpdateKey succeeded, want an error", st.name)
			}
		} else {
			if err != nil {
				t.Fatalf("%s: UpdateKey: %v", st.name, err)
			}
			st.apply(&want)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%s: UpdateKey returned %+v, want %+v", st.name, got, want)
			}
		}
		stored, err := s.GetKey(ctx, "kupd")
		if err != nil {
			t.Fatalf("GetKey: %v", err)
		}
		if !reflect.DeepEqual(stored, want) {
			t.Fatalf("%s: stored %+v, want %+v", st.name, stored, want)
		}
	}

	// A revoked key stays revoked whatever is updated.
	at := time.Date(2025, 4, 1, 0, 0, 0, 0, time.UTC)
	if err := s.RevokeKey(ctx, "kupd", at); err != nil {
		t.Fatalf("RevokeKey: %v", err)
	}
	enabled := false
	got, err := s.UpdateKey(ctx, ws, "kupd", store.KeyUpdate{Disabled: &enabled})
	if err != nil || got.RevokedAt == nil || !got.RevokedAt.Equal(at) {
		t.Fatalf("UpdateKey of a revoked key = %+v, %v; want it still revoked", got, err)
	}

	_, err = s.UpdateKey(ctx, other, "kupd", store.KeyUpdate{Name: &name})
	wantErr(t, "UpdateKey from another workspace", err, store.ErrNotFound)
	_, err = s.UpdateKey(ctx, ws, "k_missing", store.KeyUpdate{Name: &name})
	wantErr(t, "UpdateKey unknown", err, store.ErrNotFound)
}

func testKeyLimit(t *testing.T, s store.Store) {
	ctx := context.Background()
	ws := newWorkspace(t, s, 100*usd)
	other := newWorkspace(t, s, 100*usd)
	limited := newKey(t, s, ws, 2*usd, store.ResetNever)
	free := newKey(t, s, ws, 0, store.ResetNever)
	foreign := newKey(t, s, other, 2*usd, store.ResetNever)

	first, err := reserveKey(s, ws, limited, 3*usd/2)
	if err != nil {
		t.Fatalf("Reserve within the limit: %v", err)
	}

	_, err = reserveKey(s, ws, limited, 600_000_000)
	wantErr(t, "Reserve past the limit", err, store.ErrKeyLimitExceeded)
	var le *store.KeyLimitError
	if !errors.As(err, &le) {
		t.Fatalf("Reserve past the limit: error %T is not a *store.KeyLimitError", err)
	}
	wantLE := store.KeyLimitError{KeyID: limited, LimitNanos: 2 * usd, SpentNanos: 0, ReservedNanos: 3 * usd / 2, AmountNanos: 600_000_000}
	if *le != wantLE {
		t.Errorf("KeyLimitError = %+v, want %+v", *le, wantLE)
	}
	if errors.Is(err, store.ErrInsufficientFunds) {
		t.Error("a key limit refusal also matches ErrInsufficientFunds")
	}
	mustBalance(t, s, ws, 100*usd, 3*usd/2)

	// Exactly reaching the limit is allowed; one nanodollar more is not.
	second, err := reserveKey(s, ws, limited, usd/2)
	if err != nil {
		t.Fatalf("Reserve up to the limit: %v", err)
	}
	_, err = reserveKey(s, ws, limited, 1)
	wantErr(t, "Reserve one nano past the limit", err, store.ErrKeyLimitExceeded)

	// Reservations of other keys, or of no key, neither count nor are limited.
	if _, err := reserveKey(s, ws, free, 50*usd); err != nil {
		t.Fatalf("Reserve with an unlimited key: %v", err)
	}
	if _, err := reserveKey(s, ws, "", 10*usd); err != nil {
		t.Fatalf("Reserve without a key: %v", err)
	}
	if _, err := reserveKey(s, other, foreign, 2*usd); err != nil {
		t.Fatalf("Reserve with another workspace's key: %v", err)
	}
	mustSpend(t, s, limited, time.Time{}, 0, 2*usd)

	// Settling releases the reservation and counts the real charge.
	settleKey(t, s, ws, limited, first.ID, 400_000_000)
	mustSpend(t, s, limited, time.Time{}, 400_000_000, usd/2)
	third, err := reserveKey(s, ws, limited, 1_100_000_000)
	if err != nil {
		t.Fatalf("Reserve what the settlement freed: %v", err)
	}
	_, err = reserveKey(s, ws, limited, 1)
	wantErr(t, "Reserve past the limit after settling", err, store.ErrKeyLimitExceeded)
	settleKey(t, s, ws, limited, second.ID, usd/2)
	settleKey(t, s, ws, limited, third.ID, 1_100_000_000)
	mustSpend(t, s, limited, time.Time{}, 2*usd, 0)
	// Spending since a later time leaves earlier charges out.
	mustSpend(t, s, limited, time.Now().Add(time.Hour), 0, 0)

	// A reservation of nothing still fits a key at its limit: free requests are never refused.
	if _, err := reserveKey(s, ws, limited, 0); err != nil {
		t.Fatalf("Reserve of zero at the limit: %v", err)
	}

	// The wallet's own check still comes first.
	poor := newWorkspace(t, s, usd/2)
	poorKey := newKey(t, s, poor, 10*usd, store.ResetNever)
	_, err = reserveKey(s, poor, poorKey, usd)
	wantErr(t, "Reserve beyond the wallet with room on the key", err, store.ErrInsufficientFunds)

	_, err = reserveKey(s, ws, "k_missing", 1)
	wantErr(t, "Reserve with an unknown key", err, store.ErrNotFound)
	_, err = reserveKey(s, ws, foreign, 1)
	wantErr(t, "Reserve with another workspace's key", err, store.ErrNotFound)

	// An expired reservation released by the sweeper stops counting.
	sweep := newKey(t, s, ws, usd, store.ResetNever)
	if _, err := s.Reserve(ctx, store.ReserveParams{WorkspaceID: ws, KeyID: sweep, AmountNanos: usd, ExpiresAt: time.Now().Add(-time.Minute)}); err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	_, err = reserveKey(s, ws, sweep, 1)
	wantErr(t, "Reserve while an expired reservation is held", err, store.ErrKeyLimitExceeded)
	if _, err := s.ReleaseExpired(ctx, time.Now()); err != nil {
		t.Fatalf("ReleaseExpired: %v", err)
	}
	if _, err := reserveKey(s, ws, sweep, usd); err != nil {
		t.Fatalf("Reserve after the release: %v", err)
	}

	_, err = s.KeySpend(ctx, "", time.Time{})
	if err == nil {
		t.Error("KeySpend of an empty key id succeeded")
	}
}

// testKeyLimitChanges checks that a changed limit applies to the next reservation.
func testKeyLimitChanges(t *testing.T, s store.Store) {
	ctx := context.Background()
	ws := newWorkspace(t, s, 100*usd)
	key := newKey(t, s, ws, 5*usd, store.ResetNever)
	r, err := reserveKey(s, ws, key, 3*usd)
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	settleKey(t, s, ws, key, r.ID, 3*usd)

	set := func(limit int64) {
		t.Helper()
		if _, err := s.UpdateKey(ctx, ws, key, store.KeyUpdate{LimitNanos: &limit}); err != nil {
			t.Fatalf("UpdateKey: %v", err)
		}
	}
	set(2 * usd) // below what was already spent
	_, err = reserveKey(s, ws, key, 1)
	wantErr(t, "Reserve under a lowered limit", err, store.ErrKeyLimitExceeded)
	set(0) // no limit
	if _, err := reserveKey(s, ws, key, 50*usd); err != nil {
		t.Fatalf("Reserve without a limit: %v", err)
	}
	set(60 * usd)
	_, err = reserveKey(s, ws, key, 7*usd+1)
	wantErr(t, "Reserve past a raised limit", err, store.ErrKeyLimitExceeded)
	if _, err := reserveKey(s, ws, key, 7*usd); err != nil {
		t.Fatalf("Reserve up to a raised limit: %v", err)
	}
}

// testKeyLimitPeriods moves the clock across period boundaries: spending before the
// current period's start no longer counts.
func testKeyLimitPeriods(t *testing.T, s store.Store, c *Clock) {
	// 2025-01-01 is a Wednesday; its week started on Monday 2024-12-30.
	start := time.Date(2025, 1, 1, 9, 30, 0, 0, time.UTC)
	tests := []struct {
		reset                string
		periodStart, nextEnd time.Time
	}{
		{store.ResetDaily, time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2025, 1, 2, 0, 0, 0, 0, time.UTC)},
		{store.ResetWeekly, time.Date(2024, 12, 30, 0, 0, 0, 0, time.UTC), time.Date(2025, 1, 6, 0, 0, 0, 0, time.UTC)},
		{store.ResetMonthly, time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2025, 2, 1, 0, 0, 0, 0, time.UTC)},
		{store.ResetNever, time.Time{}, time.Time{}},
	}
	for _, tc := range tests {
		name := tc.reset
		if name == "" {
			name = "never"
		}
		t.Run(name, func(t *testing.T) {
			c.Set(start)
			ws := newWorkspace(t, s, 100*usd)
			key := newKey(t, s, ws, usd, tc.reset)
			r, err := reserveKey(s, ws, key, 600_000_000)
			if err != nil {
				t.Fatalf("Reserve: %v", err)
			}
			settleKey(t, s, ws, key, r.ID, 600_000_000)

			_, err = reserveKey(s, ws, key, 600_000_000)
			var le *store.KeyLimitError
			if !errors.As(err, &le) {
				t.Fatalf("Reserve past the limit: %v", err)
			}
			if !le.PeriodStart.Equal(tc.periodStart) || !le.PeriodEnd.Equal(tc.nextEnd) || le.SpentNanos != 600_000_000 || le.LimitReset != tc.reset {
				t.Fatalf("KeyLimitError = %+v, want period %v to %v", *le, tc.periodStart, tc.nextEnd)
			}

			later := tc.nextEnd
			if later.IsZero() {
				later = start.AddDate(1, 0, 0)
			}
			c.Set(later.Add(-time.Millisecond))
			_, err = reserveKey(s, ws, key, 600_000_000)
			wantErr(t, "Reserve just before the reset", err, store.ErrKeyLimitExceeded)

			c.Set(later)
			_, err = reserveKey(s, ws, key, 600_000_000)
			if tc.reset == store.ResetNever {
				wantErr(t, "Reserve a year later without a reset", err, store.ErrKeyLimitExceeded)
				return
			}
			if err != nil {
				t.Fatalf("Reserve after the reset: %v", err)
			}
		})
	}
}

// testConcurrentKeyLimitReservations races more reservations than the key's limit holds
// in a wallet that could pay for all of them: exactly as many as fit must win.
func testConcurrentKeyLimitReservations(t *testing.T, s store.Store) {
	ws := newWorkspace(t, s, 100*usd)
	key := newKey(t, s, ws, 10*usd, store.ResetDaily)
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := 0
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := reserveKey(s, ws, key, usd)
			if errors.Is(err, store.ErrKeyLimitExceeded) {
				return
			}
			if err != nil {
				t.Errorf("Reserve: %v", err)
				return
			}
			mu.Lock()
			won++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if won != 10 {
		t.Errorf("%d reservations of 1 USD succeeded against a key limit of 10 USD, want 10", won)
	}
	mustBalance(t, s, ws, 100*usd, 10*usd)
	mustSpend(t, s, key, time.Time{}, 0, 10*usd)
}

// testConcurrentKeyLimitNeverExceeded runs many requests of a limited key at once, beside
// an unlimited key of the same wallet. Each reserves its worst case and settles less, as
// the gateway does; what the limited key is charged never passes its limit.
func testConcurrentKeyLimitNeverExceeded(t *testing.T, s store.Store) {
	ctx := context.Background()
	ws := newWorkspace(t, s, 100*usd)
	limited := newKey(t, s, ws, 5*usd, store.ResetMonthly)
	unlimited := newKey(t, s, ws, 0, store.ResetNever)
	const workers = 60
	const worst = usd / 2
	rng := rand.New(rand.NewPCG(3, 4))
	costs := make([]int64, workers)
	for i := range costs {
		costs[i] = usd/10 + rng.Int64N(worst-usd/10+1) // 0.1 to 0.5 USD
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	settled := map[string]int64{}
	refused := 0
	for i := range workers {
		for _, key := range []string{limited, unlimited} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := reserveKey(s, ws, key, worst)
				if errors.Is(err, store.ErrKeyLimitExceeded) && key == limited {
					mu.Lock()
					refused++
					mu.Unlock()
					return
				}
				if err != nil {
					t.Errorf("Reserve(%s): %v", key, err)
					return
				}
				g, err := s.Settle(ctx, store.SettleParams{ReservationID: r.ID, Generation: &store.Generation{
					WorkspaceID: ws, KeyID: key, CostNanos: costs[i],
				}})
				if err != nil {
					t.Errorf("Settle: %v", err)
					return
				}
				mu.Lock()
				settled[key] += g.CostNanos
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	if settled[limited] > 5*usd {
		t.Errorf("the limited key was charged %d nanos, more than its limit of %d", settled[limited], 5*usd)
	}
	if refused == 0 {
		t.Error("no request of the limited key was refused; the test did not reach the limit")
	}
	// While fewer than 10 requests have succeeded at most 4.5 USD is spoken for, so at
	// least 10 always get through.
	if settled[limited] < 10*usd/10 {
		t.Errorf("the limited key was charged only %d nanos", settled[limited])
	}
	mustSpend(t, s, limited, time.Time{}, settled[limited], 0)
	mustSpend(t, s, unlimited, time.Time{}, settled[unlimited], 0)
	mustBalance(t, s, ws, 100*usd-settled[limited]-settled[unlimited], 0)
}

func testActivity(t *testing.T, s store.Store) {
	ctx := context.Background()
	ws := newWorkspace(t, s, 10*usd)
	other := newWorkspace(t, s, 10*usd)
	day1 := time.Date(2025, 5, 6, 0, 0, 0, 0, time.UTC)
	day2 := day1.AddDate(0, 0, 1)
	cest := time.FixedZone("CEST", 2*3600)
	gens := []store.Generation{
		{WorkspaceID: ws, KeyID: "k1", Model: "m1", Provider: "p1", CreatedAt: day1.Add(10 * time.Hour),
			InputTokens: 10, CacheReadTokens: 1, CacheWriteTokens: 2, OutputTokens: 5, ReasoningTokens: 3, CostNanos: 100},
		// 01:30 in CEST is still the 6th in UTC.
		{WorkspaceID: ws, KeyID: "k2", Model: "m1", Provider: "p1", CreatedAt: time.Date(2025, 5, 7, 1, 30, 0, 0, cest),
			InputTokens: 20, CacheReadTokens: 10, CacheWriteTokens: 20, OutputTokens: 50, ReasoningTokens: 30, CostNanos: 200},
		{WorkspaceID: ws, KeyID: "k1", Model: "m1", Provider: "p2", CreatedAt: day1.Add(12 * time.Hour), InputTokens: 7, CostNanos: 50},
		{WorkspaceID: ws, KeyID: "k1", Model: "m2", Provider: "p1", CreatedAt: day1.Add(12 * time.Hour), OutputTokens: 8, CostNanos: 60, Status: 502},
		{WorkspaceID: ws, KeyID: "k1", Model: "m1", Provider: "p1", CreatedAt: day2, InputTokens: 1, CostNanos: 1},
		// Outside the range asked for.
		{WorkspaceID: ws, KeyID: "k1", Model: "m1", Provider: "p1", CreatedAt: day1.Add(-time.Millisecond), CostNanos: 1000},
		{WorkspaceID: ws, KeyID: "k1", Model: "m1", Provider: "p1", CreatedAt: day2.AddDate(0, 0, 1), CostNanos: 1000},
		// Another workspace.
		{WorkspaceID: other, KeyID: "k9", Model: "m1", Provider: "p1", CreatedAt: day1.Add(time.Hour), CostNanos: 5000},
	}
	for i := range gens {
		if _, err := s.Settle(ctx, store.SettleParams{Generation: &gens[i]}); err != nil {
			t.Fatalf("Settle: %v", err)
		}
	}
	tests := []struct {
		name string
		q    store.ActivityQuery
		want []store.ActivityRow
	}{
		{"two days", store.ActivityQuery{WorkspaceID: ws, From: day1, To: day2.AddDate(0, 0, 1)}, []store.ActivityRow{
			{Day: day1, Model: "m1", Provider: "p1", Requests: 2, InputTokens: 30, CacheReadTokens: 11, CacheWriteTokens: 22, OutputTokens: 55, ReasoningTokens: 33, CostNanos: 300},
			{Day: day1, Model: "m1", Provider: "p2", Requests: 1, InputTokens: 7, CostNanos: 50},
			{Day: day1, Model: "m2", Provider: "p1", Requests: 1, OutputTokens: 8, CostNanos: 60},
			{Day: day2, Model: "m1", Provider: "p1", Requests: 1, InputTokens: 1, CostNanos: 1},
		}},
		{"one key", store.ActivityQuery{WorkspaceID: ws, From: day1, To: day2.AddDate(0, 0, 1), KeyID: "k2"}, []store.ActivityRow{
			{Day: day1, Model: "m1", Provider: "p1", Requests: 1, InputTokens: 20, CacheReadTokens: 10, CacheWriteTokens: 20, OutputTokens: 50, ReasoningTokens: 30, CostNanos: 200},
		}},
		{"to is exclusive", store.ActivityQuery{WorkspaceID: ws, From: day2, To: day2.Add(time.Millisecond)}, []store.ActivityRow{
			{Day: day2, Model: "m1", Provider: "p1", Requests: 1, InputTokens: 1, CostNanos: 1},
		}},
		{"another workspace", store.ActivityQuery{WorkspaceID: other, From: day1, To: day2}, []store.ActivityRow{
			{Day: day1, Model: "m1", Provider: "p1", Requests: 1, CostNanos: 5000},
		}},
		{"nothing", store.ActivityQuery{WorkspaceID: ws, From: day1.AddDate(-1, 0, 0), To: day1.AddDate(0, 0, -1)}, nil},
		{"unknown workspace", store.ActivityQuery{WorkspaceID: "ws_missing", From: day1, To: day2}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.Activity(ctx, tc.q)
			if err != nil {
				t.Fatalf("Activity: %v", err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("Activity = %+v, want %+v", got, tc.want)
			}
			for i := range got {
				isUTC(t, "activity day", got[i].Day)
				if !reflect.DeepEqual(got[i], tc.want[i]) {
					t.Errorf("row %d = %+v, want %+v", i, got[i], tc.want[i])
				}
			}
		})
	}
	if _, err := s.Activity(ctx, store.ActivityQuery{From: day1, To: day2}); err == nil {
		t.Error("Activity without a workspace succeeded")
	}
}
