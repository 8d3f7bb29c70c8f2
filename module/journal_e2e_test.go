package module

import (
	"context"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/caddyserver/caddy/v2"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// TestJournaledSettlementsReadBack: a wallet large enough for credit leases gets its
// answers acknowledged from the settlement journal (durability process, the default), and
// the gateway's own read routes wait for the journal: right after each answer, its
// generation record and the wallet already show exactly what the client was charged.
func TestJournaledSettlementsReadBack(t *testing.T) {
	up := newFakeOpenAI(t, chatOK("ok", 10, 20))
	env := startGateway(t, providerBlock("primary", up.URL)+pricedModel("gpt-test", `
			route primary gpt-4o-mini {
				input 1.00
				output 2.00
				max_output_tokens 1000
			}`), "")
	a := env.team(100 * usd)
	client := env.openai(a.std)
	var spent int64
	for i := range 20 {
		var httpResp *http.Response
		if _, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
			Model: "gpt-test", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
		}, option.WithResponseInto(&httpResp)); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		// No waiting: the first read must find it.
		id := httpResp.Header.Get("X-Generation-Id")
		rec := env.expect(200, http.MethodGet, a.std, "/generations?id="+id, "")["data"].(map[string]any)
		cost, _ := rec["cost_nanos"].(float64)
		if cost <= 0 {
			t.Fatalf("generation %s: cost %v", id, rec["cost_nanos"])
		}
		spent += int64(cost)
		credits := env.expect(200, http.MethodGet, a.mgmt, "/credits", "")["data"].(map[string]any)
		if credits["balance_nanos"] != float64(100*usd-spent) {
			t.Fatalf("after %d answers: balance %v, want %d", i+1, credits["balance_nanos"], 100*usd-spent)
		}
	}
	if segs, _ := filepath.Glob(env.dbPath + "-settlements/*.log"); len(segs) == 0 {
		t.Error("no settlement journal next to the database: the answers were not journaled")
	}
}

// TestShutdownReturnsLeases: a key's credit lease lingers after its request (2 s by
// default), holding credit; stopping Caddy returns it before the store closes, whatever
// order Caddy cleans the app and the handler up in, so a restarted gateway does not start
// with credit held for a process that is gone (only the sweeper would free it, much later),
// and the store is closed once nothing uses it.
func TestShutdownReturnsLeases(t *testing.T) {
	up := newFakeOpenAI(t, chatOK("ok", 10, 20))
	env := startGateway(t, "\t\tcredit_lease_linger 2s\n"+providerBlock("primary", up.URL)+pricedModel("gpt-test", pricedRoute("primary", "gpt-4o-mini")), "")
	ws, key := env.workspace(100 * usd)
	if status, _, body := env.post(key, "/chat/completions", `{"model":"gpt-test","messages":[{"role":"user","content":"hi"}]}`); status != 200 {
		t.Fatalf("%d %s", status, body)
	}
	if b := env.balance(ws); b.ReservedNanos == 0 {
		t.Fatal("no credit held after the request: the test needs a lingering lease")
	}
	if err := caddy.Stop(); err != nil {
		t.Fatal(err)
	}
	// Caddy is gone: read the file.
	b, err := env.store.GetBalance(context.Background(), ws)
	if err != nil {
		t.Fatal(err)
	}
	if b.ReservedNanos != 0 || b.BalanceNanos != 100*usd-(10*1000+20*2000) {
		t.Fatalf("after shutdown: %+v, want nothing reserved and the one charge", b)
	}
	count := 0
	stores.Range(func(key, value any) bool { count++; return true })
	if count != 0 {
		t.Fatalf("%d store handles left open after shutdown", count)
	}
}
