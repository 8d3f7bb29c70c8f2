package storetest

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/store"
)

func testDestination(ws, id string) store.NotificationDestination {
	return store.NotificationDestination{
		ID: id, WorkspaceID: ws, Kind: "slack", Name: "alerts " + id, Target: []byte("sealed:" + id),
		Preview: "hooks.slack.com/…/" + id, CreatedBy: "key_1",
	}
}

func createDestination(t *testing.T, s store.Notifications, d store.NotificationDestination) store.NotificationDestination {
	t.Helper()
	got, err := s.CreateNotificationDestination(context.Background(), d)
	if err != nil {
		t.Fatalf("CreateNotificationDestination(%s): %v", d.ID, err)
	}
	return got
}

func sameDestination(t *testing.T, what string, got, want store.NotificationDestination) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\n got %+v\nwant %+v", what, got, want)
	}
}

// testNotificationDestinations: create, get, list, update, outcomes and delete, each
// fenced by the workspace; a deleted destination is missing everywhere.
func testNotificationDestinations(t *testing.T, s store.Store, c *Clock) {
	ctx := context.Background()
	ws, other := newWorkspace(t, s, 0), newWorkspace(t, s, 0)
	created := c.Now()

	d := createDestination(t, s, testDestination(ws, "ntd_1"))
	want := testDestination(ws, "ntd_1")
	want.Status, want.CreatedAt, want.UpdatedAt = store.DestinationActive, created, created
	sameDestination(t, "created", d, want)
	got, err := s.GetNotificationDestination(ctx, ws, "ntd_1")
	if err != nil {
		t.Fatal(err)
	}
	sameDestination(t, "read back", got, want)

	_, err = s.CreateNotificationDestination(ctx, testDestination(ws, "ntd_1"))
	wantErr(t, "an id used twice", err, store.ErrConflict)
	_, err = s.CreateNotificationDestination(ctx, testDestination("ws_missing", "ntd_x"))
	wantErr(t, "an unknown workspace", err, store.ErrNotFound)
	bad := testDestination(ws, "ntd_bad")
	bad.Target = nil
	if _, err := s.CreateNotificationDestination(ctx, bad); err == nil {
		t.Fatal("a destination without a target was stored")
	}
	_, err = s.GetNotificationDestination(ctx, other, "ntd_1")
	wantErr(t, "another workspace's destination", err, store.ErrNotFound)

	c.Set(created.Add(time.Second))
	createDestination(t, s, testDestination(ws, "ntd_2"))
	createDestination(t, s, testDestination(other, "ntd_3"))
	list, err := s.ListNotificationDestinations(ctx, ws, store.Page{Limit: 10})
	if err != nil || len(list) != 2 || list[0].ID != "ntd_1" || list[1].ID != "ntd_2" {
		t.Fatalf("list = %+v, %v; want ntd_1 and ntd_2", list, err)
	}

	c.Set(created.Add(2 * time.Second))
	name, preview, disabled := "renamed", "new preview", store.DestinationDisabled
	u, err := s.UpdateNotificationDestination(ctx, ws, "ntd_1", store.NotificationDestinationUpdate{
		Name: &name, Target: []byte("sealed:new"), Preview: &preview, Status: &disabled})
	if err != nil {
		t.Fatal(err)
	}
	want.Name, want.Target, want.Preview, want.Status, want.UpdatedAt = name, []byte("sealed:new"), preview, disabled, c.Now()
	sameDestination(t, "updated", u, want)
	_, err = s.UpdateNotificationDestination(ctx, other, "ntd_1", store.NotificationDestinationUpdate{Name: &name})
	wantErr(t, "updating another workspace's destination", err, store.ErrNotFound)
	if _, err := s.UpdateNotificationDestination(ctx, ws, "ntd_1", store.NotificationDestinationUpdate{Target: []byte("x")}); err == nil {
		t.Fatal("a target changed without its preview")
	}

	c.Set(created.Add(3 * time.Second))
	if err := s.RecordNotificationOutcome(ctx, ws, "ntd_1", store.NotificationOutcome{Delivered: true, Status: 200}); err != nil {
		t.Fatal(err)
	}
	delivered := c.Now()
	c.Set(created.Add(4 * time.Second))
	if err := s.RecordNotificationOutcome(ctx, ws, "ntd_1", store.NotificationOutcome{Status: 550}); err != nil {
		t.Fatal(err)
	}
	want.LastDeliveredAt, want.LastFailureAt, want.LastStatus = delivered, c.Now(), 550
	got, _ = s.GetNotificationDestination(ctx, ws, "ntd_1")
	sameDestination(t, "after two outcomes", got, want)
	err = s.RecordNotificationOutcome(ctx, other, "ntd_1", store.NotificationOutcome{Delivered: true, Status: 200})
	wantErr(t, "an outcome on another workspace's destination", err, store.ErrNotFound)

	if err := s.SetNotificationRoute(ctx, ws, "balance.low", []string{"ntd_1", "ntd_2"}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetNotificationRoute(ctx, ws, "video.failed", []string{"ntd_1"}); err != nil {
		t.Fatal(err)
	}
	c.Set(created.Add(5 * time.Second))
	del, err := s.DeleteNotificationDestination(ctx, ws, "ntd_1")
	if err != nil || !del.DeletedAt.Equal(c.Now()) {
		t.Fatalf("deleted = %+v, %v", del, err)
	}
	_, err = s.DeleteNotificationDestination(ctx, ws, "ntd_1")
	wantErr(t, "a second delete", err, store.ErrNotFound)
	_, err = s.GetNotificationDestination(ctx, ws, "ntd_1")
	wantErr(t, "reading a deleted destination", err, store.ErrNotFound)
	_, err = s.UpdateNotificationDestination(ctx, ws, "ntd_1", store.NotificationDestinationUpdate{Name: &name})
	wantErr(t, "updating a deleted destination", err, store.ErrNotFound)
	err = s.RecordNotificationOutcome(ctx, ws, "ntd_1", store.NotificationOutcome{Delivered: true, Status: 200})
	wantErr(t, "an outcome on a deleted destination", err, store.ErrNotFound)
	list, _ = s.ListNotificationDestinations(ctx, ws, store.Page{Limit: 10})
	if len(list) != 1 || list[0].ID != "ntd_2" {
		t.Fatalf("list after delete = %+v", list)
	}
	routes, err := s.NotificationRoutes(ctx, ws)
	if err != nil || !reflect.DeepEqual(routes, map[string][]string{"balance.low": {"ntd_2"}}) {
		t.Fatalf("routes after delete = %v, %v; want the deleted destination gone from each", routes, err)
	}
	_, err = s.DeleteNotificationDestination(ctx, other, "ntd_2")
	wantErr(t, "deleting another workspace's destination", err, store.ErrNotFound)
}

// testNotificationRoutes: a route replaces the event's destinations, in order and without
// duplicates; one naming a destination that is not live in the workspace changes nothing.
func testNotificationRoutes(t *testing.T, s store.Store) {
	ctx := context.Background()
	ws, other := newWorkspace(t, s, 0), newWorkspace(t, s, 0)
	for _, id := range []string{"ntd_a", "ntd_b", "ntd_c"} {
		createDestination(t, s, testDestination(ws, id))
	}
	createDestination(t, s, testDestination(other, "ntd_o"))
	routes, err := s.NotificationRoutes(ctx, ws)
	if err != nil || len(routes) != 0 {
		t.Fatalf("routes of a new workspace = %v, %v", routes, err)
	}
	if err := s.SetNotificationRoute(ctx, ws, "balance.low", []string{"ntd_b", "ntd_a", "ntd_b"}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetNotificationRoute(ctx, ws, "batch.failed", []string{"ntd_c"}); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{"balance.low": {"ntd_b", "ntd_a"}, "batch.failed": {"ntd_c"}}
	if routes, err := s.NotificationRoutes(ctx, ws); err != nil || !reflect.DeepEqual(routes, want) {
		t.Fatalf("routes = %v, %v; want %v", routes, err, want)
	}
	for _, ids := range [][]string{{"ntd_a", "ntd_o"}, {"ntd_missing"}} {
		err := s.SetNotificationRoute(ctx, ws, "balance.low", ids)
		var missing *store.MissingDestinationError
		if !errors.Is(err, store.ErrNotFound) || !errors.As(err, &missing) || missing.ID != ids[len(ids)-1] {
			t.Fatalf("route to %v = %v; want a MissingDestinationError naming %s", ids, err, ids[len(ids)-1])
		}
	}
	if routes, _ := s.NotificationRoutes(ctx, ws); !reflect.DeepEqual(routes, want) {
		t.Fatalf("a refused route changed the routes: %v", routes)
	}
	if routes, _ := s.NotificationRoutes(ctx, other); len(routes) != 0 {
		t.Fatalf("another workspace sees routes %v", routes)
	}
	if err := s.SetNotificationRoute(ctx, ws, "batch.failed", nil); err != nil {
		t.Fatal(err)
	}
	delete(want, "batch.failed")
	if routes, _ := s.NotificationRoutes(ctx, ws); !reflect.DeepEqual(routes, want) {
		t.Fatalf("routes after emptying one = %v; want %v", routes, want)
	}
}

// testLowBalance: the alert fires once when the balance crosses below the threshold, not
// again within the cooldown, again after it, and at once after a recovery above the
// threshold and a new crossing; a new threshold is judged afresh.
func testLowBalance(t *testing.T, s store.Store, c *Clock) {
	ctx := context.Background()
	const cooldown = 6 * time.Hour
	ws, quiet := newWorkspace(t, s, 10*usd), newWorkspace(t, s, 1*usd)
	start := c.Now()
	fire := func(what string, want ...string) {
		t.Helper()
		got, err := s.FireLowBalance(ctx, cooldown)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		var ids []string
		for _, lb := range got {
			ids = append(ids, lb.WorkspaceID)
			if !lb.FiredAt.Equal(c.Now()) {
				t.Fatalf("%s: fired at %v, want %v", what, lb.FiredAt, c.Now())
			}
		}
		if !reflect.DeepEqual(ids, want) {
			t.Fatalf("%s: fired %v, want %v", what, ids, want)
		}
	}
	st, err := s.NotificationSettings(ctx, ws)
	if err != nil || st.LowBalanceThresholdNanos != nil || st.WorkspaceID != ws {
		t.Fatalf("settings never set = %+v, %v", st, err)
	}
	fire("no threshold anywhere")
	threshold := 5 * usd
	st, err = s.SetLowBalanceThreshold(ctx, ws, &threshold)
	if err != nil || st.LowBalanceThresholdNanos == nil || *st.LowBalanceThresholdNanos != threshold || !st.LowBalanceArmed || !st.UpdatedAt.Equal(start) {
		t.Fatalf("settings after setting the threshold = %+v, %v", st, err)
	}
	if _, err := s.SetLowBalanceThreshold(ctx, "ws_missing", &threshold); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("threshold of an unknown workspace: %v", err)
	}
	zero := int64(0)
	if _, err := s.SetLowBalanceThreshold(ctx, ws, &zero); err == nil {
		t.Fatal("a zero threshold was accepted")
	}
	half := usd / 2
	if _, err := s.SetLowBalanceThreshold(ctx, quiet, &half); err != nil {
		t.Fatal(err)
	}
	fire("balance above the threshold")

	if _, err := s.AddCredits(ctx, ws, -6*usd, "spent"); err != nil {
		t.Fatal(err)
	}
	c.Set(start.Add(time.Minute))
	got, err := s.FireLowBalance(ctx, cooldown)
	if err != nil || len(got) != 1 || got[0].WorkspaceID != ws || got[0].BalanceNanos != 4*usd || got[0].ThresholdNanos != threshold {
		t.Fatalf("first crossing = %+v, %v", got, err)
	}
	fired := c.Now()
	fire("again at once")
	c.Set(fired.Add(cooldown - time.Second))
	fire("within the cooldown")
	c.Set(fired.Add(cooldown))
	fire("after the cooldown, still below", ws)

	c.Set(fired.Add(cooldown + time.Minute))
	if _, err := s.AddCredits(ctx, ws, 2*usd, "top-up"); err != nil {
		t.Fatal(err)
	}
	fire("back above the threshold")
	if st, _ := s.NotificationSettings(ctx, ws); !st.LowBalanceArmed {
		t.Fatalf("the alert is not armed again after a recovery: %+v", st)
	}
	c.Set(fired.Add(cooldown + 2*time.Minute))
	if _, err := s.AddCredits(ctx, ws, -2*usd, "spent"); err != nil {
		t.Fatal(err)
	}
	fire("a new crossing within the cooldown of the last", ws)
	fire("and not twice")

	// A new threshold arms the alert again: judged afresh, it fires at once.
	lower := 4*usd + 1
	if _, err := s.SetLowBalanceThreshold(ctx, ws, &lower); err != nil {
		t.Fatal(err)
	}
	fire("a new threshold, still crossed", ws)
	if st, err := s.SetLowBalanceThreshold(ctx, ws, nil); err != nil || st.LowBalanceThresholdNanos != nil {
		t.Fatalf("turning the alert off = %+v, %v", st, err)
	}
	c.Set(c.Now().Add(2 * cooldown))
	fire("no threshold")
}
