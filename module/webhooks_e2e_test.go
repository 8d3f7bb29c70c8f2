package module

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/modelgateway/caddy-modelgateway/delivery"
)

// webhookObjectKeys is the exact key set of the specification's webhook endpoint object.
var webhookObjectKeys = []string{"createdAt", "createdBy", "deletedAt", "events", "hasSecret", "id", "name", "status", "updatedAt", "url", "workspaceId"}

func expectWebhookObject(t *testing.T, what string, v map[string]any, withSecret bool) {
	t.Helper()
	want := slices.Clone(webhookObjectKeys)
	if withSecret {
		want = append(want, "signing_secret")
		slices.Sort(want)
	}
	var got []string
	for k := range v {
		got = append(got, k)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("%s: keys %v, want exactly %v", what, got, want)
	}
	if v["hasSecret"] != true {
		t.Fatalf("%s: hasSecret %v", what, v["hasSecret"])
	}
}

// filesContain tells whether any file under dir holds marker.
func filesContain(t *testing.T, dir, marker string) bool {
	t.Helper()
	found := false
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || found {
			return err
		}
		b, err := os.ReadFile(path)
		found = bytes.Contains(b, []byte(marker))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

func newSecretKey(t *testing.T) string {
	t.Helper()
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b)
}

// TestWebhookEndpointsEndToEnd runs the webhook endpoint routes through Caddy: secrets
// shown once and sealed at rest, the spec's object exactly, workspace fences, URL and
// event checks, rotation gated by the operator's CLI, and soft deletion.
func TestWebhookEndpointsEndToEnd(t *testing.T) {
	secretKey := newSecretKey(t)
	t.Setenv("GATEWAY_TEST_SECRET_KEY", secretKey)
	up := newFakeOpenAI(t, chatUsage(1, 0, 1, 0))
	env := startGateway(t, "\t\tsecret_key {env.GATEWAY_TEST_SECRET_KEY}\n"+discoveryConfig(up.URL), "")
	a, b := env.team(0), env.team(0)
	ctx := context.Background()

	created := env.expect(201, http.MethodPost, a.mgmt, "/webhook-endpoints",
		`{"name": "receiver-name-marker", "url": "https://hooks.example.com/gw", "events": ["video.completed", "batch.failed"]}`)
	expectWebhookObject(t, "created", created, true)
	id, secret := created["id"].(string), created["signing_secret"].(string)
	if !strings.HasPrefix(secret, delivery.SecretPrefix) || created["workspaceId"] != a.ws || created["status"] != "active" ||
		created["createdBy"] != kidOf(t, a.mgmt) || created["deletedAt"] != nil || created["createdAt"] == nil {
		t.Fatalf("created %v", created)
	}
	// Sealed at rest: the database's files hold the endpoint's name but not its secret.
	dir := filepath.Dir(env.dbPath)
	if !filesContain(t, dir, "receiver-name-marker") {
		t.Fatal("the scan does not find the endpoint's name: it would not find its secret either")
	}
	if filesContain(t, dir, secret) || filesContain(t, dir, strings.TrimPrefix(secret, delivery.SecretPrefix)) {
		t.Fatal("the signing secret is stored in the clear")
	}

	got := env.expect(200, http.MethodGet, a.mgmt, "/webhook-endpoints/"+id, "")
	expectWebhookObject(t, "read", got, false)
	listed := findItem(t, env.expect(200, http.MethodGet, a.mgmt, "/webhook-endpoints", ""), id)
	expectWebhookObject(t, "listed", listed, false)

	updated := env.expect(200, http.MethodPatch, a.mgmt, "/webhook-endpoints/"+id, `{"url": "https://hooks.example.com/v2", "events": ["*"], "status": "disabled"}`)
	expectWebhookObject(t, "updated", updated, false)
	if updated["url"] != "https://hooks.example.com/v2" || updated["status"] != "disabled" || updated["name"] != "receiver-name-marker" ||
		!slices.Equal(updated["events"].([]any), []any{"*"}) {
		t.Fatalf("updated %v", updated)
	}
	env.expect(200, http.MethodPatch, a.mgmt, "/webhook-endpoints/"+id, `{"status": "active"}`)

	// Pages.
	all := []string{id}
	for i := range 4 {
		v := env.expect(201, http.MethodPost, a.mgmt, "/webhook-endpoints", fmt.Sprintf(`{"name": "r%d", "url": "https://hooks.example.com/%d", "events": ["music.progress"]}`, i, i))
		all = append(all, v["id"].(string))
		time.Sleep(2 * time.Millisecond) // distinct creation times, so that the order is the creation order
	}
	if pages := env.walkList(a.mgmt, "/webhook-endpoints", 2); !slices.Equal(pages, all) {
		t.Fatalf("pages %v, want %v", pages, all)
	}

	// Another workspace sees none of it, for every verb; a standard key is refused.
	if ids := env.walkList(b.mgmt, "/webhook-endpoints", 10); len(ids) != 0 {
		t.Fatalf("b lists %v", ids)
	}
	env.expectError(404, "not_found", "id", "GET", b.mgmt, "/webhook-endpoints/"+id, "")
	env.expectError(404, "not_found", "id", "PATCH", b.mgmt, "/webhook-endpoints/"+id, `{"name": "mine"}`)
	env.expectError(404, "not_found", "id", "DELETE", b.mgmt, "/webhook-endpoints/"+id, "")
	env.expectError(404, "not_found", "id", "POST", b.mgmt, "/webhook-endpoints/"+id+"/rotate-secret", "")
	for _, rt := range [][2]string{{"POST", "/webhook-endpoints"}, {"GET", "/webhook-endpoints"}, {"GET", "/webhook-endpoints/" + id},
		{"PATCH", "/webhook-endpoints/" + id}, {"DELETE", "/webhook-endpoints/" + id}, {"POST", "/webhook-endpoints/" + id + "/rotate-secret"}} {
		env.expectError(403, "forbidden", "", rt[0], a.std, rt[1], `{}`)
	}

	// Bad receivers and events are 400, naming the problem.
	for _, tc := range []struct{ body, param, says string }{
		{`{"name": "n", "url": "http://hooks.example.com/", "events": ["*"]}`, "url", "https only"},
		{`{"name": "n", "url": "https://127.0.0.1/hook", "events": ["*"]}`, "url", "loopback"},
		{`{"name": "n", "url": "https://user:pass@hooks.example.com/", "events": ["*"]}`, "url", "credentials"},
		{`{"name": "n", "url": "https://hooks.example.com/", "events": ["video.finished"]}`, "events", `"video.finished"`},
	} {
		status, _, v := env.call(http.MethodPost, a.mgmt, "/webhook-endpoints", tc.body)
		errObj, _ := v["error"].(map[string]any)
		if status != 400 || errObj["code"] != "validation_error" || errObj["param"] != tc.param || !strings.Contains(v["message"].(string), tc.says) {
			t.Fatalf("%s: %d %v, want 400 on %s saying %s", tc.body, status, v, tc.param, tc.says)
		}
	}

	// Rotation needs the workspace's async access, which the operator's CLI turns on.
	env.expectError(403, "async_access_required", "", "POST", a.mgmt, "/webhook-endpoints/"+id+"/rotate-secret", "")
	cfg := filepath.Join(t.TempDir(), "Caddyfile")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("{\n\tmodel_gateway {\n\t\tstore sqlite %s\n\t}\n}\n\n:0 {\n\trespond ok\n}\n", env.dbPath)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"--workspace", a.ws}, {"--workspace", a.ws, "--enable", "--disable"}, {"--enable"}, {"--workspace", "ws_missing", "--enable"}} {
		if out, err := runGateway(t, append([]string{"workspace", "async", "--config", cfg}, args...)...); err == nil {
			t.Fatalf("workspace async %v: no error: %s", args, out)
		}
	}
	env.expectError(403, "async_access_required", "", "POST", a.mgmt, "/webhook-endpoints/"+id+"/rotate-secret", "")
	if out, err := runGateway(t, "workspace", "async", "--config", cfg, "--workspace", a.ws, "--enable"); err != nil || !strings.Contains(out, "async access on") {
		t.Fatalf("workspace async --enable: %v: %s", err, out)
	}
	before := time.Now()
	rotated := env.expect(200, http.MethodPost, a.mgmt, "/webhook-endpoints/"+id+"/rotate-secret", "")
	expectWebhookObject(t, "rotated", rotated, true)
	newSecret := rotated["signing_secret"].(string)
	if newSecret == secret || !strings.HasPrefix(newSecret, delivery.SecretPrefix) {
		t.Fatalf("rotated secret %q (was %q)", newSecret, secret)
	}
	if again := env.expect(200, http.MethodGet, a.mgmt, "/webhook-endpoints/"+id, ""); again["signing_secret"] != nil {
		t.Fatal("the rotated secret is shown again")
	}
	sealer, err := delivery.NewSealer(secretKey)
	if err != nil {
		t.Fatal(err)
	}
	stored, err := env.store.GetWebhookEndpoint(ctx, a.ws, id)
	if err != nil {
		t.Fatal(err)
	}
	cur, errCur := sealer.Open(stored.Secret, []byte(id))
	prev, errPrev := sealer.Open(stored.PreviousSecret, []byte(id))
	grace := stored.PreviousUntil.Sub(before)
	if errCur != nil || errPrev != nil || string(cur) != newSecret || string(prev) != secret || grace < 24*time.Hour-time.Second || grace > 24*time.Hour+time.Minute {
		t.Fatalf("after rotation: current %q (%v), previous %q (%v), kept %v", cur, errCur, prev, errPrev, grace)
	}
	if out, err := runGateway(t, "workspace", "async", "--config", cfg, "--workspace", a.ws, "--disable"); err != nil || !strings.Contains(out, "async access off") {
		t.Fatalf("workspace async --disable: %v: %s", err, out)
	}
	env.expectError(403, "async_access_required", "", "POST", a.mgmt, "/webhook-endpoints/"+id+"/rotate-secret", "")

	// Delete is soft: the answer shows it deleted, and it is gone for every verb.
	deleted := env.expect(200, http.MethodDelete, a.mgmt, "/webhook-endpoints/"+id, "")
	expectWebhookObject(t, "deleted", deleted, false)
	if deleted["status"] != "deleted" || deleted["deletedAt"] == nil {
		t.Fatalf("deleted %v", deleted)
	}
	env.expectError(404, "not_found", "id", "GET", a.mgmt, "/webhook-endpoints/"+id, "")
	env.expectError(404, "not_found", "id", "PATCH", a.mgmt, "/webhook-endpoints/"+id, `{"name": "back"}`)
	env.expectError(404, "not_found", "id", "DELETE", a.mgmt, "/webhook-endpoints/"+id, "")
	env.expectError(404, "not_found", "id", "POST", a.mgmt, "/webhook-endpoints/"+id+"/rotate-secret", "")
	if ids := env.walkList(a.mgmt, "/webhook-endpoints", 10); slices.Contains(ids, id) || len(ids) != 4 {
		t.Fatalf("after the delete the list is %v", ids)
	}
}

// Without secret_key the webhook endpoint routes answer 503 saying how to make one, and
// the start log says webhooks are off.
func TestWebhookEndpointsWithoutSecretKey(t *testing.T) {
	dir := t.TempDir()
	setDataDirs(t, dir)
	t.Setenv("GATEWAY_TEST_SECRET_KEY_UNSET", "")
	processLog := filepath.Join(dir, "process.log")
	port := freePort(t)
	env := &gatewayEnv{t: t, baseURL: fmt.Sprintf("http://127.0.0.1:%d", port), dbPath: filepath.Join(dir, "gateway.db")}
	loadCaddyfile(t, fmt.Sprintf(`{
%s
	model_gateway {
		store sqlite %s
		secret_key {env.GATEWAY_TEST_SECRET_KEY_UNSET}
	}
}

http://127.0.0.1:%d {
	route /v1/* {
		model_gateway
	}
}
`, loggedGlobals(processLog, "format json"), env.dbPath, port))
	t.Cleanup(func() { _ = caddy.Stop() })
	env.openStore()
	a := env.team(0)

	for _, rt := range [][2]string{{"POST", "/webhook-endpoints"}, {"GET", "/webhook-endpoints"},
		{"GET", "/webhook-endpoints/0b9f1c6e-3a57-4c1e-9d0f-2f5a7c3e8b11"}, {"POST", "/webhook-endpoints/0b9f1c6e-3a57-4c1e-9d0f-2f5a7c3e8b11/rotate-secret"}} {
		status, _, v := env.call(rt[0], a.mgmt, rt[1], `{"name": "n", "url": "https://hooks.example.com", "events": ["*"]}`)
		errObj, _ := v["error"].(map[string]any)
		msg, _ := v["message"].(string)
		if status != 503 || errObj["code"] != "not_configured" || v["ok"] != false || !strings.Contains(msg, "secret_key") || !strings.Contains(msg, "openssl rand -base64 32") {
			t.Fatalf("%s %s without a secret key: %d %v", rt[0], rt[1], status, v)
		}
	}
	env.expectError(403, "forbidden", "", "GET", a.std, "/webhook-endpoints", "")

	said := false
	decoded, _ := stoppedLogLines(t, processLog)
	for _, line := range decoded {
		msg, _ := line["msg"].(string)
		said = said || (line["level"] == "warn" && strings.Contains(msg, "webhook endpoints are off") && strings.Contains(msg, "openssl rand -base64 32"))
	}
	if !said {
		t.Fatal("the start log does not say that webhooks are off")
	}
}

// A secret_key that is not 32 bytes of base64 fails the configuration, saying how to make one.
func TestWebhookSecretKeyMalformed(t *testing.T) {
	dir := t.TempDir()
	setDataDirs(t, dir)
	for _, key := range []string{"not base64!", base64.StdEncoding.EncodeToString([]byte("sixteen bytes...")), "{env.GATEWAY_TEST_SECRET_KEY_SHORT}"} {
		t.Setenv("GATEWAY_TEST_SECRET_KEY_SHORT", "c2hvcnQ=")
		cf := fmt.Sprintf("{\n\tadmin off\n\tpersist_config off\n\tmodel_gateway {\n\t\tstore sqlite %s\n\t\tsecret_key \"%s\"\n\t}\n}\n\nhttp://127.0.0.1:%d {\n\troute /v1/* {\n\t\tmodel_gateway\n\t}\n}\n",
			filepath.Join(dir, "gateway.db"), key, freePort(t))
		cfgJSON, _, err := caddyconfig.GetAdapter("caddyfile").Adapt(caddyfile.Format([]byte(cf)), nil)
		if err != nil {
			t.Fatalf("adapting: %v", err)
		}
		err = caddy.Load(cfgJSON, true)
		_ = caddy.Stop()
		if err == nil || !strings.Contains(err.Error(), "secret_key") || !strings.Contains(err.Error(), "openssl rand -base64 32") {
			t.Fatalf("secret_key %q: %v", key, err)
		}
	}
}

// webhook_allow admits receivers on the operator's internal networks, which are refused
// otherwise; a value that is no network fails the configuration.
func TestWebhookAllowAdmitsInternalReceivers(t *testing.T) {
	t.Setenv("GATEWAY_TEST_SECRET_KEY", newSecretKey(t))
	up := newFakeOpenAI(t, chatUsage(1, 0, 1, 0))
	internal := `{"name": "internal", "url": "https://10.1.2.3/hook", "events": ["video.completed"]}`
	other := `{"name": "other", "url": "https://192.168.1.6/hook", "events": ["video.completed"]}`
	env := startGateway(t, "\t\tsecret_key {env.GATEWAY_TEST_SECRET_KEY}\n"+discoveryConfig(up.URL), "")
	tm := env.team(0)
	env.expect(400, http.MethodPost, tm.mgmt, "/webhook-endpoints", internal)
	_ = caddy.Stop()

	env = startGateway(t, "\t\tsecret_key {env.GATEWAY_TEST_SECRET_KEY}\n\t\twebhook_allow 10.0.0.0/8 192.168.1.5\n"+discoveryConfig(up.URL), "")
	tm = env.team(0)
	env.expect(201, http.MethodPost, tm.mgmt, "/webhook-endpoints", internal)
	env.expect(400, http.MethodPost, tm.mgmt, "/webhook-endpoints", other)
	_ = caddy.Stop()

	dir := t.TempDir()
	setDataDirs(t, dir)
	cf := fmt.Sprintf("{\n\tadmin off\n\tpersist_config off\n\tmodel_gateway {\n\t\tstore sqlite %s\n\t\twebhook_allow intranet\n\t}\n}\n\nhttp://127.0.0.1:%d {\n\troute /v1/* {\n\t\tmodel_gateway\n\t}\n}\n",
		filepath.Join(dir, "gateway.db"), freePort(t))
	cfgJSON, _, err := caddyconfig.GetAdapter("caddyfile").Adapt(caddyfile.Format([]byte(cf)), nil)
	if err != nil {
		t.Fatalf("adapting: %v", err)
	}
	err = caddy.Load(cfgJSON, true)
	_ = caddy.Stop()
	if err == nil || !strings.Contains(err.Error(), `webhook_allow: "intranet"`) {
		t.Fatalf("webhook_allow intranet: %v", err)
	}
}
