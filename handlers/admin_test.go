package handlers

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/store"
)

func TestAdminRequiresManagementKey(t *testing.T) {
	a := newAdminGateway(t, nil, nil)
	_, std, _ := a.workspace(0)
	routes := []struct{ method, path string }{
		{"GET", "/keys"}, {"POST", "/keys"}, {"GET", "/keys/abc"}, {"PATCH", "/keys/abc"}, {"DELETE", "/keys/abc"},
		{"GET", "/workspaces"}, {"POST", "/workspaces"}, {"GET", "/credits"}, {"POST", "/credits"}, {"GET", "/activity"},
	}
	for _, rt := range routes {
		status, v := a.do(rt.method, rt.path, std, `{}`)
		wantError(t, rt.method+" "+rt.path+" with a standard key", status, v, 403, CodeForbidden, "")
		status, v = a.do(rt.method, rt.path, "", `{}`)
		wantError(t, rt.method+" "+rt.path+" without a key", status, v, 401, CodeUnauthorised, "")
	}
}

func TestAdminKeys(t *testing.T) {
	now := time.Date(2025, 5, 14, 15, 0, 0, 0, time.UTC) // a Wednesday
	a := newAdminGateway(t, nil, func(g *Gateway) { g.Now = fixedClock(now) })
	wsA, stdA, mgmtA := a.workspace(10 * usdNanos)
	_, stdB, mgmtB := a.workspace(10 * usdNanos)

	// Create a capped standard key.
	v := a.mustDo(201, http.MethodPost, "/keys", mgmtA, `{"name":"ci runner","limit_usd":"2.50","limit_reset":"weekly"}`)
	created := v["data"].(map[string]any)
	plain, _ := created["key"].(string)
	pk, err := ParseKey(plain)
	if err != nil || pk.Kind != store.KeyStandard || created["id"] != pk.ID {
		t.Fatalf("created %v (%v)", created, err)
	}
	want := map[string]any{
		"object": "key", "name": "ci runner", "kind": "standard", "workspace_id": wsA, "status": "active",
		"disabled": false, "revoked": false, "limit": 2.5, "limit_nanos": float64(2_500_000_000), "limit_reset": "weekly",
		"limit_remaining_nanos": float64(2_500_000_000), "usage_nanos": float64(0), "reserved_nanos": float64(0),
		"period_start": "2025-05-12T00:00:00Z", "resets_at": "2025-05-19T00:00:00Z", "prefix": "gateway_v1_sk_" + pk.ID,
		"created_at": "2025-05-14T15:00:00Z",
	}
	for k, w := range want {
		if created[k] != w {
			t.Errorf("created %s = %v, want %v", k, created[k], w)
		}
	}
	for _, leak := range []string{"secret", "hash", "secret_hash"} {
		if _, ok := created[leak]; ok {
			t.Errorf("the key view has %q", leak)
		}
	}
	stored, _ := a.s.GetKey(t.Context(), pk.ID)
	if stored.LimitNanos != 2_500_000_000 || stored.LimitReset != store.ResetWeekly || stored.Name != "ci runner" {
		t.Fatalf("stored %+v", stored)
	}
	// The new key works, and GET /key shows it with its limit.
	self := a.mustDo(200, http.MethodGet, "/key", plain, "")["data"].(map[string]any)
	if self["id"] != pk.ID || self["limit_reset"] != "weekly" || self["credits"] == nil {
		t.Fatalf("GET /key %v", self)
	}

	// A management key from the API, with defaults.
	v = a.mustDo(201, http.MethodPost, "/keys", mgmtA, `{"kind":"management"}`)
	mk := v["data"].(map[string]any)
	if mk["kind"] != "management" || mk["limit"] != nil || mk["limit_reset"] != nil || mk["period_start"] != nil {
		t.Fatalf("management key %v", mk)
	}
	a.mustDo(200, http.MethodGet, "/credits", mk["key"].(string), "")
	// An empty body is an empty object.
	a.mustDo(201, http.MethodPost, "/keys", mgmtA, "")

	// Workspace A lists its own five keys, page by page in the order of one page, and never B's.
	ids := a.walk("/keys", mgmtA, 2)
	body := a.mustDo(200, http.MethodGet, "/keys?limit=100", mgmtA, "")
	if !reflect.DeepEqual(ids, listIDs(body)) || len(ids) != 5 {
		t.Fatalf("keys of A: walked %v, one page %v", ids, listIDs(body))
	}
	for _, want := range []string{kidOf(t, stdA), kidOf(t, mgmtA), pk.ID, mk["id"].(string)} {
		if !slices.Contains(ids, want) {
			t.Fatalf("keys of A %v lack %s", ids, want)
		}
	}
	for _, id := range ids {
		if id == kidOf(t, stdB) || id == kidOf(t, mgmtB) {
			t.Fatal("A lists a key of B")
		}
	}
	raw, _ := json.Marshal(body)
	if strings.Contains(string(raw), hex.EncodeToString(stored.SecretHash)) || strings.Contains(string(raw), pk.Secret) {
		t.Fatal("a secret or its hash leaked into GET /keys")
	}

	// Another workspace's key is 404, like a missing one, for every verb.
	for _, m := range []string{"GET", "PATCH", "DELETE"} {
		status, v := a.do(m, "/keys/"+kidOf(t, stdB), mgmtA, `{"name":"mine now"}`)
		wantError(t, m+" another workspace's key", status, v, 404, CodeNotFound, "id")
		status, v = a.do(m, "/keys/nosuchkey", mgmtA, `{"name":"x"}`)
		wantError(t, m+" an unknown key", status, v, 404, CodeNotFound, "id")
	}
	if k, _ := a.s.GetKey(t.Context(), kidOf(t, stdB)); k.Name != "standard" || k.RevokedAt != nil {
		t.Fatalf("B's key changed: %+v", k)
	}

	// PATCH changes what it names and nothing else.
	steps := []struct {
		body  string
		check func(k map[string]any) bool
	}{
		{`{"name":"renamed"}`, func(k map[string]any) bool {
			return k["name"] == "renamed" && k["limit_nanos"] == float64(2_500_000_000)
		}},
		{`{"disabled":true}`, func(k map[string]any) bool { return k["status"] == "disabled" && k["name"] == "renamed" }},
		{`{"limit_nanos":7,"limit_reset":"daily"}`, func(k map[string]any) bool {
			return k["limit_nanos"] == float64(7) && k["resets_at"] == "2025-05-15T00:00:00Z" && k["disabled"] == true
		}},
		{`{"limit_usd":null,"limit_reset":"none"}`, func(k map[string]any) bool { return k["limit"] == nil && k["limit_reset"] == nil }},
		{`{"limit_usd":1.25,"limit_reset":"monthly","disabled":false}`, func(k map[string]any) bool {
			return k["limit_nanos"] == float64(1_250_000_000) && k["period_start"] == "2025-05-01T00:00:00Z" && k["status"] == "active"
		}},
		{`{}`, func(k map[string]any) bool { return k["name"] == "renamed" }},
	}
	for _, st := range steps {
		k := a.mustDo(200, http.MethodPatch, "/keys/"+pk.ID, mgmtA, st.body)["data"].(map[string]any)
		if !st.check(k) {
			t.Fatalf("PATCH %s: %v", st.body, k)
		}
		if got := a.mustDo(200, http.MethodGet, "/keys/"+pk.ID, mgmtA, "")["data"]; !reflect.DeepEqual(got, k) {
			t.Fatalf("GET after PATCH %s: %v, PATCH said %v", st.body, got, k)
		}
	}

	bad := []struct{ body, code, param string }{
		{`{"limit_reset":"hourly"}`, CodeValidation, "limit_reset"},
		{`{"limit_reset":""}`, CodeValidation, "limit_reset"},
		{`{"limit_usd":"2","limit_nanos":5}`, CodeValidation, "limit_usd"},
		{`{"limit_usd":"-1"}`, CodeValidation, "limit_usd"},
		{`{"limit_usd":"1e3"}`, CodeValidation, "limit_usd"},
		{`{"limit_usd":"0.0000000001"}`, CodeValidation, "limit_usd"},
		{`{"limit_usd":true}`, CodeValidation, "limit_usd"},
		{`{"limit_nanos":-1}`, CodeValidation, "limit_nanos"},
		{`{"limit_nanos":1.5}`, CodeValidation, "limit_nanos"},
		{`{"disabled":"yes"}`, CodeValidation, "disabled"},
		{`{"name":42}`, CodeValidation, "name"},
		{`{"name":"` + strings.Repeat("x", 201) + `"}`, CodeValidation, "name"},
		{`{"kind":"management"}`, CodeValidation, "kind"},
		{`{"revoked":false}`, CodeValidation, "revoked"},
		{`{"name":`, CodeInvalidJSON, ""},
		{`"a string"`, CodeValidation, ""},
	}
	for _, b := range bad {
		status, v := a.do(http.MethodPatch, "/keys/"+pk.ID, mgmtA, b.body)
		wantError(t, "PATCH "+b.body, status, v, 400, b.code, b.param)
	}
	status, v := a.do(http.MethodPost, "/keys", mgmtA, `{"kind":"root"}`)
	wantError(t, "unknown kind", status, v, 400, CodeValidation, "kind")
	if k, _ := a.s.GetKey(t.Context(), pk.ID); k.LimitNanos != 1_250_000_000 || k.Name != "renamed" {
		t.Fatalf("refused PATCHes changed the key: %+v", k)
	}

	// DELETE revokes for good; the key stops working; a second DELETE keeps the first time.
	v = a.mustDo(200, http.MethodDelete, "/keys/"+pk.ID, mgmtA, "")
	if v["deleted"] != true || v["data"].(map[string]any)["status"] != "revoked" || v["data"].(map[string]any)["revoked_at"] != "2025-05-14T15:00:00Z" {
		t.Fatalf("DELETE %v", v)
	}
	status, v = a.do(http.MethodGet, "/key", plain, "")
	wantError(t, "revoked key", status, v, 401, CodeUnauthorised, "")
	a.g.Now = fixedClock(now.Add(time.Hour))
	v = a.mustDo(200, http.MethodDelete, "/keys/"+pk.ID, mgmtA, "")
	if v["data"].(map[string]any)["revoked_at"] != "2025-05-14T15:00:00Z" {
		t.Fatalf("second DELETE %v", v)
	}
	k := a.mustDo(200, http.MethodPatch, "/keys/"+pk.ID, mgmtA, `{"disabled":false}`)["data"].(map[string]any)
	if k["status"] != "revoked" {
		t.Fatalf("a revoked key came back: %v", k)
	}
}

func TestAdminKeyUsage(t *testing.T) {
	now := time.Date(2025, 5, 14, 15, 0, 0, 0, time.UTC)
	a := newAdminGateway(t, nil, func(g *Gateway) { g.Now = fixedClock(now) })
	ws, _, mgmt := a.workspace(10 * usdNanos)
	capped := a.key(ws, store.KeyStandard, usdNanos, store.ResetNever)
	kid := kidOf(t, capped)
	ctx := t.Context()
	if _, err := a.s.Settle(ctx, store.SettleParams{Generation: &store.Generation{WorkspaceID: ws, KeyID: kid, CostNanos: 300_000_000}}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.s.Reserve(ctx, store.ReserveParams{WorkspaceID: ws, KeyID: kid, AmountNanos: 200_000_000, ExpiresAt: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	k := a.mustDo(200, http.MethodGet, "/keys/"+kid, mgmt, "")["data"].(map[string]any)
	if k["usage_nanos"] != float64(300_000_000) || k["usage"] != 0.3 || k["reserved_nanos"] != float64(200_000_000) || k["limit_remaining_nanos"] != float64(500_000_000) {
		t.Fatalf("usage %v", k)
	}
}

func TestAdminWorkspaces(t *testing.T) {
	a := newAdminGateway(t, nil, nil)
	wsA, _, mgmtA := a.workspace(3 * usdNanos)
	wsB, _, mgmtB := a.workspace(0)

	v := a.mustDo(201, http.MethodPost, "/workspaces", mgmtA, `{"name":"  research  ","key_name":"owner"}`)
	child := v["data"].(map[string]any)
	mk := child["management_key"].(map[string]any)
	childKey, _ := mk["key"].(string)
	if child["name"] != "research" || child["parent_id"] != wsA || child["current"] != false || mk["kind"] != "management" || mk["name"] != "owner" || mk["workspace_id"] != child["id"] {
		t.Fatalf("created %v", v)
	}
	// The child is run with its own key, has its own empty wallet, and sees only itself.
	credits := a.mustDo(200, http.MethodGet, "/credits", childKey, "")["data"].(map[string]any)
	if credits["workspace_id"] != child["id"] || credits["balance_nanos"] != float64(0) {
		t.Fatalf("child credits %v", credits)
	}
	if got := listIDs(a.mustDo(200, http.MethodGet, "/workspaces", childKey, "")); !reflect.DeepEqual(got, []string{child["id"].(string)}) {
		t.Fatalf("child lists %v", got)
	}
	if got := listIDs(a.mustDo(200, http.MethodGet, "/keys", childKey, "")); len(got) != 1 || got[0] != mk["id"] {
		t.Fatalf("child keys %v", got)
	}
	// The parent's key does not act on the child.
	status, body := a.do(http.MethodGet, "/keys/"+mk["id"].(string), mgmtA, "")
	wantError(t, "parent reads the child's key", status, body, 404, CodeNotFound, "id")

	v = a.mustDo(201, http.MethodPost, "/workspaces", mgmtA, `{"name":"ops"}`)
	if v["data"].(map[string]any)["management_key"].(map[string]any)["name"] != "admin" {
		t.Fatalf("default key name: %v", v)
	}
	list := a.mustDo(200, http.MethodGet, "/workspaces", mgmtA, "")
	got := listIDs(list)
	if len(got) != 3 || got[0] != wsA || got[1] != child["id"] || item(t, list, wsA)["current"] != true {
		t.Fatalf("A lists %v", list)
	}
	if got := a.walk("/workspaces", mgmtA, 1); len(got) != 3 {
		t.Fatalf("walked %v", got)
	}
	if got := listIDs(a.mustDo(200, http.MethodGet, "/workspaces", mgmtB, "")); len(got) != 1 || got[0] != wsB {
		t.Fatalf("B lists %v", got)
	}

	for _, b := range []struct{ body, param string }{
		{`{}`, "name"}, {`{"name":"   "}`, "name"}, {`{"name":7}`, "name"}, {`{"name":"x","credits":5}`, "credits"},
	} {
		status, v := a.do(http.MethodPost, "/workspaces", mgmtA, b.body)
		wantError(t, "POST /workspaces "+b.body, status, v, 400, CodeValidation, b.param)
	}
}

func TestAdminCredits(t *testing.T) {
	a := newAdminGateway(t, nil, nil)
	ws, _, mgmt := a.workspace(usdNanos)
	other, _, _ := a.workspace(0)
	if _, err := a.s.Reserve(t.Context(), store.ReserveParams{WorkspaceID: ws, AmountNanos: usdNanos / 4, ExpiresAt: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	c := a.mustDo(200, http.MethodGet, "/credits", mgmt, "")["data"].(map[string]any)
	if c["balance_nanos"] != float64(usdNanos) || c["reserved_nanos"] != float64(usdNanos/4) || c["available_nanos"] != float64(3*usdNanos/4) || c["available"] != 0.75 || c["object"] != "credits" {
		t.Fatalf("credits %v", c)
	}
	steps := []struct {
		body  string
		added int64
	}{
		{`{"amount_usd":"10.50"}`, 10_500_000_000},
		{`{"amount_usd":2.25,"note":"invoice 42"}`, 2_250_000_000},
		{`{"amount_nanos":1}`, 1},
		{`{"amount_usd":"$0.000000001"}`, 1},
	}
	balance := usdNanos
	for _, st := range steps {
		balance += st.added
		c := a.mustDo(200, http.MethodPost, "/credits", mgmt, st.body)["data"].(map[string]any)
		if c["added_nanos"] != float64(st.added) || c["balance_nanos"] != float64(balance) {
			t.Fatalf("POST %s: %v", st.body, c)
		}
	}
	if b, _ := a.s.GetBalance(t.Context(), other); b.BalanceNanos != 0 {
		t.Fatal("a top-up reached another workspace")
	}
	for _, b := range []struct{ body, param string }{
		{`{}`, "amount_usd"},
		{`{"amount_usd":"0"}`, "amount_usd"},
		{`{"amount_nanos":0}`, "amount_nanos"},
		{`{"amount_usd":"-5"}`, "amount_usd"},
		{`{"amount_usd":"1e3"}`, "amount_usd"},
		{`{"amount_usd":1e3}`, "amount_usd"},
		{`{"amount_usd":"ten"}`, "amount_usd"},
		{`{"amount_usd":null}`, "amount_usd"},
		{`{"amount_usd":"1000000.000000001"}`, "amount_usd"},
		{`{"amount_nanos":"5"}`, "amount_nanos"},
		{`{"amount_nanos":1e3}`, "amount_nanos"},
		{`{"amount_usd":"1","amount_nanos":1}`, "amount_usd"},
		{`{"amount_usd":"1","currency":"EUR"}`, "currency"},
		{`{"amount_usd":"1","note":5}`, "note"},
	} {
		status, v := a.do(http.MethodPost, "/credits", mgmt, b.body)
		wantError(t, "POST /credits "+b.body, status, v, 400, CodeValidation, b.param)
	}
	if b, _ := a.s.GetBalance(t.Context(), ws); b.BalanceNanos != balance {
		t.Fatalf("refused top-ups changed the balance: %+v", b)
	}

	a.g.DisableCreditTopUp = true
	status, v := a.do(http.MethodPost, "/credits", mgmt, `{"amount_usd":"1"}`)
	wantError(t, "top-up disabled", status, v, 403, CodeForbidden, "")
	a.mustDo(200, http.MethodGet, "/credits", mgmt, "")
}

func TestAdminActivity(t *testing.T) {
	now := time.Date(2025, 5, 14, 15, 0, 0, 0, time.UTC)
	a := newAdminGateway(t, nil, func(g *Gateway) { g.Now = fixedClock(now) })
	wsA, stdA, mgmtA := a.workspace(100 * usdNanos)
	wsB, stdB, mgmtB := a.workspace(100 * usdNanos)
	k1, k2, kB := kidOf(t, stdA), kidOf(t, mgmtA), kidOf(t, stdB)
	day := func(d, h int) time.Time { return time.Date(2025, 5, d, h, 0, 0, 0, time.UTC) }
	gens := []store.Generation{
		{WorkspaceID: wsA, KeyID: k1, Model: "gpt", Provider: "openai", CreatedAt: day(13, 9), InputTokens: 100, CacheReadTokens: 20, OutputTokens: 30, ReasoningTokens: 5, CostNanos: 1000},
		{WorkspaceID: wsA, KeyID: k2, Model: "gpt", Provider: "openai", CreatedAt: day(13, 23), InputTokens: 1, OutputTokens: 2, CostNanos: 10},
		{WorkspaceID: wsA, KeyID: k1, Model: "gpt", Provider: "azure", CreatedAt: day(13, 10), InputTokens: 5, CostNanos: 5},
		{WorkspaceID: wsA, KeyID: k1, Model: "claude", Provider: "anthropic", CreatedAt: day(14, 1), CacheWriteTokens: 7, OutputTokens: 3, CostNanos: 70},
		{WorkspaceID: wsA, KeyID: k1, Model: "gpt", Provider: "openai", CreatedAt: day(1, 0), CostNanos: 1}, // before the default range
		{WorkspaceID: wsB, KeyID: kB, Model: "gpt", Provider: "openai", CreatedAt: day(13, 9), InputTokens: 999, CostNanos: 99999},
	}
	for i := range gens {
		if _, err := a.s.Settle(t.Context(), store.SettleParams{Generation: &gens[i]}); err != nil {
			t.Fatal(err)
		}
	}

	// Default range: the 30 days up to the end of today.
	v := a.mustDo(200, http.MethodGet, "/activity", mgmtA, "")
	if v["from"] != "2025-04-15T00:00:00Z" || v["to"] != "2025-05-15T00:00:00Z" {
		t.Fatalf("default range %v to %v", v["from"], v["to"])
	}
	wantIDs := []string{"2025-05-01|gpt|openai", "2025-05-13|gpt|azure", "2025-05-13|gpt|openai", "2025-05-14|claude|anthropic"}
	if got := listIDs(v); !reflect.DeepEqual(got, wantIDs) {
		t.Fatalf("rows %v", got)
	}
	row := item(t, v, "2025-05-13|gpt|openai")
	wantRow := map[string]any{"object": "activity", "date": "2025-05-13", "model": "gpt", "provider": "openai",
		"requests": float64(2), "prompt_tokens": float64(121), "completion_tokens": float64(37), "cost_nanos": float64(1010), "cost": 0.00000101}
	for k, w := range wantRow {
		if row[k] != w {
			t.Errorf("row %s = %v, want %v", k, row[k], w)
		}
	}
	if tot := v["totals"].(map[string]any); tot["requests"] != float64(5) || tot["cost_nanos"] != float64(1086) {
		t.Fatalf("totals %v", tot)
	}
	if got := a.walk("/activity", mgmtA, 3); !reflect.DeepEqual(got, wantIDs) {
		t.Fatalf("walked %v", got)
	}
	queries := []struct {
		query string
		want  []string
	}{
		{"from=2025-05-13&to=2025-05-14", wantIDs[1:3]},
		{"from=2025-05-13T10:00:00Z&to=2025-05-14T00:00:00Z", []string{"2025-05-13|gpt|azure", "2025-05-13|gpt|openai"}},
		{"from=2025-05-13T12:00:00%2B02:00", wantIDs[1:]},
		{"from=2025-05-13T12:00:00+02:00", wantIDs[1:]},
		{"from=2025-05-13&key_id=" + k2, []string{"2025-05-13|gpt|openai"}},
		{"from=2025-05-14&to=2025-05-15&limit=1", wantIDs[3:]},
		{"from=2020-01-01&to=2020-02-01", nil},
		{"to=2025-05-02", wantIDs[:1]},
	}
	for _, q := range queries {
		if got := listIDs(a.mustDo(200, http.MethodGet, "/activity?"+q.query, mgmtA, "")); !reflect.DeepEqual(got, q.want) {
			t.Errorf("%s: %v, want %v", q.query, got, q.want)
		}
	}
	// B sees only its own.
	v = a.mustDo(200, http.MethodGet, "/activity", mgmtB, "")
	if got := listIDs(v); !reflect.DeepEqual(got, []string{"2025-05-13|gpt|openai"}) || item(t, v, got[0])["cost_nanos"] != float64(99999) {
		t.Fatalf("B's activity %v", v)
	}

	bad := []struct {
		query  string
		status int
		code   string
		param  string
	}{
		{"from=yesterday", 400, CodeValidation, "from"},
		{"to=2025-13-01", 400, CodeValidation, "to"},
		{"from=2025-05-14&to=2025-05-14", 400, CodeValidation, "to"},
		{"from=2025-05-15&to=2025-05-14", 400, CodeValidation, "to"},
		{"key_id=" + kB, 404, CodeNotFound, "key_id"},
		{"key_id=nosuchkey", 404, CodeNotFound, "key_id"},
		{"limit=abc", 400, CodeValidation, "limit"},
		{"after=2025-05-13|gpt|nowhere", 400, CodeValidation, "after"},
	}
	for _, b := range bad {
		status, v := a.do(http.MethodGet, "/activity?"+strings.ReplaceAll(b.query, "|", "%7C"), mgmtA, "")
		wantError(t, b.query, status, v, b.status, b.code, b.param)
	}
}

func TestKeyLimitError(t *testing.T) {
	now := time.Date(2025, 5, 14, 23, 59, 0, 0, time.UTC)
	if keyLimitError(store.ErrInsufficientFunds, now) != nil || keyLimitError(errors.New("x"), now) != nil {
		t.Fatal("keyLimitError mapped another error")
	}
	tests := []struct {
		name       string
		le         store.KeyLimitError
		retryAfter string
		contains   []string
	}{
		{"daily, nothing in flight", store.KeyLimitError{KeyID: "k", LimitNanos: usdNanos, LimitReset: store.ResetDaily, SpentNanos: 900_000_000, AmountNanos: 200_000_000,
			PeriodStart: time.Date(2025, 5, 14, 0, 0, 0, 0, time.UTC), PeriodEnd: time.Date(2025, 5, 15, 0, 0, 0, 0, time.UTC)},
			"60", []string{"limit of 1 USD", "0.9 USD spent today", "up to 0.2 USD", "resets at 2025-05-15T00:00:00Z"}},
		{"weekly, requests in flight", store.KeyLimitError{KeyID: "k", LimitNanos: usdNanos, LimitReset: store.ResetWeekly, SpentNanos: 100, ReservedNanos: 900_000_000, AmountNanos: 200_000_000,
			PeriodStart: time.Date(2025, 5, 12, 0, 0, 0, 0, time.UTC), PeriodEnd: time.Date(2025, 5, 19, 0, 0, 0, 0, time.UTC)},
			"", []string{"this week", "0.9 USD held by requests in flight"}},
		{"never resets", store.KeyLimitError{KeyID: "k", LimitNanos: 5 * usdNanos, SpentNanos: 5 * usdNanos, AmountNanos: 1},
			"", []string{"in total", "PATCH /keys/{id}"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			le := tc.le
			e := keyLimitError(fmt.Errorf("reserving: %w", &le), now)
			if e == nil || e.Status != 429 || e.Code != CodeKeyLimitExceeded {
				t.Fatalf("keyLimitError = %+v", e)
			}
			for _, s := range tc.contains {
				if !strings.Contains(e.Message, s) {
					t.Errorf("message %q lacks %q", e.Message, s)
				}
			}
			w := httptest.NewRecorder()
			writeError(w, SurfaceOpenAI, e, "")
			if got := w.Header().Get("Retry-After"); got != tc.retryAfter {
				t.Errorf("Retry-After %q, want %q", got, tc.retryAfter)
			}
			var v map[string]any
			_ = json.Unmarshal(w.Body.Bytes(), &v)
			if v["limit_nanos"] != float64(le.LimitNanos) || v["required_nanos"] != float64(le.AmountNanos) || v["error"].(map[string]any)["code"] != CodeKeyLimitExceeded {
				t.Errorf("body %v", v)
			}
		})
	}
}
