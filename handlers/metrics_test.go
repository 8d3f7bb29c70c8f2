package handlers

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/modelgateway/caddy-modelgateway/billing"
	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// failingChat is a chat provider whose every call fails with a retryable 500.
type failingChat struct{}

func (failingChat) Name() string { return "flaky" }

func (failingChat) Chat(context.Context, *providers.Request) (*providers.Response, error) {
	return nil, &providers.UpstreamError{Provider: "flaky", Status: 500, Category: providers.CategoryServerError, Retryable: true, Message: "overloaded"}
}

func (p failingChat) ChatStream(ctx context.Context, r *providers.Request) (providers.Stream, error) {
	_, err := p.Chat(ctx, r)
	return nil, err
}

// TestMetricsCountRequests serves, through a Gateway counting into a fresh registry, a
// request that is retried on its first route and then falls back (opening that route's
// circuit), a stream that skips the open circuit, and a request the wallet refuses, and
// reads every series back.
func TestMetricsCountRequests(t *testing.T) {
	flaky := route("flaky", "f-1", "1", "2")
	flaky.Provider = failingChat{}
	// One retry, no wait between tries, a circuit that opens after two failures.
	flaky.Policy = Policy{Retries: 1, BackoffBase: time.Nanosecond, BackoffMax: time.Nanosecond, BreakerThreshold: 2, BreakerCooldown: time.Hour}
	good := route("good", "g-1", "1", "2")
	good.Provider = newBenchProvider()
	reg := prometheus.NewPedanticRegistry()
	a := newAdminGateway(t, []*Model{{Name: "m", Routes: []Route{flaky, good}}}, func(g *Gateway) {
		// A still clock: every duration observed is 0, in the first bucket.
		g.Now = fixedClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	})
	t.Cleanup(func() { _ = a.g.Close() })
	m, err := NewMetrics(reg, a.g.Registry)
	if err != nil {
		t.Fatal(err)
	}
	a.g.Metrics = m
	_, std, _ := a.workspace(10 * usdNanos)
	_, broke, _ := a.workspace(0)

	const chat = `{"model":"m","messages":[{"role":"user","content":"hi"}]`
	a.mustDo(http.StatusOK, http.MethodPost, "/chat/completions", std, chat+`}`)
	r := httptest.NewRequest(http.MethodPost, "http://gw/v1/chat/completions", strings.NewReader(chat+`,"stream":true}`))
	r.Header.Set("Authorization", "Bearer "+std)
	w := httptest.NewRecorder()
	a.g.ServeHTTP(w, r, "/chat/completions")
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "[DONE]") {
		t.Fatalf("stream: %d %s", w.Code, w.Body.String())
	}
	status, v := a.do(http.MethodPost, "/chat/completions", broke, chat+`}`)
	wantError(t, "no credit", status, v, http.StatusPaymentRequired, CodeInsufficientFunds, "")

	// The answer usage: 12 prompt and 10 completion tokens, then 12 and 15 streamed, at
	// 1 and 2 USD per million tokens.
	const want = `
# HELP model_gateway_breaker_open Routes whose circuit breaker is open (or half-open, awaiting its probe), by provider.
# TYPE model_gateway_breaker_open gauge
model_gateway_breaker_open{provider="flaky"} 1
model_gateway_breaker_open{provider="good"} 0
# HELP model_gateway_cost_nanodollars_total Cost billed in nanodollars (1e-9 USD), by model, provider and pricing dimension.
# TYPE model_gateway_cost_nanodollars_total counter
model_gateway_cost_nanodollars_total{dimension="input",model="m",provider="good"} 24000
model_gateway_cost_nanodollars_total{dimension="output",model="m",provider="good"} 50000
# HELP model_gateway_errors_total Failed upstream attempts, by endpoint, model, provider and failure category.
# TYPE model_gateway_errors_total counter
model_gateway_errors_total{category="server_error",endpoint="/chat/completions",model="m",provider="flaky"} 2
# HELP model_gateway_fallbacks_total Routes tried after an earlier route of the request failed, by the provider of the route tried.
# TYPE model_gateway_fallbacks_total counter
model_gateway_fallbacks_total{provider="good"} 1
# HELP model_gateway_requests_total Metered requests answered, by endpoint, model, the provider that answered (empty if none did) and HTTP status code.
# TYPE model_gateway_requests_total counter
model_gateway_requests_total{code="200",endpoint="/chat/completions",model="m",provider="good"} 2
model_gateway_requests_total{code="402",endpoint="/chat/completions",model="m",provider=""} 1
# HELP model_gateway_retries_total Attempts repeated on the same route after a failure, by provider.
# TYPE model_gateway_retries_total counter
model_gateway_retries_total{provider="flaky"} 1
# HELP model_gateway_usage_total Usage billed, by model, provider and pricing dimension, in the dimension's unit (tokens, characters, started seconds, images, pages, requests).
# TYPE model_gateway_usage_total counter
model_gateway_usage_total{dimension="input",model="m",provider="good"} 24
model_gateway_usage_total{dimension="output",model="m",provider="good"} 25
# HELP model_gateway_wallet_refusals_total Requests refused before any upstream call by the wallet, by reason: insufficient_funds, key_limit_exceeded or store_unavailable.
# TYPE model_gateway_wallet_refusals_total counter
model_gateway_wallet_refusals_total{reason="insufficient_funds"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"model_gateway_breaker_open", "model_gateway_cost_nanodollars_total", "model_gateway_errors_total",
		"model_gateway_fallbacks_total", "model_gateway_requests_total", "model_gateway_retries_total",
		"model_gateway_usage_total", "model_gateway_wallet_refusals_total"); err != nil {
		t.Fatal(err)
	}
	// Two failed attempts on flaky, two answers from good; one stream's first token.
	for _, tc := range []struct {
		name string
		h    *prometheus.HistogramVec
		prov string
		want uint64
	}{
		{"upstream latency", m.latency, "flaky", 2},
		{"upstream latency", m.latency, "good", 2},
		{"time to first token", m.firstToken, "good", 1},
	} {
		if n := sampleCount(t, tc.h, tc.prov); n != tc.want {
			t.Errorf("%s of %s: %d samples, want %d", tc.name, tc.prov, n, tc.want)
		}
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %v", err, problems)
	}
}

func sampleCount(t *testing.T, h *prometheus.HistogramVec, provider string) uint64 {
	t.Helper()
	var d dto.Metric
	if err := h.WithLabelValues(provider).(prometheus.Metric).Write(&d); err != nil {
		t.Fatal(err)
	}
	return d.GetHistogram().GetSampleCount()
}

// TestMetricsAllocateNothingPerRequest: what a request counts (a fallback, a failed attempt
// and its retry, an answer, the settlement with its cost lines, a wallet refusal, a circuit
// opening and closing) allocates nothing once its series exist: the children are found by
// hashing the label values, and the status code's label is made once. (Measured on the
// hooks themselves: a whole request's count varies by a few allocations from run to run
// with the store's background work.)
func TestMetricsAllocateNothingPerRequest(t *testing.T) {
	m, err := NewMetrics(prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	rt := Route{ProviderName: "good", breaker: new(breaker)}
	rt.breaker.reportTo(m.breakerOpen.WithLabelValues("good"))
	p := Policy{BreakerThreshold: 1, BreakerCooldown: time.Second}
	c := &call{Charge: billing.Charge{Endpoint: "/chat/completions", Status: http.StatusOK, Streamed: true, Start: t0,
		FirstByte: t0.Add(300 * time.Millisecond), Attempts: make([]store.Attempt, 1)}, model: &Model{Name: "m"}, route: &rt}
	lines := []store.CostLine{{Dimension: "input", Quantity: 12, Nanos: 12_000}, {Dimension: "output", Quantity: 10, Nanos: 20_000}}
	refusal := newError(http.StatusPaymentRequired, CodeInsufficientFunds, "no credit")
	count := func() {
		m.routeTried(c, "good")
		m.attempt(c, "flaky", time.Second, true, "server_error")
		m.retry("flaky")
		rt.breaker.record(t0, p, false)
		m.attempt(c, "good", 2*time.Second, false, "")
		rt.breaker.record(t0, p, true)
		m.settled(c, lines, nil)
		m.refused("/chat/completions", "m", refusal)
	}
	count()
	if n := testing.AllocsPerRun(1000, count); n != 0 {
		t.Fatalf("counting a request allocates %.0f times, want none", n)
	}
	if v := testutil.ToFloat64(m.breakerOpen.WithLabelValues("good")); v != 0 {
		t.Fatalf("breaker_open %v after the circuit closed, want 0", v)
	}
}

// TestMetricsBreakerOpen: the breaker_open gauge counts a route while its circuit is open,
// half-open included, and never one whose breaker is off.
func TestMetricsBreakerOpen(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	on := Policy{BreakerThreshold: 2, BreakerCooldown: time.Second}
	off := Policy{BreakerThreshold: -1}
	for _, tc := range []struct {
		name    string
		p       Policy
		results []bool
		want    float64
	}{
		{"closed after one failure", on, []bool{false}, 0},
		{"open at the threshold", on, []bool{false, false}, 1},
		{"open after a failed probe", on, []bool{false, false, false}, 1},
		{"closed by a success", on, []bool{false, false, true}, 0},
		{"open again", on, []bool{false, false, true, false, false}, 1},
		{"never with the breaker off", off, []bool{false, false, false}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := NewMetrics(prometheus.NewRegistry(), nil)
			if err != nil {
				t.Fatal(err)
			}
			g := m.breakerOpen.WithLabelValues("p")
			b := new(breaker)
			b.reportTo(g)
			for _, ok := range tc.results {
				b.record(now, tc.p, ok)
			}
			if v := testutil.ToFloat64(g); v != tc.want {
				t.Fatalf("breaker_open %v, want %v", v, tc.want)
			}
		})
	}
}

// TestMetricsSharedOnOneRegistry: a second Gateway registering on the same registry (the
// second handler of a Caddy configuration) shares the first one's series instead of failing.
func TestMetricsSharedOnOneRegistry(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m1, err := NewMetrics(reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	m2, err := NewMetrics(reg, nil)
	if err != nil {
		t.Fatalf("registering again: %v", err)
	}
	m1.retry("p")
	m2.retry("p")
	if v := testutil.ToFloat64(m1.retries.WithLabelValues("p")); v != 2 {
		t.Fatalf("retries_total %v, want 2", v)
	}
	// A collector of another type under one of the gateway's names is an error, not a panic.
	other := prometheus.NewRegistry()
	other.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "model_gateway_retries_total", Help: "x"}))
	if _, err := NewMetrics(other, nil); err == nil {
		t.Fatal("registering over a different collector succeeded")
	}
	var nilMetrics *Metrics
	nilMetrics.retry("p") // a Gateway without metrics counts nothing, and does not panic
}

// TestMetricsOutliveARegistry: one Metrics registered on two registries (two Caddy
// configurations, before and after a reload) counts into the same series on both, and the
// circuits left open by a configuration that is gone are withdrawn from breaker_open.
func TestMetricsOutliveARegistry(t *testing.T) {
	m, err := NewMetrics(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	before, after := prometheus.NewPedanticRegistry(), prometheus.NewPedanticRegistry()
	for _, reg := range []*prometheus.Registry{before, after, after} {
		if err := m.Register(reg); err != nil {
			t.Fatalf("registering: %v", err)
		}
	}
	m.retry("p")
	const want = `
# HELP model_gateway_retries_total Attempts repeated on the same route after a failure, by provider.
# TYPE model_gateway_retries_total counter
model_gateway_retries_total{provider="p"} 1
`
	for _, reg := range []*prometheus.Registry{before, after} {
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "model_gateway_retries_total"); err != nil {
			t.Fatal(err)
		}
	}

	p := Policy{BreakerThreshold: 1, BreakerCooldown: time.Hour}
	rt := route("p", "p-1", "1", "2")
	rt.Policy = p
	old, err := NewRegistry([]*Model{{Name: "m", Routes: []Route{rt}}})
	if err != nil {
		t.Fatal(err)
	}
	withdraw := m.ReportBreakers(old)
	old.models["m"].Routes[0].breaker.record(time.Now(), p, false)
	if v := testutil.ToFloat64(m.breakerOpen.WithLabelValues("p")); v != 1 {
		t.Fatalf("breaker_open %v with the circuit open, want 1", v)
	}
	withdraw()
	if v := testutil.ToFloat64(m.breakerOpen.WithLabelValues("p")); v != 0 {
		t.Fatalf("breaker_open %v once its configuration is gone, want 0", v)
	}
}
