package storetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/delivery"
	"github.com/modelgateway/caddy-modelgateway/store"
)

func testEndpoint(ws, id string) store.WebhookEndpoint {
	return store.WebhookEndpoint{
		ID: id, WorkspaceID: ws, Name: "receiver " + id, URL: "https://hooks.example.com/" + id,
		Events: []string{"video.completed", "video.failed"}, Secret: []byte("sealed:" + id), CreatedBy: "key_1",
	}
}

func createEndpoint(t *testing.T, s store.WebhookEndpoints, e store.WebhookEndpoint) store.WebhookEndpoint {
	t.Helper()
	got, err := s.CreateWebhookEndpoint(context.Background(), e)
	if err != nil {
		t.Fatalf("CreateWebhookEndpoint(%s): %v", e.ID, err)
	}
	return got
}

func getEndpoint(t *testing.T, s store.WebhookEndpoints, ws, id string) store.WebhookEndpoint {
	t.Helper()
	got, err := s.GetWebhookEndpoint(context.Background(), ws, id)
	if err != nil {
		t.Fatalf("GetWebhookEndpoint(%s): %v", id, err)
	}
	return got
}

func sameEndpoint(t *testing.T, what string, got, want store.WebhookEndpoint) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\n got %+v\nwant %+v", what, got, want)
	}
}

// testWebhookEndpoints: create, get, update and delete, each fenced by the workspace.
func testWebhookEndpoints(t *testing.T, s store.Store, c *Clock) {
	ctx := context.Background()
	ws, other := newWorkspace(t, s, 0), newWorkspace(t, s, 0)
	created := c.Now()

	e := testEndpoint(ws, "we_1")
	e.Events = nil
	got := createEndpoint(t, s, e)
	want := e
	want.Status, want.Events, want.CreatedAt, want.UpdatedAt = store.WebhookActive, []string{}, created, created
	sameEndpoint(t, "created", got, want)
	sameEndpoint(t, "read back", getEndpoint(t, s, ws, "we_1"), want)
	if !got.HasSecret() {
		t.Fatal("a created endpoint has no secret")
	}

	_, err := s.CreateWebhookEndpoint(ctx, testEndpoint(other, "we_1"))
	wantErr(t, "CreateWebhookEndpoint of a used id", err, store.ErrConflict)
	_, err = s.CreateWebhookEndpoint(ctx, testEndpoint("ws_missing", "we_2"))
	wantErr(t, "CreateWebhookEndpoint in a missing workspace", err, store.ErrNotFound)
	for name, bad := range map[string]func(e *store.WebhookEndpoint){
		"no id":        func(e *store.WebhookEndpoint) { e.ID = "" },
		"no workspace": func(e *store.WebhookEndpoint) { e.WorkspaceID = "" },
		"no secret":    func(e *store.WebhookEndpoint) { e.Secret = nil },
		"no url":       func(e *store.WebhookEndpoint) { e.URL = "" },
		"no name":      func(e *store.WebhookEndpoint) { e.Name = "" },
		"bad status":   func(e *store.WebhookEndpoint) { e.Status = "deleted" },
		"empty event":  func(e *store.WebhookEndpoint) { e.Events = []string{""} },
	} {
		e := testEndpoint(ws, "we_bad")
		bad(&e)
		_, err := s.CreateWebhookEndpoint(ctx, e)
		wantErrAny(t, "CreateWebhookEndpoint with "+name, err)
	}
	_, err = s.GetWebhookEndpoint(ctx, ws, "we_bad")
	wantErr(t, "GetWebhookEndpoint of a refused endpoint", err, store.ErrNotFound)

	// Another workspace sees nothing of it, and changes nothing.
	_, err = s.GetWebhookEndpoint(ctx, other, "we_1")
	wantErr(t, "GetWebhookEndpoint from another workspace", err, store.ErrNotFound)
	name := "stolen"
	_, err = s.UpdateWebhookEndpoint(ctx, other, "we_1", store.WebhookEndpointUpdate{Name: &name})
	wantErr(t, "UpdateWebhookEndpoint from another workspace", err, store.ErrNotFound)
	_, err = s.RotateWebhookSecret(ctx, other, "we_1", []byte("other"), created.Add(time.Hour))
	wantErr(t, "RotateWebhookSecret from another workspace", err, store.ErrNotFound)
	_, err = s.DeleteWebhookEndpoint(ctx, other, "we_1")
	wantErr(t, "DeleteWebhookEndpoint from another workspace", err, store.ErrNotFound)
	sameEndpoint(t, "after another workspace's tries", getEndpoint(t, s, ws, "we_1"), want)

	// Update replaces what it sets, and only that.
	c.Set(created.Add(time.Minute))
	name, url, disabled := "renamed", "https://other.example.com/hook", store.WebhookDisabled
	got, err = s.UpdateWebhookEndpoint(ctx, ws, "we_1", store.WebhookEndpointUpdate{Name: &name, Events: []string{"music.completed"}})
	if err != nil {
		t.Fatalf("UpdateWebhookEndpoint: %v", err)
	}
	want.Name, want.Events, want.UpdatedAt = name, []string{"music.completed"}, c.Now()
	sameEndpoint(t, "updated", got, want)
	got, err = s.UpdateWebhookEndpoint(ctx, ws, "we_1", store.WebhookEndpointUpdate{URL: &url, Status: &disabled})
	if err != nil {
		t.Fatalf("UpdateWebhookEndpoint: %v", err)
	}
	want.URL, want.Status = url, disabled
	sameEndpoint(t, "disabled", got, want)
	sameEndpoint(t, "disabled, read back", getEndpoint(t, s, ws, "we_1"), want)
	got, err = s.UpdateWebhookEndpoint(ctx, ws, "we_1", store.WebhookEndpointUpdate{Events: []string{}})
	if err != nil || len(got.Events) != 0 || got.Events == nil {
		t.Fatalf("UpdateWebhookEndpoint to no events: %v, events %#v", err, got.Events)
	}
	bad := "paused"
	_, err = s.UpdateWebhookEndpoint(ctx, ws, "we_1", store.WebhookEndpointUpdate{Status: &bad})
	wantErrAny(t, "UpdateWebhookEndpoint to an unknown status", err)
	_, err = s.UpdateWebhookEndpoint(ctx, ws, "we_missing", store.WebhookEndpointUpdate{Name: &name})
	wantErr(t, "UpdateWebhookEndpoint of a missing endpoint", err, store.ErrNotFound)

	// Delete marks it deleted, once; from then on it is missing to every other method and
	// to the list.
	createEndpoint(t, s, testEndpoint(ws, "we_2"))
	c.Set(created.Add(2 * time.Minute))
	before := getEndpoint(t, s, ws, "we_1")
	got, err = s.DeleteWebhookEndpoint(ctx, ws, "we_1")
	if err != nil {
		t.Fatalf("DeleteWebhookEndpoint: %v", err)
	}
	wantDeleted := before
	wantDeleted.Status, wantDeleted.DeletedAt, wantDeleted.UpdatedAt = store.WebhookDeleted, c.Now(), c.Now()
	sameEndpoint(t, "deleted", got, wantDeleted)
	_, err = s.GetWebhookEndpoint(ctx, ws, "we_1")
	wantErr(t, "GetWebhookEndpoint of a deleted endpoint", err, store.ErrNotFound)
	_, err = s.DeleteWebhookEndpoint(ctx, ws, "we_1")
	wantErr(t, "DeleteWebhookEndpoint again", err, store.ErrNotFound)
	_, err = s.UpdateWebhookEndpoint(ctx, ws, "we_1", store.WebhookEndpointUpdate{Name: &name})
	wantErr(t, "UpdateWebhookEndpoint of a deleted endpoint", err, store.ErrNotFound)
	_, err = s.RotateWebhookSecret(ctx, ws, "we_1", []byte("new"), c.Now().Add(time.Hour))
	wantErr(t, "RotateWebhookSecret of a deleted endpoint", err, store.ErrNotFound)
	_, err = s.RecordWebhookOutcome(ctx, ws, "we_1", store.WebhookOutcome{Delivered: true})
	wantErr(t, "RecordWebhookOutcome of a deleted endpoint", err, store.ErrNotFound)
	list, err := s.ListWebhookEndpoints(ctx, ws, store.Page{Limit: 10})
	if err != nil || len(list) != 1 || list[0].ID != "we_2" {
		t.Fatalf("ListWebhookEndpoints after a delete: %v, %d endpoints (want only we_2)", err, len(list))
	}
	getEndpoint(t, s, ws, "we_2")
	_, err = s.CreateWebhookEndpoint(ctx, testEndpoint(ws, "we_1"))
	wantErr(t, "CreateWebhookEndpoint of a deleted endpoint's id", err, store.ErrConflict)
}

// testWorkspaceAsyncAccess: a workspace starts without async access, and the setting
// turns it on and off, for that workspace alone.
func testWorkspaceAsyncAccess(t *testing.T, s store.Store) {
	ctx := context.Background()
	ws, other := newWorkspace(t, s, 0), newWorkspace(t, s, 0)
	read := func(id string) store.Workspace {
		t.Helper()
		got, err := s.GetWorkspace(ctx, id)
		if err != nil {
			t.Fatalf("GetWorkspace: %v", err)
		}
		return got
	}
	if read(ws).AsyncAccess {
		t.Fatal("a new workspace has async access")
	}
	for _, enabled := range []bool{true, true, false, true} {
		got, err := s.SetWorkspaceAsyncAccess(ctx, ws, enabled)
		if err != nil {
			t.Fatalf("SetWorkspaceAsyncAccess(%v): %v", enabled, err)
		}
		if got.ID != ws || got.AsyncAccess != enabled || read(ws).AsyncAccess != enabled {
			t.Fatalf("SetWorkspaceAsyncAccess(%v) returned %+v, reads back %v", enabled, got, read(ws).AsyncAccess)
		}
		if read(other).AsyncAccess {
			t.Fatal("turning on one workspace's async access turned on another's")
		}
	}
	_, err := s.SetWorkspaceAsyncAccess(ctx, "ws_missing", true)
	wantErr(t, "SetWorkspaceAsyncAccess of a missing workspace", err, store.ErrNotFound)
}

// testWebhookRotation: a rotation keeps the previous secret beside the new one until its
// expiry, and no longer.
func testWebhookRotation(t *testing.T, s store.Store, c *Clock) {
	ctx := context.Background()
	ws := newWorkspace(t, s, 0)
	e := createEndpoint(t, s, testEndpoint(ws, "we_1"))
	first := e.Secret

	c.Set(c.Now().Add(time.Minute))
	rotated := c.Now()
	until := rotated.Add(24 * time.Hour)
	got, err := s.RotateWebhookSecret(ctx, ws, "we_1", []byte("second"), until)
	if err != nil {
		t.Fatalf("RotateWebhookSecret: %v", err)
	}
	want := e
	want.Secret, want.PreviousSecret, want.PreviousUntil, want.UpdatedAt = []byte("second"), first, until, rotated
	sameEndpoint(t, "rotated", got, want)
	sameEndpoint(t, "rotated, read back", getEndpoint(t, s, ws, "we_1"), want)

	c.Set(until.Add(-time.Millisecond))
	sameEndpoint(t, "just before the previous secret's end", getEndpoint(t, s, ws, "we_1"), want)

	c.Set(until)
	want.PreviousSecret, want.PreviousUntil = nil, time.Time{}
	sameEndpoint(t, "at the previous secret's end", getEndpoint(t, s, ws, "we_1"), want)
	list, err := s.ListWebhookEndpoints(ctx, ws, store.Page{})
	if err != nil || len(list) != 1 {
		t.Fatalf("ListWebhookEndpoints: %d endpoints, %v", len(list), err)
	}
	sameEndpoint(t, "listed at the previous secret's end", list[0], want)

	// A second rotation keeps only the secret it replaced.
	got, err = s.RotateWebhookSecret(ctx, ws, "we_1", []byte("third"), c.Now().Add(time.Hour))
	if err != nil {
		t.Fatalf("RotateWebhookSecret again: %v", err)
	}
	if string(got.Secret) != "third" || string(got.PreviousSecret) != "second" {
		t.Fatalf("after two rotations: secret %q previous %q, want third and second", got.Secret, got.PreviousSecret)
	}
	_, err = s.RotateWebhookSecret(ctx, ws, "we_1", nil, c.Now().Add(time.Hour))
	wantErrAny(t, "RotateWebhookSecret to no secret", err)
	_, err = s.RotateWebhookSecret(ctx, ws, "we_missing", []byte("x"), c.Now().Add(time.Hour))
	wantErr(t, "RotateWebhookSecret of a missing endpoint", err, store.ErrNotFound)
}

// testWebhookPages: endpoints list oldest first, a page at a time, each workspace its own.
func testWebhookPages(t *testing.T, s store.Store) {
	ctx := context.Background()
	ws, other := newWorkspace(t, s, 0), newWorkspace(t, s, 0)
	created := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	var want []string
	for i := range 23 {
		e := testEndpoint(ws, fmt.Sprintf("we_%02d", 22-i))
		e.CreatedAt = created.Add(time.Duration(i/2) * time.Second)
		createEndpoint(t, s, e)
		want = append(want, e.ID)
	}
	for i := 0; i < len(want); i += 2 { // two a second: ids break the ties
		slices.Sort(want[i:min(i+2, len(want))])
	}
	createEndpoint(t, s, testEndpoint(other, "we_other"))
	for _, limit := range []int{1, 5, 23, 100} {
		got := walk(t, limit, func(e store.WebhookEndpoint) string { return e.ID }, func(p store.Page) ([]store.WebhookEndpoint, error) {
			return s.ListWebhookEndpoints(ctx, ws, p)
		})
		if !slices.Equal(got, want) {
			t.Fatalf("pages of %d: %v, want %v", limit, got, want)
		}
	}
	_, err := s.ListWebhookEndpoints(ctx, ws, store.Page{After: "we_other"})
	wantErr(t, "ListWebhookEndpoints after another workspace's endpoint", err, store.ErrCursorNotFound)
	list, err := s.ListWebhookEndpoints(ctx, other, store.Page{})
	if err != nil || len(list) != 1 || list[0].ID != "we_other" {
		t.Fatalf("the other workspace's list: %v, %v", list, err)
	}
}

// SecretsSealedAtRest checks that a webhook secret sealed by the caller (delivery.Sealer)
// is nowhere in s's storage in the clear: contains reports whether the backend's storage
// (the database file, the table) holds a byte string. A marker kept in the clear (the
// endpoint's name) must be found, which shows that contains sees the storage.
func SecretsSealedAtRest(t *testing.T, s store.Store, contains func(t *testing.T, marker []byte) bool) {
	ctx := context.Background()
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	sealer, err := delivery.NewSealer(base64.StdEncoding.EncodeToString(key))
	if err != nil {
		t.Fatal(err)
	}
	ws := newWorkspace(t, s, 0)
	visible := []byte("visible-name-" + ws)
	secret := []byte("whsec_SECRET-MARKER-" + ws)
	rotatedSecret := []byte("whsec_ROTATED-MARKER-" + ws)
	seal := func(plain []byte) []byte {
		sealed, err := sealer.Seal(plain, []byte("we_sealed"))
		if err != nil {
			t.Fatal(err)
		}
		return sealed
	}
	e := testEndpoint(ws, "we_sealed")
	e.Name, e.Secret = string(visible), seal(secret)
	createEndpoint(t, s, e)
	if _, err := s.RotateWebhookSecret(ctx, ws, "we_sealed", seal(rotatedSecret), time.Now().Add(time.Hour)); err != nil {
		t.Fatalf("RotateWebhookSecret: %v", err)
	}
	if !contains(t, visible) {
		t.Fatal("the storage scan does not find the endpoint's name: it sees nothing")
	}
	for _, marker := range [][]byte{secret, rotatedSecret, []byte("SECRET-MARKER"), []byte("ROTATED-MARKER")} {
		if contains(t, marker) {
			t.Fatalf("the storage holds %q in the clear", marker)
		}
	}
	got := getEndpoint(t, s, ws, "we_sealed")
	for plain, sealed := range map[string][]byte{string(secret): got.PreviousSecret, string(rotatedSecret): got.Secret} {
		opened, err := sealer.Open(sealed, []byte("we_sealed"))
		if err != nil || !bytes.Equal(opened, []byte(plain)) {
			t.Fatalf("a secret read back does not open to what was sealed: %v", err)
		}
	}
}

// testWebhookOutcomes: failures count up until a delivery succeeds, and the one that
// reaches the threshold disables the endpoint, visibly and once.
func testWebhookOutcomes(t *testing.T, s store.Store, c *Clock) {
	ctx := context.Background()
	ws, other := newWorkspace(t, s, 0), newWorkspace(t, s, 0)
	want := createEndpoint(t, s, testEndpoint(ws, "we_1"))
	record := func(o store.WebhookOutcome) store.WebhookEndpoint {
		t.Helper()
		got, err := s.RecordWebhookOutcome(ctx, ws, "we_1", o)
		if err != nil {
			t.Fatalf("RecordWebhookOutcome(%+v): %v", o, err)
		}
		return got
	}
	failure := store.WebhookOutcome{DisableAfter: 3, Reason: "3 deliveries failed in a row"}
	c.Set(c.Now().Add(time.Minute))
	record(failure)
	want.ConsecutiveFailures = 2
	sameEndpoint(t, "after two failures", record(failure), want)
	want.ConsecutiveFailures = 0
	sameEndpoint(t, "after a delivery", record(store.WebhookOutcome{Delivered: true, DisableAfter: 3}), want)

	record(failure)
	record(failure)
	c.Set(c.Now().Add(time.Minute))
	want.ConsecutiveFailures, want.Status, want.DisabledReason, want.UpdatedAt = 3, store.WebhookDisabled, failure.Reason, c.Now()
	sameEndpoint(t, "at the threshold", record(failure), want)
	sameEndpoint(t, "at the threshold, read back", getEndpoint(t, s, ws, "we_1"), want)
	c.Set(c.Now().Add(time.Minute))
	want.ConsecutiveFailures = 4
	sameEndpoint(t, "disabled, failing again", record(store.WebhookOutcome{DisableAfter: 3, Reason: "other"}), want)

	// Made active again, it starts counting afresh.
	active := store.WebhookActive
	got, err := s.UpdateWebhookEndpoint(ctx, ws, "we_1", store.WebhookEndpointUpdate{Status: &active})
	if err != nil {
		t.Fatalf("UpdateWebhookEndpoint: %v", err)
	}
	want.ConsecutiveFailures, want.Status, want.DisabledReason, want.UpdatedAt = 0, store.WebhookActive, "", c.Now()
	sameEndpoint(t, "made active again", got, want)
	want.ConsecutiveFailures = 1
	sameEndpoint(t, "a failure that never disables", record(store.WebhookOutcome{}), want)

	_, err = s.RecordWebhookOutcome(ctx, other, "we_1", failure)
	wantErr(t, "RecordWebhookOutcome from another workspace", err, store.ErrNotFound)
	_, err = s.RecordWebhookOutcome(ctx, ws, "we_1", store.WebhookOutcome{DisableAfter: 1})
	wantErrAny(t, "RecordWebhookOutcome that may disable with no reason", err)
	sameEndpoint(t, "after refused outcomes", getEndpoint(t, s, ws, "we_1"), want)
}
