package module

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/jackc/pgx/v5"
	"github.com/openai/openai-go/v3"

	"github.com/modelgateway/caddy-modelgateway/delivery"
	"github.com/modelgateway/caddy-modelgateway/notify"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// fakeKind is a destination kind that keeps what it is sent: its target is {"url": ...,
// "fail": N}, and a target with fail answers as a service refusing with that status, or,
// with fail -1, fails as an unreachable URL does (net/http's error names the URL).
type fakeKind struct {
	mu   sync.Mutex
	sent []fakeSent
}

type fakeSent struct {
	target string
	n      notify.Notification
}

type fakeTarget struct {
	URL  string `json:"url"`
	Fail int    `json:"fail,omitempty"`
}

func (k *fakeKind) Check(raw json.RawMessage) ([]byte, string, error) {
	var t fakeTarget
	if err := json.Unmarshal(raw, &t); err != nil || t.URL == "" {
		return nil, "", &notify.TargetError{Field: "url", Message: "url is required"}
	}
	b, _ := json.Marshal(t)
	return b, "fake/…" + t.URL[len(t.URL)-4:], nil
}

func (k *fakeKind) Send(_ context.Context, env notify.Env, target []byte, n notify.Notification) (int, error) {
	if env.Client == nil {
		return 0, fmt.Errorf("no guarded client")
	}
	var t fakeTarget
	if err := json.Unmarshal(target, &t); err != nil {
		return 0, err
	}
	k.mu.Lock()
	k.sent = append(k.sent, fakeSent{string(target), n})
	k.mu.Unlock()
	if t.Fail == -1 {
		return 0, fmt.Errorf("posting: %w", &url.Error{Op: "Post", URL: t.URL, Err: errors.New("connection refused")})
	}
	if t.Fail != 0 {
		return t.Fail, &notify.SendError{Status: t.Fail, Message: "mailbox unavailable"}
	}
	return http.StatusOK, nil
}

// to returns the notifications of event sent to targets holding url.
func (k *fakeKind) to(url, event string) []notify.Notification {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []notify.Notification
	for _, s := range k.sent {
		if strings.Contains(s.target, url) && s.n.Event == event {
			out = append(out, s.n)
		}
	}
	return out
}

// useFakeKind makes the next configurations have kind "fake", sweep balances and send
// notifications often, and returns the kind.
func useFakeKind(t *testing.T) *fakeKind {
	k := &fakeKind{}
	notifyTuning.Store(&notifyTune{
		kinds:              map[string]notify.Kind{"fake": k},
		lowBalanceInterval: 20 * time.Millisecond,
		sender: func(s *notify.Sender) {
			s.Idle = 10 * time.Millisecond
			s.Schedule = []time.Duration{10 * time.Millisecond}
		},
	})
	t.Cleanup(func() { notifyTuning.Store(nil) })
	return k
}

// startLoggedGateway starts a gateway on storeArgs whose every log line, at debug level,
// goes to a file, and returns it with the file's path.
func startLoggedGateway(t *testing.T, dir, storeArgs, gatewayBlock string) (*gatewayEnv, string) {
	t.Helper()
	setDataDirs(t, dir)
	port := freePort(t)
	logFile := filepath.Join(dir, "caddy.log")
	loadCaddyfile(t, fmt.Sprintf(`{
	admin off
	persist_config off
	grace_period 1ns
	log {
		output file %s
		level DEBUG
	}
	model_gateway {
		store %s
		credit_lease_linger 0
%s
	}
}

http://127.0.0.1:%d {
	route /v1/* {
		model_gateway
	}
}
`, logFile, storeArgs, gatewayBlock, port))
	t.Cleanup(func() { _ = caddy.Stop() })
	return &gatewayEnv{t: t, baseURL: fmt.Sprintf("http://127.0.0.1:%d", port)}, logFile
}

// waitUntil polls cond until it holds, failing the test with what after a bound far above
// what any machine needs: the workers run every few milliseconds here.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited too long for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// destinationKeys is the exact key set of a destination object.
var destinationKeys = []string{"created_at", "id", "kind", "last_delivered_at", "last_failure_at", "last_status", "name", "object", "preview", "status", "updated_at"}

func expectDestination(t *testing.T, what string, v map[string]any) map[string]any {
	t.Helper()
	d, _ := v["data"].(map[string]any)
	var got []string
	for k := range d {
		got = append(got, k)
	}
	slices.Sort(got)
	if !slices.Equal(got, destinationKeys) || d["object"] != "notification.destination" || !strings.HasPrefix(d["id"].(string), "ntd_") {
		t.Fatalf("%s: %v, want a destination with exactly %v", what, v, destinationKeys)
	}
	return d
}

// rawAnswer sends a request and returns its status and body as bytes, for exact shapes.
func (e *gatewayEnv) rawAnswer(method, key, path, body string) (int, []byte) {
	e.t.Helper()
	req, _ := http.NewRequest(method, e.baseURL+"/v1"+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return resp.StatusCode, bytes.TrimSpace(b.Bytes())
}

// TestNotificationsEndToEnd runs the notification routes through Caddy with management
// keys: destinations made, listed, read, changed, tested and deleted with the exact answers
// of the specification; routes and their fences; the threshold; a deleted destination told
// nothing when its event fires; and a target never in plain text in an answer, a log line
// or the database's files.
func TestNotificationsEndToEnd(t *testing.T) {
	kind := useFakeKind(t)
	t.Setenv("GATEWAY_TEST_SECRET_KEY", newSecretKey(t))
	dir := t.TempDir()
	dbPath := filepath.Join(dir, "gateway.db")
	env, logFile := startLoggedGateway(t, dir, "sqlite "+dbPath, "\t\tsecret_key {env.GATEWAY_TEST_SECRET_KEY}")
	env.dbPath = dbPath
	env.openStore()
	a, b := env.team(10*store.NanosPerUSD), env.team(0)
	const marker = "tgt-marker-7f3a9c"
	live := "https://hooks.example.com/" + marker + "/live"
	var answers bytes.Buffer
	do := func(want int, method, key, path, body string) map[string]any {
		t.Helper()
		status, raw := env.rawAnswer(method, key, path, body)
		answers.Write(raw)
		var v map[string]any
		if err := json.Unmarshal(raw, &v); err != nil || status != want {
			t.Fatalf("%s %s: %d %s, want %d", method, path, status, raw, want)
		}
		return v
	}

	created := expectDestination(t, "created", do(201, "POST", a.mgmt, "/notifications/destinations",
		`{"kind": "fake", "name": "ops", "target": {"url": "`+live+`"}}`))
	id := created["id"].(string)
	if created["kind"] != "fake" || created["name"] != "ops" || created["status"] != "active" || created["preview"] != "fake/…live" ||
		created["last_status"] != nil || created["last_delivered_at"] != nil {
		t.Fatalf("created %v", created)
	}
	expectDestination(t, "read", do(200, "GET", a.mgmt, "/notifications/destinations/"+id, ""))
	if got := env.walkList(a.mgmt, "/notifications/destinations", 1); !slices.Equal(got, []string{id}) {
		t.Fatalf("listed %v", got)
	}
	renamed := expectDestination(t, "renamed", do(200, "PATCH", a.mgmt, "/notifications/destinations/"+id, `{"name": "ops-2", "status": "disabled"}`))
	if renamed["name"] != "ops-2" || renamed["status"] != "disabled" {
		t.Fatalf("renamed %v", renamed)
	}
	do(200, "PATCH", a.mgmt, "/notifications/destinations/"+id, `{"status": "active"}`)

	// Bad input names its field; another workspace and a standard key see nothing.
	env.expectError(400, "validation_error", "kind", "POST", a.mgmt, "/notifications/destinations", `{"kind": "pager", "name": "x", "target": {"url": "u"}}`)
	env.expectError(400, "validation_error", "target.url", "POST", a.mgmt, "/notifications/destinations", `{"kind": "fake", "name": "x", "target": {}}`)
	env.expectError(400, "validation_error", "target", "POST", a.mgmt, "/notifications/destinations", `{"kind": "fake", "name": "x"}`)
	for _, rt := range [][2]string{{"GET", ""}, {"PATCH", ""}, {"DELETE", ""}, {"POST", "/test"}} {
		env.expectError(404, "not_found", "id", rt[0], b.mgmt, "/notifications/destinations/"+id+rt[1], `{"name": "mine"}`)
		env.expectError(403, "forbidden", "", rt[0], a.std, "/notifications/destinations/"+id+rt[1], `{"name": "mine"}`)
	}
	if got := env.walkList(b.mgmt, "/notifications/destinations", 10); len(got) != 0 {
		t.Fatalf("b lists %v", got)
	}

	// A test is delivered now, and answers exactly the specification's shape.
	status, raw := env.rawAnswer("POST", a.mgmt, "/notifications/destinations/"+id+"/test", "")
	answers.Write(raw)
	if status != 200 || string(raw) != `{"data":{"delivered":true,"status":200}}` {
		t.Fatalf("test: %d %s", status, raw)
	}
	if sent := kind.to(live, notify.EventTest); len(sent) != 1 || sent[0].WorkspaceID != a.ws || !strings.HasPrefix(sent[0].ID, "ntf_") {
		t.Fatalf("test notifications sent: %+v", sent)
	}
	if d := expectDestination(t, "after the test", do(200, "GET", a.mgmt, "/notifications/destinations/"+id, "")); d["last_status"] != float64(200) || d["last_delivered_at"] == nil {
		t.Fatalf("after the test: %v", d)
	}

	// A failing test is an error naming what failed, with the service's status.
	refusing := "https://hooks.example.com/" + marker + "/refusing"
	failing := expectDestination(t, "failing", do(201, "POST", a.mgmt, "/notifications/destinations",
		`{"kind": "fake", "name": "smtp", "target": {"url": "`+refusing+`", "fail": 550}}`))["id"].(string)
	status, raw = env.rawAnswer("POST", a.mgmt, "/notifications/destinations/"+failing+"/test", "")
	answers.Write(raw)
	var failed map[string]any
	_ = json.Unmarshal(raw, &failed)
	if e, _ := failed["error"].(map[string]any); status != 502 || e["code"] != "destination_delivery_failed" || failed["destination_status"] != float64(550) ||
		failed["destination_id"] != failing || !strings.Contains(failed["message"].(string), "550") {
		t.Fatalf("failing test: %d %s", status, raw)
	}

	// An unreachable destination's error names no URL: not in the answer, not in the log.
	unreachable := expectDestination(t, "unreachable", do(201, "POST", a.mgmt, "/notifications/destinations",
		`{"kind": "fake", "name": "down", "target": {"url": "https://down.example.com/`+marker+`/down", "fail": -1}}`))["id"].(string)
	status, raw = env.rawAnswer("POST", a.mgmt, "/notifications/destinations/"+unreachable+"/test", "")
	answers.Write(raw)
	if status != 502 || !bytes.Contains(raw, []byte("connection refused")) || !bytes.Contains(raw, []byte(`"destination_status":null`)) {
		t.Fatalf("unreachable test: %d %s", status, raw)
	}

	// Routes: every event listed; unknown events and foreign or missing ids refused.
	routes := do(200, "GET", a.mgmt, "/notifications/routes", "")["data"].([]any)
	if len(routes) != len(notify.Events) || routes[0].(map[string]any)["event"] != notify.EventBalanceLow ||
		len(routes[0].(map[string]any)["destination_ids"].([]any)) != 0 {
		t.Fatalf("routes of a new workspace: %v", routes)
	}
	env.expectError(400, "validation_error", "event", "PUT", a.mgmt, "/notifications/routes/balance.high", `{"destination_ids": []}`)
	bDest := expectDestination(t, "b's", do(201, "POST", b.mgmt, "/notifications/destinations", `{"kind": "fake", "name": "b", "target": {"url": "https://b.example.com/bbbb"}}`))["id"].(string)
	env.expectError(404, "not_found", "destination_ids", "PUT", a.mgmt, "/notifications/routes/balance.low", `{"destination_ids": ["`+bDest+`"]}`)
	env.expectError(404, "not_found", "destination_ids", "PUT", a.mgmt, "/notifications/routes/balance.low", `{"destination_ids": ["ntd_nope"]}`)
	env.expectError(400, "validation_error", "destination_ids", "PUT", a.mgmt, "/notifications/routes/balance.low", `{}`)
	doomed := "https://hooks.example.com/" + marker + "/doomed"
	doomedID := expectDestination(t, "doomed", do(201, "POST", a.mgmt, "/notifications/destinations",
		`{"kind": "fake", "name": "doomed", "target": {"url": "`+doomed+`"}}`))["id"].(string)
	set := do(200, "PUT", a.mgmt, "/notifications/routes/balance.low", `{"destination_ids": ["`+id+`", "`+doomedID+`"]}`)
	if !reflect.DeepEqual(set["data"], map[string]any{"event": "balance.low", "destination_ids": []any{id, doomedID}}) {
		t.Fatalf("route set: %v", set)
	}

	// Settings: a decimal USD threshold, null turns it off, zero is refused.
	st := do(200, "GET", a.mgmt, "/notifications/settings", "")["data"].(map[string]any)
	if st["low_balance_threshold_usd"] != nil || st["low_balance_armed"] != false {
		t.Fatalf("settings of a new workspace: %v", st)
	}
	env.expectError(400, "validation_error", "low_balance_threshold_usd", "PATCH", a.mgmt, "/notifications/settings", `{"low_balance_threshold_usd": "0"}`)
	env.expectError(400, "validation_error", "low_balance_threshold_usd", "PATCH", a.mgmt, "/notifications/settings", `{"low_balance_threshold_usd": "five"}`)
	st = do(200, "PATCH", a.mgmt, "/notifications/settings", `{"low_balance_threshold_usd": null}`)["data"].(map[string]any)
	if st["low_balance_threshold_usd"] != nil {
		t.Fatalf("settings off: %v", st)
	}

	// Delete: exactly {"deleted": true}, then 404 everywhere, and out of the routes.
	status, raw = env.rawAnswer("DELETE", a.mgmt, "/notifications/destinations/"+doomedID, "")
	if status != 200 || string(raw) != `{"deleted":true}` {
		t.Fatalf("delete: %d %s", status, raw)
	}
	env.expectError(404, "not_found", "id", "DELETE", a.mgmt, "/notifications/destinations/"+doomedID, "")
	env.expectError(404, "not_found", "id", "POST", a.mgmt, "/notifications/destinations/"+doomedID+"/test", "")
	env.expectError(404, "not_found", "id", "GET", a.mgmt, "/notifications/destinations/"+doomedID, "")
	routes = do(200, "GET", a.mgmt, "/notifications/routes", "")["data"].([]any)
	if got := routes[0].(map[string]any)["destination_ids"]; !reflect.DeepEqual(got, []any{id}) {
		t.Fatalf("balance.low routed to %v after the delete, want only %s", got, id)
	}

	// Low balance: told once when the balance crosses the threshold (to the live destination
	// only: the deleted one hears nothing), and again after a top-up and a new crossing.
	st = do(200, "PATCH", a.mgmt, "/notifications/settings", `{"low_balance_threshold_usd": "5.00"}`)["data"].(map[string]any)
	if st["low_balance_threshold_usd"] != "5" || st["low_balance_threshold_nanos"] != float64(5*store.NanosPerUSD) || st["low_balance_armed"] != true {
		t.Fatalf("threshold set: %v", st)
	}
	ctx := context.Background()
	if _, err := env.store.AddCredits(ctx, a.ws, -6*store.NanosPerUSD, "spent"); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the low-balance notification", func() bool { return len(kind.to(live, notify.EventBalanceLow)) == 1 })
	low := kind.to(live, notify.EventBalanceLow)[0]
	if low.WorkspaceID != a.ws || !strings.Contains(low.Title, "5 USD") || !strings.Contains(low.Text, "is 4 USD") {
		t.Fatalf("low-balance notification: %+v", low)
	}
	if st := do(200, "GET", a.mgmt, "/notifications/settings", "")["data"].(map[string]any); st["low_balance_armed"] != false || st["low_balance_last_notified_at"] == nil {
		t.Fatalf("settings once told: %v", st)
	}
	do(200, "POST", a.mgmt, "/credits", `{"amount_usd": "2"}`)
	waitUntil(t, "the alert armed again by the top-up", func() bool {
		return do(200, "GET", a.mgmt, "/notifications/settings", "")["data"].(map[string]any)["low_balance_armed"] == true
	})
	if _, err := env.store.AddCredits(ctx, a.ws, -2*store.NanosPerUSD, "spent"); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the second low-balance notification", func() bool { return len(kind.to(live, notify.EventBalanceLow)) == 2 })
	if n := len(kind.to(doomed, notify.EventBalanceLow)); n != 0 {
		t.Fatalf("the deleted destination was told %d times", n)
	}
	waitUntil(t, "the live destination's delivery recorded", func() bool {
		d := expectDestination(t, "live", do(200, "GET", a.mgmt, "/notifications/destinations/"+id, ""))
		return d["last_delivered_at"] != nil
	})

	// Nowhere in plain text: not in an answer, a log line or the database's files.
	if bytes.Contains(answers.Bytes(), []byte(marker)) {
		t.Fatalf("an answer holds the target: %s", answers.String())
	}
	caddy.Stop() // flush and close the log file and the database
	logs, err := os.ReadFile(logFile)
	if err != nil || len(logs) == 0 {
		t.Fatalf("reading the log: %v", err)
	}
	if !bytes.Contains(logs, []byte(failing)) || !bytes.Contains(logs, []byte(unreachable)) {
		t.Fatal("the log does not name the failing destination: a scan of it proves nothing")
	}
	if bytes.Contains(logs, []byte(marker)) {
		t.Fatal("a log line holds a target")
	}
	if !filesContain(t, dir, "ops-2") {
		t.Fatal("the scan does not find a destination's name: it would not find its target either")
	}
	if filesContain(t, dir, marker) {
		t.Fatal("a target is stored in the clear")
	}
}

// TestNotificationTargetsSealedOnPostgres writes a target through the API onto PostgreSQL
// and reads every column of every notification table back as text: the target is in none.
func TestNotificationTargetsSealedOnPostgres(t *testing.T) {
	useFakeKind(t)
	dsn := postgresSchema(t)
	t.Setenv("GATEWAY_TEST_SECRET_KEY", newSecretKey(t))
	t.Setenv("GATEWAY_TEST_PG_DSN", dsn)
	env, _ := startLoggedGateway(t, t.TempDir(), "postgres {env.GATEWAY_TEST_PG_DSN}", "\t\tsecret_key {env.GATEWAY_TEST_SECRET_KEY}")
	env.store = openPostgres(t, dsn)
	a := env.team(0)
	const marker = "pg-target-marker-41d2"
	created := env.expect(201, "POST", a.mgmt, "/notifications/destinations",
		`{"kind": "fake", "name": "pg-name-marker", "target": {"url": "https://hooks.example.com/`+marker+`/tail"}}`)
	id := created["data"].(map[string]any)["id"].(string)
	env.expect(200, "PUT", a.mgmt, "/notifications/routes/balance.low", `{"destination_ids": ["`+id+`"]}`)
	if got := env.expect(200, "POST", a.mgmt, "/notifications/destinations/"+id+"/test", ""); !reflect.DeepEqual(got, map[string]any{"data": map[string]any{"delivered": true, "status": float64(200)}}) {
		t.Fatalf("test: %v", got)
	}
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var dump strings.Builder
	// A row as text shows BYTEA in hex, where no marker shows: those columns are read
	// escaped too, printable bytes as they are.
	for _, q := range []string{
		"SELECT t::text || ' ' || encode(t.target, 'escape') FROM notification_destinations t",
		"SELECT t::text FROM notification_routes t",
		"SELECT t::text FROM notification_settings t",
		"SELECT t::text || ' ' || encode(t.payload, 'escape') FROM queue_items t",
	} {
		rows, err := conn.Query(context.Background(), q)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			dump.WriteString(s + "\n")
		}
		rows.Close()
	}
	if !strings.Contains(dump.String(), "pg-name-marker") {
		t.Fatalf("the dump does not hold the destination's name: a scan of it proves nothing:\n%s", dump.String())
	}
	if strings.Contains(dump.String(), marker) {
		t.Fatalf("a column holds the target in the clear:\n%s", dump.String())
	}
}

// TestNotificationsWebhookKindEndToEnd runs a destination of a real kind (the signed
// custom webhook) through Caddy and its guarded client: a test is posted to the receiver
// now and answers its status; a refusal is a 502 carrying the receiver's status; and
// balance.low, fired by the sweep, reaches the receiver through the queue.
func TestNotificationsWebhookKindEndToEnd(t *testing.T) {
	useFakeKind(t)
	deliveryTuning.Store(deliveryTuneOf(10*time.Millisecond, nil))
	t.Cleanup(func() { deliveryTuning.Store(nil) })
	var mu sync.Mutex
	var got []map[string]any
	status := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var v map[string]any
		_ = json.NewDecoder(r.Body).Decode(&v)
		mu.Lock()
		defer mu.Unlock()
		if r.Header.Get("webhook-id") != v["id"] || !strings.HasPrefix(r.Header.Get("webhook-signature"), "v1,") {
			t.Errorf("unsigned post: %v %v", r.Header, v)
		}
		got = append(got, v)
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	received := func(typ string) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, v := range got {
			if v["type"] == typ {
				n++
			}
		}
		return n
	}
	t.Setenv("GATEWAY_TEST_SECRET_KEY", newSecretKey(t))
	dir := t.TempDir()
	env, _ := startLoggedGateway(t, dir, "sqlite "+filepath.Join(dir, "gateway.db"), "\t\tsecret_key {env.GATEWAY_TEST_SECRET_KEY}\n\t\twebhook_allow 127.0.0.1")
	env.dbPath = filepath.Join(dir, "gateway.db")
	env.openStore()
	a := env.team(10 * store.NanosPerUSD)
	secret, err := delivery.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	d := env.expect(201, "POST", a.mgmt, "/notifications/destinations",
		`{"kind": "webhook", "name": "own", "target": {"url": "`+srv.URL+`/in", "secret": "`+secret+`"}}`)["data"].(map[string]any)
	id := d["id"].(string)
	if d["kind"] != "webhook" || strings.Contains(fmt.Sprint(d), secret) {
		t.Fatalf("created %v", d)
	}
	status2, raw := env.rawAnswer("POST", a.mgmt, "/notifications/destinations/"+id+"/test", "")
	if status2 != 200 || string(raw) != `{"data":{"delivered":true,"status":200}}` || received(notify.EventTest) != 1 {
		t.Fatalf("test: %d %s, received %d", status2, raw, received(notify.EventTest))
	}
	mu.Lock()
	status = http.StatusInternalServerError
	mu.Unlock()
	env.expectError(502, "destination_delivery_failed", "", "POST", a.mgmt, "/notifications/destinations/"+id+"/test", "")
	_, _, v := env.call("POST", a.mgmt, "/notifications/destinations/"+id+"/test", "")
	if v["destination_status"] != float64(500) {
		t.Fatalf("refused test: %v", v)
	}
	mu.Lock()
	status = http.StatusOK
	mu.Unlock()

	env.expect(200, "PUT", a.mgmt, "/notifications/routes/balance.low", `{"destination_ids": ["`+id+`"]}`)
	env.expect(200, "PATCH", a.mgmt, "/notifications/settings", `{"low_balance_threshold_usd": "5"}`)
	if _, err := env.store.AddCredits(context.Background(), a.ws, -6*store.NanosPerUSD, "spent"); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "balance.low at the receiver", func() bool { return received(notify.EventBalanceLow) == 1 })
}

// Each notification route × the callers an operator meets, through Caddy: owners and
// admins pass, a member reads but writes nothing (missing_scope) and neither tests nor
// deletes (role_required), an admin narrowed to notifications:read is refused each other
// scope by name, and a standard key is refused everywhere.
func TestNotificationRoutesByRole(t *testing.T) {
	useFakeKind(t)
	t.Setenv("GATEWAY_TEST_SECRET_KEY", newSecretKey(t))
	env := startGateway(t, "\t\tsecret_key {env.GATEWAY_TEST_SECRET_KEY}\n", "")
	a := env.team(0)
	grant := func(body string) string {
		return env.expect(201, http.MethodPost, a.mgmt, "/keys", body)["data"].(map[string]any)["key"].(string)
	}
	admin := grant(`{"kind": "management", "role": "admin"}`)
	member := grant(`{"kind": "management", "role": "member"}`)
	reader := grant(`{"kind": "management", "role": "admin", "scopes": "notifications:read"}`)
	dest := env.expect(201, http.MethodPost, a.mgmt, "/notifications/destinations",
		`{"kind": "fake", "name": "d", "target": {"url": "https://x.example.com/abcd"}}`)["data"].(map[string]any)["id"].(string)
	const (
		ok      = ""
		role    = "role_required"
		missing = "missing_scope"
		denied  = "forbidden"
	)
	for _, tc := range []struct {
		method, path, body, scope string
		owner, admin, member      string
		reader                    string
	}{
		{"POST", "/notifications/destinations", `{"kind": "fake", "name": "n", "target": {"url": "https://x.example.com/efgh"}}`, "notifications:write", ok, ok, missing, missing},
		{"GET", "/notifications/destinations", "", "notifications:read", ok, ok, ok, ok},
		{"GET", "/notifications/destinations/" + dest, "", "notifications:read", ok, ok, ok, ok},
		{"PATCH", "/notifications/destinations/" + dest, `{"name": "m"}`, "notifications:write", ok, ok, missing, missing},
		{"POST", "/notifications/destinations/" + dest + "/test", "", "notifications:write", ok, ok, role, missing},
		{"GET", "/notifications/routes", "", "notifications:read", ok, ok, ok, ok},
		{"PUT", "/notifications/routes/video.failed", `{"destination_ids": []}`, "notifications:write", ok, ok, missing, missing},
		{"GET", "/notifications/settings", "", "settings:read", ok, ok, ok, missing},
		{"PATCH", "/notifications/settings", `{"low_balance_threshold_usd": "3"}`, "settings:write", ok, ok, missing, missing},
		{"DELETE", "/notifications/destinations/" + dest, "", "notifications:delete", ok, ok, role, missing},
	} {
		for _, c := range []struct{ name, key, want string }{
			{"standard", a.std, denied}, {"member", member, tc.member}, {"reader", reader, tc.reader},
			{"admin", admin, tc.admin}, {"owner", a.mgmt, tc.owner},
		} {
			what := tc.method + " " + tc.path + " as " + c.name
			status, _, v := env.call(tc.method, c.key, tc.path, tc.body)
			e, _ := v["error"].(map[string]any)
			switch c.want {
			case ok:
				if status == http.StatusForbidden || status == http.StatusUnauthorized || status >= 500 {
					t.Errorf("%s: %d %v, want it admitted", what, status, v)
				}
			case missing:
				if status != http.StatusForbidden || e["code"] != missing || v["required_scope"] != tc.scope {
					t.Errorf("%s: %d %v, want 403 missing_scope %s", what, status, v, tc.scope)
				}
			default:
				if status != http.StatusForbidden || e["code"] != c.want {
					t.Errorf("%s: %d %v, want 403 %s", what, status, v, c.want)
				}
			}
		}
	}
}

// A video job that fails tells the workspace's video.failed destinations, once, through the
// running gateway: the job engine's hook, the queue and the sender.
func TestVideoFailedNotifiesEndToEnd(t *testing.T) {
	kind := useFakeKind(t)
	env := startVideoGateway(t)
	a := env.team(100 * usd)
	dest := env.expect(201, http.MethodPost, a.mgmt, "/notifications/destinations",
		`{"kind": "fake", "name": "video ops", "target": {"url": "https://x.example.com/vids"}}`)["data"].(map[string]any)["id"].(string)
	env.expect(200, http.MethodPut, a.mgmt, "/notifications/routes/video.failed", `{"destination_ids": ["`+dest+`"]}`)
	client := env.openai(a.std)
	ctx := context.Background()
	failed, err := client.Videos.New(ctx, openai.VideoNewParams{Model: "video-fail", Prompt: "doomed", Seconds: "4", Size: "1280x720"})
	if err != nil {
		t.Fatal(err)
	}
	if ended, err := client.Videos.PollStatus(ctx, failed.ID, 0); err != nil || ended.Status != openai.VideoStatusFailed {
		t.Fatalf("the job did not fail: %v %v", ended, err)
	}
	waitUntil(t, "video.failed at the destination", func() bool { return len(kind.to("x.example.com/vids", notify.EventVideoFailed)) > 0 })
	n := kind.to("x.example.com/vids", notify.EventVideoFailed)
	if len(n) != 1 || n[0].WorkspaceID != a.ws || !strings.Contains(n[0].Title, failed.ID) {
		t.Fatalf("video.failed notifications: %+v", n)
	}
}
