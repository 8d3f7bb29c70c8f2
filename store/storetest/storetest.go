// Package storetest is the conformance suite every store.Store backend must pass. Tests of
// one role take that role's interface (store.Identity, store.Claims...).
// A backend's test calls Run with a function that opens a fresh, empty store whose clock
// is now (the system clock when now is nil):
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T, now func() time.Time) store.Store { return openTemp(t, now) })
//	}
//
// open is called once per subtest and must register its own cleanup (t.Cleanup).
package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/internal/ids"
	"github.com/modelgateway/caddy-modelgateway/store"
)

const usd = store.NanosPerUSD

// Opener opens a fresh, empty store that reads the time from now (nil: the system clock).
type Opener func(t *testing.T, now func() time.Time) store.Store

// Run runs the whole suite against stores made by open.
func Run(t *testing.T, open Opener) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"Workspaces", testWorkspaces},
		{"Keys", testKeys},
		{"RevokeKey", testRevokeKey},
		{"Credits", testCredits},
		{"Reserve", testReserve},
		{"ReserveValidation", testReserveValidation},
		{"Settle", testSettle},
		{"SettleTwice", testSettleTwice},
		{"SettleErrorsLeaveReservation", testSettleErrorsLeaveReservation},
		{"SettleAgain", testSettleAgain},
		{"SettleAgainElsewhere", testSettleAgainElsewhere},
		{"SettleAfterInterrupted", testSettleAfterInterrupted},
		{"ConcurrentSettleAgain", testConcurrentSettleAgain},
		{"ReleaseExpired", testReleaseExpired},
		{"GenerationIsolation", testGenerationIsolation},
		{"GenerationRoundTrip", testGenerationRoundTrip},
		{"ConcurrentReserveAndSettle", testConcurrentReserveAndSettle},
		{"ConcurrentReserveNeverOverspends", testConcurrentReserveNeverOverspends},
		{"ConcurrentDebits", testConcurrentDebits},
		{"ConcurrentMixedOutcomes", testConcurrentMixedOutcomes},
		{"CancelledContext", testCancelledContext},
		{"ChildWorkspaces", testChildWorkspaces},
		{"KeyLimitFields", testKeyLimitFields},
		{"UpdateKey", testUpdateKey},
		{"KeyLimit", testKeyLimit},
		{"KeyLimitChanges", testKeyLimitChanges},
		{"ConcurrentKeyLimitReservations", testConcurrentKeyLimitReservations},
		{"ConcurrentKeyLimitNeverExceeded", testConcurrentKeyLimitNeverExceeded},
		{"Activity", testActivity},
		{"SettleLease", testSettleLease},
		{"SettleLeaseErrors", testSettleLeaseErrors},
		{"ReleaseReservation", testReleaseReservation},
		{"ConcurrentLeaseSettlements", testConcurrentLeaseSettlements},
		{"InFlightSettled", testInFlightSettled},
		{"Ping", testPing},
		{"IdentityPages", func(t *testing.T, s store.Store) { testIdentityPages(t, s) }},
		{"ActivityPages", testActivityPages},
		{"ConcurrentClaims", func(t *testing.T, s store.Store) { testConcurrentClaims(t, s) }},
		{"ClaimLeaseExpiry", func(t *testing.T, s store.Store) { testClaimLeaseExpiry(t, s) }},
		{"JobPages", testJobPages},
		{"Watch", testWatchSameStore},
		{"AdvanceRace", testAdvanceRace},
		{"WebhookPages", testWebhookPages},
		{"WorkspaceAsyncAccess", testWorkspaceAsyncAccess},
		{"NotificationRoutes", testNotificationRoutes},
		{"BatchRowCountsRace", testBatchRowCountsRace},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, open(t, nil))
		})
	}
	// These move the store's clock.
	clocked := []struct {
		name string
		fn   func(t *testing.T, s store.Store, c *Clock)
	}{
		{"KeyLimitPeriods", testKeyLimitPeriods},
		{"Instances", testInstances},
		{"DeadInstanceClaims", testDeadInstanceClaims},
		{"ConcurrentOrphanRelease", testConcurrentOrphanRelease},
		{"Interrupted", testInterrupted},
		{"Claims", func(t *testing.T, s store.Store, c *Clock) { testClaims(t, s, c) }},
		{"ClaimLifecycle", func(t *testing.T, s store.Store, c *Clock) { testClaimLifecycle(t, s, c) }},
		{"ClaimAttempts", func(t *testing.T, s store.Store, c *Clock) { testClaimAttempts(t, s, c) }},
		{"ClaimRemoveReschedule", func(t *testing.T, s store.Store, c *Clock) { testClaimRemoveReschedule(t, s, c) }},
		{"ClaimGroupCap", func(t *testing.T, s store.Store, c *Clock) { testClaimGroupCap(t, s, c) }},
		{"Jobs", testJobs},
		{"DeleteJob", testDeleteJob},
		{"CreateJobEvents", testCreateJobEvents},
		{"AdvanceJob", testAdvanceJob},
		{"UnpolledJobs", testUnpolledJobs},
		{"Deliveries", testDeliveries},
		{"SkipDelivery", testSkipDelivery},
		{"WebhookEndpoints", testWebhookEndpoints},
		{"WebhookRotation", testWebhookRotation},
		{"WebhookOutcomes", testWebhookOutcomes},
		{"Files", testFiles},
		{"NotificationDestinations", testNotificationDestinations},
		{"LowBalance", testLowBalance},
		{"BatchRows", testBatchRows},
		{"BatchRowsGathered", testBatchRowsGathered},
		{"BatchRowCounts", testBatchRowCounts},
		{"EndedBatchesWithRows", testEndedBatchesWithRows},
	}
	for _, tc := range clocked {
		t.Run(tc.name, func(t *testing.T) {
			c := NewClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
			tc.fn(t, open(t, c.Now), c)
		})
	}
}

// newWorkspace creates a workspace holding balance nanos and returns its id.
func newWorkspace(t *testing.T, s store.Store, balance int64) string {
	t.Helper()
	ctx := context.Background()
	id := ids.New("ws")
	if err := s.CreateWorkspace(ctx, store.Workspace{ID: id, Name: "test " + id}); err != nil {
		t.Fatalf("CreateWorkspace: %v", err)
	}
	if balance != 0 {
		if _, err := s.AddCredits(ctx, id, balance, "test funding"); err != nil {
			t.Fatalf("AddCredits: %v", err)
		}
	}
	return id
}

func mustBalance(t *testing.T, s store.Store, ws string, balance, reserved int64) {
	t.Helper()
	b, err := s.GetBalance(context.Background(), ws)
	if err != nil {
		t.Fatalf("GetBalance: %v", err)
	}
	if b.BalanceNanos != balance || b.ReservedNanos != reserved {
		t.Fatalf("balance = %d reserved = %d, want %d and %d", b.BalanceNanos, b.ReservedNanos, balance, reserved)
	}
	if b.WorkspaceID != ws {
		t.Fatalf("balance workspace = %q, want %q", b.WorkspaceID, ws)
	}
}

func reserve(t *testing.T, s store.Store, ws string, amount int64) store.Reservation {
	t.Helper()
	r, err := s.Reserve(context.Background(), store.ReserveParams{
		WorkspaceID: ws, AmountNanos: amount, ExpiresAt: time.Now().Add(time.Hour),
	})
	if err != nil {
		t.Fatalf("Reserve(%d): %v", amount, err)
	}
	return r
}

func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: error = %v, want %v", what, err, target)
	}
}

func isUTC(t *testing.T, what string, tm time.Time) {
	t.Helper()
	if tm.IsZero() || tm.Location() != time.UTC {
		t.Errorf("%s = %v, want a non-zero UTC time", what, tm)
	}
}

func testWorkspaces(t *testing.T, s store.Store) {
	ctx := context.Background()
	created := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	a := store.Workspace{ID: "ws_a", Name: "Alpha", CreatedAt: created}
	if err := s.CreateWorkspace(ctx, a); err != nil {
		t.Fatalf("CreateWorkspace: %v", err)
	}
	before := time.Now().Truncate(time.Millisecond)
	if err := s.CreateWorkspace(ctx, store.Workspace{ID: "ws_b", Name: "Beta"}); err != nil {
		t.Fatalf("CreateWorkspace: %v", err)
	}
	after := time.Now()

	got, err := s.GetWorkspace(ctx, "ws_a")
	if err != nil {
		t.Fatalf("GetWorkspace: %v", err)
	}
	if got.ID != a.ID || got.Name != a.Name || !got.CreatedAt.Equal(created) {
		t.Errorf("GetWorkspace = %+v, want %+v", got, a)
	}
	isUTC(t, "CreatedAt", got.CreatedAt)

	b, err := s.GetWorkspace(ctx, "ws_b")
	if err != nil {
		t.Fatalf("GetWorkspace: %v", err)
	}
	if b.CreatedAt.Before(before) || b.CreatedAt.After(after) {
		t.Errorf("defaulted CreatedAt = %v, want between %v and %v", b.CreatedAt, before, after)
	}

	list, err := s.ListWorkspaces(ctx, store.Page{})
	if err != nil {
		t.Fatalf("ListWorkspaces: %v", err)
	}
	if len(list) != 2 || list[0].ID != "ws_a" || list[1].ID != "ws_b" {
		t.Errorf("ListWorkspaces = %+v, want ws_a then ws_b", list)
	}

	// A new workspace has an empty wallet.
	mustBalance(t, s, "ws_a", 0, 0)

	wantErr(t, "CreateWorkspace duplicate", s.CreateWorkspace(ctx, store.Workspace{ID: "ws_a", Name: "Again"}), store.ErrConflict)
	_, err = s.GetWorkspace(ctx, "ws_missing")
	wantErr(t, "GetWorkspace missing", err, store.ErrNotFound)
	_, err = s.GetBalance(ctx, "ws_missing")
	wantErr(t, "GetBalance missing", err, store.ErrNotFound)
	if err := s.CreateWorkspace(ctx, store.Workspace{Name: "no id"}); err == nil {
		t.Error("CreateWorkspace with an empty id succeeded")
	}
}

func testKeys(t *testing.T, s store.Store) {
	ctx := context.Background()
	ws := newWorkspace(t, s, 0)
	other := newWorkspace(t, s, 0)
	hash := []byte("0123456789abcdef0123456789abcdef")
	created := time.Date(2025, 3, 1, 12, 0, 0, 123_000_000, time.UTC)
	keys := []store.Key{
		{ID: "k1", WorkspaceID: ws, Kind: store.KeyStandard, Name: "one", SecretHash: hash, CreatedAt: created},
		{ID: "k2", WorkspaceID: ws, Kind: store.KeyManagement, Name: "two", SecretHash: hash, Disabled: true, CreatedAt: created.Add(time.Second),
			Role: store.RoleAdmin, Scopes: []string{"credits:read", "keys:write"}},
		{ID: "k3", WorkspaceID: other, Kind: store.KeyStandard, Name: "three", SecretHash: hash, CreatedAt: created},
	}
	for _, k := range keys {
		if err := s.CreateKey(ctx, k); err != nil {
			t.Fatalf("CreateKey(%s): %v", k.ID, err)
		}
	}

	got, err := s.GetKey(ctx, "k2")
	if err != nil {
		t.Fatalf("GetKey: %v", err)
	}
	isUTC(t, "key CreatedAt", got.CreatedAt)
	if !reflect.DeepEqual(got, keys[1]) {
		t.Errorf("GetKey = %+v, want %+v", got, keys[1])
	}

	list, err := s.ListKeys(ctx, ws, store.Page{})
	if err != nil {
		t.Fatalf("ListKeys: %v", err)
	}
	if len(list) != 2 || list[0].ID != "k1" || list[1].ID != "k2" {
		t.Errorf("ListKeys = %+v, want k1 then k2", list)
	}
	empty := newWorkspace(t, s, 0)
	if list, err := s.ListKeys(ctx, empty, store.Page{}); err != nil || len(list) != 0 {
		t.Errorf("ListKeys(empty workspace) = %v, %v; want nothing", list, err)
	}
	// A management key without a role, or a standard key with one, is a caller's bug.
	wantErrAny(t, "CreateKey(standard key with a role)", s.CreateKey(ctx, store.Key{ID: "k9", WorkspaceID: ws, Kind: store.KeyStandard, SecretHash: hash, Role: store.RoleOwner}))
	wantErrAny(t, "CreateKey(management key without a role)", s.CreateKey(ctx, store.Key{ID: "k9", WorkspaceID: ws, Kind: store.KeyManagement, SecretHash: hash}))

	tests := []struct {
		name string
		call func() error
		want error
	}{
		{"duplicate key", func() error {
			return s.CreateKey(ctx, store.Key{ID: "k1", WorkspaceID: ws, Kind: store.KeyStandard, SecretHash: hash})
		}, store.ErrConflict},
		{"duplicate key in another workspace", func() error {
			return s.CreateKey(ctx, store.Key{ID: "k1", WorkspaceID: other, Kind: store.KeyStandard, SecretHash: hash})
		}, store.ErrConflict},
		{"unknown workspace", func() error {
			return s.CreateKey(ctx, store.Key{ID: "k9", WorkspaceID: "ws_missing", Kind: store.KeyStandard, SecretHash: hash})
		}, store.ErrNotFound},
		{"get unknown key", func() error { _, err := s.GetKey(ctx, "k_missing"); return err }, store.ErrNotFound},
		{"list unknown workspace", func() error { _, err := s.ListKeys(ctx, "ws_missing", store.Page{}); return err }, store.ErrNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { wantErr(t, tc.name, tc.call(), tc.want) })
	}
}

func testRevokeKey(t *testing.T, s store.Store) {
	ctx := context.Background()
	ws := newWorkspace(t, s, 0)
	if err := s.CreateKey(ctx, store.Key{ID: "k1", WorkspaceID: ws, Kind: store.KeyStandard, SecretHash: []byte{1}}); err != nil {
		t.Fatalf("CreateKey: %v", err)
	}
	k, err := s.GetKey(ctx, "k1")
	if err != nil || k.RevokedAt != nil {
		t.Fatalf("new key: RevokedAt = %v, err = %v; want nil, nil", k.RevokedAt, err)
	}
	at := time.Date(2025, 4, 1, 8, 30, 0, 0, time.UTC)
	if err := s.RevokeKey(ctx, "k1", at); err != nil {
		t.Fatalf("RevokeKey: %v", err)
	}
	// A second revocation must not move the recorded time.
	if err := s.RevokeKey(ctx, "k1", at.Add(time.Hour)); err != nil {
		t.Fatalf("RevokeKey again: %v", err)
	}
	k, err = s.GetKey(ctx, "k1")
	if err != nil {
		t.Fatalf("GetKey: %v", err)
	}
	if k.RevokedAt == nil || !k.RevokedAt.Equal(at) {
		t.Fatalf("RevokedAt = %v, want %v", k.RevokedAt, at)
	}
	isUTC(t, "RevokedAt", *k.RevokedAt)
	wantErr(t, "RevokeKey missing", s.RevokeKey(ctx, "k_missing", at), store.ErrNotFound)
}

func testCredits(t *testing.T, s store.Store) {
	ctx := context.Background()
	ws := newWorkspace(t, s, 0)
	steps := []struct {
		name        string
		amount      int64
		wantErr     error
		wantBalance int64
	}{
		{"credit", 5 * usd, nil, 5 * usd},
		{"second credit", 250_000_000, nil, 5*usd + 250_000_000},
		{"debit", -2 * usd, nil, 3*usd + 250_000_000},
		{"debit beyond balance", -4 * usd, store.ErrInsufficientFunds, 3*usd + 250_000_000},
		{"debit to zero", -(3*usd + 250_000_000), nil, 0},
		{"debit from zero", -1, store.ErrInsufficientFunds, 0},
	}
	for _, st := range steps {
		b, err := s.AddCredits(ctx, ws, st.amount, st.name)
		if st.wantErr != nil {
			wantErr(t, st.name, err, st.wantErr)
		} else if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		} else if b.BalanceNanos != st.wantBalance || b.WorkspaceID != ws {
			t.Fatalf("%s: returned %+v, want balance %d", st.name, b, st.wantBalance)
		}
		mustBalance(t, s, ws, st.wantBalance, 0)
	}
	_, err := s.AddCredits(ctx, "ws_missing", usd, "")
	wantErr(t, "AddCredits unknown workspace", err, store.ErrNotFound)
}

func testReserve(t *testing.T, s store.Store) {
	ctx := context.Background()
	ws := newWorkspace(t, s, 2*usd)
	expires := time.Now().Add(time.Hour)

	// Each step runs against the wallet the previous steps left: 2 USD, nothing reserved.
	steps := []struct {
		name         string
		amount, min  int64
		wantErr      error
		wantReserved int64
	}{
		{"below minimum available", usd / 2, 3 * usd, store.ErrInsufficientFunds, 0},
		{"above available", 3 * usd, usd, store.ErrInsufficientFunds, 0},
		{"small amount with minimum", usd / 2, usd, nil, usd / 2},
		{"exactly the rest", 3 * usd / 2, 0, nil, 2 * usd},
		{"nothing left", 1, 0, store.ErrInsufficientFunds, 2 * usd},
		{"zero still allowed", 0, 0, nil, 2 * usd},
	}
	for _, st := range steps {
		r, err := s.Reserve(ctx, store.ReserveParams{WorkspaceID: ws, AmountNanos: st.amount, MinAvailableNanos: st.min, ExpiresAt: expires})
		if st.wantErr != nil {
			wantErr(t, st.name, err, st.wantErr)
		} else {
			if err != nil {
				t.Fatalf("%s: %v", st.name, err)
			}
			if !strings.HasPrefix(r.ID, "res_") || r.WorkspaceID != ws || r.AmountNanos != st.amount {
				t.Fatalf("%s: reservation = %+v", st.name, r)
			}
			isUTC(t, "reservation CreatedAt", r.CreatedAt)
			if !r.ExpiresAt.Equal(expires.Truncate(time.Millisecond)) {
				t.Errorf("%s: ExpiresAt = %v, want %v", st.name, r.ExpiresAt, expires)
			}
		}
		mustBalance(t, s, ws, 2*usd, st.wantReserved)
	}

	// A caller-chosen id is kept, and may not be used twice.
	rich := newWorkspace(t, s, 10*usd)
	r, err := s.Reserve(ctx, store.ReserveParams{ID: "res_mine", WorkspaceID: rich, AmountNanos: usd, ExpiresAt: expires})
	if err != nil || r.ID != "res_mine" {
		t.Fatalf("Reserve with id = %+v, %v", r, err)
	}
	_, err = s.Reserve(ctx, store.ReserveParams{ID: "res_mine", WorkspaceID: rich, AmountNanos: usd, ExpiresAt: expires})
	wantErr(t, "Reserve duplicate id", err, store.ErrConflict)
	mustBalance(t, s, rich, 10*usd, usd)

	_, err = s.Reserve(ctx, store.ReserveParams{WorkspaceID: "ws_missing", AmountNanos: 1, ExpiresAt: expires})
	wantErr(t, "Reserve unknown workspace", err, store.ErrNotFound)
}

func testReserveValidation(t *testing.T, s store.Store) {
	ctx := context.Background()
	ws := newWorkspace(t, s, 10*usd)
	expires := time.Now().Add(time.Hour)
	tests := []struct {
		name string
		p    store.ReserveParams
	}{
		{"negative amount", store.ReserveParams{WorkspaceID: ws, AmountNanos: -1, ExpiresAt: expires}},
		{"negative minimum", store.ReserveParams{WorkspaceID: ws, MinAvailableNanos: -1, ExpiresAt: expires}},
		{"no expiry", store.ReserveParams{WorkspaceID: ws, AmountNanos: 1}},
		{"no workspace", store.ReserveParams{AmountNanos: 1, ExpiresAt: expires}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if r, err := s.Reserve(ctx, tc.p); err == nil {
				t.Fatalf("Reserve = %+v, want an error", r)
			}
			mustBalance(t, s, ws, 10*usd, 0)
		})
	}
}

func testSettle(t *testing.T, s store.Store) {
	ctx := context.Background()
	tests := []struct {
		name         string
		balance      int64
		reserve      int64 // 0: settle without a reservation
		cost         int64
		wantCost     int64
		wantUnbilled int64
		wantBalance  int64
	}{
		{"charge and release the rest", 5 * usd, 2 * usd, 700_000_000, 700_000_000, 0, 4*usd + 300_000_000},
		{"cost above reservation", 5 * usd, usd, 3 * usd, 3 * usd, 0, 2 * usd},
		{"cost above balance is capped", 2 * usd, usd, 5 * usd, 2 * usd, 3 * usd, 0},
		{"free without reservation", 0, 0, 0, 0, 0, 0},
		{"free with funds", 3 * usd, 0, 0, 0, 0, 3 * usd},
		{"paid without reservation", usd, 0, 250_000_000, 250_000_000, 0, 750_000_000},
		{"empty wallet", 0, 0, usd, 0, usd, 0},
		{"nothing used", 5 * usd, 2 * usd, 0, 0, 0, 5 * usd},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ws := newWorkspace(t, s, tc.balance)
			var resID string
			if tc.reserve > 0 {
				resID = reserve(t, s, ws, tc.reserve).ID
			}
			before := time.Now().Truncate(time.Millisecond)
			g, err := s.Settle(ctx, store.SettleParams{ReservationID: resID, Generation: &store.Generation{
				WorkspaceID: ws, KeyID: "k1", Model: "m", Status: 200, CostNanos: tc.cost,
			}})
			if err != nil {
				t.Fatalf("Settle: %v", err)
			}
			if g.CostNanos != tc.wantCost || g.UnbilledNanos != tc.wantUnbilled {
				t.Errorf("Settle: cost %d unbilled %d, want %d and %d", g.CostNanos, g.UnbilledNanos, tc.wantCost, tc.wantUnbilled)
			}
			if !strings.HasPrefix(g.ID, "gen_") {
				t.Errorf("generated id = %q, want a gen_ id", g.ID)
			}
			if g.CreatedAt.Before(before) || g.CreatedAt.After(time.Now()) {
				t.Errorf("defaulted CreatedAt = %v, want about now", g.CreatedAt)
			}
			isUTC(t, "generation CreatedAt", g.CreatedAt)
			mustBalance(t, s, ws, tc.wantBalance, 0)

			stored, err := s.GetGeneration(ctx, ws, g.ID)
			if err != nil {
				t.Fatalf("GetGeneration: %v", err)
			}
			if !reflect.DeepEqual(stored, g) {
				t.Errorf("stored generation = %+v, Settle returned %+v", stored, g)
			}
		})
	}
}

func testSettleTwice(t *testing.T, s store.Store) {
	ctx := context.Background()
	ws := newWorkspace(t, s, 5*usd)
	r := reserve(t, s, ws, 2*usd)
	settle := func(id string) error {
		_, err := s.Settle(ctx, store.SettleParams{ReservationID: r.ID, Generation: &store.Generation{
			ID: id, WorkspaceID: ws, CostNanos: usd,
		}})
		return err
	}
	if err := settle("gen_first"); err != nil {
		t.Fatalf("Settle: %v", err)
	}
	wantErr(t, "second Settle", settle("gen_second"), store.ErrNotFound)
	mustBalance(t, s, ws, 4*usd, 0)
	_, err := s.GetGeneration(ctx, ws, "gen_second")
	wantErr(t, "generation of the refused Settle", err, store.ErrNotFound)

	err = func() error {
		_, err := s.Settle(ctx, store.SettleParams{ReservationID: "res_missing", Generation: &store.Generation{WorkspaceID: ws, CostNanos: 1}})
		return err
	}()
	wantErr(t, "Settle unknown reservation", err, store.ErrNotFound)
	mustBalance(t, s, ws, 4*usd, 0)
}

// testSettleErrorsLeaveReservation checks that a refused Settle changes nothing: it is
// one transaction, so the reservation it started to release is still held.
func testSettleErrorsLeaveReservation(t *testing.T, s store.Store) {
	ctx := context.Background()
	ws := newWorkspace(t, s, 5*usd)
	other := newWorkspace(t, s, 5*usd)
	if _, err := s.Settle(ctx, store.SettleParams{Generation: &store.Generation{ID: "gen_taken", WorkspaceID: ws, CostNanos: usd}}); err != nil {
		t.Fatalf("Settle: %v", err)
	}
	r := reserve(t, s, ws, 2*usd)
	tests := []struct {
		name string
		p    store.SettleParams
		want error
	}{
		{"another workspace's reservation", store.SettleParams{ReservationID: r.ID, Generation: &store.Generation{WorkspaceID: other, CostNanos: usd}}, store.ErrNotFound},
		{"duplicate generation id", store.SettleParams{ReservationID: r.ID, Generation: &store.Generation{ID: "gen_taken", WorkspaceID: ws, CostNanos: usd}}, store.ErrConflict},
		{"negative cost", store.SettleParams{ReservationID: r.ID, Generation: &store.Generation{WorkspaceID: ws, CostNanos: -1}}, nil},
		{"no generation", store.SettleParams{ReservationID: r.ID}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Settle(ctx, tc.p)
			if tc.want != nil {
				wantErr(t, tc.name, err, tc.want)
			} else if err == nil {
				t.Fatal("Settle succeeded, want an error")
			}
			mustBalance(t, s, ws, 4*usd, 2*usd)
			mustBalance(t, s, other, 5*usd, 0)
		})
	}
	// The reservation survived every refusal and still settles.
	if _, err := s.Settle(ctx, store.SettleParams{ReservationID: r.ID, Generation: &store.Generation{WorkspaceID: ws, CostNanos: usd}}); err != nil {
		t.Fatalf("Settle after refusals: %v", err)
	}
	mustBalance(t, s, ws, 3*usd, 0)
}

func testReleaseExpired(t *testing.T, s store.Store) {
	ctx := context.Background()
	ws := newWorkspace(t, s, 10*usd)
	other := newWorkspace(t, s, 10*usd)
	now := time.Now()
	res := func(ws string, amount int64, expires time.Time) store.Reservation {
		r, err := s.Reserve(ctx, store.ReserveParams{WorkspaceID: ws, AmountNanos: amount, ExpiresAt: expires})
		if err != nil {
			t.Fatalf("Reserve: %v", err)
		}
		return r
	}
	expired := res(ws, 2*usd, now.Add(-time.Minute))
	res(ws, 3*usd, now.Add(-time.Second))
	live := res(ws, usd, now.Add(time.Hour))
	res(other, 4*usd, now.Add(-time.Hour))

	n, err := s.ReleaseExpired(ctx, now)
	if err != nil {
		t.Fatalf("ReleaseExpired: %v", err)
	}
	if n != 3 {
		t.Errorf("ReleaseExpired released %d, want 3", n)
	}
	mustBalance(t, s, ws, 10*usd, usd)
	mustBalance(t, s, other, 10*usd, 0)

	if n, err := s.ReleaseExpired(ctx, now); err != nil || n != 0 {
		t.Errorf("second ReleaseExpired = %d, %v; want 0, nil", n, err)
	}
	_, err = s.Settle(ctx, store.SettleParams{ReservationID: expired.ID, Generation: &store.Generation{WorkspaceID: ws, CostNanos: usd}})
	wantErr(t, "Settle released reservation", err, store.ErrNotFound)
	if _, err := s.Settle(ctx, store.SettleParams{ReservationID: live.ID, Generation: &store.Generation{WorkspaceID: ws, CostNanos: usd / 2}}); err != nil {
		t.Fatalf("Settle live reservation: %v", err)
	}
	mustBalance(t, s, ws, 10*usd-usd/2, 0)
}

func testGenerationIsolation(t *testing.T, s store.Store) {
	ctx := context.Background()
	a := newWorkspace(t, s, usd)
	b := newWorkspace(t, s, usd)
	g, err := s.Settle(ctx, store.SettleParams{Generation: &store.Generation{ID: "gen_a", WorkspaceID: a, CostNanos: 1}})
	if err != nil {
		t.Fatalf("Settle: %v", err)
	}
	if _, err := s.GetGeneration(ctx, a, g.ID); err != nil {
		t.Fatalf("GetGeneration own: %v", err)
	}
	_, err = s.GetGeneration(ctx, b, g.ID)
	wantErr(t, "GetGeneration of another workspace", err, store.ErrNotFound)
	_, err = s.GetGeneration(ctx, a, "gen_missing")
	wantErr(t, "GetGeneration missing", err, store.ErrNotFound)
}

func testGenerationRoundTrip(t *testing.T, s store.Store) {
	ctx := context.Background()
	ws := newWorkspace(t, s, 10*usd)
	full := store.Generation{
		ID: "gen_full", WorkspaceID: ws, KeyID: "k1", Endpoint: "/v1/chat/completions",
		Model: "openai/gpt-x", Provider: "openai", UpstreamModel: "gpt-x-2025", UpstreamID: "chatcmpl-1",
		Streamed: true, Cancelled: true, Status: 200, FinishReason: "stop",
		ErrorCode: "upstream_error", ErrorMessage: "quote \" and unicode ✓",
		InputTokens: 1000, CacheReadTokens: 200, CacheWriteTokens: 300, OutputTokens: 400, ReasoningTokens: 50,
		InputCharacters: 4096, Images: 2, Pages: 3, InputAudioMs: 61_250, OutputAudioMs: 3000, OutputVideoMs: 8500,
		CostNanos: 1_234_567,
		CostLines: []store.CostLine{
			{Dimension: "input", Quantity: 1000, UnitPriceNanos: 2_500_000_000, Nanos: 2_500_000},
			{Dimension: "output", Quantity: 400, UnitPriceNanos: 10_000_000_000, Nanos: 4_000_000},
			{Dimension: "image", Key: "1024x1024/high", Quantity: 2, UnitPriceNanos: 167_000_000, Nanos: 334_000_000},
		},
		Attempts: []store.Attempt{
			{Provider: "a", UpstreamModel: "x", Status: 529, DurationMs: 12, Error: "overloaded", Category: "overloaded"},
			{Provider: "openai", UpstreamModel: "gpt-x-2025", Status: 200, DurationMs: 345},
		},
		LatencyMs: 120, GenerationMs: 900, EndToEndMs: 1100,
		// Sub-millisecond precision is not kept; the returned value says what was stored.
		CreatedAt: time.Date(2025, 5, 6, 7, 8, 9, 123_456_789, time.FixedZone("CEST", 2*3600)),
	}
	tests := []struct {
		name string
		g    store.Generation
	}{
		{"every field", full},
		{"nil slices", store.Generation{ID: "gen_nil", WorkspaceID: ws}},
		{"empty slices", store.Generation{ID: "gen_empty", WorkspaceID: ws, CostLines: []store.CostLine{}, Attempts: []store.Attempt{}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.g
			got, err := s.Settle(ctx, store.SettleParams{Generation: &in})
			if err != nil {
				t.Fatalf("Settle: %v", err)
			}
			if !reflect.DeepEqual(in, tc.g) {
				t.Errorf("Settle modified the caller's generation: %+v", in)
			}
			want := tc.g
			if !want.CreatedAt.IsZero() {
				want.CreatedAt = want.CreatedAt.UTC().Truncate(time.Millisecond)
			} else {
				want.CreatedAt = got.CreatedAt
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("Settle returned\n%+v\nwant\n%+v", got, want)
			}
			stored, err := s.GetGeneration(ctx, ws, tc.g.ID)
			if err != nil {
				t.Fatalf("GetGeneration: %v", err)
			}
			if !reflect.DeepEqual(stored, want) {
				t.Errorf("GetGeneration returned\n%+v\nwant\n%+v", stored, want)
			}
		})
	}
}

// testConcurrentReserveAndSettle runs many requests against one wallet at once. Every
// request reserves its worst case (1 USD), so none is ever capped, and the wallet must
// end exactly where the stored charges say.
func testConcurrentReserveAndSettle(t *testing.T, s store.Store) {
	ctx := context.Background()
	const initial = 10 * usd
	const workers = 50
	ws := newWorkspace(t, s, initial)
	rng := rand.New(rand.NewPCG(1, 2))
	costs := make([]int64, workers)
	for i := range costs {
		costs[i] = 300_000_000 + rng.Int64N(700_000_001) // 0.3 to 1 USD
	}

	gens := make([]*store.Generation, workers)
	var wg sync.WaitGroup
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := s.Reserve(ctx, store.ReserveParams{
				WorkspaceID: ws, AmountNanos: usd, MinAvailableNanos: usd, ExpiresAt: time.Now().Add(time.Hour),
			})
			if errors.Is(err, store.ErrInsufficientFunds) {
				return
			}
			if err != nil {
				t.Errorf("Reserve: %v", err)
				return
			}
			if b, err := s.GetBalance(ctx, ws); err != nil {
				t.Errorf("GetBalance: %v", err)
			} else if b.BalanceNanos < 0 || b.ReservedNanos < 0 || b.Available() < 0 {
				t.Errorf("wallet went negative: %+v", b)
			}
			g, err := s.Settle(ctx, store.SettleParams{ReservationID: r.ID, Generation: &store.Generation{
				WorkspaceID: ws, CostNanos: costs[i],
			}})
			if err != nil {
				t.Errorf("Settle: %v", err)
				return
			}
			gens[i] = &g
		}()
	}
	wg.Wait()

	var settled int
	var charged int64
	for i, g := range gens {
		if g == nil {
			continue
		}
		settled++
		stored, err := s.GetGeneration(ctx, ws, g.ID)
		if err != nil {
			t.Fatalf("GetGeneration: %v", err)
		}
		if stored.CostNanos != costs[i] || stored.UnbilledNanos != 0 {
			t.Errorf("generation %d: cost %d unbilled %d, want %d and 0 (it was reserved in full)", i, stored.CostNanos, stored.UnbilledNanos, costs[i])
		}
		charged += stored.CostNanos
	}
	// While fewer than 10 requests have succeeded at most 9 USD is spoken for, so at
	// least 10 always get through.
	if settled < 10 {
		t.Errorf("only %d requests settled, want at least 10", settled)
	}
	if charged > initial {
		t.Errorf("charged %d, more than the initial %d", charged, initial)
	}
	mustBalance(t, s, ws, initial-charged, 0)
}

// testConcurrentReserveNeverOverspends races more reservations than the wallet can hold:
// exactly as many as fit must win.
func testConcurrentReserveNeverOverspends(t *testing.T, s store.Store) {
	ctx := context.Background()
	ws := newWorkspace(t, s, 10*usd)
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := 0
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.Reserve(ctx, store.ReserveParams{WorkspaceID: ws, AmountNanos: usd, ExpiresAt: time.Now().Add(time.Hour)})
			if errors.Is(err, store.ErrInsufficientFunds) {
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
		t.Errorf("%d reservations of 1 USD succeeded against 10 USD, want 10", won)
	}
	mustBalance(t, s, ws, 10*usd, 10*usd)
}

// testConcurrentDebits races debits: the balance may reach zero but never pass it.
func testConcurrentDebits(t *testing.T, s store.Store) {
	ctx := context.Background()
	ws := newWorkspace(t, s, 10*usd)
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := 0
	for range 30 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.AddCredits(ctx, ws, -usd, "refund")
			if errors.Is(err, store.ErrInsufficientFunds) {
				return
			}
			if err != nil {
				t.Errorf("AddCredits: %v", err)
				return
			}
			mu.Lock()
			won++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if won != 10 {
		t.Errorf("%d debits of 1 USD succeeded against 10 USD, want 10", won)
	}
	mustBalance(t, s, ws, 0, 0)
}

// testConcurrentMixedOutcomes races writes that must succeed against writes that must fail,
// on one wallet: each call gets its own outcome and a refused one leaves no trace. A backend
// that runs concurrent writes in shared transactions must keep them this independent.
func testConcurrentMixedOutcomes(t *testing.T, s store.Store) {
	ctx := context.Background()
	const n = 20
	ws := newWorkspace(t, s, 100*usd)
	if _, err := s.Settle(ctx, store.SettleParams{Generation: &store.Generation{ID: "gen_taken", WorkspaceID: ws}}); err != nil {
		t.Fatalf("Settle: %v", err)
	}
	// Each of raced is settled twice at once: exactly one Settle may win. Each of kept is
	// settled with a taken generation id: it must stay reserved.
	raced := make([]string, n)
	kept := make([]string, n)
	for i := range n {
		raced[i] = reserve(t, s, ws, usd).ID
		kept[i] = reserve(t, s, ws, usd).ID
	}

	type call struct {
		name string
		fn   func() error
		want error // nil: must succeed
	}
	var calls []call
	winners := make([][2]error, n)
	var raceCalls []func()
	for i := range n {
		for j := range 2 {
			raceCalls = append(raceCalls, func() {
				_, winners[i][j] = s.Settle(ctx, store.SettleParams{ReservationID: raced[i], Generation: &store.Generation{
					ID: fmt.Sprintf("gen_raced_%d_%d", i, j), WorkspaceID: ws, CostNanos: usd / 2,
				}})
			})
		}
		calls = append(calls,
			call{"settle with a taken generation id", func() error {
				_, err := s.Settle(ctx, store.SettleParams{ReservationID: kept[i], Generation: &store.Generation{ID: "gen_taken", WorkspaceID: ws, CostNanos: usd}})
				return err
			}, store.ErrConflict},
			call{"settle an unknown reservation", func() error {
				_, err := s.Settle(ctx, store.SettleParams{ReservationID: "res_missing", Generation: &store.Generation{
					ID: fmt.Sprintf("gen_missing_%d", i), WorkspaceID: ws, CostNanos: usd,
				}})
				return err
			}, store.ErrNotFound},
			call{"debit beyond the balance", func() error {
				_, err := s.AddCredits(ctx, ws, -1000*usd, "refund")
				return err
			}, store.ErrInsufficientFunds},
			call{"reserve beyond the available balance", func() error {
				_, err := s.Reserve(ctx, store.ReserveParams{WorkspaceID: ws, AmountNanos: 1, MinAvailableNanos: 1000 * usd, ExpiresAt: time.Now().Add(time.Hour)})
				return err
			}, store.ErrInsufficientFunds},
			call{"reserve", func() error {
				_, err := s.Reserve(ctx, store.ReserveParams{WorkspaceID: ws, AmountNanos: usd / 10, ExpiresAt: time.Now().Add(time.Hour)})
				return err
			}, nil},
		)
	}
	all := make([]func(), 0, len(calls)+len(raceCalls))
	errs := make([]error, len(calls))
	for i, c := range calls {
		all = append(all, func() { errs[i] = c.fn() })
	}
	all = append(all, raceCalls...)
	rand.New(rand.NewPCG(3, 4)).Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })

	start := make(chan struct{})
	var wg sync.WaitGroup
	for _, fn := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			fn()
		}()
	}
	close(start)
	wg.Wait()

	for i, c := range calls {
		switch {
		case c.want == nil && errs[i] != nil:
			t.Errorf("%s: %v", c.name, errs[i])
		case c.want != nil && !errors.Is(errs[i], c.want):
			t.Errorf("%s: error = %v, want %v", c.name, errs[i], c.want)
		}
	}
	for i, w := range winners {
		won := 0
		for j, err := range w {
			id := fmt.Sprintf("gen_raced_%d_%d", i, j)
			_, getErr := s.GetGeneration(ctx, ws, id)
			switch {
			case err == nil:
				won++
				if getErr != nil {
					t.Errorf("generation %s of a Settle that succeeded: %v", id, getErr)
				}
			case errors.Is(err, store.ErrNotFound):
				wantErr(t, "generation of the Settle that lost the race", getErr, store.ErrNotFound)
			default:
				t.Errorf("racing Settle: %v", err)
			}
		}
		if won != 1 {
			t.Errorf("reservation %d settled %d times, want exactly once", i, won)
		}
	}
	for i := range n {
		_, err := s.GetGeneration(ctx, ws, fmt.Sprintf("gen_missing_%d", i))
		wantErr(t, "generation of a refused Settle", err, store.ErrNotFound)
	}
	// Charged: n × 0.5 USD. Held: the kept reservations and the small ones.
	mustBalance(t, s, ws, 100*usd-n*usd/2, n*usd+n*usd/10)
	for _, id := range kept {
		if _, err := s.Settle(ctx, store.SettleParams{ReservationID: id, Generation: &store.Generation{WorkspaceID: ws}}); err != nil {
			t.Fatalf("settling a reservation a refused Settle left: %v", err)
		}
	}
	mustBalance(t, s, ws, 100*usd-n*usd/2, n*usd/10)
}

// testCancelledContext checks that writes made with a context already cancelled fail and
// change nothing.
func testCancelledContext(t *testing.T, s store.Store) {
	ws := newWorkspace(t, s, 10*usd)
	r := reserve(t, s, ws, usd)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name string
		call func() error
	}{
		{"AddCredits", func() error { _, err := s.AddCredits(ctx, ws, usd, ""); return err }},
		{"Reserve", func() error {
			_, err := s.Reserve(ctx, store.ReserveParams{WorkspaceID: ws, AmountNanos: usd, ExpiresAt: time.Now().Add(time.Hour)})
			return err
		}},
		{"Settle", func() error {
			_, err := s.Settle(ctx, store.SettleParams{ReservationID: r.ID, Generation: &store.Generation{ID: "gen_cancelled", WorkspaceID: ws, CostNanos: usd}})
			return err
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); err == nil {
				t.Fatal("succeeded with a cancelled context")
			}
			mustBalance(t, s, ws, 10*usd, usd)
		})
	}
	_, err := s.GetGeneration(context.Background(), ws, "gen_cancelled")
	wantErr(t, "generation of a cancelled Settle", err, store.ErrNotFound)
}
