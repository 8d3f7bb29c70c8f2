package handlers

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/modelgateway/caddy-modelgateway/store"
)

// Metrics counts what a Gateway serves, for Prometheus. A nil *Metrics counts nothing, so
// a Gateway without metrics pays for none of it.
//
// Its counts belong to whoever keeps it, not to a registry: one Metrics can be registered
// on several registries (Register), so that a process keeps its counts across Caddy
// configurations, each of which has its own registry, as Caddy keeps its own admin and
// config-reload counters.
//
// Every label comes from the configuration (model and provider names) or from a fixed set
// (endpoints, HTTP status codes, failure categories, pricing dimensions, refusal reasons),
// never from a key, a workspace or what a request says: the number of series stays
// bounded whatever the traffic.
type Metrics struct {
	requests     *prometheus.CounterVec   // endpoint, model, provider, code
	errors       *prometheus.CounterVec   // endpoint, model, provider, category
	usage        *prometheus.CounterVec   // model, provider, dimension
	cost         *prometheus.CounterVec   // model, provider, dimension
	latency      *prometheus.HistogramVec // provider
	firstToken   *prometheus.HistogramVec // provider
	retries      *prometheus.CounterVec   // provider
	fallbacks    *prometheus.CounterVec   // provider
	breakerOpen  *prometheus.GaugeVec     // provider
	refusals     *prometheus.CounterVec   // reason
	unbilledCost *prometheus.CounterVec   // model, provider

	// collectors are all of the above, for Register.
	collectors []prometheus.Collector
}

// NewMetrics makes the gateway's collectors, registers them on reg (nil: none) and makes
// the circuit breakers of models' routes (nil: none) report to them. Collectors that reg
// already has, registered by another Gateway or an earlier call, are shared rather than
// registered twice: every Gateway of one registry counts into the same series.
func NewMetrics(reg prometheus.Registerer, models *Registry) (*Metrics, error) {
	const ns = "model_gateway"
	r := &registrar{reg: reg}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return register(r, prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: name, Help: help}, labels))
	}
	histogram := func(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
		return register(r, prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: name, Help: help, Buckets: buckets}, labels))
	}
	m := &Metrics{
		requests: counter("requests_total",
			"Metered requests answered, by endpoint, model, the provider that answered (empty if none did) and HTTP status code.",
			"endpoint", "model", "provider", "code"),
		errors: counter("errors_total",
			"Failed upstream attempts, by endpoint, model, provider and failure category.",
			"endpoint", "model", "provider", "category"),
		usage: counter("usage_total",
			"Usage billed, by model, provider and pricing dimension, in the dimension's unit (tokens, characters, started seconds, images, pages, requests).",
			"model", "provider", "dimension"),
		cost: counter("cost_nanodollars_total",
			"Cost billed in nanodollars (1e-9 USD), by model, provider and pricing dimension.",
			"model", "provider", "dimension"),
		latency: histogram("upstream_latency_seconds",
			"Time an upstream attempt took to answer: the whole answer, or a stream's first event.",
			[]float64{.1, .25, .5, 1, 2.5, 5, 10, 20, 40, 80, 160}, "provider"),
		firstToken: histogram("time_to_first_token_seconds",
			"Time from a streamed request's arrival to the first event of its answer, retries and fallbacks included, by the provider that answered.",
			[]float64{.05, .1, .25, .5, 1, 2, 4, 8, 16, 32}, "provider"),
		retries:   counter("retries_total", "Attempts repeated on the same route after a failure, by provider.", "provider"),
		fallbacks: counter("fallbacks_total", "Routes tried after an earlier route of the request failed, by the provider of the route tried.", "provider"),
		breakerOpen: register(r, prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "breaker_open",
			Help: "Routes whose circuit breaker is open (or half-open, awaiting its probe), by provider."}, []string{"provider"})),
		refusals: counter("wallet_refusals_total",
			"Requests refused before any upstream call by the wallet, by reason: insufficient_funds, key_limit_exceeded or store_unavailable.",
			"reason"),
		unbilledCost: counter("unbilled_nanodollars_total",
			"Priced usage not charged, in nanodollars (1e-9 USD), by model and provider: beyond what its request held or beyond the wallet's balance. The operator paid the upstream for it.",
			"model", "provider"),
	}
	if r.err != nil {
		return nil, r.err
	}
	m.collectors = r.collectors
	m.ReportBreakers(models)
	return m, nil
}

// Register registers m's collectors on reg as well, where they count into the same series
// as on every other registry they are on.
func (m *Metrics) Register(reg prometheus.Registerer) error {
	for _, c := range m.collectors {
		err := reg.Register(c)
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) && are.ExistingCollector == c {
			continue
		}
		if err != nil {
			return fmt.Errorf("registering the gateway's metrics: %w", err)
		}
	}
	return nil
}

// ReportBreakers makes the circuit breakers of models' routes (nil: none) count on m's
// breaker_open gauge, and returns what withdraws them from it: breakers belong to one
// configuration, the gauge outlives it, and a circuit left open in a configuration that
// is gone must not stay counted.
func (m *Metrics) ReportBreakers(models *Registry) (withdraw func()) {
	report := func(g func(provider string) gauge) {
		if models == nil {
			return
		}
		for _, md := range models.models {
			for _, rt := range md.Routes {
				rt.breaker.reportTo(g(rt.ProviderName))
			}
		}
	}
	report(func(provider string) gauge { return m.breakerOpen.WithLabelValues(provider) })
	return func() { report(func(string) gauge { return nil }) }
}

// registrar registers collectors on a registry (if any), keeps the first error and lists
// the collectors.
type registrar struct {
	reg        prometheus.Registerer
	err        error
	collectors []prometheus.Collector
}

// register registers c, or returns the collector of the same description that the registry
// already has: Caddy gives each configuration a registry, and every handler of the
// configuration registers the gateway's metrics on it as it is provisioned.
func register[C prometheus.Collector](r *registrar, c C) C {
	if r.reg != nil {
		err := r.reg.Register(c)
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				c, err = existing, nil
			}
		}
		if err != nil && r.err == nil {
			r.err = fmt.Errorf("registering the gateway's metrics: %w", err)
		}
	}
	r.collectors = append(r.collectors, c)
	return c
}

// refused counts a request the wallet refused before any upstream call, and returns e.
func (m *Metrics) refused(endpoint, model string, e *APIError) *APIError {
	if m != nil {
		m.refusals.WithLabelValues(e.Code).Inc()
		m.requests.WithLabelValues(endpoint, model, "", statusCode(e.Status)).Inc()
	}
	return e
}

// attempt counts one upstream attempt of c, which took d; category is its failure's ("" for
// an error that is not the upstream's), when it failed.
func (m *Metrics) attempt(c *call, provider string, d time.Duration, failed bool, category string) {
	if m == nil {
		return
	}
	m.latency.WithLabelValues(provider).Observe(d.Seconds())
	if failed {
		if category == "" {
			category = "other"
		}
		m.errors.WithLabelValues(c.Endpoint, c.model.Name, provider, category).Inc()
	}
}

// retry counts a route tried again after a failure.
func (m *Metrics) retry(provider string) {
	if m != nil {
		m.retries.WithLabelValues(provider).Inc()
	}
}

// routeTried counts a fallback when c tries a route after an earlier one failed.
func (m *Metrics) routeTried(c *call, provider string) {
	if m != nil && len(c.Attempts) > 0 {
		m.fallbacks.WithLabelValues(provider).Inc()
	}
}

// settled counts c once it is settled with its cost lines, or failed to be (err): its
// answer then was withheld or cut, and nothing was billed.
func (m *Metrics) settled(c *call, lines []store.CostLine, err error) {
	if m == nil {
		return
	}
	provider, status := "", c.Status
	if c.route != nil {
		provider = c.route.ProviderName
	}
	if err != nil {
		status = http.StatusInternalServerError
	}
	m.requests.WithLabelValues(c.Endpoint, c.model.Name, provider, statusCode(status)).Inc()
	if c.Streamed && c.route != nil && !c.FirstByte.IsZero() {
		m.firstToken.WithLabelValues(provider).Observe(c.FirstByte.Sub(c.Start).Seconds())
	}
	if err != nil {
		return
	}
	for _, l := range lines {
		m.usage.WithLabelValues(c.model.Name, provider, l.Dimension).Add(float64(l.Quantity))
		m.cost.WithLabelValues(c.model.Name, provider, l.Dimension).Add(float64(l.Nanos))
	}
}

// unbilled counts the priced usage of c that was not charged.
func (m *Metrics) unbilled(c *call, nanos int64) {
	if m == nil || nanos <= 0 || c.route == nil {
		return
	}
	m.unbilledCost.WithLabelValues(c.model.Name, c.route.ProviderName).Add(float64(nanos))
}

// statusCodes are the code labels, made once: strconv would allocate one per request.
var statusCodes = func() (s [600]string) {
	for i := range s {
		s[i] = strconv.Itoa(i)
	}
	return s
}()

func statusCode(status int) string {
	if status < 0 || status >= len(statusCodes) {
		return "0"
	}
	return statusCodes[status]
}

// gauge is what a breaker reports its state to: the provider's breaker_open gauge.
type gauge interface{ Add(float64) }

// reportTo makes the breaker count itself on g while open (nil: nowhere).
func (b *breaker) reportTo(g gauge) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.gauge == g {
		return
	}
	if b.reported && b.gauge != nil {
		b.gauge.Add(-1)
	}
	b.gauge = g
	if g == nil {
		b.reported = false
	} else if b.reported {
		g.Add(1)
	}
}

// report moves the breaker's gauge when the circuit opened or closed; b.mu is held.
func (b *breaker) report(p Policy) {
	open := p.BreakerThreshold > 0 && b.failures >= p.BreakerThreshold
	if b.gauge == nil || open == b.reported {
		return
	}
	b.reported = open
	if open {
		b.gauge.Add(1)
	} else {
		b.gauge.Add(-1)
	}
}
