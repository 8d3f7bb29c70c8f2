package handlers

import (
	"fmt"
	"maps"
	"net/http"
	"sort"
	"strings"

	"github.com/modelgateway/caddy-modelgateway/internal/pricing"
	"github.com/modelgateway/caddy-modelgateway/jobs"
	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/store"
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

// credentialPresent tells whether the route's provider has the credential it was configured
// with: one whose api_key resolved empty cannot answer until the operator sets it.
func (rt Route) credentialPresent() bool {
	cc, ok := rt.Provider.(providers.CredentialChecker)
	return !ok || !cc.CredentialMissing()
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

// JobRoute is the route job j was created on (jobs.Env.Route), as this registry has it,
// with the price its model bills: nothing for a free model, whose routes may be a paid
// model's too. A job whose model is no longer named here, or no longer has the route,
// takes the first model's route to the same provider and upstream model.
func (r *Registry) JobRoute(j store.Job) (jobs.Route, bool) {
	of := func(m *Model) (jobs.Route, bool) {
		for _, rt := range m.Routes {
			if rt.ProviderName == j.Provider && rt.UpstreamModel == j.UpstreamModel {
				return jobs.Route{Upstream: rt.Provider, Price: billedPrice(m, rt), Free: m.Free()}, true
			}
		}
		return jobs.Route{}, false
	}
	if m, ok := r.Lookup(j.Model); ok {
		if rt, ok := of(m); ok {
			return rt, true
		}
	}
	for _, m := range r.Models() {
		if rt, ok := of(m); ok {
			return rt, true
		}
	}
	return jobs.Route{}, false
}

// Models lists the models sorted by name.
func (r *Registry) Models() []*Model {
	out := make([]*Model, len(r.names))
	for i, n := range r.names {
		out[i] = r.models[n]
	}
	return out
}

// The stages that filter a model's routes for a request, in order, and why a route is left
// out at each, as routing_diagnostics names them. The reasons follow the spec's diagnostics
// where it names them (droppedUnsupportedEndpoint, missing_pricing_providers).
const (
	stageEndpoint     = "endpoint_support"
	stageRequestFit   = "request_fit"
	stagePricing      = "pricing"
	stageAvailability = "availability"

	reasonUnsupportedEndpoint = "unsupported_endpoint"
	reasonUploadTooLarge      = "upload_too_large"
	reasonUnsupportedDocument = "unsupported_document_type"
	reasonMissingPricing      = "missing_pricing"
	reasonUnbillable          = "unbillable"
	reasonContextWindow       = "context_window_too_small"
	reasonCircuitOpen         = "circuit_open"
)

var filterStages = [...]string{stageEndpoint, stageRequestFit, stagePricing, stageAvailability}

// droppedRoute is a route of the model left out of a request: at which stage, and why.
type droppedRoute struct {
	stage, provider, reason string
}

// dropRoutes keeps the routes for which why gives no reason and notes the others in dropped
// under stage. The routes are copied only once one is dropped: most requests drop none, and
// they keep the model's own slice, which callers only read.
func dropRoutes(routes []Route, dropped []droppedRoute, stage string, why func(Route) string) ([]Route, []droppedRoute) {
	var kept []Route
	copied := false
	for i, rt := range routes {
		reason := why(rt)
		if reason == "" {
			if copied {
				kept = append(kept, rt)
			}
			continue
		}
		if !copied {
			kept, copied = routes[:i:i], true // a copy on the next append
		}
		dropped = append(dropped, droppedRoute{stage, rt.ProviderName, reason})
	}
	if !copied {
		return routes, dropped
	}
	return kept, dropped
}

// candidates selects the model's routes whose adapter has the capability, noting the others
// as dropped for an unsupported endpoint, or explains in the spec's diagnostics why none has.
func (r *Registry) candidates(name string, cp *capability) (*Model, []Route, []droppedRoute, *APIError) {
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
		return nil, nil, nil, e
	}
	routes, dropped := dropRoutes(m.Routes, nil, stageEndpoint, func(rt Route) string {
		if cp.supports(rt) {
			return ""
		}
		return reasonUnsupportedEndpoint
	})
	if len(routes) == 0 {
		e := newError(http.StatusBadRequest, CodeUnsupportedModel, fmt.Sprintf("model %q has no provider that serves %s", name, cp.endpoint))
		e.Param = "model"
		return nil, nil, nil, withRouting(e, m, dropped)
	}
	return m, routes, dropped, nil
}

// withRouting adds to e the spec's routing_diagnostics and provider_candidate_diagnostics of
// a request to m whose routes were filtered as dropped says.
func withRouting(e *APIError, m *Model, dropped []droppedRoute) *APIError {
	if e.Extra == nil {
		e.Extra = map[string]any{}
	}
	maps.Copy(e.Extra, routingDiagnostics(m, dropped))
	return e
}

// routingDiagnostics are the spec's routing_diagnostics (each filter stage with the routes
// it dropped and why), provider_candidate_diagnostics and, when routes lacked a price for
// the request, missing_pricing_providers. The endpoint stage is always shown; the others
// when they dropped a route. Every route's adapter is compiled in (a configuration naming
// an unknown provider type does not load), so none is dropped for a missing adapter.
func routingDiagnostics(m *Model, dropped []droppedRoute) map[string]any {
	count := len(m.Routes)
	supporting, candidates := count, count
	stages := make([]any, 0, len(filterStages))
	unsupported := []string{}
	var unpriced []string
	for _, stage := range filterStages {
		list := []any{}
		for _, d := range dropped {
			if d.stage != stage {
				continue
			}
			list = append(list, map[string]any{"providerId": d.provider, "reason": d.reason})
			switch d.reason {
			case reasonUnsupportedEndpoint:
				unsupported = append(unsupported, d.provider)
			case reasonMissingPricing:
				unpriced = append(unpriced, d.provider)
			}
		}
		if len(list) > 0 || stage == stageEndpoint {
			stages = append(stages, map[string]any{"stage": stage, "beforeCount": count, "afterCount": count - len(list), "droppedProviders": list})
		}
		count -= len(list)
		switch stage {
		case stageEndpoint:
			supporting = count
		case stagePricing:
			candidates = count
		}
	}
	d := map[string]any{
		"routing_diagnostics": map[string]any{"filterStages": stages},
		"provider_candidate_diagnostics": map[string]any{
			"totalProviders": len(m.Routes), "supportsEndpointCount": supporting, "candidateCount": candidates,
			"droppedUnsupportedEndpoint": unsupported, "droppedMissingAdapter": []any{},
		},
	}
	if unpriced != nil {
		d["missing_pricing_providers"] = unpriced
	}
	return d
}
