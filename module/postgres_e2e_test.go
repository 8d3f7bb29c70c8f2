package module

import (
	"strings"
	"testing"
)

// The gateway configured with `store postgres {env.X}` serves and bills through PostgreSQL.
func TestGatewayOnPostgres(t *testing.T) {
	dsn := postgresSchema(t)
	up := newFakeOpenAI(t, chatOK("from postgres", 10, 5))
	env := startPostgresGateway(t, dsn, "\t\tcredit_lease_linger 0\n"+providerBlock("primary", up.URL)+pricedModel("gpt-test", pricedRoute("primary", "m")))
	env.store = openPostgres(t, dsn)
	ws, key := fundedKey(t, env.store, 5*usd)
	status, hdr, body := env.post(key, "/chat/completions", `{"model":"gpt-test","messages":[{"role":"user","content":"hi"}]}`)
	if status != 200 || !strings.Contains(string(body), "from postgres") {
		t.Fatalf("%d %s", status, body)
	}
	gen := env.generation(ws, hdr.Get("X-Generation-Id"))
	if gen.CostNanos != 20000 {
		t.Fatalf("generation %+v", gen)
	}
	if b := env.balance(ws); b.BalanceNanos != 5*usd-20000 || b.ReservedNanos != 0 {
		t.Fatalf("balance %+v", b)
	}
}
