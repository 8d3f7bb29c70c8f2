package handlers

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelgateway/caddy-modelgateway/providers/mock"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// failingSettle is a store whose Settle fails, as when the disk is full.
type failingSettle struct{ store.Store }

func (failingSettle) Settle(context.Context, store.SettleParams) (store.Generation, error) {
	return store.Generation{}, errors.New("disk I/O error")
}

// An answer whose charge cannot be recorded is not delivered: not the body of a plain
// answer, not the end of a stream.
func TestAnswerNotDeliveredWhenItCannotBeRecorded(t *testing.T) {
	mk := mock.New(mock.Config{Name: "mock", Chunks: 3, Text: "secret answer text"})
	models := []*Model{{Name: "m", Routes: []Route{{ProviderName: "mock", Provider: mk, UpstreamModel: "m-1", Price: route("mock", "m-1", "1", "2").Price}}}}
	a := newAdminGateway(t, models, func(g *Gateway) {})
	_, std, _ := a.workspace(5 * usdNanos)
	a.g.Store = failingSettle{a.s}
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
			req.Header.Set("Authorization", "Bearer "+std)
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
			if rec.Code != 500 || strings.Contains(body, "secret answer") || !strings.Contains(body, "could not record") {
				t.Fatalf("%d %s", rec.Code, body)
			}
		})
	}
}
