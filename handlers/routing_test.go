package handlers

import (
	"context"
	"net/http"
	"reflect"
	"testing"

	"github.com/modelgateway/caddy-modelgateway/internal/pricing"
	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// downReader is a DocumentReader whose upstream fails every call.
type downReader struct{ name string }

func (f downReader) Name() string { return f.name }
func (f downReader) ReadDocument(context.Context, *providers.OCRRequest) (*providers.OCRResponse, error) {
	return nil, &providers.UpstreamError{Provider: f.name, Status: http.StatusInternalServerError, Category: providers.CategoryServerError, Message: "down"}
}

// TestRoutingDiagnosticsTellEachReason: every route left out of a request is listed under
// the stage that dropped it, with its own reason, whether no route is left to try or the
// ones left failed.
func TestRoutingDiagnosticsTellEachReason(t *testing.T) {
	pages := pricing.Price{Page: 1_000_000}
	leftOut := []Route{
		// No OCR at all.
		{ProviderName: "embed", Provider: embedOnly{}, UpstreamModel: "e"},
		// A chat model reads images, not a PDF.
		{ProviderName: "vision", Provider: stubChat{"vision"}, UpstreamModel: "v", Price: pricing.Price{Input: usdNanos, Output: usdNanos}},
		// Takes no document as large as the request.
		{ProviderName: "small", Provider: &fakeReader{name: "small"}, UpstreamModel: "s", Price: pages, MaxUpload: 16},
		// Billed by what OCR never measures.
		{ProviderName: "unpriced", Provider: &fakeReader{name: "unpriced"}, UpstreamModel: "u", Price: pricing.Price{InputAudioSeconds: 1_000}},
	}
	down := Route{ProviderName: "down", Provider: downReader{"down"}, UpstreamModel: "d", Price: pages}
	a := newAdminGateway(t, []*Model{
		{Name: "none-left", Routes: leftOut},
		{Name: "one-left", Routes: append(append([]Route{}, leftOut...), down)},
	}, nil)
	ws, std, _ := a.workspace(5 * usdNanos)
	stages := []any{
		map[string]any{"stage": "endpoint_support", "beforeCount": 4.0, "afterCount": 3.0, "droppedProviders": []any{
			map[string]any{"providerId": "embed", "reason": "unsupported_endpoint"}}},
		map[string]any{"stage": "request_fit", "beforeCount": 3.0, "afterCount": 1.0, "droppedProviders": []any{
			map[string]any{"providerId": "vision", "reason": "unsupported_document_type"},
			map[string]any{"providerId": "small", "reason": "upload_too_large"}}},
		map[string]any{"stage": "pricing", "beforeCount": 1.0, "afterCount": 0.0, "droppedProviders": []any{
			map[string]any{"providerId": "unpriced", "reason": "missing_pricing"}}},
	}
	for _, tc := range []struct {
		model      string
		status     int
		code       string
		stages     []any
		supporting float64
		candidates float64
	}{
		{"none-left", http.StatusBadRequest, CodeUnsupportedModel, stages, 3, 0},
		{"one-left", http.StatusBadGateway, CodeUpstream, []any{
			map[string]any{"stage": "endpoint_support", "beforeCount": 5.0, "afterCount": 4.0, "droppedProviders": stages[0].(map[string]any)["droppedProviders"]},
			map[string]any{"stage": "request_fit", "beforeCount": 4.0, "afterCount": 2.0, "droppedProviders": stages[1].(map[string]any)["droppedProviders"]},
			map[string]any{"stage": "pricing", "beforeCount": 2.0, "afterCount": 1.0, "droppedProviders": stages[2].(map[string]any)["droppedProviders"]},
		}, 4, 1},
	} {
		t.Run(tc.model, func(t *testing.T) {
			status, v := a.do(http.MethodPost, "/ocr", std, `{"model":"`+tc.model+`","document":{"type":"document_url","document_url":"https://example.com/report.pdf"}}`)
			wantError(t, tc.model, status, v, tc.status, tc.code, "")
			routing, _ := v["routing_diagnostics"].(map[string]any)
			if routing == nil || !reflect.DeepEqual(routing["filterStages"], tc.stages) {
				t.Fatalf("routing_diagnostics %v\nwant %v", routing, tc.stages)
			}
			cand, _ := v["provider_candidate_diagnostics"].(map[string]any)
			if cand == nil || !reflect.DeepEqual(cand["droppedUnsupportedEndpoint"], []any{"embed"}) || cand["supportsEndpointCount"] != tc.supporting ||
				cand["candidateCount"] != tc.candidates {
				t.Fatalf("provider_candidate_diagnostics %v", cand)
			}
			if !reflect.DeepEqual(v["missing_pricing_providers"], []any{"unpriced"}) {
				t.Fatalf("missing_pricing_providers %v", v["missing_pricing_providers"])
			}
		})
	}
	if b, _ := a.s.GetBalance(context.Background(), ws); b.BalanceNanos != 5*usdNanos || b.ReservedNanos != 0 {
		t.Fatalf("balance %+v after requests no route answered", b)
	}
}

// holdWatch is an image model that notes the credit held for requests in flight when it
// is called, which is while the request that called it holds its worst case: on the
// workspace's credit lease when one admitted it, else reserved in the store.
type holdWatch struct {
	fakeImages
	g      *Gateway
	ws     string
	called bool
	held   int64
}

func (f *holdWatch) GenerateImages(ctx context.Context, req *providers.ImageRequest) (*providers.ImageResponse, error) {
	b, err := f.g.Store.GetBalance(ctx, f.ws)
	if err != nil {
		return nil, err
	}
	f.called, f.held = true, b.ReservedNanos
	if inflight, leases := inflightHolds(f.g); leases > 0 {
		f.held = inflight
	}
	return f.fakeImages.GenerateImages(ctx, req)
}

// inflightHolds sums the worst cases of the requests in flight on g's credit leases.
func inflightHolds(g *Gateway) (sum int64, leases int) {
	st := g.ledger.LeaseStats()
	return st.InFlightNanos, st.Leases
}

// TestHoldLeavesOutRoutesTooSmallForTheUpload: a dear route whose max_upload the edit
// passes cannot serve it, so it neither sizes the hold nor is tried: the hold is the worst
// case of the cheap route that answers.
func TestHoldLeavesOutRoutesTooSmallForTheUpload(t *testing.T) {
	answer := providers.ImageResponse{Images: []providers.GeneratedImage{{B64JSON: "ZWRpdGVk", MIMEType: "image/png"}}}
	dear := &holdWatch{fakeImages: fakeImages{name: "dear", resp: answer}}
	cheap := &holdWatch{fakeImages: fakeImages{name: "cheap", resp: answer}}
	a := newAdminGateway(t, []*Model{{Name: "editor", Routes: []Route{
		{ProviderName: "dear", Provider: dear, UpstreamModel: "edit-hd", Price: imagePrices(t, pricing.ImagePrice{Nanos: 500_000_000}), MaxUpload: 8},
		{ProviderName: "cheap", Provider: cheap, UpstreamModel: "edit-1", Price: imagePrices(t, pricing.ImagePrice{Nanos: 20_000_000})},
	}}}, nil)
	ws, std, _ := a.workspace(5 * usdNanos)
	dear.g, dear.ws, cheap.g, cheap.ws = a.g, ws, a.g, ws

	w := a.postEdit(std, map[string]string{"model": "editor", "prompt": "add a hat"}, 2, false)
	if w.Code != http.StatusOK {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
	if dear.called || !cheap.called {
		t.Fatalf("called: dear %v, cheap %v", dear.called, cheap.called)
	}
	if cheap.held != 20_000_000 {
		t.Fatalf("held %d while the upstream answered, want the cheap route's worst case 20000000", cheap.held)
	}
	if b, _ := a.s.GetBalance(context.Background(), ws); b.BalanceNanos != 5*usdNanos-20_000_000 || b.ReservedNanos != 0 {
		t.Fatalf("balance %+v", b)
	}
}

// TestJobRouteBillsTheJobsModel: a job is priced as its own model bills, not as the first
// model that shares its route: a ":free" model's job on a paid model's route is free.
func TestJobRouteBillsTheJobsModel(t *testing.T) {
	paid := pricing.Price{PerRequest: 100_000_000}
	route := Route{ProviderName: "vid", Provider: stubChat{"vid"}, UpstreamModel: "v-1", Price: paid}
	reg, err := NewRegistry([]*Model{
		{Name: "a-video", Routes: []Route{route}},
		{Name: "a-video:free", Routes: []Route{route}},
	})
	if err != nil {
		t.Fatal(err)
	}
	job := func(model string) store.Job {
		return store.Job{Model: model, Provider: "vid", UpstreamModel: "v-1"}
	}
	for _, tc := range []struct {
		model string
		free  bool
		price pricing.Price
	}{
		{"a-video", false, paid},
		{"a-video:free", true, pricing.Price{}},
		// A model renamed since: the route's first model, the paid one.
		{"gone", false, paid},
	} {
		rt, ok := reg.JobRoute(job(tc.model))
		if !ok || rt.Free != tc.free || !reflect.DeepEqual(rt.Price, tc.price) || rt.Upstream != route.Provider {
			t.Errorf("%s: route %+v, %v; want free %v at %+v", tc.model, rt, ok, tc.free, tc.price)
		}
	}
	if _, ok := reg.JobRoute(store.Job{Model: "a-video", Provider: "vid", UpstreamModel: "v-2"}); ok {
		t.Error("a route no model has was found")
	}
}
