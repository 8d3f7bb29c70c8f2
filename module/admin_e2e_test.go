package module

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/modelgateway/caddy-modelgateway/store"
)

// TestAdministrationEndToEnd runs two teams side by side through the management routes:
// each sees and changes only its own keys, credits, activity and generations.
func TestAdministrationEndToEnd(t *testing.T) {
	up := newFakeOpenAI(t, chatUsage(100, 0, 50, 0))
	env := startGateway(t, discoveryConfig(up.URL), "")
	a, b := env.team(5*usd), env.team(5*usd)

	// Standard keys are refused on every management route; no key is 401.
	for _, rt := range [][2]string{{"GET", "/keys"}, {"POST", "/keys"}, {"GET", "/keys/x"}, {"PATCH", "/keys/x"}, {"DELETE", "/keys/x"},
		{"GET", "/workspaces"}, {"POST", "/workspaces"}, {"GET", "/credits"}, {"POST", "/credits"}, {"GET", "/activity"}} {
		env.expectError(403, "forbidden", "", rt[0], a.std, rt[1], `{}`)
		env.expectError(401, "unauthorised", "", rt[0], "", rt[1], `{}`)
	}

	// Keys: create one for a with a weekly limit; its plaintext is shown once and works.
	created := env.expect(201, http.MethodPost, a.mgmt, "/keys", `{"name":"batch jobs","limit_usd":"1.50","limit_reset":"weekly"}`)["data"].(map[string]any)
	newKey, kid := created["key"].(string), created["id"].(string)
	if created["limit_nanos"] != float64(1_500_000_000) || created["limit_reset"] != "weekly" || created["resets_at"] == nil {
		t.Fatalf("created %v", created)
	}
	self := env.expect(200, http.MethodGet, newKey, "/key", "")["data"].(map[string]any)
	if self["id"] != kid || self["limit_remaining_nanos"] != float64(1_500_000_000) {
		t.Fatalf("GET /key %v", self)
	}
	if again := env.expect(200, http.MethodGet, a.mgmt, "/keys/"+kid, "")["data"].(map[string]any); again["key"] != nil {
		t.Fatal("the plaintext was shown twice")
	}
	aKeys := env.walkList(a.mgmt, "/keys", 1)
	bKeys := env.walkList(b.mgmt, "/keys", 100)
	if len(aKeys) != 3 || !slices.Contains(aKeys, kid) || len(bKeys) != 2 {
		t.Fatalf("a's keys %v, b's keys %v", aKeys, bKeys)
	}
	for _, k := range bKeys {
		if slices.Contains(aKeys, k) {
			t.Fatal("a lists b's key")
		}
		// b's keys are not found from a, for every verb.
		env.expectError(404, "not_found", "id", "GET", a.mgmt, "/keys/"+k, "")
		env.expectError(404, "not_found", "id", "PATCH", a.mgmt, "/keys/"+k, `{"disabled":true}`)
		env.expectError(404, "not_found", "id", "DELETE", a.mgmt, "/keys/"+k, "")
	}
	env.expect(200, http.MethodGet, b.std, "/key", "") // b's keys still work

	updated := env.expect(200, http.MethodPatch, a.mgmt, "/keys/"+kid, `{"name":"nightly","disabled":true}`)["data"].(map[string]any)
	if updated["name"] != "nightly" || updated["status"] != "disabled" || updated["limit_nanos"] != float64(1_500_000_000) {
		t.Fatalf("updated %v", updated)
	}
	env.expectError(401, "unauthorised", "", "GET", newKey, "/key", "")
	env.expect(200, http.MethodPatch, a.mgmt, "/keys/"+kid, `{"disabled":false}`)
	env.expect(200, http.MethodGet, newKey, "/key", "")
	env.expectError(400, "validation_error", "limit_reset", "PATCH", a.mgmt, "/keys/"+kid, `{"limit_reset":"hourly"}`)
	env.expectError(400, "validation_error", "secret", "PATCH", a.mgmt, "/keys/"+kid, `{"secret":"x"}`)
	revoked := env.expect(200, http.MethodDelete, a.mgmt, "/keys/"+kid, "")
	if revoked["deleted"] != true || revoked["data"].(map[string]any)["status"] != "revoked" {
		t.Fatalf("revoked %v", revoked)
	}
	env.expectError(401, "unauthorised", "", "GET", newKey, "/key", "")

	// Credits: a tops up its own wallet only.
	c := env.expect(200, http.MethodPost, a.mgmt, "/credits", `{"amount_usd":"2.50","note":"invoice 7"}`)["data"].(map[string]any)
	if c["balance_nanos"] != float64(7_500_000_000) || c["workspace_id"] != a.ws {
		t.Fatalf("top-up %v", c)
	}
	if env.balance(a.ws).BalanceNanos != 7_500_000_000 || env.balance(b.ws).BalanceNanos != 5*usd {
		t.Fatal("the top-up did not land on a's wallet alone")
	}
	if got := env.expect(200, http.MethodGet, b.mgmt, "/credits", "")["data"].(map[string]any)["balance_nanos"]; got != float64(5*usd) {
		t.Fatalf("b's credits %v", got)
	}
	env.expectError(400, "validation_error", "amount_usd", "POST", a.mgmt, "/credits", `{"amount_usd":"-1"}`)
	env.expectError(400, "validation_error", "amount_nanos", "POST", a.mgmt, "/credits", `{"amount_nanos":0}`)

	// Workspaces: a creates one; its first management key runs it, and sees only it.
	ws := env.expect(201, http.MethodPost, a.mgmt, "/workspaces", `{"name":"research"}`)["data"].(map[string]any)
	childKey := ws["management_key"].(map[string]any)["key"].(string)
	if ws["parent_id"] != a.ws {
		t.Fatalf("workspace %v", ws)
	}
	if got := itemIDs(env.expect(200, http.MethodGet, a.mgmt, "/workspaces", "")); len(got) != 2 || got[0] != a.ws || got[1] != ws["id"] {
		t.Fatalf("a's workspaces %v", got)
	}
	if got := itemIDs(env.expect(200, http.MethodGet, b.mgmt, "/workspaces", "")); len(got) != 1 || got[0] != b.ws {
		t.Fatalf("b's workspaces %v", got)
	}
	if got := itemIDs(env.expect(200, http.MethodGet, childKey, "/workspaces", "")); len(got) != 1 || got[0] != ws["id"] {
		t.Fatalf("the child's workspaces %v", got)
	}
	if got := env.expect(200, http.MethodGet, childKey, "/credits", "")["data"].(map[string]any)["balance_nanos"]; got != float64(0) {
		t.Fatalf("the child's wallet %v", got)
	}
	env.expectError(400, "validation_error", "name", "POST", a.mgmt, "/workspaces", `{}`)

	// Activity and generations: requests of both teams, each sees its own.
	genA := env.chatGeneration(a.std, a.ws, "gpt-4o-mini")
	env.chatGeneration(a.std, a.ws, "gpt-4o-mini")
	env.chatGeneration(a.std, a.ws, "mock-1:free")
	genB := env.chatGeneration(b.std, b.ws, "gpt-4o-mini")
	today := time.Now().UTC().Format(time.DateOnly)
	act := env.expect(200, http.MethodGet, a.mgmt, "/activity", "")
	if got := itemIDs(act); !slices.Equal(got, []string{today + "|gpt-4o-mini|primary", today + "|mock-1:free|mock"}) {
		t.Fatalf("a's activity %v", got)
	}
	row := findItem(t, act, today+"|gpt-4o-mini|primary")
	if row["requests"] != float64(2) || row["prompt_tokens"] != float64(200) || row["cost_nanos"] != float64(2*genA.CostNanos) {
		t.Fatalf("a's row %v (generation cost %d)", row, genA.CostNanos)
	}
	actB := env.expect(200, http.MethodGet, b.mgmt, "/activity?from="+today, "")
	if got := itemIDs(actB); len(got) != 1 || findItem(t, actB, got[0])["cost_nanos"] != float64(genB.CostNanos) {
		t.Fatalf("b's activity %v", actB)
	}
	aStd, _ := env.store.GetKey(context.Background(), kidOf(t, a.std))
	if got := itemIDs(env.expect(200, http.MethodGet, a.mgmt, "/activity?key_id="+aStd.ID+"&limit=1", "")); len(got) != 1 {
		t.Fatalf("one key's activity %v", got)
	}
	env.expectError(404, "not_found", "key_id", "GET", a.mgmt, "/activity?key_id="+kidOf(t, b.std), "")
	env.expectError(400, "validation_error", "from", "GET", a.mgmt, "/activity?from=last-week", "")
	env.expectError(400, "validation_error", "to", "GET", a.mgmt, "/activity?from=2025-02-02&to=2025-02-01", "")
	env.expectError(404, "not_found", "", "GET", b.std, "/generations?id="+genA.ID, "")
	env.expectError(404, "not_found", "", "GET", a.mgmt, "/generations?id="+genB.ID, "")
	env.expect(200, http.MethodGet, a.mgmt, "/generations?id="+genA.ID, "")
}

// TestKeySpendingLimitUnderConcurrency races many requests of a key with a spending
// limit against a wallet that could pay for all of them: the key is never charged past
// its limit, the refusals are 429 key_limit_exceeded, and raising the limit through
// PATCH /keys/{id} lets requests through again.
func TestKeySpendingLimitUnderConcurrency(t *testing.T) {
	// Each request reserves its worst case, about 60 prompt bytes at 1 USD/M plus 1,000
	// output tokens at 2 USD/M (0.00206 USD), and costs 10 + 500 tokens (0.00101 USD).
	up := newFakeOpenAI(t, func(w http.ResponseWriter, r *http.Request, req map[string]any) {
		time.Sleep(15 * time.Millisecond)
		chatOK("ok", 10, 500)(w, r, req)
	})
	env := startGateway(t, providerBlock("primary", up.URL)+pricedModel("gpt-test", `
			route primary gpt-4o-mini {
				input 1.00
				output 2.00
				max_output_tokens 1000
			}`), "")
	a := env.team(100 * usd)
	const limit = 10_000_000 // 0.01 USD
	kid, key := env.limitedKey(a.ws, limit, store.ResetMonthly)

	const n = 40
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[int]int{}
	var genIDs []string
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status, hdr, body := env.post(key, "/chat/completions", `{"model":"gpt-test","messages":[{"role":"user","content":"hi"}]}`)
			mu.Lock()
			defer mu.Unlock()
			statuses[status]++
			switch status {
			case 200:
				genIDs = append(genIDs, hdr.Get("X-Generation-Id"))
			case 429:
				if !strings.Contains(string(body), `"code":"key_limit_exceeded"`) {
					t.Errorf("429 body %s", body)
				}
			}
		}()
	}
	wg.Wait()
	if statuses[200] == 0 || statuses[429] == 0 || statuses[200]+statuses[429] != n {
		t.Fatalf("statuses %v", statuses)
	}
	// Then one at a time until the limit refuses, as the SDK sees it: a typed 429 that,
	// with nothing of the key in flight, tells when the limit resets. Waiting for each
	// generation record waits for its settlement, which releases its reservation.
	var spent int64
	for _, id := range genIDs {
		spent += env.generation(a.ws, id).CostNanos
	}
	client := env.openai(key)
	var apiErr *openai.Error
	for i := 0; ; i++ {
		var httpResp *http.Response
		_, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
			Model: "gpt-test", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
		}, option.WithResponseInto(&httpResp))
		if err == nil {
			spent += env.generation(a.ws, httpResp.Header.Get("X-Generation-Id")).CostNanos
			if i == 10 {
				t.Fatal("the limit never refused a request")
			}
			continue
		}
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 || apiErr.Code != "key_limit_exceeded" {
			t.Fatalf("over the limit: %v", err)
		}
		break
	}
	if ra, _ := strconv.Atoi(apiErr.Response.Header.Get("Retry-After")); ra <= 0 || ra > 31*86400 {
		t.Fatalf("Retry-After %q", apiErr.Response.Header.Get("Retry-After"))
	}
	if spent > limit {
		t.Fatalf("the key was charged %d nanos, past its limit of %d", spent, limit)
	}
	k := env.expect(200, http.MethodGet, a.mgmt, "/keys/"+kid, "")["data"].(map[string]any)
	if k["usage_nanos"] != float64(spent) || k["reserved_nanos"] != float64(0) {
		t.Fatalf("key usage %v, spent %d", k, spent)
	}
	if b := env.balance(a.ws); b.BalanceNanos != 100*usd-spent || b.ReservedNanos != 0 {
		t.Fatalf("balance %+v, spent %d", b, spent)
	}
	// Another key of the same wallet is not limited.
	unlimited := env.openai(a.std)
	if _, err := unlimited.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model: "gpt-test", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
	}); err != nil {
		t.Fatalf("an unlimited key of the same wallet: %v", err)
	}
	env.expect(200, http.MethodPatch, a.mgmt, "/keys/"+kid, `{"limit_usd":"1"}`)
	if _, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model: "gpt-test", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
	}); err != nil {
		t.Fatalf("after raising the limit: %v", err)
	}
}
