package module

import (
	"context"
	"net/http"
	"path/filepath"
	"testing"

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
