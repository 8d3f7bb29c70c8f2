package handlers

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/modelgateway/caddy-modelgateway/internal/catalog"
	"github.com/modelgateway/caddy-modelgateway/internal/pricing"
	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/openai"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// Discovery: what the gateway offers and what it costs.
//
//	GET  /gateway/models      configured models, joined with the catalogue; ?endpoints=chat,embeddings&organisation=openai
//	GET  /gateway/models/me   the configured models the calling key can use now
//	GET  /data/models         the whole catalogue, configured or not; same filters
//	GET  /providers           the configured upstream providers
//	GET  /endpoints           the endpoint families (chat, embeddings, ...) and their routes
//	GET  /organisations       model authors
//	GET  /pricing/models      the prices that bill, per model and route
//	POST /pricing/calculate   the cost of a usage, with the arithmetic that bills requests
//
// Every list is paged as pagination.go describes. A configured model is matched to its
// catalogue entry by, in order: the Gateway's CatalogIDs, its public name (without
// ":free"), then its first route's upstream model id, each compared with the catalogue's
// ids and aliases. Unmatched models are listed with what the configuration tells
// (unknown context length and modalities, endpoints from their routes' adapters).

// catalog is the catalogue the discovery routes read.
func (g *Gateway) catalog() *catalog.Catalog {
	if g.Catalog != nil {
		return g.Catalog
	}
	return catalog.Default()
}

// offered is a configured model joined with its catalogue entry.
type offered struct {
	model *Model
	// entry is nil when the catalogue does not know the model.
	entry        *catalog.Model
	organisation string
	endpoints    []string
}

func (g *Gateway) offeredModels() []offered {
	cat := g.catalog()
	models := g.Registry.Models()
	out := make([]offered, 0, len(models))
	for _, m := range models {
		o := offered{model: m, entry: g.catalogEntry(cat, m)}
		if o.entry != nil {
			o.organisation = o.entry.Organisation
		} else {
			o.organisation = modelOwner(m)
		}
		o.endpoints = modelEndpoints(m, g.declaredFamilies(m, o.entry))
		out = append(out, o)
	}
	return out
}

// modelFamilies are the endpoint families each model is declared for (declaredFamilies):
// Init computes them once, as the catalogue and the routes are fixed.
func (g *Gateway) modelFamilies() map[*Model][]string {
	cat := g.catalog()
	out := map[*Model][]string{}
	for _, m := range g.Registry.Models() {
		out[m] = g.declaredFamilies(m, g.catalogEntry(cat, m))
	}
	return out
}

// declaredFamilies are the endpoint families a model is for: those configured for it, else
// those its catalogue entry names (with OCR for a chat model that reads images: the gateway
// has it transcribe the page), else those its prices are for (pricedFamilies). A model whose
// prices tell nothing (free, unknown to the catalogue) is for every family.
func (g *Gateway) declaredFamilies(m *Model, entry *catalog.Model) []string {
	if cached, ok := g.families[m]; ok {
		return cached
	}
	switch {
	case len(m.Endpoints) > 0:
		return m.Endpoints
	case entry != nil && len(entry.Endpoints) > 0:
		if slices.Contains(entry.Endpoints, "chat") && !slices.Contains(entry.Endpoints, "ocr") && slices.Contains(entry.InputModalities, "image") {
			return append(slices.Clip(entry.Endpoints), "ocr")
		}
		return entry.Endpoints
	}
	if named := pricedFamilies(m); named != nil {
		return named
	}
	return EndpointFamilies()
}

// The endpoint families, as the route table declares them. They are indexed from the table
// once, by init, rather than in their declarations: the table names the discovery handlers,
// which read them, and a declaration may not depend on itself.
var (
	// listedFamilies are the families GET /endpoints lists, in the order of their first
	// listed row, each with its listed routes in table order.
	listedFamilies []listedFamily
	// familyCapabilities are the capabilities of each family's routes: a model serves a
	// family when one of its routes serves one of them.
	familyCapabilities map[string][]*capability
	// capabilityFamily names the family of each capability a request asks for.
	capabilityFamily map[*capability]string
	// listedFamilyIDs are the ids of listedFamilies, in their order: what the `endpoints`
	// filter takes.
	listedFamilyIDs []string
	// servedFamilies are the families whose routes ask a capability of a model, sorted: those
	// a model may be configured for (EndpointFamilies).
	servedFamilies []string
)

type listedFamily struct {
	family *endpointFamily
	routes []apiRoute
}

func init() { indexFamilies(routeTable) }

// indexFamilies indexes the endpoint families of a route table.
func indexFamilies(table []apiRoute) {
	listedFamilies, listedFamilyIDs = nil, nil
	familyCapabilities, capabilityFamily = map[string][]*capability{}, map[*capability]string{}
	listed := map[*endpointFamily]int{}
	for _, rt := range table {
		f, cp := rt.of.family, rt.of.capability
		if f == nil {
			continue
		}
		if !rt.of.unlisted {
			i, ok := listed[f]
			if !ok {
				i = len(listedFamilies)
				listed[f] = i
				listedFamilies = append(listedFamilies, listedFamily{family: f})
				listedFamilyIDs = append(listedFamilyIDs, f.id)
			}
			listedFamilies[i].routes = append(listedFamilies[i].routes, rt)
		}
		if cp != nil && !slices.Contains(familyCapabilities[f.id], cp) {
			familyCapabilities[f.id] = append(familyCapabilities[f.id], cp)
			capabilityFamily[cp] = f.id
		}
	}
	servedFamilies = slices.Sorted(maps.Keys(familyCapabilities))
}

// isFor tells whether model m is declared for the family of cp; its routes then serve the
// request as they serve discovery (routeServes). A capability outside the families, or a
// Gateway not initialised, is not gated.
func (g *Gateway) isFor(m *Model, cp *capability) bool {
	family, ok := capabilityFamily[cp]
	if !ok || g.families == nil {
		return true
	}
	return slices.Contains(g.families[m], family)
}

// EndpointFamilies are the endpoint families a model may serve, as discovery names them.
func EndpointFamilies() []string {
	return slices.Clone(servedFamilies)
}

// routeServes tells whether route rt of m serves cp, as a request is routed: its adapter has
// the capability (the endpoint stage), and on a paid model it prices something the endpoint
// measures (the pricing stage): a route billed by nothing measured could only charge 0.
func (m *Model) routeServes(rt Route, cp *capability) bool {
	return cp.supports(rt) && (m.Free() || unmetered(rt.Price, cp.meters) == "")
}

// modelEndpoints are the endpoint families a model serves: those of declared that one of
// its routes serves as a request is routed.
func modelEndpoints(m *Model, declared []string) []string {
	out := []string{}
	for _, family := range declared {
		for _, cp := range familyCapabilities[family] {
			if slices.ContainsFunc(m.Routes, func(rt Route) bool { return m.routeServes(rt, cp) }) {
				out = append(out, family)
				break
			}
		}
	}
	return out
}

// pricedFamilies guesses the families of a model from what its routes charge for: seconds of
// audio made: music; characters or other audio: audio; images: images; pages: OCR; input tokens alone: embeddings; requests
// alone: moderations; otherwise chat. Routes that charge nothing tell nothing: nil when all do.
func pricedFamilies(m *Model) []string {
	var out []string
	add := func(f string) {
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	for _, rt := range m.Routes {
		p := rt.Price
		switch {
		case p.IsZero():
		case p.PerUnit(pricing.DimOutputAudioSeconds) > 0:
			// No audio endpoint measures seconds of audio made: music does.
			add("music")
		case p.PerUnit(pricing.DimInputCharacters) > 0, p.PerUnit(pricing.DimInputAudioSeconds) > 0,
			p.PerUnit(pricing.DimOutputAudioTokens) > 0, p.PerUnit(pricing.DimInputAudioTokens) > 0:
			add("audio")
		case len(p.VideoSeconds()) > 0:
			add("video")
		case len(p.Images()) > 0, p.PerUnit(pricing.DimImageOutputTokens) > 0:
			add("images")
		case p.PerUnit(pricing.DimPage) > 0:
			add("ocr")
		case p.PerUnit(pricing.DimOutput) == 0 && p.PerUnit(pricing.DimInput) > 0:
			add("embeddings")
		case p.PerUnit(pricing.DimOutput) == 0 && p.PerUnit(pricing.DimInput) == 0 && p.PerUnit(pricing.DimRequest) > 0:
			add("moderations")
		default:
			add("chat")
		}
	}
	return out
}

func (g *Gateway) catalogEntry(cat *catalog.Catalog, m *Model) *catalog.Model {
	names := []string{}
	if id, ok := g.CatalogIDs[m.Name]; ok {
		names = append(names, id)
	}
	names = append(names, strings.TrimSuffix(m.Name, FreeSuffix), m.Routes[0].UpstreamModel)
	for _, n := range names {
		if e, ok := cat.Lookup(n); ok {
			return e
		}
	}
	return nil
}

// modelOwner is the owned_by of GET /models: the configured owner, else the first route's provider.
func modelOwner(m *Model) string {
	if m.OwnedBy != "" {
		return m.OwnedBy
	}
	return m.Routes[0].ProviderName
}

// listFilter is the endpoints and organisation filters of the model lists.
type listFilter struct {
	endpoints    []string
	organisation string
}

func (g *Gateway) parseListFilter(q url.Values) (listFilter, *APIError) {
	var f listFilter
	for _, v := range q["endpoints"] {
		for _, e := range strings.Split(v, ",") {
			e = strings.TrimSpace(e)
			if e == "" {
				continue
			}
			if !slices.Contains(listedFamilyIDs, e) {
				return f, paramError("endpoints", fmt.Sprintf("unknown endpoint %q; endpoints is a comma-separated list of %s", e, strings.Join(listedFamilyIDs, ", ")))
			}
			if !slices.Contains(f.endpoints, e) {
				f.endpoints = append(f.endpoints, e)
			}
		}
	}
	if vs, ok := q["organisation"]; ok {
		f.organisation = first(vs)
		if !slices.Contains(g.organisationIDs(), f.organisation) {
			return f, paramError("organisation", fmt.Sprintf("unknown organisation %q; GET /organisations lists them", f.organisation))
		}
	}
	return f, nil
}

// keep tells whether a model with these endpoints and organisation passes the filter:
// it serves any of the endpoints asked for and is the organisation's.
func (f listFilter) keep(endpoints []string, organisation string) bool {
	if f.organisation != "" && organisation != f.organisation {
		return false
	}
	if len(f.endpoints) == 0 {
		return true
	}
	for _, e := range f.endpoints {
		if slices.Contains(endpoints, e) {
			return true
		}
	}
	return false
}

// offeredView is a configured model as the discovery routes show it.
func offeredView(o offered) map[string]any {
	m := o.model
	provs := make([]string, 0, len(m.Routes))
	for _, rt := range m.Routes {
		if !slices.Contains(provs, rt.ProviderName) {
			provs = append(provs, rt.ProviderName)
		}
	}
	v := map[string]any{
		"id": m.Name, "object": "model", "name": m.Name, "created": m.Created, "owned_by": modelOwner(m),
		"organisation": o.organisation, "catalogue_id": nil, "description": nil, "release_date": nil,
		"context_length": nil, "max_output_tokens": nil, "input_modalities": nil, "output_modalities": nil,
		"endpoints": o.endpoints, "free": m.Free(), "providers": provs,
		"pricing": priceView(m.Routes[0].Price), "pricing_nanos": priceNanos(m.Routes[0].Price),
	}
	if e := o.entry; e != nil {
		v["name"], v["catalogue_id"] = e.Name, e.ID
		v["description"] = orNull(e.Description)
		v["release_date"] = orNull(e.ReleaseDate)
		v["input_modalities"], v["output_modalities"] = e.InputModalities, e.OutputModalities
		if e.ContextLength > 0 {
			v["context_length"] = e.ContextLength
		}
		if e.MaxOutputTokens > 0 {
			v["max_output_tokens"] = e.MaxOutputTokens
		}
	}
	return v
}

// priceViewKeys name the USD figures of priceView by dimension, with their units.
var priceViewKeys = map[string]string{
	pricing.DimInput: "input_per_million_tokens", pricing.DimCachedInput: "cached_input_per_million", pricing.DimCacheWrite: "cache_write_per_million",
	pricing.DimOutput: "output_per_million_tokens", pricing.DimReasoning: "reasoning_per_million_tokens",
	pricing.DimInputAudioTokens: "input_audio_per_million_tokens", pricing.DimOutputAudioTokens: "output_audio_per_million_tokens",
	pricing.DimImageInputTokens: "image_input_per_million_tokens", pricing.DimImageOutputTokens: "image_output_per_million_tokens",
	pricing.DimInputCharacters: "input_per_million_characters", pricing.DimInputAudioSeconds: "input_audio_per_second",
	pricing.DimOutputAudioSeconds: "output_audio_per_second", pricing.DimImage: "per_image", pricing.DimPage: "per_page",
	pricing.DimOutputVideoSeconds: "output_video_per_second", pricing.DimRequest: "per_request",
}

// priceView is a configured price, the one that bills, in USD: every dimension, named with
// its unit; the keyed ones as lists of {size, quality, price} and {resolution, price}, a
// null key part standing for any.
func priceView(p pricing.Price) map[string]any {
	v := priceFigures(p, func(dim string) string { return priceViewKeys[dim] }, "price", func(n int64) any { return costNumber(n) })
	v["currency"] = "USD"
	return v
}

// priceNanos is a configured price in integer nanodollars, by dimension name.
func priceNanos(p pricing.Price) map[string]any {
	return priceFigures(p, func(dim string) string { return dim }, "nanos", func(n int64) any { return n })
}

// priceFigures lists every dimension of p under the key its name gives, each price written
// by figure, under the name price in the lists of keyed prices.
func priceFigures(p pricing.Price, name func(dim string) string, price string, figure func(int64) any) map[string]any {
	v := map[string]any{}
	for _, d := range pricing.Dimensions() {
		switch d.Name {
		case pricing.DimImage:
			list := []map[string]any{}
			for _, ip := range p.Images() {
				list = append(list, map[string]any{"size": orNull(ip.Size), "quality": orNull(ip.Quality), price: figure(ip.Nanos)})
			}
			v[name(d.Name)] = list
		case pricing.DimOutputVideoSeconds:
			list := []map[string]any{}
			for _, vp := range p.VideoSeconds() {
				list = append(list, map[string]any{"resolution": orNull(vp.Resolution), price: figure(vp.Nanos)})
			}
			v[name(d.Name)] = list
		default:
			v[name(d.Name)] = figure(p.PerUnit(d.Name))
		}
	}
	return v
}

// listPriceKeys names the catalogue's price dimensions in views, with their units.
var listPriceKeys = map[string]string{
	"input": "input_per_million_tokens", "cached_input": "cached_input_per_million", "cache_write": "cache_write_per_million",
	"output": "output_per_million_tokens", "reasoning": "reasoning_per_million_tokens", "request": "per_request",
	"image": "per_image", "audio_second": "per_audio_second", "characters": "per_million_characters",
	"page": "per_page", "video_second": "per_video_second",
}

// listPriceView is a catalogue entry's list price: only the dimensions it prices.
func listPriceView(e *catalog.Model) map[string]any {
	v := map[string]any{"currency": "USD"}
	nanos := map[string]int64{}
	for _, p := range e.Prices() {
		v[listPriceKeys[p.Dimension]] = costNumber(p.Nanos)
		nanos[p.Dimension] = p.Nanos
	}
	v["nanos"] = nanos
	return v
}

func offeredID(v map[string]any) string { return v["id"].(string) }

// gatewayModels serves GET /gateway/models: the configured models, sorted by name.
func (g *Gateway) gatewayModels(w http.ResponseWriter, r *http.Request, _ *Caller) error {
	return g.writeOffered(w, r, func(offered) bool { return true }, nil)
}

// gatewayModelsMe serves GET /gateway/models/me: the configured models the calling key
// can use now. Free models always; paid models while the workspace has the 1.00 USD
// the preflight check asks for and the key has room under its spending limit. A model
// none of whose routes' providers has its credential (an api_key that resolved empty)
// cannot answer at all: it is left out, and named in unavailable_models with the spec's
// credentials_not_configured, so that the operator sees what to fix.
func (g *Gateway) gatewayModelsMe(w http.ResponseWriter, r *http.Request, c *Caller) error {
	ctx := r.Context()
	bal, err := g.Store.GetBalance(ctx, c.Key.WorkspaceID)
	if err != nil {
		return err
	}
	paid, reason := true, any(nil)
	if bal.Available() < MinPreflightNanos {
		paid, reason = false, CodeInsufficientFunds
	} else if c.Key.LimitNanos > 0 {
		start, _ := store.LimitPeriod(c.Key.LimitReset, g.Now())
		sp, err := g.Store.KeySpend(ctx, c.Key.ID, start)
		if err != nil {
			return err
		}
		if sp.SpentNanos+sp.ReservedNanos >= c.Key.LimitNanos {
			paid, reason = false, CodeKeyLimitExceeded
		}
	}
	unavailable := []map[string]any{}
	for _, m := range g.Registry.Models() {
		if !slices.ContainsFunc(m.Routes, Route.credentialPresent) {
			unavailable = append(unavailable, map[string]any{"id": m.Name, "reason": string(providers.CategoryCredentialsNotConfigured)})
		}
	}
	extra := map[string]any{
		"paid_models_available": paid, "reason": reason, "key_id": c.Key.ID,
		"credits": balanceView(bal), "unavailable_models": unavailable,
	}
	return g.writeOffered(w, r, func(o offered) bool {
		return (paid || o.model.Free()) && slices.ContainsFunc(o.model.Routes, Route.credentialPresent)
	}, extra)
}

func (g *Gateway) writeOffered(w http.ResponseWriter, r *http.Request, usable func(offered) bool, extra map[string]any) error {
	q := r.URL.Query()
	p, apiErr := parsePage(q)
	if apiErr != nil {
		return apiErr
	}
	f, apiErr := g.parseListFilter(q)
	if apiErr != nil {
		return apiErr
	}
	var views []map[string]any
	for _, o := range g.offeredModels() {
		if usable(o) && f.keep(o.endpoints, o.organisation) {
			views = append(views, offeredView(o))
		}
	}
	env, apiErr := page(views, offeredID, p)
	if apiErr != nil {
		return apiErr
	}
	for k, v := range extra {
		env[k] = v
	}
	env["catalogue_version"] = g.catalog().Version
	return writeJSON(w, http.StatusOK, env)
}

// dataModels serves GET /data/models: every catalogue entry, sorted by id, with the
// configured models that serve it.
func (g *Gateway) dataModels(w http.ResponseWriter, r *http.Request, _ *Caller) error {
	q := r.URL.Query()
	p, apiErr := parsePage(q)
	if apiErr != nil {
		return apiErr
	}
	f, apiErr := g.parseListFilter(q)
	if apiErr != nil {
		return apiErr
	}
	served := map[string][]string{}
	for _, o := range g.offeredModels() {
		if o.entry != nil {
			served[o.entry.ID] = append(served[o.entry.ID], o.model.Name)
		}
	}
	cat := g.catalog()
	var views []map[string]any
	for i := range cat.Models {
		e := &cat.Models[i]
		if !f.keep(e.Endpoints, e.Organisation) {
			continue
		}
		names := served[e.ID]
		if names == nil {
			names = []string{}
		}
		aliases := e.Aliases
		if aliases == nil {
			aliases = []string{}
		}
		v := map[string]any{
			"id": e.ID, "object": "model", "name": e.Name, "organisation": e.Organisation,
			"description": orNull(e.Description), "aliases": aliases, "release_date": orNull(e.ReleaseDate),
			"context_length": nil, "max_output_tokens": nil,
			"input_modalities": e.InputModalities, "output_modalities": e.OutputModalities, "endpoints": e.Endpoints,
			"pricing": listPriceView(e), "available": len(names) > 0, "gateway_models": names,
		}
		if e.ContextLength > 0 {
			v["context_length"] = e.ContextLength
		}
		if e.MaxOutputTokens > 0 {
			v["max_output_tokens"] = e.MaxOutputTokens
		}
		views = append(views, v)
	}
	env, apiErr := page(views, offeredID, p)
	if apiErr != nil {
		return apiErr
	}
	env["catalogue_version"] = cat.Version
	return writeJSON(w, http.StatusOK, env)
}

// listProviders serves GET /providers: the configured upstream providers, sorted by name.
func (g *Gateway) listProviders(w http.ResponseWriter, r *http.Request, _ *Caller) error {
	p, apiErr := parsePage(r.URL.Query())
	if apiErr != nil {
		return apiErr
	}
	type agg struct {
		models, endpoints []string
	}
	by := map[string]*agg{}
	for _, o := range g.offeredModels() {
		for _, rt := range o.model.Routes {
			a := by[rt.ProviderName]
			if a == nil {
				a = &agg{models: []string{}, endpoints: []string{}}
				by[rt.ProviderName] = a
			}
			if !slices.Contains(a.models, o.model.Name) {
				a.models = append(a.models, o.model.Name)
			}
			for _, e := range o.endpoints {
				if !slices.Contains(a.endpoints, e) {
					a.endpoints = append(a.endpoints, e)
				}
			}
		}
	}
	views := make([]map[string]any, 0, len(g.Registry.providers))
	for _, name := range g.Registry.providers {
		a := by[name]
		if a == nil {
			a = &agg{models: []string{}, endpoints: []string{}}
		}
		sort.Strings(a.endpoints)
		views = append(views, map[string]any{
			"id": name, "object": "provider", "name": name,
			"model_count": len(a.models), "models": a.models, "endpoints": a.endpoints,
		})
	}
	env, apiErr := page(views, offeredID, p)
	if apiErr != nil {
		return apiErr
	}
	return writeJSON(w, http.StatusOK, env)
}

// serves tells whether this gateway answers method on path with more than not_implemented_yet.
func (g *Gateway) serves(method, path string) bool {
	if g.placeholders[method+" "+path] {
		return false
	}
	if _, ok := g.routes[path][method]; ok {
		return true
	}
	for _, p := range g.patterns {
		if p.path == path {
			_, ok := p.methods[method]
			return ok
		}
	}
	return false
}

// listEndpoints serves GET /endpoints: the endpoint families of the route table, each with
// its listed routes, whether this gateway serves them yet, and how many configured models
// offer the family.
func (g *Gateway) listEndpoints(w http.ResponseWriter, r *http.Request, _ *Caller) error {
	p, apiErr := parsePage(r.URL.Query())
	if apiErr != nil {
		return apiErr
	}
	offeredModels := g.offeredModels()
	views := make([]map[string]any, 0, len(listedFamilies))
	for _, lf := range listedFamilies {
		routes := make([]map[string]any, 0, len(lf.routes))
		available := false
		for _, rt := range lf.routes {
			ok := g.serves(rt.method, rt.path)
			available = available || ok
			routes = append(routes, map[string]any{"method": rt.method, "path": rt.path, "available": ok})
		}
		n := 0
		for _, o := range offeredModels {
			if slices.Contains(o.endpoints, lf.family.id) {
				n++
			}
		}
		views = append(views, map[string]any{
			"id": lf.family.id, "object": "endpoint", "name": lf.family.name, "available": available, "routes": routes, "model_count": n,
		})
	}
	env, apiErr := page(views, offeredID, p)
	if apiErr != nil {
		return apiErr
	}
	return writeJSON(w, http.StatusOK, env)
}

// organisationIDs lists the organisations the catalogue knows and those of the
// configured models, sorted.
func (g *Gateway) organisationIDs() []string {
	cat := g.catalog()
	ids := make([]string, 0, len(cat.Organisations))
	for _, o := range cat.Organisations {
		ids = append(ids, o.ID)
	}
	for _, o := range g.offeredModels() {
		if !slices.Contains(ids, o.organisation) {
			ids = append(ids, o.organisation)
		}
	}
	sort.Strings(ids)
	return ids
}

// listOrganisations serves GET /organisations: model authors, sorted by id, with how
// many catalogue entries and configured models are theirs.
func (g *Gateway) listOrganisations(w http.ResponseWriter, r *http.Request, _ *Caller) error {
	p, apiErr := parsePage(r.URL.Query())
	if apiErr != nil {
		return apiErr
	}
	cat := g.catalog()
	inCatalogue, configured := map[string]int{}, map[string]int{}
	for i := range cat.Models {
		inCatalogue[cat.Models[i].Organisation]++
	}
	for _, o := range g.offeredModels() {
		configured[o.organisation]++
	}
	ids := g.organisationIDs()
	views := make([]map[string]any, 0, len(ids))
	for _, id := range ids {
		v := map[string]any{
			"id": id, "object": "organisation", "name": id, "url": nil,
			"catalogue_model_count": inCatalogue[id], "gateway_model_count": configured[id],
		}
		if org, ok := cat.Organisation(id); ok {
			v["name"], v["url"] = org.Name, orNull(org.URL)
		}
		views = append(views, v)
	}
	env, apiErr := page(views, offeredID, p)
	if apiErr != nil {
		return apiErr
	}
	return writeJSON(w, http.StatusOK, env)
}

// pricingModels serves GET /pricing/models: per configured model, the prices of each
// route (the route that answers a request is the one that bills it) and the
// catalogue's list price for comparison.
func (g *Gateway) pricingModels(w http.ResponseWriter, r *http.Request, _ *Caller) error {
	q := r.URL.Query()
	p, apiErr := parsePage(q)
	if apiErr != nil {
		return apiErr
	}
	f, apiErr := g.parseListFilter(q)
	if apiErr != nil {
		return apiErr
	}
	var views []map[string]any
	for _, o := range g.offeredModels() {
		if !f.keep(o.endpoints, o.organisation) {
			continue
		}
		m := o.model
		routes := make([]map[string]any, 0, len(m.Routes))
		for _, rt := range m.Routes {
			routes = append(routes, map[string]any{
				"provider": rt.ProviderName, "upstream_model": rt.UpstreamModel,
				"pricing": priceView(rt.Price), "pricing_nanos": priceNanos(rt.Price),
			})
		}
		var list any
		if o.entry != nil {
			list = listPriceView(o.entry)
		}
		views = append(views, map[string]any{
			"id": m.Name, "object": "model.pricing", "currency": "USD", "free": m.Free(),
			"pricing": priceView(m.Routes[0].Price), "pricing_nanos": priceNanos(m.Routes[0].Price),
			"routes": routes, "catalogue_id": nullableEntryID(o.entry), "list_pricing": list,
		})
	}
	env, apiErr := page(views, offeredID, p)
	if apiErr != nil {
		return apiErr
	}
	return writeJSON(w, http.StatusOK, env)
}

func nullableEntryID(e *catalog.Model) any {
	if e == nil {
		return nil
	}
	return e.ID
}

// neutralUsageFields are the usage counters of GET /generations, which
// POST /pricing/calculate also reads.
var neutralUsageFields = []string{"input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens", "reasoning_tokens"}

// meteredUsageFields are the other dimensions POST /pricing/calculate prices, with the keys
// of the keyed ones: counts, seconds (a decimal number), and size, quality and resolution.
var meteredUsageFields = []string{
	"input_audio_tokens", "output_audio_tokens", "image_input_tokens", "image_output_tokens", "input_characters",
	"input_audio_seconds", "output_audio_seconds", "images", "size", "quality", "pages", "output_video_seconds", "resolution", "requests",
}

// chatUsageFields are OpenAI's chat completion usage fields.
var chatUsageFields = []string{"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details", "completion_tokens_details"}

// pricingCalculate serves POST /pricing/calculate:
//
//	{"model": "gpt-4o-mini", "provider": "openai", "usage": {"input_tokens": 1200, "output_tokens": 300}}
//
// provider is optional (default: the model's first route, the one that answers unless it
// fails). usage is either the gateway's counters (input_tokens, cache_read_tokens,
// cache_write_tokens, output_tokens, reasoning_tokens: disjoint, as GET /generations
// shows them), with any other dimension by name (meteredUsageFields), or an OpenAI chat
// completion usage object (prompt_tokens, completion_tokens,
// prompt_tokens_details.cached_tokens, completion_tokens_details.reasoning_tokens), read
// as the gateway reads an upstream's. The answer prices it at the route's price as billing
// does (nothing on a free model), with Price.Cost, the arithmetic that bills requests; a
// usage the route cannot price (an image size it has no price for) is 400.
func (g *Gateway) pricingCalculate(w http.ResponseWriter, r *http.Request, _ *Caller) error {
	f, apiErr := g.readObject(w, r, "model", "provider", "usage")
	if apiErr != nil {
		return apiErr
	}
	name, present, apiErr := f.str("model")
	if apiErr != nil {
		return apiErr
	}
	if !present || name == "" {
		e := newError(http.StatusBadRequest, CodeModelRequired, "model is required")
		e.Param = "model"
		return e
	}
	m, ok := g.Registry.Lookup(name)
	if !ok {
		e := newError(http.StatusBadRequest, CodeUnsupportedModel, fmt.Sprintf("model %q is not offered by this gateway; GET /gateway/models lists the models you can use", name))
		e.Param = "model"
		return e
	}
	rt := m.Routes[0]
	prov, present, apiErr := f.str("provider")
	if apiErr != nil {
		return apiErr
	}
	if present {
		found := false
		names := make([]string, 0, len(m.Routes))
		for _, cand := range m.Routes {
			names = append(names, cand.ProviderName)
			if !found && cand.ProviderName == prov {
				rt, found = cand, true
			}
		}
		if !found {
			return paramError("provider", fmt.Sprintf("model %q has no route through provider %q (its providers: %s)", name, prov, strings.Join(names, ", ")))
		}
	}
	raw, ok := f["usage"]
	if !ok || isJSONNull(raw) {
		return paramError("usage", "usage is required: an object of token counts or other quantities")
	}
	u, apiErr := parseUsage(raw)
	if apiErr != nil {
		return apiErr
	}
	lines, total, err := billedPrice(m, rt).Cost(u)
	if err != nil {
		return priceError(err, "usage.")
	}
	if lines == nil {
		lines = []store.CostLine{}
	}
	return writeJSON(w, http.StatusOK, map[string]any{
		"object": "pricing.calculation", "model": m.Name, "provider": rt.ProviderName, "upstream_model": rt.UpstreamModel,
		"currency": "USD", "free": m.Free(), "usage": usageView(u),
		"cost": costNumber(total), "cost_nanos": total, "cost_usd": pricing.FormatUSD(total), "cost_lines": lines,
	})
}

// billedPrice is what a route of m charges: nothing on a free model, which reserved
// nothing, whatever its routes cost.
func billedPrice(m *Model, rt Route) pricing.Price {
	if m.Free() {
		return pricing.Price{}
	}
	return rt.Price
}

// priceError answers a usage that a route cannot price (a *pricing.UnpricedError) with 400
// and the key's parameter, under prefix; any other error is the gateway's.
func priceError(err error, prefix string) *APIError {
	var apiErr *APIError
	if errors.As(err, &apiErr) {
		return apiErr
	}
	var ue *pricing.UnpricedError
	if !errors.As(err, &ue) {
		return newError(http.StatusInternalServerError, CodeGateway, "pricing the usage failed: "+err.Error())
	}
	param := "size"
	if ue.Dimension == pricing.DimOutputVideoSeconds {
		param = "resolution"
	}
	return paramError(prefix+param, ue.Error())
}

// usageView is a usage as POST /pricing/calculate shows it: the fields it reads, seconds
// as a number, with the prompt and completion token totals.
func usageView(u pricing.Usage) map[string]any {
	return map[string]any{
		"input_tokens": u.Input, "cache_read_tokens": u.CachedInput, "cache_write_tokens": u.CacheWrite,
		"output_tokens": u.Output, "reasoning_tokens": u.Reasoning,
		"input_audio_tokens": u.InputAudioTokens, "output_audio_tokens": u.OutputAudioTokens,
		"image_input_tokens": u.ImageInputTokens, "image_output_tokens": u.ImageOutputTokens, "input_characters": u.InputCharacters,
		"input_audio_seconds": u.InputAudio.Seconds(), "output_audio_seconds": u.OutputAudio.Seconds(),
		"images": u.Images, "size": orNull(u.ImageSize), "quality": orNull(u.ImageQuality), "pages": u.Pages,
		"output_video_seconds": u.OutputVideo.Seconds(), "resolution": orNull(u.VideoResolution), "requests": max(u.Requests, 1),
		"prompt_tokens":     u.Input + u.CachedInput + u.CacheWrite + u.InputAudioTokens + u.ImageInputTokens,
		"completion_tokens": u.Output + u.Reasoning + u.OutputAudioTokens + u.ImageOutputTokens,
	}
}

// parseUsage reads a usage object in either of the two shapes pricingCalculate takes.
func parseUsage(raw json.RawMessage) (pricing.Usage, *APIError) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
		return pricing.Usage{}, paramError("usage", "usage must be an object of token counts or other quantities")
	}
	chat := false
	for k := range fields {
		if slices.Contains(chatUsageFields, k) {
			chat = true
		}
	}
	gateway := slices.Concat(neutralUsageFields, meteredUsageFields)
	allowed := gateway
	if chat {
		allowed = chatUsageFields
	}
	for k := range fields {
		if !slices.Contains(allowed, k) {
			return pricing.Usage{}, paramError("usage."+k, fmt.Sprintf(
				"unknown usage field %q; give either %s, or an OpenAI chat usage (%s), not both",
				k, strings.Join(gateway, ", "), strings.Join(chatUsageFields, ", ")))
		}
	}
	count := func(path string, raw json.RawMessage) (int64, *APIError) {
		v, ok := jsonInt(raw)
		if !ok || v < 0 {
			return 0, paramError("usage."+path, path+" must be a non-negative integer")
		}
		return v, nil
	}
	if !chat {
		var u pricing.Usage
		counts := map[string]*int64{
			"input_tokens": &u.Input, "cache_read_tokens": &u.CachedInput, "cache_write_tokens": &u.CacheWrite, "output_tokens": &u.Output,
			"reasoning_tokens": &u.Reasoning, "input_audio_tokens": &u.InputAudioTokens, "output_audio_tokens": &u.OutputAudioTokens,
			"image_input_tokens": &u.ImageInputTokens, "image_output_tokens": &u.ImageOutputTokens, "input_characters": &u.InputCharacters,
			"images": &u.Images, "pages": &u.Pages, "requests": &u.Requests,
		}
		seconds := map[string]*time.Duration{"input_audio_seconds": &u.InputAudio, "output_audio_seconds": &u.OutputAudio, "output_video_seconds": &u.OutputVideo}
		keys := map[string]*string{"size": &u.ImageSize, "quality": &u.ImageQuality, "resolution": &u.VideoResolution}
		// In the order of the fields, so that of two bad fields the same one is named.
		for _, k := range gateway {
			raw, ok := fields[k]
			if !ok {
				continue
			}
			switch {
			case counts[k] != nil:
				v, apiErr := count(k, raw)
				if apiErr != nil {
					return pricing.Usage{}, apiErr
				}
				*counts[k] = v
			case seconds[k] != nil:
				d, err := pricing.ParseSeconds(string(raw))
				if !isJSONNumber(raw) || err != nil {
					return pricing.Usage{}, paramError("usage."+k, k+" must be a non-negative number of seconds, with at most nine decimals")
				}
				*seconds[k] = d
			default:
				if err := json.Unmarshal(raw, keys[k]); err != nil {
					return pricing.Usage{}, paramError("usage."+k, k+" must be a string")
				}
			}
		}
		return u, nil
	}
	// Check every count, nested ones included, before the OpenAI reader (which clamps
	// negatives to zero) converts them as it converts an upstream's usage.
	for _, k := range []string{"prompt_tokens", "completion_tokens", "total_tokens"} {
		if raw, ok := fields[k]; ok {
			if _, apiErr := count(k, raw); apiErr != nil {
				return pricing.Usage{}, apiErr
			}
		}
	}
	for _, k := range []string{"prompt_tokens_details", "completion_tokens_details"} {
		raw, ok := fields[k]
		if !ok || isJSONNull(raw) {
			continue
		}
		var details map[string]json.RawMessage
		if err := json.Unmarshal(raw, &details); err != nil || details == nil {
			return pricing.Usage{}, paramError("usage."+k, k+" must be an object of token counts")
		}
		for dk, dv := range details {
			if isJSONNull(dv) {
				continue
			}
			if _, apiErr := count(k+"."+dk, dv); apiErr != nil {
				return pricing.Usage{}, apiErr
			}
		}
	}
	u, err := openai.ParseChatUsage(raw)
	if err != nil {
		return pricing.Usage{}, paramError("usage", "usage is not a valid OpenAI chat usage object: "+err.Error())
	}
	return u.Metered(), nil
}

func isJSONNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }
