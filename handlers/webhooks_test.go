package handlers

import (
	"context"
	"encoding/base64"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/delivery"
)

// webhookKeys is the exact key set of the specification's webhook endpoint object.
var webhookKeys = []string{"createdAt", "createdBy", "deletedAt", "events", "hasSecret", "id", "name", "status", "updatedAt", "url", "workspaceId"}

func wantKeys(t *testing.T, what string, v map[string]any, extra ...string) {
	t.Helper()
	var got []string
	for k := range v {
		got = append(got, k)
	}
	want := append(slices.Clone(webhookKeys), extra...)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("%s: keys %v, want %v", what, got, want)
	}
}

func newWebhookGateway(t *testing.T, now *time.Time) *adminGateway {
	t.Helper()
	sealer, err := delivery.NewSealer(base64.StdEncoding.EncodeToString(make([]byte, 32)))
	if err != nil {
		t.Fatal(err)
	}
	return newAdminGateway(t, nil, func(g *Gateway) {
		g.WebhookSealer = sealer
		if now != nil {
			g.Now = func() time.Time { return *now }
		}
	})
}

func TestWebhookEndpointLifecycle(t *testing.T) {
	// Near the store's own clock, which decides whether a previous secret has expired.
	now := time.Now().UTC().Truncate(time.Second)
	createdAt := rfc3339(now)
	a := newWebhookGateway(t, &now)
	ws, std, mgmt := a.workspace(0)
	_, _, otherMgmt := a.workspace(0)
	ctx := context.Background()

	created := a.mustDo(201, http.MethodPost, "/webhook-endpoints", mgmt,
		`{"name": "prod", "url": "https://hooks.example.com/gw", "events": ["video.completed", "music.failed", "video.completed"]}`)
	wantKeys(t, "created", created, "signing_secret")
	id, secret := created["id"].(string), created["signing_secret"].(string)
	if !strings.HasPrefix(secret, delivery.SecretPrefix) || created["workspaceId"] != ws || created["status"] != "active" ||
		created["hasSecret"] != true || created["createdBy"] != kidOf(t, mgmt) || created["deletedAt"] != nil ||
		created["createdAt"] != createdAt || len(created["events"].([]any)) != 2 {
		t.Fatalf("created: %v", created)
	}
	stored, err := a.s.GetWebhookEndpoint(ctx, ws, id)
	if err != nil {
		t.Fatal(err)
	}
	if opened, err := a.g.WebhookSealer.Open(stored.Secret, []byte(id)); err != nil || string(opened) != secret {
		t.Fatalf("stored secret opens to %q, %v; want the answered one", opened, err)
	}
	if strings.Contains(string(stored.Secret), secret) {
		t.Fatal("the secret is stored in the clear")
	}

	got := a.mustDo(200, http.MethodGet, "/webhook-endpoints/"+id, mgmt, "")
	wantKeys(t, "read", got)
	list := a.mustDo(200, http.MethodGet, "/webhook-endpoints", mgmt, "")
	if ids := listIDs(list); len(ids) != 1 || ids[0] != id {
		t.Fatalf("list: %v", list)
	}
	wantKeys(t, "listed", list["data"].([]any)[0].(map[string]any))

	// Another workspace's key, a standard key, an id that is no UUID.
	status, v := a.do(http.MethodGet, "/webhook-endpoints/"+id, otherMgmt, "")
	wantError(t, "another workspace's get", status, v, 404, CodeNotFound, "id")
	status, v = a.do(http.MethodPost, "/webhook-endpoints/"+id+"/rotate-secret", otherMgmt, "")
	wantError(t, "another workspace's rotation", status, v, 404, CodeNotFound, "id")
	status, v = a.do(http.MethodPatch, "/webhook-endpoints/"+id, otherMgmt, `{"name": "x"}`)
	wantError(t, "another workspace's update", status, v, 404, CodeNotFound, "id")
	status, v = a.do(http.MethodDelete, "/webhook-endpoints/"+id, otherMgmt, "")
	wantError(t, "another workspace's delete", status, v, 404, CodeNotFound, "id")
	if ids := listIDs(a.mustDo(200, http.MethodGet, "/webhook-endpoints", otherMgmt, "")); len(ids) != 0 {
		t.Fatalf("another workspace lists %v", ids)
	}
	status, v = a.do(http.MethodGet, "/webhook-endpoints", std, "")
	wantError(t, "standard key", status, v, 403, CodeForbidden, "")
	status, v = a.do(http.MethodGet, "/webhook-endpoints/we_1", mgmt, "")
	wantError(t, "an id that is no UUID", status, v, 404, CodeNotFound, "id")

	// Update. (The store stamps updatedAt and deletedAt by its own clock.)
	updated := a.mustDo(200, http.MethodPatch, "/webhook-endpoints/"+id, mgmt, `{"name": "staging", "events": ["*"], "status": "disabled"}`)
	wantKeys(t, "updated", updated)
	if updated["name"] != "staging" || updated["status"] != "disabled" || updated["url"] != "https://hooks.example.com/gw" ||
		updated["updatedAt"] == nil || updated["createdAt"] != createdAt {
		t.Fatalf("updated: %v", updated)
	}

	// Rotation needs the workspace's async access.
	status, v = a.do(http.MethodPost, "/webhook-endpoints/"+id+"/rotate-secret", mgmt, "")
	wantError(t, "rotation without async access", status, v, 403, CodeAsyncAccessRequired, "")
	if _, err := a.s.SetWorkspaceAsyncAccess(ctx, ws, true); err != nil {
		t.Fatal(err)
	}
	rotated := a.mustDo(200, http.MethodPost, "/webhook-endpoints/"+id+"/rotate-secret", mgmt, "")
	wantKeys(t, "rotated", rotated, "signing_secret")
	newSecret := rotated["signing_secret"].(string)
	if newSecret == secret || !strings.HasPrefix(newSecret, delivery.SecretPrefix) || rotated["status"] != "disabled" {
		t.Fatalf("rotated: %v", rotated)
	}
	stored, err = a.s.GetWebhookEndpoint(ctx, ws, id)
	if err != nil {
		t.Fatal(err)
	}
	prev, err := a.g.WebhookSealer.Open(stored.PreviousSecret, []byte(id))
	cur, err2 := a.g.WebhookSealer.Open(stored.Secret, []byte(id))
	if err != nil || err2 != nil || string(prev) != secret || string(cur) != newSecret || !stored.PreviousUntil.Equal(now.Add(delivery.RotationGrace)) {
		t.Fatalf("after rotation: previous %q (%v), current %q (%v), until %v", prev, err, cur, err2, stored.PreviousUntil)
	}

	// Delete is soft, and final.
	deleted := a.mustDo(200, http.MethodDelete, "/webhook-endpoints/"+id, mgmt, "")
	wantKeys(t, "deleted", deleted)
	if deleted["status"] != "deleted" || deleted["deletedAt"] == nil {
		t.Fatalf("deleted: %v", deleted)
	}
	for _, m := range []struct{ method, path, body string }{
		{http.MethodGet, "/webhook-endpoints/" + id, ""},
		{http.MethodPatch, "/webhook-endpoints/" + id, `{"name": "x"}`},
		{http.MethodDelete, "/webhook-endpoints/" + id, ""},
		{http.MethodPost, "/webhook-endpoints/" + id + "/rotate-secret", ""},
	} {
		status, v := a.do(m.method, m.path, mgmt, m.body)
		wantError(t, m.method+" "+m.path+" once deleted", status, v, 404, CodeNotFound, "id")
	}
	if ids := listIDs(a.mustDo(200, http.MethodGet, "/webhook-endpoints", mgmt, "")); len(ids) != 0 {
		t.Fatalf("a deleted endpoint is listed: %v", ids)
	}
}

func TestWebhookEndpointValidation(t *testing.T) {
	a := newWebhookGateway(t, nil)
	_, _, mgmt := a.workspace(0)
	for _, tc := range []struct{ body, param, says string }{
		{`{"name": "n", "url": "http://hooks.example.com", "events": ["*"]}`, "url", "https only"},
		{`{"name": "n", "url": "https://127.0.0.1/hook", "events": ["*"]}`, "url", "loopback"},
		{`{"name": "n", "url": "https://10.1.2.3/hook", "events": ["*"]}`, "url", "private"},
		{`{"name": "n", "url": "https://169.254.169.254/latest", "events": ["*"]}`, "url", "169.254.169.254"},
		{`{"name": "n", "url": "https://user:pass@hooks.example.com", "events": ["*"]}`, "url", "credentials"},
		{`{"name": "n", "events": ["*"]}`, "url", "required"},
		{`{"url": "https://hooks.example.com", "events": ["*"]}`, "name", "required"},
		{`{"name": "n", "url": "https://hooks.example.com", "events": ["video.done"]}`, "events", `"video.done"`},
		{`{"name": "n", "url": "https://hooks.example.com", "events": ["image.completed"]}`, "events", `"image.completed"`},
		{`{"name": "n", "url": "https://hooks.example.com", "events": []}`, "events", "at least one"},
		{`{"name": "n", "url": "https://hooks.example.com"}`, "events", "required"},
		{`{"name": "n", "url": "https://hooks.example.com", "events": ["*"], "secret": "x"}`, "secret", "unknown field"},
		{`{"name": "n", "url": "https://hooks.example.com", "events": ["*"], "status": "active"}`, "status", "unknown field"},
	} {
		status, v := a.do(http.MethodPost, "/webhook-endpoints", mgmt, tc.body)
		wantError(t, tc.body, status, v, 400, CodeValidation, tc.param)
		if msg, _ := v["message"].(string); !strings.Contains(msg, tc.says) {
			t.Errorf("%s: message %q does not say %q", tc.body, msg, tc.says)
		}
	}
	id := a.mustDo(201, http.MethodPost, "/webhook-endpoints", mgmt, `{"name": "n", "url": "https://hooks.example.com", "events": ["batch.expired"]}`)["id"].(string)
	for _, tc := range []struct{ body, param string }{
		{`{"status": "deleted"}`, "status"},
		{`{"status": "paused"}`, "status"},
		{`{"url": "https://[::1]/hook"}`, "url"},
		{`{"events": ["video.*"]}`, "events"},
		{`{"name": ""}`, "name"},
	} {
		status, v := a.do(http.MethodPatch, "/webhook-endpoints/"+id, mgmt, tc.body)
		wantError(t, tc.body, status, v, 400, CodeValidation, tc.param)
	}
}

func TestWebhookEndpointPages(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	a := newWebhookGateway(t, &now)
	_, _, mgmt := a.workspace(0)
	var want []string
	for i := range 5 {
		now = now.Add(time.Second)
		v := a.mustDo(201, http.MethodPost, "/webhook-endpoints", mgmt, `{"name": "n`+string(rune('0'+i))+`", "url": "https://hooks.example.com", "events": ["*"]}`)
		want = append(want, v["id"].(string))
	}
	if got := a.walk("/webhook-endpoints", mgmt, 2); !slices.Equal(got, want) {
		t.Fatalf("pages %v, want %v", got, want)
	}
}

func TestWebhookEndpointsWithoutKey(t *testing.T) {
	a := newAdminGateway(t, nil, nil)
	_, std, mgmt := a.workspace(0)
	status, v := a.do(http.MethodPost, "/webhook-endpoints", mgmt, `{"name": "n", "url": "https://hooks.example.com", "events": ["*"]}`)
	wantError(t, "no secret key", status, v, 503, CodeNotConfigured, "")
	if msg := v["message"].(string); !strings.Contains(msg, "secret_key") || !strings.Contains(msg, "openssl rand -base64 32") {
		t.Fatalf("message %q does not say how to set a key", msg)
	}
	status, v = a.do(http.MethodGet, "/webhook-endpoints", std, "")
	wantError(t, "standard key without a secret key", status, v, 403, CodeForbidden, "")
}
