package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/billing"
	"github.com/modelgateway/caddy-modelgateway/providers"
)

// refusingChat is a chat provider whose every call fails with a copy of its error.
type refusingChat struct {
	name string
	ue   providers.UpstreamError
}

func (p refusingChat) Name() string { return p.name }

func (p refusingChat) Chat(context.Context, *providers.Request) (*providers.Response, error) {
	ue := p.ue
	return nil, &ue
}

func (p refusingChat) ChatStream(ctx context.Context, r *providers.Request) (providers.Stream, error) {
	_, err := p.Chat(ctx, r)
	return nil, err
}

// lastOutcome keeps the outcome of the last request begun.
type lastOutcome struct{ o Outcome }

func (l *lastOutcome) Began(_ context.Context, o Outcome) { l.o = o }
func (l *lastOutcome) Finished(context.Context, Outcome)  {}

// TestChargeKeepsRoutesAndFailures: the charge of a call whose every route failed names
// its routes in order, and the charge read back from JSON (as a job row keeps it) gives
// the client the same answer and diagnostics as the call did: they are built from the
// charge, not from the routes and errors of the attempts.
func TestChargeKeepsRoutesAndFailures(t *testing.T) {
	limited := route("lim", "l-1", "1", "2")
	// No message: the client is told the transport's error.
	limited.Provider = refusingChat{"lim", providers.UpstreamError{Provider: "lim", Status: 429, Category: providers.CategoryRateLimited,
		Retryable: true, Code: "rate_limit_exceeded", Param: "model", RetryAfter: 1500 * time.Millisecond, Payload: `{"error":"slow"}`,
		Err: errors.New("the transport's own words")}}
	busy := route("busy", "b-1", "1", "2")
	// No message and no transport error: the client is told the status.
	busy.Provider = refusingChat{"busy", providers.UpstreamError{Provider: "busy", Status: 429, Category: providers.CategoryRateLimited,
		Retryable: true, RetryAfter: 3 * time.Second}}
	// Each route is tried once: one failure each.
	limited.Policy, busy.Policy = Policy{Retries: -1}, Policy{Retries: -1}
	var seen lastOutcome
	a := newAdminGateway(t, []*Model{{Name: "m", Routes: []Route{limited, busy}}}, func(g *Gateway) { g.Observer = &seen })
	t.Cleanup(func() { _ = a.g.Close() })
	_, std, _ := a.workspace(10 * usdNanos)

	status, answer := a.do(http.MethodPost, "/chat/completions", std, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	if status != http.StatusTooManyRequests || answer["retry_after_seconds"] != float64(3) {
		t.Fatalf("answer %d %v", status, answer)
	}
	c := seen.o.c
	ch := c.charge()
	if want := []billing.RouteName{{Provider: "lim", UpstreamModel: "l-1"}, {Provider: "busy", UpstreamModel: "b-1"}}; !reflect.DeepEqual(ch.Routes, want) {
		t.Fatalf("routes %+v, want %+v", ch.Routes, want)
	}
	if len(c.Failures) != 2 || c.Failures[0].Message != "the transport's own words" || c.Failures[1].Message != "status 429" {
		t.Fatalf("failures %+v", c.Failures)
	}

	row, err := json.Marshal(ch)
	if err != nil {
		t.Fatal(err)
	}
	back := &call{model: c.model, skipped: c.skipped}
	if err := json.Unmarshal(row, &back.Charge); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back.Routes, ch.Routes) || !reflect.DeepEqual(back.Failures, c.Failures) {
		t.Fatalf("read back: routes %+v failures %+v", back.Routes, back.Failures)
	}
	jsonOf := func(v any) string {
		t.Helper()
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if got, want := jsonOf(back.diagnostics()), jsonOf(c.diagnostics()); got != want {
		t.Fatalf("diagnostics read back:\n got %s\nwant %s", got, want)
	}
	got, want := back.allFailed(), c.allFailed()
	if got.Status != want.Status || got.Code != want.Code || got.Message != want.Message || jsonOf(got.Extra) != jsonOf(want.Extra) {
		t.Fatalf("answer read back:\n got %d %s %s %s\nwant %d %s %s %s", got.Status, got.Code, got.Message, jsonOf(got.Extra),
			want.Status, want.Code, want.Message, jsonOf(want.Extra))
	}
	// What the client was told is what the charge read back tells.
	for k, v := range got.Extra {
		var told any
		if err := json.Unmarshal([]byte(jsonOf(v)), &told); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(answer[k], told) {
			t.Errorf("%s: the client was told %v, the charge read back tells %v", k, answer[k], told)
		}
	}
}

// TestFailedOverChargeReadBack: a failed-over stream's charge read back from JSON is priced
// as the call was: what the broken attempt consumed at its route's prices, the rest at the
// prices of the route that ended the stream.
func TestFailedOverChargeReadBack(t *testing.T) {
	broken, cont := route("broken", "x", "1", "2"), route("cont", "c", "3", "4")
	m := &Model{Name: "m", Routes: []Route{broken, cont}}
	c := &call{model: m, route: &broken}
	c.reportTokens(providers.Usage{Input: 1000, Output: 10})
	c.carry()
	c.route = &cont
	// The continuation reports its own usage; the call's counts the broken attempt's too.
	c.reportTokens(usagePlus(c.carriedTokens(), providers.Usage{Input: 1020, Output: 7}))
	lines, total := c.cost()
	// 1000 and 10 tokens at 1 and 2 USD a million, then 1020 and 7 at 3 and 4.
	if want := int64(1000*1000 + 10*2000 + 1020*3000 + 7*4000); total != want || len(lines) != 4 {
		t.Fatalf("cost %d %+v, want %d in 4 lines", total, lines, want)
	}
	if got := c.tokens(); got != (providers.Usage{Input: 2020, Output: 17}) {
		t.Fatalf("tokens %+v", got)
	}

	row, err := json.Marshal(c.Charge)
	if err != nil {
		t.Fatal(err)
	}
	back := &call{model: m, route: &cont}
	if err := json.Unmarshal(row, &back.Charge); err != nil {
		t.Fatal(err)
	}
	if gotLines, gotTotal := back.cost(); gotTotal != total || !reflect.DeepEqual(gotLines, lines) {
		t.Fatalf("read back: cost %d %+v, want %d %+v", gotTotal, gotLines, total, lines)
	}
}
