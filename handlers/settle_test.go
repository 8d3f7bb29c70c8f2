package handlers

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/modelgateway/caddy-modelgateway/providers/mock"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// failingSettle is a store whose settlements fail, as when the disk is full. It counts
// them by kind.
type failingSettle struct {
	store.Store
	exact, lease *atomic.Int64
}

func (f failingSettle) Settle(context.Context, store.SettleParams) (store.Generation, error) {
	f.exact.Add(1)
	return store.Generation{}, errors.New("disk I/O error")
}

func (f failingSettle) SettleLease(context.Context, store.SettleLeaseParams) (store.Generation, error) {
	f.lease.Add(1)
	return store.Generation{}, errors.New("disk I/O error")
}

// An answer whose charge cannot be recorded is not delivered: not the body of a plain
// answer, not the end of a stream. A 5 USD wallet's requests are admitted from a small
// credit lease; a wallet with barely more than the 1.00 USD preflight takes no lease, and
// each of its requests reserves and settles on its own.
func TestAnswerNotDeliveredWhenItCannotBeRecorded(t *testing.T) {
	mk := mock.New(mock.Config{Name: "mock", Chunks: 3, Text: "secret answer text"})
	models := []*Model{{Name: "m", Routes: []Route{{ProviderName: "mock", Provider: mk, UpstreamModel: "m-1", Price: route("mock", "m-1", "1", "2").Price}}}}
	a := newAdminGateway(t, models, func(g *Gateway) {})
	f := failingSettle{Store: a.s, exact: new(atomic.Int64), lease: new(atomic.Int64)}
	a.g.Store = f
	_, leased, _ := a.workspace(5 * usdNanos)
	answerNotDelivered(t, a, func() string { return leased })
	if f.lease.Load() == 0 || f.exact.Load() != 0 {
		t.Fatalf("5 USD wallet: %d lease and %d exact settlements, want leases only", f.lease.Load(), f.exact.Load())
	}
	// A fresh wallet each, too small for a credit lease.
	answerNotDelivered(t, a, func() string {
		_, k, _ := a.workspace(MinPreflightNanos + 20_000_000)
		return k
	})
	// (A request with a small max_tokens still fits a lease of 10 mUSD: /messages here.)
	if f.exact.Load() == 0 {
		t.Fatal("small wallets: no exact settlement")
	}
}

func answerNotDelivered(t *testing.T, a *adminGateway, key func() string) {
	t.Helper()
	for _, tc := range []struct {
		path, body string
	}{
		{"/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`},
		{"/messages", `{"model":"m","max_tokens":50,"messages":[{"role":"user","content":"hi"}]}`},
		{"/responses", `{"model":"m","input":"hi"}`},
		{"/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`},
		{"/messages", `{"model":"m","stream":true,"max_tokens":50,"messages":[{"role":"user","content":"hi"}]}`},
		{"/responses", `{"model":"m","stream":true,"input":"hi"}`},
	} {
		t.Run(tc.path+" "+tc.body[len(tc.body)-20:], func(t *testing.T) {
			req := httptest.NewRequest(http.MethodPost, "/v1"+tc.path, strings.NewReader(tc.body))
			req.Header.Set("Authorization", "Bearer "+key())
			rec := httptest.NewRecorder()
			a.g.ServeHTTP(rec, req, tc.path)
			body := rec.Body.String()
			if strings.Contains(tc.body, `"stream":true`) {
				if rec.Code != 200 || !strings.Contains(body, "could not record") || strings.Contains(body, "[DONE]") ||
					strings.Contains(body, "message_stop") || strings.Contains(body, "response.completed") {
					t.Fatalf("stream: %d %s", rec.Code, body)
				}
				return
			}
			if rec.Code != 503 || strings.Contains(body, "secret answer") || !strings.Contains(body, "could not record") || !strings.Contains(body, CodeStoreUnavailable) {
				t.Fatalf("%d %s", rec.Code, body)
			}
		})
	}
}
