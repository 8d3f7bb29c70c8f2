package handlers

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"net/http"
	"reflect"
	"slices"
	"testing"

	"github.com/modelgateway/caddy-modelgateway/internal/pricing"
	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/mock"
)

func TestParseEmbeddings(t *testing.T) {
	for _, tc := range []struct {
		body   string
		inputs []string
		tokens [][]int64
		base64 bool
		param  string // the invalid field, "" when valid
	}{
		{body: `{"model":"m","input":"hi"}`, inputs: []string{"hi"}},
		{body: `{"model":"m","input":["a","b"],"encoding_format":"base64"}`, inputs: []string{"a", "b"}, base64: true},
		{body: `{"model":"m","input":[1,2,3],"encoding_format":"float"}`, tokens: [][]int64{{1, 2, 3}}},
		{body: `{"model":"m","input":[[1],[2,3]]}`, tokens: [][]int64{{1}, {2, 3}}},
		{body: `{"model":"m","input":"x","dimensions":256,"user":"u","meta":true}`, inputs: []string{"x"}},
		{body: `{"input":"x"}`, param: "model"},
		{body: `{"model":"m"}`, param: "input"},
		{body: `{"model":"m","input":""}`, param: "input"},
		{body: `{"model":"m","input":[]}`, param: "input"},
		{body: `{"model":"m","input":["a",""]}`, param: "input"},
		{body: `{"model":"m","input":["a",1]}`, param: "input"},
		{body: `{"model":"m","input":[1.5]}`, param: "input"},
		{body: `{"model":"m","input":[[]]}`, param: "input"},
		{body: `{"model":"m","input":{"text":"x"}}`, param: "input"},
		{body: `{"model":"m","input":"x","encoding_format":"int8"}`, param: "encoding_format"},
		{body: `{"model":"m","input":"x","dimensions":-1}`, param: "dimensions"},
	} {
		req, apiErr := parseEmbeddings([]byte(tc.body))
		if tc.param != "" {
			if apiErr == nil || apiErr.Param != tc.param {
				t.Errorf("%s: error %v, want one on %s", tc.body, apiErr, tc.param)
			}
			continue
		}
		if apiErr != nil {
			t.Errorf("%s: %v", tc.body, apiErr)
			continue
		}
		if !reflect.DeepEqual(req.inputs, tc.inputs) || !reflect.DeepEqual(req.tokens, tc.tokens) || req.base64 != tc.base64 || req.model != "m" {
			t.Errorf("%s: read %+v", tc.body, req)
		}
	}
}

func le32(v ...float32) string {
	raw := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(x))
	}
	return base64.StdEncoding.EncodeToString(raw)
}

func TestAppendVector(t *testing.T) {
	floats := `[0.5,-0.25,1e-7,0.1]`
	want64 := `"` + le32(0.5, -0.25, 1e-7, 0.1) + `"`
	for _, tc := range []struct {
		in       string
		asBase64 bool
		want     string
	}{
		{floats, false, floats}, // as it came, to the digit
		{floats, true, want64},
		{want64, true, want64},
		{want64, false, `[0.5,-0.25,1e-07,0.1]`},
		{` [1, 2] `, false, `[1, 2]`},
	} {
		got, err := appendVector(nil, json.RawMessage(tc.in), tc.asBase64)
		if err != nil || string(got) != tc.want {
			t.Errorf("appendVector(%s, base64 %v) = %s, %v; want %s", tc.in, tc.asBase64, got, err, tc.want)
		}
	}
	for _, bad := range []string{``, `"not base64!"`, `"` + base64.StdEncoding.EncodeToString([]byte{1, 2, 3}) + `"`, `["a"]`} {
		if _, err := appendVector(nil, json.RawMessage(bad), bad != "" && bad[0] == '['); err == nil {
			t.Errorf("appendVector(%s) accepted it", bad)
		}
	}
}

func TestEncodeEmbeddings(t *testing.T) {
	floats := []byte(`{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.5,-0.25]}],"model":"m","usage":{"prompt_tokens":2,"total_tokens":2}}`)
	if got, err := encodeEmbeddings(floats, false); err != nil || &got[0] != &floats[0] {
		t.Fatalf("floats asked, floats answered: rewritten (%v)", err)
	}
	got, err := encodeEmbeddings(floats, true)
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Data []struct {
			Index     int    `json:"index"`
			Embedding string `json:"embedding"`
		} `json:"data"`
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(got, &v); err != nil || len(v.Data) != 1 || v.Data[0].Embedding != le32(0.5, -0.25) || v.Usage.PromptTokens != 2 {
		t.Fatalf("base64 asked, floats answered: %s (%v)", got, err)
	}
	back, err := encodeEmbeddings(got, false)
	if err != nil || !json.Valid(back) {
		t.Fatalf("%s %v", back, err)
	}
	for _, bad := range []string{`[]`, `{"data":"x"}`, `{"data":[{"index":0}]}`} {
		if _, err := encodeEmbeddings([]byte(bad), true); err == nil {
			t.Errorf("encodeEmbeddings(%s) accepted it", bad)
		}
	}
}

func TestUnmeteredDimensions(t *testing.T) {
	var p pricing.Price
	if dim := unmetered(p, moderationsCapability.meters); dim != "" {
		t.Fatalf("a free route prices %s", dim)
	}
	p.PerRequest = 1000
	if dim := unmetered(p, moderationsCapability.meters); dim != "" {
		t.Fatalf("a per-request route prices %s", dim)
	}
	for _, d := range pricing.Dimensions() {
		if d.Keyed || d.Name == pricing.DimRequest {
			continue
		}
		var q pricing.Price
		if err := q.SetPerUnit(d.Name, 5); err != nil {
			t.Fatal(err)
		}
		if got := unmetered(q, moderationsCapability.meters); got != d.Name {
			t.Errorf("moderation on a route pricing %s: %q", d.Name, got)
		}
		want := d.Name
		if slices.Contains(textMeters, d.Name) {
			want = ""
		}
		if got := unmetered(q, textMeters); got != want {
			t.Errorf("text on a route pricing %s: %q, want %q", d.Name, got, want)
		}
		// Beside a dimension the endpoint measures, another is no refusal.
		q.PerRequest = 1000
		if got := unmetered(q, moderationsCapability.meters); got != "" {
			t.Errorf("moderation on a route pricing requests and %s: %q", d.Name, got)
		}
	}
}

// garbledEmbedder answers vectors that are not numbers.
type garbledEmbedder struct{ name string }

func (p garbledEmbedder) Name() string { return p.name }
func (p garbledEmbedder) Embed(context.Context, *providers.EmbeddingRequest) (*providers.EmbeddingResponse, error) {
	return &providers.EmbeddingResponse{Vectors: []json.RawMessage{json.RawMessage(`["x"]`)}, Usage: providers.Usage{Input: 1000}, UsageKnown: true}, nil
}

// TestUnusableEmbeddingFallsBack: an answer the gateway cannot give the client fails its
// attempt like an upstream error: the next route answers, and only it is charged; with no
// other route, the failure is in the error's diagnostics.
func TestUnusableEmbeddingFallsBack(t *testing.T) {
	garbled := route("garbled", "g", "1", "")
	garbled.Provider = garbledEmbedder{"garbled"}
	good := route("mock", "m", "1", "")
	good.Provider = mock.New(mock.Config{Name: "mock"})
	a := newAdminGateway(t, []*Model{
		{Name: "fallback", Routes: []Route{garbled, good}},
		{Name: "garbled-only", Routes: []Route{garbled}},
	}, nil)
	ws, std, _ := a.workspace(5 * usdNanos)

	status, h, v := a.doHeader(http.MethodPost, "/embeddings", std, `{"model":"fallback","input":"hello","encoding_format":"base64"}`)
	if status != http.StatusOK {
		t.Fatalf("%d %v", status, v)
	}
	gen, err := a.s.GetGeneration(context.Background(), ws, h.Get("X-Generation-Id"))
	if err != nil {
		t.Fatal(err)
	}
	// The garbled route was tried (and retried, as after a 5xx) and charged nothing.
	n := len(gen.Attempts)
	if gen.Provider != "mock" || n < 2 || gen.Attempts[0].Provider != "garbled" || gen.Attempts[0].Status != 0 ||
		gen.Attempts[n-1].Provider != "mock" || gen.InputTokens != 2 || gen.CostNanos != 2000 {
		t.Fatalf("generation %+v", gen)
	}

	status, v = a.do(http.MethodPost, "/embeddings", std, `{"model":"garbled-only","input":"hello","encoding_format":"base64"}`)
	if status != http.StatusBadGateway || !reflect.DeepEqual(v["failed_providers"], []any{"garbled", "garbled", "garbled"}) {
		t.Fatalf("%d %v", status, v)
	}
}
