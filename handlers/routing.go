package handlers

import (
	"fmt"
	"net/http"
	"sort"
	"strings"

	"github.com/modelgateway/caddy-modelgateway/internal/pricing"
	"github.com/modelgateway/caddy-modelgateway/providers"
)

// FreeSuffix marks a model name as free: it needs no deposited credit.
const FreeSuffix = ":free"

// DefaultMaxOutputTokens bounds the worst-case reservation of a request that sets no
// max_tokens on a route that names no limit of its own.
const DefaultMaxOutputTokens = 4096

// Route is one way to serve a model: a provider, the model id it knows, and the prices.
type Route struct {
	ProviderName  string
	Provider      providers.Provider
	UpstreamModel string
	Price         pricing.Price
	// MaxOutputTokens is the largest completion the route produces; it sizes reservations.
	MaxOutputTokens int64
	// ContextWindow is the model's context length in tokens; 0 means unknown. A request too
	// long for one route falls back only to routes with a larger window.
	ContextWindow int64
	// MaxUpload is the largest multipart upload the route takes; 0 means the endpoint's
	// default.
	MaxUpload int64
	// Prefill tells whether the route accepts an assistant prefill, so that a stream broken
	// on another route can be continued here.
	Prefill bool
	// Policy is the route's retry, timeout and circuit-breaking behaviour.
	Policy Policy

	breaker *breaker
}

// Model is a public model name with its routes in fallback order.
type Model struct {
	Name    string
	OwnedBy string
	Created int64
	Routes  []Route
	// Endpoints, when set, are the endpoint families the model serves (EndpointFamilies),
	// over what its catalogue entry or its prices say.
	Endpoints []string
}

// Free tells whether requests to the model skip the wallet: a ":free" name, or routes that
// all cost nothing.
func (m *Model) Free() bool {
	if strings.HasSuffix(m.Name, FreeSuffix) {
		return true
	}
	for _, r := range m.Routes {
		if !r.Price.IsZero() {
			return false
		}
	}
	return true
}

// Registry is the set of public models. It is built once per configuration and read-only.
type Registry struct {
	models    map[string]*Model
	names     []string
	providers []string
}

// NewRegistry checks and indexes models: names are unique and every model has a route.
func NewRegistry(models []*Model) (*Registry, error) {
	r := &Registry{models: make(map[string]*Model, len(models))}
	provs := map[string]bool{}
	for _, m := range models {
		if m.Name == "" {
			return nil, fmt.Errorf("a model has no name")
		}
		if _, dup := r.models[m.Name]; dup {
			return nil, fmt.Errorf("model %q is defined twice", m.Name)
		}
		if len(m.Routes) == 0 {
			return nil, fmt.Errorf("model %q has no route", m.Name)
		}
		for i, rt := range m.Routes {
			if rt.Provider == nil || rt.UpstreamModel == "" {
				return nil, fmt.Errorf("model %q route %d: provider and upstream model are required", m.Name, i)
			}
			if rt.MaxOutputTokens <= 0 {
				m.Routes[i].MaxOutputTokens = DefaultMaxOutputTokens
			}
			m.Routes[i].Policy = rt.Policy.WithDefaults()
			m.Routes[i].breaker = new(breaker)
			provs[rt.ProviderName] = true
		}
		r.models[m.Name] = m
		r.names = append(r.names, m.Name)
	}
	sort.Strings(r.names)
	for p := range provs {
		r.providers = append(r.providers, p)
	}
	sort.Strings(r.providers)
	return r, nil
}

// Lookup finds a model by its public name.
func (r *Registry) Lookup(name string) (*Model, bool) {
	m, ok := r.models[name]
	return m, ok
}

// Models lists the models sorted by name.
func (r *Registry) Models() []*Model {
	out := make([]*Model, len(r.names))
	for i, n := range r.names {
		out[i] = r.models[n]
	}
	return out
}

// candidates selects the model's routes whose adapter has the capability, or explains why
// none has in the spec's diagnostics: a route whose adapter lacks it is dropped as an
// unsupported endpoint. When every route has it, the routes are the model's own slice, not
// a copy: callers only read them.
func (r *Registry) candidates(name string, cp *capability) (*Model, []Route, *APIError) {
	m, ok := r.models[name]
	if !ok {
		e := newError(http.StatusBadRequest, CodeUnsupportedModel, fmt.Sprintf("model %q is not offered by this gateway; GET /models lists the models you can use", name))
		e.Param = "model"
		e.Extra = map[string]any{
			"provider_candidate_diagnostics": map[string]any{
				"totalProviders": len(r.providers), "supportsEndpointCount": 0, "candidateCount": 0,
				"droppedUnsupportedEndpoint": []string{}, "droppedMissingAdapter": []any{},
			},
			"routing_diagnostics": map[string]any{"filterStages": []any{
				map[string]any{"stage": "model_lookup", "beforeCount": len(r.names), "afterCount": 0, "droppedProviders": []any{}},
			}},
		}
		return nil, nil, e
	}
	if allSupport(m.Routes, cp) {
		return m, m.Routes, nil
	}
	var out []Route
	unsupported := []string{}
	var dropped []any
	for _, rt := range m.Routes {
		if cp.supports(rt) {
			out = append(out, rt)
			continue
		}
		unsupported = append(unsupported, rt.ProviderName)
		dropped = append(dropped, map[string]any{"providerId": rt.ProviderName, "reason": "unsupported_endpoint"})
	}
	if len(out) == 0 {
		e := newError(http.StatusBadRequest, CodeUnsupportedModel, fmt.Sprintf("model %q has no provider that serves %s", name, cp.endpoint))
		e.Param = "model"
		e.Extra = map[string]any{
			"provider_candidate_diagnostics": candidateDiagnostics(len(m.Routes), 0, unsupported),
			"routing_diagnostics": map[string]any{"filterStages": []any{
				map[string]any{"stage": "endpoint_support", "beforeCount": len(m.Routes), "afterCount": 0, "droppedProviders": dropped},
			}},
		}
		return nil, nil, e
	}
	return m, out, nil
}

// candidateDiagnostics is the spec's provider_candidate_diagnostics of a model with total
// routes, of which supporting serve the endpoint; unsupported names the others' providers.
// Every route's adapter is compiled in (a configuration naming an unknown provider type
// does not load), so none is dropped for a missing adapter.
func candidateDiagnostics(total, supporting int, unsupported []string) map[string]any {
	if unsupported == nil {
		unsupported = []string{}
	}
	return map[string]any{
		"totalProviders": total, "supportsEndpointCount": supporting, "candidateCount": supporting,
		"droppedUnsupportedEndpoint": unsupported, "droppedMissingAdapter": []any{},
	}
}

func allSupport(routes []Route, cp *capability) bool {
	for _, rt := range routes {
		if !cp.supports(rt) {
			return false
		}
	}
	return true
}
