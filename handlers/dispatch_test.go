package handlers

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/internal/pricing"
	"github.com/modelgateway/caddy-modelgateway/providers/mock"
)

// Dispatch runs a chat row and an embeddings row of a batch under the batch's budget: each
// row is answered as through HTTP and recorded, the budget shrinks by exactly the rows'
// costs, and nothing else is reserved (no lease, no reservation per row).
func TestDispatchRowsUnderABatchBudget(t *testing.T) {
	mk := mock.New(mock.Config{Name: "mock", Text: "a short answer"})
	chat := route("mock", "m-1", "1", "2")
	chat.Provider, chat.MaxOutputTokens = mk, 1000
	a := newAdminGateway(t, []*Model{
		{Name: "m", Routes: []Route{chat}},
		{Name: "emb", Routes: []Route{{ProviderName: "mock", Provider: mk, UpstreamModel: "emb-1", Price: pricing.Price{Input: 100_000_000}}}},
	}, nil)
	t.Cleanup(func() { _ = a.g.Close() })
	ctx := context.Background()
	ws, std, _ := a.workspace(100 * usdNanos)
	key, err := a.s.GetKey(ctx, kidOf(t, std))
	if err != nil {
		t.Fatal(err)
	}
	caller := &Caller{Key: key}
	const budgetNanos = 2 * usdNanos
	budget, err := a.g.ledger.ReserveBatch(ctx, ws, key.ID, budgetNanos, time.Now().Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}

	var costs int64
	for _, row := range []struct{ path, body, object string }{
		{"/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, "chat.completion"},
		{"/embeddings", `{"model":"emb","input":"hello"}`, "list"},
	} {
		w := httptest.NewRecorder()
		if err := a.g.Dispatch(ctx, caller, budget, http.MethodPost, row.path, []byte(row.body), w); err != nil {
			t.Fatal(err)
		}
		var v map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &v); err != nil || w.Code != http.StatusOK || v["object"] != row.object {
			t.Fatalf("%s: %d %s", row.path, w.Code, w.Body)
		}
		gen, err := a.s.GetGeneration(ctx, ws, w.Header().Get("X-Generation-Id"))
		if err != nil || gen.Status != http.StatusOK || gen.Endpoint != row.path || gen.CostNanos <= 0 {
			t.Fatalf("%s: generation %+v, %v", row.path, gen, err)
		}
		costs += gen.CostNanos
		// Nothing is held but the budget: no lease, no reservation of the row's own.
		if st := a.g.ledger.LeaseStats(); st.Leases != 0 {
			t.Fatalf("%s: %d leases taken", row.path, st.Leases)
		}
		b, err := a.s.GetBalance(ctx, ws)
		if err != nil {
			t.Fatal(err)
		}
		if b.ReservedNanos != budgetNanos-costs || b.BalanceNanos != 100*usdNanos-costs {
			t.Fatalf("after %s: %+v, want the budget less %d held and charged", row.path, b, costs)
		}
	}
	if budget.Charged() != costs || budget.Remaining() != budgetNanos-costs {
		t.Fatalf("budget charged %d, remaining %d; rows cost %d", budget.Charged(), budget.Remaining(), costs)
	}

	// A row beyond what the budget has left is refused as a wallet would refuse it, and
	// nothing is reserved for it.
	small, err := a.g.ledger.ReserveBatch(ctx, ws, key.ID, 1, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	if err := a.g.Dispatch(ctx, caller, small, http.MethodPost, "/chat/completions", []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`), w); err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	_ = json.Unmarshal(w.Body.Bytes(), &v)
	wantError(t, "a row beyond its budget", w.Code, v, http.StatusPaymentRequired, CodeInsufficientFunds, "")
	if err := small.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := budget.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if b, _ := a.s.GetBalance(ctx, ws); b.ReservedNanos != 0 || b.BalanceNanos != 100*usdNanos-costs {
		t.Fatalf("after the batch: %+v", b)
	}
}

// Dispatch authorises the caller against the route table as ServeHTTP does: a management
// key cannot run an inference row.
func TestDispatchChecksTheCallersKind(t *testing.T) {
	a := newAdminGateway(t, []*Model{{Name: "m", Routes: []Route{route("mock", "m-1", "1", "2")}}}, nil)
	ctx := context.Background()
	_, _, mgmt := a.workspace(usdNanos)
	key, err := a.s.GetKey(ctx, kidOf(t, mgmt))
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	if err := a.g.Dispatch(ctx, &Caller{Key: key}, nil, http.MethodPost, "/chat/completions", []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`), w); err != nil {
		t.Fatal(err)
	}
	if w.Code != http.StatusForbidden {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
}
