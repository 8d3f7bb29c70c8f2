package handlers

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"testing"

	"github.com/modelgateway/caddy-modelgateway/internal/catalog"
	"github.com/modelgateway/caddy-modelgateway/internal/pricing"
	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/openai"
	"github.com/modelgateway/caddy-modelgateway/store"
)

func TestParsePage(t *testing.T) {
	tests := []struct {
		query     string
		limit     int
		after     string
		set       bool
		wantParam string
	}{
		{"", 20, "", false, ""},
		{"limit=5", 5, "", true, ""},
		{"limit=100", 100, "", true, ""},
		{"limit=1000", 100, "", true, ""},
		{"limit=1&after=x", 1, "x", true, ""},
		{"after=k_1", 20, "k_1", true, ""},
		{"limit=0", 0, "", false, "limit"},
		{"limit=-3", 0, "", false, "limit"},
		{"limit=ten", 0, "", false, "limit"},
		{"limit=2.5", 0, "", false, "limit"},
		{"limit=", 0, "", false, "limit"},
		{"after=", 0, "", false, "after"},
	}
	for _, tc := range tests {
		t.Run(tc.query, func(t *testing.T) {
			q, _ := url.ParseQuery(tc.query)
			p, apiErr := parsePage(q)
			if tc.wantParam != "" {
				if apiErr == nil || apiErr.Status != 400 || apiErr.Code != CodeValidation || apiErr.Param != tc.wantParam {
					t.Fatalf("parsePage(%q) = %+v, %v; want a 400 about %s", tc.query, p, apiErr, tc.wantParam)
				}
				return
			}
			if apiErr != nil || p.limit != tc.limit || p.after != tc.after || p.set != tc.set {
				t.Fatalf("parsePage(%q) = %+v, %v", tc.query, p, apiErr)
			}
		})
	}
}

func TestPage(t *testing.T) {
	items := make([]string, 45)
	for i := range items {
		items[i] = "item" + strconv.Itoa(i)
	}
	id := func(s string) string { return s }
	var seen []string
	after := ""
	for n := 0; ; n++ {
		env, apiErr := page(items, id, pageRequest{limit: 20, after: after})
		if apiErr != nil {
			t.Fatal(apiErr)
		}
		data := env["data"].([]string)
		seen = append(seen, data...)
		if env["first_id"] != data[0] || env["last_id"] != data[len(data)-1] {
			t.Fatalf("page %d: %v", n, env)
		}
		if env["has_more"] == false {
			if n != 2 || len(data) != 5 {
				t.Fatalf("last page %d holds %d", n, len(data))
			}
			break
		}
		after = data[len(data)-1]
	}
	if !reflect.DeepEqual(seen, items) {
		t.Fatalf("walked %v", seen)
	}
	env, apiErr := page(items, id, pageRequest{limit: 20, after: "item44"})
	if apiErr != nil || len(env["data"].([]string)) != 0 || env["first_id"] != nil || env["last_id"] != nil || env["has_more"] != false {
		t.Fatalf("after the last item: %v %v", env, apiErr)
	}
	if _, apiErr := page(items, id, pageRequest{limit: 20, after: "nope"}); apiErr == nil || apiErr.Param != "after" {
		t.Fatalf("unknown cursor: %v", apiErr)
	}
	env, _ = page([]string(nil), id, pageRequest{limit: 20})
	if d := env["data"].([]string); d == nil || len(d) != 0 {
		t.Fatalf("empty list data %#v", env["data"])
	}
}

func TestRoutePatternsAndAliases(t *testing.T) {
	a := newAdminGateway(t, nil, nil)
	_, std, mgmt := a.workspace(0)

	// A family that needs what the gateway was not given (batches: a job store and a blob
	// store) says so; an alias answers as its route does.
	status, v := a.do(http.MethodPost, "/batches", std, `{"model":"m"}`)
	wantError(t, "/batches", status, v, 503, CodeNotConfigured, "")
	for _, path := range []string{"/moderations", "/moderation"} {
		status, v := a.do(http.MethodPost, path, std, `{"input":"hi"}`)
		wantError(t, path, status, v, 400, CodeUnsupportedModel, "model")
	}
	status, v = a.do(http.MethodGet, "/moderation", std, "")
	wantError(t, "GET /moderation", status, v, 405, CodeMethodNotAllowed, "")
	status, v = a.do(http.MethodPost, "/moderation", mgmt, `{}`)
	wantError(t, "moderation with a management key", status, v, 403, CodeForbidden, "")
	status, v = a.do(http.MethodGet, "/generation?id=gen_missing", std, "")
	wantError(t, "GET /generation alias", status, v, 404, CodeNotFound, "")

	// /keys/{id} matches one segment only.
	status, v = a.do(http.MethodGet, "/keys/abc/extra", mgmt, "")
	wantError(t, "deeper path", status, v, 404, CodeNotFound, "")
	status, v = a.do(http.MethodGet, "/keys/abc/", mgmt, "")
	wantError(t, "trailing slash", status, v, 404, CodeNotFound, "id")
	status, v = a.do(http.MethodPut, "/keys/abc", mgmt, "")
	wantError(t, "PUT on /keys/{id}", status, v, 405, CodeMethodNotAllowed, "")

	// A route without a handler is a placeholder; a parameterised one leaves the exact table.
	served := func(*Gateway, http.ResponseWriter, *http.Request, *Caller) error { return nil }
	g := &Gateway{}
	g.buildRoutes([]apiRoute{
		{http.MethodPost, "/moderations", permInference, SurfaceOpenAI, familyRoute{}, served},
		{http.MethodPost, "/ocr", permInference, SurfaceOpenAI, familyRoute{}, nil},
		{http.MethodGet, "/things/{id}", permAnyKey, SurfaceOpenAI, familyRoute{}, served},
	})
	if g.placeholders["POST /moderations"] || !g.placeholders["POST /ocr"] || g.serves(http.MethodPost, "/ocr") || !g.serves(http.MethodPost, "/moderations") {
		t.Fatalf("placeholders %v, routes %v", g.placeholders, g.routes)
	}
	if _, ok := g.routes["/things/{id}"]; ok || !g.serves(http.MethodGet, "/things/{id}") {
		t.Fatal("the pattern route was left in the exact table")
	}
	r, _ := http.NewRequest(http.MethodGet, "/", nil)
	if _, ok := g.matchPattern(r, "/things/t1"); !ok || r.PathValue("id") != "t1" {
		t.Fatalf("matchPattern: id %q", r.PathValue("id"))
	}
	if _, ok := g.matchPattern(r, "/things/"); ok {
		t.Fatal("an empty parameter matched")
	}
}

// discoveryModels covers every way a configured model meets the catalogue.
func discoveryModels() []*Model {
	twoRoutes := &Model{Name: "gpt-4o-mini", Routes: []Route{
		route("openai", "gpt-4o-mini", "0.15", "0.60"),
		route("azure", "gpt-4o-mini", "0.20", "0.80"),
	}}
	return []*Model{
		twoRoutes,
		{Name: "fast", Routes: []Route{route("groq", "llama-3.3-70b-versatile", "0.59", "0.79")}},
		{Name: "house-model", Routes: []Route{route("local", "my-finetune", "1", "2")}},
		{Name: "mystery:free", OwnedBy: "acme-labs", Routes: []Route{route("local", "mystery-7b", "", "")}},
		{Name: "embedder", Routes: []Route{embedderRoute}},
	}
}

// embedderRoute serves embeddings: a catalogue entry's endpoints count only where a route serves them.
var embedderRoute = func() Route {
	rt := route("openai", "text-embedding-3-small", "0.02", "")
	rt.Provider = stubEmbedder{stubChat{"openai"}}
	return rt
}()

func newDiscoveryGateway(t *testing.T) *adminGateway {
	return newAdminGateway(t, discoveryModels(), func(g *Gateway) {
		g.CatalogIDs = map[string]string{"house-model": "openai/gpt-4.1"}
	})
}

func item(t *testing.T, v map[string]any, id string) map[string]any {
	t.Helper()
	for _, it := range v["data"].([]any) {
		if m := it.(map[string]any); m["id"] == id {
			return m
		}
	}
	t.Fatalf("no item %s in %v", id, listIDs(v))
	return nil
}

func TestGatewayModels(t *testing.T) {
	a := newDiscoveryGateway(t)
	_, std, mgmt := a.workspace(5 * usdNanos)

	v := a.mustDo(200, http.MethodGet, "/gateway/models", std, "")
	if got := listIDs(v); !reflect.DeepEqual(got, []string{"embedder", "fast", "gpt-4o-mini", "house-model", "mystery:free"}) {
		t.Fatalf("ids %v", got)
	}
	if v["catalogue_version"] != catalog.Default().Version || v["has_more"] != false {
		t.Fatalf("envelope %v", v)
	}
	// A chat model that reads images serves OCR too: the gateway has it transcribe the page.
	mini := item(t, v, "gpt-4o-mini")
	if mini["catalogue_id"] != "openai/gpt-4o-mini" || mini["organisation"] != "openai" || mini["context_length"] != float64(128000) ||
		!reflect.DeepEqual(mini["endpoints"], []any{"chat", "ocr"}) || !reflect.DeepEqual(mini["providers"], []any{"openai", "azure"}) ||
		!reflect.DeepEqual(mini["input_modalities"], []any{"text", "image"}) || mini["free"] != false {
		t.Fatalf("gpt-4o-mini %v", mini)
	}
	// The configured price, the one that bills, not the list price.
	if p := mini["pricing_nanos"].(map[string]any); p["input"] != float64(150_000_000) || p["output"] != float64(600_000_000) {
		t.Fatalf("pricing %v", p)
	}
	if fast := item(t, v, "fast"); fast["catalogue_id"] != "meta/llama-3.3-70b-instruct" || fast["organisation"] != "meta" {
		t.Fatalf("matched by upstream id: %v", fast)
	}
	if house := item(t, v, "house-model"); house["catalogue_id"] != "openai/gpt-4.1" || house["name"] != "GPT-4.1" {
		t.Fatalf("matched by CatalogIDs: %v", house)
	}
	// Free and unknown to the catalogue, its prices tell nothing: it is listed for what its
	// route serves, a chat model reading images included.
	mystery := item(t, v, "mystery:free")
	if mystery["catalogue_id"] != nil || mystery["organisation"] != "acme-labs" || mystery["context_length"] != nil ||
		!reflect.DeepEqual(mystery["endpoints"], []any{"chat", "ocr"}) || mystery["free"] != true {
		t.Fatalf("unmatched model %v", mystery)
	}
	if e := item(t, v, "embedder"); !reflect.DeepEqual(e["endpoints"], []any{"embeddings"}) {
		t.Fatalf("embedder %v", e)
	}

	filters := []struct {
		query string
		want  []string
	}{
		{"endpoints=embeddings", []string{"embedder"}},
		{"endpoints=chat", []string{"fast", "gpt-4o-mini", "house-model", "mystery:free"}},
		{"endpoints=chat,embeddings", []string{"embedder", "fast", "gpt-4o-mini", "house-model", "mystery:free"}},
		{"endpoints=images&endpoints=embeddings", []string{"embedder"}},
		{"endpoints=video", nil},
		{"organisation=openai", []string{"embedder", "gpt-4o-mini", "house-model"}},
		{"organisation=acme-labs", []string{"mystery:free"}},
		{"organisation=openai&endpoints=chat", []string{"gpt-4o-mini", "house-model"}},
	}
	for _, f := range filters {
		t.Run(f.query, func(t *testing.T) {
			got := listIDs(a.mustDo(200, http.MethodGet, "/gateway/models?"+f.query, mgmt, ""))
			if !reflect.DeepEqual(got, f.want) {
				t.Fatalf("%s: %v, want %v", f.query, got, f.want)
			}
		})
	}
	if got := a.walk("/gateway/models", std, 2); len(got) != 5 {
		t.Fatalf("walked %v", got)
	}

	bad := []struct{ query, code, param string }{
		{"endpoints=telepathy", CodeValidation, "endpoints"},
		{"endpoints=chat,,bogus", CodeValidation, "endpoints"},
		{"organisation=nobody", CodeValidation, "organisation"},
		{"limit=0", CodeValidation, "limit"},
		{"after=gpt-9", CodeValidation, "after"},
	}
	for _, b := range bad {
		status, v := a.do(http.MethodGet, "/gateway/models?"+b.query, std, "")
		wantError(t, b.query, status, v, 400, b.code, b.param)
	}
	status, v := a.do(http.MethodGet, "/gateway/models", "", "")
	wantError(t, "no key", status, v, 401, CodeUnauthorised, "")
}

func TestGatewayModelsMe(t *testing.T) {
	a := newDiscoveryGateway(t)
	ctx := t.Context()
	_, poor, _ := a.workspace(usdNanos / 2)
	rich, richKey, _ := a.workspace(5 * usdNanos)
	capped := a.key(rich, store.KeyStandard, usdNanos/10, store.ResetMonthly)

	v := a.mustDo(200, http.MethodGet, "/gateway/models/me", poor, "")
	if got := listIDs(v); !reflect.DeepEqual(got, []string{"mystery:free"}) || v["paid_models_available"] != false || v["reason"] != CodeInsufficientFunds {
		t.Fatalf("poor workspace: %v", v)
	}
	v = a.mustDo(200, http.MethodGet, "/gateway/models/me", richKey, "")
	if got := listIDs(v); len(got) != 5 || v["paid_models_available"] != true || v["reason"] != nil {
		t.Fatalf("funded workspace: %v", v)
	}
	if got := listIDs(a.mustDo(200, http.MethodGet, "/gateway/models/me", capped, "")); len(got) != 5 {
		t.Fatalf("key under its limit: %v", got)
	}
	// Spend the capped key's whole limit.
	_, err := a.s.Settle(ctx, store.SettleParams{Generation: &store.Generation{WorkspaceID: rich, KeyID: kidOf(t, capped), CostNanos: usdNanos / 10}})
	if err != nil {
		t.Fatal(err)
	}
	v = a.mustDo(200, http.MethodGet, "/gateway/models/me?endpoints=chat", capped, "")
	if got := listIDs(v); !reflect.DeepEqual(got, []string{"mystery:free"}) || v["reason"] != CodeKeyLimitExceeded {
		t.Fatalf("key at its limit: %v", v)
	}
	status, v := a.do(http.MethodGet, "/gateway/models/me?endpoints=nope", richKey, "")
	wantError(t, "bad filter", status, v, 400, CodeValidation, "endpoints")
}

// TestGatewayModelsMeLeavesOutModelsWithoutCredential: a model whose every route's provider
// has an api_key that resolved empty cannot answer, so the key cannot use it now: it is left
// out and named with the reason; a model with one route that has its key stays.
func TestGatewayModelsMeLeavesOutModelsWithoutCredential(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("discovery called the upstream: %s %s", r.Method, r.URL.Path)
	}))
	defer up.Close()
	provider := func(name, key string) Route {
		p, err := openai.New(openai.Config{Name: name, BaseURL: up.URL + "/v1", APIKey: key, RequireKey: true})
		if err != nil {
			t.Fatal(err)
		}
		rt := route(name, "gpt-4o", "2.50", "10")
		rt.Provider = p
		return rt
	}
	unset, keyed := provider("unset", ""), provider("keyed", "sk-test")
	a := newAdminGateway(t, []*Model{
		{Name: "dark", Routes: []Route{unset}},
		{Name: "half", Routes: []Route{unset, keyed}},
		{Name: "lit", Routes: []Route{keyed}},
	}, nil)
	_, std, _ := a.workspace(5 * usdNanos)
	v := a.mustDo(200, http.MethodGet, "/gateway/models/me", std, "")
	if got := listIDs(v); !reflect.DeepEqual(got, []string{"half", "lit"}) {
		t.Fatalf("usable now: %v", got)
	}
	if want := []any{map[string]any{"id": "dark", "reason": "credentials_not_configured"}}; !reflect.DeepEqual(v["unavailable_models"], want) {
		t.Fatalf("unavailable_models %v, want %v", v["unavailable_models"], want)
	}
	if got := listIDs(a.mustDo(200, http.MethodGet, "/gateway/models", std, "")); len(got) != 3 {
		t.Fatalf("the configured models: %v", got)
	}
}

func TestModelsListAliases(t *testing.T) {
	a := newDiscoveryGateway(t)
	_, std, _ := a.workspace(0)
	v := a.mustDo(200, http.MethodGet, "/models", std, "")
	if got := listIDs(v); len(got) != 5 || v["has_more"] != nil {
		t.Fatalf("GET /models is one unpaged list: %v", v)
	}
	if _, ok := item(t, v, "fast")["endpoints"]; ok {
		t.Fatal("endpoints without include_endpoints")
	}
	v = a.mustDo(200, http.MethodGet, "/models?include_endpoints=true", std, "")
	if e := item(t, v, "embedder")["endpoints"]; !reflect.DeepEqual(e, []any{"embeddings"}) {
		t.Fatalf("include_endpoints: %v", e)
	}
	v = a.mustDo(200, http.MethodGet, "/models?limit=2", std, "")
	if got := listIDs(v); len(got) != 2 || v["has_more"] != true || v["last_id"] != "fast" {
		t.Fatalf("paged GET /models: %v", v)
	}
	status, v := a.do(http.MethodGet, "/models?include_endpoints=maybe", std, "")
	wantError(t, "include_endpoints", status, v, 400, CodeValidation, "include_endpoints")
}

func TestDataModelsAndDirectories(t *testing.T) {
	a := newDiscoveryGateway(t)
	_, std, _ := a.workspace(0)
	cat := catalog.Default()

	all := a.walk("/data/models", std, 100)
	if len(all) != len(cat.Models) || !slices.IsSorted(all) {
		t.Fatalf("GET /data/models lists %d of %d models", len(all), len(cat.Models))
	}
	v := a.mustDo(200, http.MethodGet, "/data/models?organisation=openai&limit=100", std, "")
	mini := item(t, v, "openai/gpt-4o-mini")
	if mini["available"] != true || !reflect.DeepEqual(mini["gateway_models"], []any{"gpt-4o-mini"}) || mini["context_length"] != float64(128000) {
		t.Fatalf("catalogue entry %v", mini)
	}
	if p := mini["pricing"].(map[string]any); p["input_per_million_tokens"] != 0.15 || p["output_per_million_tokens"] != 0.6 {
		t.Fatalf("list price %v", p)
	}
	if gpt5 := item(t, v, "openai/gpt-5"); gpt5["available"] != false || len(gpt5["gateway_models"].([]any)) != 0 {
		t.Fatalf("unconfigured entry %v", gpt5)
	}
	if got := listIDs(a.mustDo(200, http.MethodGet, "/data/models?endpoints=ocr", std, "")); !reflect.DeepEqual(got, []string{"mistral/mistral-ocr"}) {
		t.Fatalf("ocr models %v", got)
	}
	dalle := item(t, a.mustDo(200, http.MethodGet, "/data/models?endpoints=images", std, ""), "openai/dall-e-3")
	if p := dalle["pricing"].(map[string]any); p["per_image"] != 0.04 || p["input_per_million_tokens"] != nil {
		t.Fatalf("per-image price %v", p)
	}

	v = a.mustDo(200, http.MethodGet, "/providers", std, "")
	if got := listIDs(v); !reflect.DeepEqual(got, []string{"azure", "groq", "local", "openai"}) {
		t.Fatalf("providers %v", got)
	}
	if p := item(t, v, "openai"); !reflect.DeepEqual(p["models"], []any{"embedder", "gpt-4o-mini"}) || !reflect.DeepEqual(p["endpoints"], []any{"chat", "embeddings", "ocr"}) {
		t.Fatalf("provider openai %v", p)
	}

	v = a.mustDo(200, http.MethodGet, "/endpoints", std, "")
	if got := listIDs(v); !reflect.DeepEqual(got, []string{"chat", "embeddings", "moderations", "images", "audio", "video", "ocr", "music"}) {
		t.Fatalf("endpoints %v", got)
	}
	chat := item(t, v, "chat")
	routes := chat["routes"].([]any)
	if chat["available"] != true || chat["model_count"] != float64(4) || routes[0].(map[string]any)["available"] != true {
		t.Fatalf("chat endpoint %v", chat)
	}
	if mod := item(t, v, "moderations"); mod["available"] != true {
		t.Fatalf("moderations is served: %v", mod)
	}
	if video := item(t, v, "video"); video["available"] != true || video["model_count"] != float64(0) {
		t.Fatalf("video is served, by none of these models: %v", video)
	}
	if got := a.walk("/endpoints", std, 3); len(got) != 8 {
		t.Fatalf("walked endpoints %v", got)
	}

	v = a.mustDo(200, http.MethodGet, "/organisations?limit=100", std, "")
	if acme := item(t, v, "acme-labs"); acme["gateway_model_count"] != float64(1) || acme["catalogue_model_count"] != float64(0) || acme["url"] != nil {
		t.Fatalf("configured-only organisation %v", acme)
	}
	if oa := item(t, v, "openai"); oa["name"] != "OpenAI" || oa["gateway_model_count"] != float64(3) || oa["catalogue_model_count"].(float64) < 10 {
		t.Fatalf("openai %v", oa)
	}

	v = a.mustDo(200, http.MethodGet, "/pricing/models", std, "")
	pm := item(t, v, "gpt-4o-mini")
	rs := pm["routes"].([]any)
	if len(rs) != 2 || rs[1].(map[string]any)["provider"] != "azure" || rs[1].(map[string]any)["pricing_nanos"].(map[string]any)["input"] != float64(200_000_000) {
		t.Fatalf("routes %v", rs)
	}
	if pm["list_pricing"] == nil || item(t, v, "mystery:free")["list_pricing"] != nil {
		t.Fatalf("list prices %v", v)
	}
	status, body := a.do(http.MethodGet, "/pricing/models?endpoints=x", std, "")
	wantError(t, "pricing filter", status, body, 400, CodeValidation, "endpoints")
}

func TestPricingCalculate(t *testing.T) {
	a := newDiscoveryGateway(t)
	_, std, mgmt := a.workspace(0)
	miniPrice := discoveryModels()[0].Routes[0].Price
	azurePrice := discoveryModels()[0].Routes[1].Price

	tests := []struct {
		name  string
		body  string
		usage providers.Usage
		price pricing.Price
		prov  string
	}{
		{"gateway counters", `{"model":"gpt-4o-mini","usage":{"input_tokens":1000,"cache_read_tokens":200,"output_tokens":400,"reasoning_tokens":100}}`,
			providers.Usage{Input: 1000, CacheRead: 200, Output: 400, Reasoning: 100}, miniPrice, "openai"},
		{"openai chat usage", `{"model":"gpt-4o-mini","usage":{"prompt_tokens":1200,"completion_tokens":500,"total_tokens":1700,
			"prompt_tokens_details":{"cached_tokens":200},"completion_tokens_details":{"reasoning_tokens":100}}}`,
			providers.Usage{Input: 1000, CacheRead: 200, Output: 400, Reasoning: 100}, miniPrice, "openai"},
		{"another route", `{"model":"gpt-4o-mini","provider":"azure","usage":{"input_tokens":1234567,"output_tokens":7}}`,
			providers.Usage{Input: 1234567, Output: 7}, azurePrice, "azure"},
		{"free model", `{"model":"mystery:free","usage":{"input_tokens":10}}`, providers.Usage{Input: 10}, pricing.Price{}, "local"},
		{"nothing used", `{"model":"fast","usage":{}}`, providers.Usage{}, discoveryModels()[1].Routes[0].Price, "groq"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := a.mustDo(200, http.MethodPost, "/pricing/calculate", std, tc.body)
			lines, total := pricing.Cost(tc.usage.Metered(), tc.price)
			if v["provider"] != tc.prov {
				t.Fatalf("answer %v, want provider %s", v, tc.prov)
			}
			wantCost(t, v, lines, total)
		})
	}
	// A management key may price too.
	a.mustDo(200, http.MethodPost, "/pricing/calculate", mgmt, `{"model":"fast","usage":{"output_tokens":1}}`)

	bad := []struct {
		name, body  string
		status      int
		code, param string
	}{
		{"no model", `{"usage":{}}`, 400, CodeModelRequired, "model"},
		{"unknown model", `{"model":"gpt-9","usage":{}}`, 400, CodeUnsupportedModel, "model"},
		{"unknown provider", `{"model":"fast","provider":"openai","usage":{}}`, 400, CodeValidation, "provider"},
		{"no usage", `{"model":"fast"}`, 400, CodeValidation, "usage"},
		{"usage not an object", `{"model":"fast","usage":[1]}`, 400, CodeValidation, "usage"},
		{"unknown usage field", `{"model":"fast","usage":{"tokens":5}}`, 400, CodeValidation, "usage.tokens"},
		{"mixed shapes", `{"model":"fast","usage":{"prompt_tokens":5,"input_tokens":5}}`, 400, CodeValidation, "usage.input_tokens"},
		{"negative", `{"model":"fast","usage":{"input_tokens":-5}}`, 400, CodeValidation, "usage.input_tokens"},
		{"string count", `{"model":"fast","usage":{"output_tokens":"15"}}`, 400, CodeValidation, "usage.output_tokens"},
		{"fraction", `{"model":"fast","usage":{"output_tokens":1.5}}`, 400, CodeValidation, "usage.output_tokens"},
		{"negative nested", `{"model":"fast","usage":{"prompt_tokens":5,"prompt_tokens_details":{"cached_tokens":-1}}}`, 400, CodeValidation, "usage.prompt_tokens_details.cached_tokens"},
		{"unknown field", `{"model":"fast","usage":{},"currency":"EUR"}`, 400, CodeValidation, "currency"},
		{"model not a string", `{"model":5,"usage":{}}`, 400, CodeValidation, "model"},
		{"not json", `{"model":`, 400, CodeInvalidJSON, ""},
		{"not an object", `[1,2]`, 400, CodeValidation, ""},
	}
	for _, b := range bad {
		t.Run(b.name, func(t *testing.T) {
			status, v := a.do(http.MethodPost, "/pricing/calculate", std, b.body)
			wantError(t, b.name, status, v, b.status, b.code, b.param)
		})
	}
	status, v := a.do(http.MethodGet, "/pricing/calculate", std, "")
	wantError(t, "GET", status, v, 405, CodeMethodNotAllowed, "")
}
