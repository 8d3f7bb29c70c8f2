package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"reflect"
	"strings"
	"testing"

	"github.com/modelgateway/caddy-modelgateway/internal/pricing"
	"github.com/modelgateway/caddy-modelgateway/internal/upload"
	"github.com/modelgateway/caddy-modelgateway/providers"
)

func TestParseImageGeneration(t *testing.T) {
	for _, tc := range []struct {
		body  string
		param string // the invalid field, "" when valid
		check func(q *imageRequest) bool
	}{
		{body: `{"model":"m","prompt":"a cat"}`, check: func(q *imageRequest) bool { return q.n == 1 && q.size == "" && !q.stream }},
		{body: `{"model":"m","prompt":"a cat","n":3,"size":"1536x1024","quality":"HIGH","output_format":"webp","background":"transparent","meta":true}`,
			check: func(q *imageRequest) bool {
				return q.n == 3 && q.size == "1536x1024" && q.quality == "high" && q.outputFormat == "webp" && q.meta &&
					reflect.DeepEqual(q.set, []string{"size", "quality", "output_format", "background", "n"})
			}},
		{body: `{"model":"m","prompt":"a cat","stream":true,"partial_images":2}`, check: func(q *imageRequest) bool { return q.stream && q.partialImages == 2 }},
		{body: `{"model":"m","prompt":"x","size":"auto","style":"vivid","response_format":"url","moderation":"low","output_compression":50,"user":"u"}`},
		{body: `{"prompt":"a cat"}`, param: "model"},
		{body: `{"model":"m"}`, param: "prompt"},
		{body: `{"model":"m","prompt":"  "}`, param: "prompt"},
		{body: `{"model":"m","prompt":"x","n":0}`, param: "n"},
		{body: `{"model":"m","prompt":"x","n":11}`, param: "n"},
		{body: `{"model":"m","prompt":"x","size":"big"}`, param: "size"},
		{body: `{"model":"m","prompt":"x","size":"0x1024"}`, param: "size"},
		{body: `{"model":"m","prompt":"x","quality":"ultra"}`, param: "quality"},
		{body: `{"model":"m","prompt":"x","output_format":"gif"}`, param: "output_format"},
		{body: `{"model":"m","prompt":"x","background":"pink"}`, param: "background"},
		{body: `{"model":"m","prompt":"x","partial_images":4,"stream":true}`, param: "partial_images"},
		{body: `{"model":"m","prompt":"x","partial_images":1}`, param: "partial_images"},
		{body: `{"model":"m","prompt":"x","stream":true,"n":2}`, param: "n"},
		{body: `{"model":"m","prompt":"x","output_compression":101}`, param: "output_compression"},
		{body: `{"model":"m","prompt":"x","response_format":"gif"}`, param: "response_format"},
		{body: `{"model":"m","prompt":1}`, param: ""},
	} {
		q, apiErr := parseImageGeneration([]byte(tc.body))
		if tc.param != "" || (tc.check == nil && apiErr != nil) {
			if apiErr == nil || apiErr.Param != tc.param {
				t.Errorf("%s: error %v, want one on %q", tc.body, apiErr, tc.param)
			}
			continue
		}
		if apiErr != nil {
			t.Errorf("%s: %v", tc.body, apiErr)
			continue
		}
		if tc.check != nil && !tc.check(q) {
			t.Errorf("%s: read %+v", tc.body, q)
		}
	}
}

// editForm is a multipart body as openai-go sends an edit: files first (image[] twice and
// a mask), then the fields in name order.
func editForm(t *testing.T, fields map[string]string, images int, mask bool) (*bytes.Buffer, string) {
	t.Helper()
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	file := func(name, filename, ct, content string) {
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", `form-data; name="`+name+`"; filename="`+filename+`"`)
		h.Set("Content-Type", ct)
		pw, err := mw.CreatePart(h)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = pw.Write([]byte(content))
	}
	for i := range images {
		file("image[]", "pic"+string(rune('0'+i))+".png", "image/png", "\x89PNG picture "+string(rune('0'+i)))
	}
	if mask {
		file("mask", "mask.png", "image/png", "\x89PNG mask")
	}
	for k, v := range fields {
		_ = mw.WriteField(k, v)
	}
	_ = mw.Close()
	return &b, mw.FormDataContentType()
}

// postEdit serves an edit of editForm's making as openai-go sends it.
func (a *adminGateway) postEdit(key string, fields map[string]string, images int, mask bool) *httptest.ResponseRecorder {
	a.t.Helper()
	body, ct := editForm(a.t, fields, images, mask)
	r := httptest.NewRequest(http.MethodPost, "http://gw/v1/images/edits", body)
	r.Header.Set("Authorization", "Bearer "+key)
	r.Header.Set("Content-Type", ct)
	w := httptest.NewRecorder()
	a.g.ServeHTTP(w, r, "/images/edits")
	return w
}

func TestParseImageEdit(t *testing.T) {
	for _, tc := range []struct {
		name   string
		fields map[string]string
		images int
		mask   bool
		param  string
	}{
		{"two images and a mask", map[string]string{"model": "m", "prompt": "p", "n": "2", "stream": "false"}, 2, true, ""},
		{"no image", map[string]string{"model": "m", "prompt": "p"}, 0, false, "image"},
		{"seventeen images", map[string]string{"model": "m", "prompt": "p"}, 17, false, "image"},
		{"n not a number", map[string]string{"model": "m", "prompt": "p", "n": "two"}, 1, false, "n"},
		{"stream not a boolean", map[string]string{"model": "m", "prompt": "p", "stream": "yes"}, 1, false, "stream"},
		{"image as text", map[string]string{"model": "m", "prompt": "p", "image": "https://example.com/a.png"}, 1, false, "image"},
		{"no prompt", map[string]string{"model": "m"}, 1, false, "prompt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body, ct := editForm(t, tc.fields, tc.images, tc.mask)
			boundary, _ := upload.Boundary(ct)
			form, err := upload.Parse(body, boundary, upload.Options{Replay: true})
			if err != nil {
				t.Fatal(err)
			}
			defer form.Close()
			q, apiErr := parseImageEdit(form)
			if tc.param != "" {
				if apiErr == nil || apiErr.Param != tc.param {
					t.Fatalf("error %v, want one on %s", apiErr, tc.param)
				}
				return
			}
			if apiErr != nil {
				t.Fatal(apiErr)
			}
			if !q.edit || len(q.images) != tc.images || (q.mask != nil) != tc.mask || q.n != 2 {
				t.Fatalf("read %+v", q)
			}
			images, mask, err := readEditPictures(form, q)
			if err != nil || len(images) != 2 || images[1].FileName != "pic1.png" || images[1].MIMEType != "image/png" ||
				string(images[1].Data) != "\x89PNG picture 1" || mask == nil || string(mask.Data) != "\x89PNG mask" {
				t.Fatalf("pictures %+v %+v %v", images, mask, err)
			}
		})
	}
}

func imagePrices(t *testing.T, list ...pricing.ImagePrice) pricing.Price {
	t.Helper()
	p, err := pricing.Price{}.WithImages(list...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestImageWorstCase(t *testing.T) {
	dalle := imagePrices(t,
		pricing.ImagePrice{Size: "1024x1024", Quality: "standard", Nanos: 40_000_000},
		pricing.ImagePrice{Size: "1024x1024", Quality: "hd", Nanos: 80_000_000},
		pricing.ImagePrice{Size: "1792x1024", Quality: "standard", Nanos: 80_000_000},
	)
	// A reseller prices GPT Image per image by quality only.
	byQuality := imagePrices(t,
		pricing.ImagePrice{Quality: "low", Nanos: 11_000_000},
		pricing.ImagePrice{Quality: "high", Nanos: 167_000_000},
	)
	tokens := pricing.Price{Input: 5 * usdNanos, ImageInputTokens: 10 * usdNanos, ImageOutputTokens: 40 * usdNanos}
	for _, tc := range []struct {
		name    string
		rt      Route
		body    string
		want    int64
		unpiced bool
	}{
		{"dall-e-3 default size", Route{UpstreamModel: "dall-e-3", Price: dalle}, `{"model":"m","prompt":"x","n":2}`, 80_000_000, false},
		{"dall-e-3 auto is the default", Route{UpstreamModel: "openai/dall-e-3", Price: dalle}, `{"model":"m","prompt":"x","size":"auto","quality":"auto"}`, 40_000_000, false},
		{"dall-e-3 hd", Route{UpstreamModel: "dall-e-3", Price: dalle}, `{"model":"m","prompt":"x","quality":"hd"}`, 80_000_000, false},
		{"dall-e-3 unpriced size", Route{UpstreamModel: "dall-e-3", Price: dalle}, `{"model":"m","prompt":"x","size":"1024x1792"}`, 0, true},
		{"gpt image auto quality takes the dearest", Route{UpstreamModel: "gpt-image-1", Price: byQuality}, `{"model":"m","prompt":"x"}`, 167_000_000, false},
		{"gpt image low", Route{UpstreamModel: "gpt-image-1", Price: byQuality}, `{"model":"m","prompt":"x","quality":"low","n":3}`, 33_000_000, false},
		{"gpt image unpriced quality", Route{UpstreamModel: "gpt-image-1", Price: byQuality}, `{"model":"m","prompt":"x","quality":"medium"}`, 0, true},
		// 3 prompt bytes at 5 USD/M plus 6240 image tokens at 40 USD/M.
		{"gpt image tokens", Route{UpstreamModel: "gpt-image-1", Price: tokens}, `{"model":"m","prompt":"cat"}`, 15_000 + 6240*40_000, false},
		// Each partial image adds 100 tokens.
		{"partial images", Route{UpstreamModel: "gpt-image-1", Price: tokens}, `{"model":"m","prompt":"cat","stream":true,"partial_images":2}`, 15_000 + 6440*40_000, false},
		// 2048x2048 is 4096/1536 of 1024x1536's pixels.
		{"large size scales", Route{UpstreamModel: "gpt-image-2", Price: tokens}, `{"model":"m","prompt":"cat","size":"2048x2048"}`, 15_000 + 16640*40_000, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, apiErr := parseImageGeneration([]byte(tc.body))
			if apiErr != nil {
				t.Fatal(apiErr)
			}
			got, err := q.worst(tc.rt)
			var ue *pricing.UnpricedError
			if tc.unpiced {
				if !errors.As(err, &ue) {
					t.Fatalf("worst %d %v, want an unpriced error", got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("worst %d %v, want %d", got, err, tc.want)
			}
		})
	}
	edit := &imageRequest{model: "m", prompt: "cat", n: 1, edit: true, images: make([]upload.Part, 2), mask: &upload.Part{}}
	if got, _ := edit.worst(Route{UpstreamModel: "gpt-image-1", Price: tokens}); got != 15_000+3*maxImageInputTokens*10_000+6240*40_000 {
		t.Fatalf("edit worst %d", got)
	}
}

func TestParseImageUsage(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want pricing.Usage
	}{
		{`{"input_tokens":50,"input_tokens_details":{"image_tokens":40,"text_tokens":10},"output_tokens":4160,"total_tokens":4210}`,
			pricing.Usage{Input: 10, ImageInputTokens: 40, ImageOutputTokens: 4160}},
		{`{"input_tokens":12,"output_tokens":300,"output_tokens_details":{"image_tokens":272,"text_tokens":28}}`,
			pricing.Usage{Input: 12, ImageOutputTokens: 272, Output: 28}},
		{`{"input_tokens":5,"input_tokens_details":{"image_tokens":9},"output_tokens":0}`, pricing.Usage{ImageInputTokens: 5}},
	} {
		got, err := parseImageUsage([]byte(tc.raw))
		if err != nil || got != tc.want {
			t.Errorf("%s: %+v %v, want %+v", tc.raw, got, err, tc.want)
		}
	}
	if _, err := parseImageUsage([]byte(`{"input_tokens":"many"}`)); err == nil {
		t.Error("an unreadable usage was read")
	}
	// A route priced by text tokens only bills image tokens at the text rates.
	p := pricing.Price{Input: 5_000, Output: 40_000}
	if u := foldImageTokens(p, pricing.Usage{Input: 10, ImageInputTokens: 40, ImageOutputTokens: 100, Output: 1}); u != (pricing.Usage{Input: 50, Output: 101}) {
		t.Errorf("folded %+v", u)
	}
}

// fakeImages is an ImageGenerator that records what it was asked.
type fakeImages struct {
	name string
	got  *providers.ImageRequest
	resp providers.ImageResponse
}

func (f *fakeImages) Name() string { return f.name }
func (f *fakeImages) GenerateImages(_ context.Context, req *providers.ImageRequest) (*providers.ImageResponse, error) {
	f.got = req
	resp := f.resp
	return &resp, nil
}

func TestNeutralImages(t *testing.T) {
	gen := &fakeImages{name: "gen", resp: providers.ImageResponse{
		Images: []providers.GeneratedImage{{B64JSON: "aW1hZ2Ux", MIMEType: "image/png", RevisedPrompt: "a cat, revised"}, {B64JSON: "aW1hZ2Uy", MIMEType: "image/png"}},
		Usage:  providers.MediaUsage{Input: 7, ImageOutputTokens: 1000}, UsageKnown: true,
	}}
	perImage := imagePrices(t, pricing.ImagePrice{Size: "1024x1024", Nanos: 30_000_000}, pricing.ImagePrice{Nanos: 50_000_000})
	perImage.Input = 1_000_000 // a nanodollar a text token
	a := newAdminGateway(t, []*Model{{Name: "imagen", Routes: []Route{{ProviderName: "gen", Provider: gen, UpstreamModel: "imagen-4", Price: perImage}}}}, nil)
	ws, std, _ := a.workspace(5 * usdNanos)

	status, h, v := a.doHeader(http.MethodPost, "/images/generations", std, `{"model":"imagen","prompt":"a cat","n":2,"size":"1024x1024","style":"vivid","meta":true}`)
	if status != 200 {
		t.Fatalf("%d %v", status, v)
	}
	if gen.got.Model != "imagen-4" || gen.got.N != 2 || gen.got.Size != "1024x1024" || gen.got.Prompt != "a cat" {
		t.Fatalf("asked %+v", gen.got)
	}
	data := v["data"].([]any)
	if len(data) != 2 || data[0].(map[string]any)["b64_json"] != "aW1hZ2Ux" || data[0].(map[string]any)["revised_prompt"] != "a cat, revised" ||
		v["size"] != "1024x1024" || v["output_format"] != "png" || v["id"] != h.Get("X-Generation-Id") {
		t.Fatalf("answer %v", v)
	}
	usage := v["usage"].(map[string]any)
	// 2 images at 0.03 plus 7 text tokens; the image tokens are not priced.
	if usage["input_tokens"] != float64(7) || usage["output_tokens"] != float64(1000) || usage["cost_nanos"] != float64(60_000_007) {
		t.Fatalf("usage %v", usage)
	}
	if meta := v["meta"].(map[string]any); !reflect.DeepEqual(meta["dropped_parameters"], []any{"style"}) {
		t.Fatalf("meta %v", meta)
	}
	if b, _ := a.s.GetBalance(context.Background(), ws); b.BalanceNanos != 5*usdNanos-60_000_007 {
		t.Fatalf("balance %d", b.BalanceNanos)
	}
	// The record keeps the images as images, and the line says which size it priced.
	g, err := a.s.GetGeneration(context.Background(), ws, h.Get("X-Generation-Id"))
	if err != nil {
		t.Fatal(err)
	}
	want := pricing.CostLine{Dimension: pricing.DimImage, Key: "1024x1024", Quantity: 2, UnitPriceNanos: 30_000_000, Nanos: 60_000_000}
	if g.Images != 2 || g.InputTokens != 7 || g.OutputTokens != 1000 || len(g.CostLines) != 2 || g.CostLines[1] != want {
		t.Fatalf("record %+v", g)
	}

	// A stream of a neutral route is its completed event, with usage and cost.
	gen.resp.Images = gen.resp.Images[:1]
	r := httptest.NewRequest(http.MethodPost, "http://gw/v1/images/generations", strings.NewReader(`{"model":"imagen","prompt":"a dog","stream":true}`))
	r.Header.Set("Authorization", "Bearer "+std)
	w := httptest.NewRecorder()
	a.g.ServeHTTP(w, r, "/images/generations")
	body := w.Body.String()
	if w.Code != 200 || w.Header().Get("Content-Type") != "text/event-stream" || strings.Count(body, "event: image_generation.completed\n") != 1 {
		t.Fatalf("%d %s", w.Code, body)
	}
	var ev map[string]any
	_ = json.Unmarshal([]byte(strings.TrimSpace(body[strings.Index(body, "data: ")+6:])), &ev)
	// No size asked and none said: the route's dearest image price, 0.05.
	if ev["type"] != "image_generation.completed" || ev["b64_json"] != "aW1hZ2Ux" || ev["usage"].(map[string]any)["cost_nanos"] != float64(50_000_007) {
		t.Fatalf("event %v", ev)
	}
}

func TestNeutralImageEdit(t *testing.T) {
	gen := &fakeImages{name: "gen", resp: providers.ImageResponse{Images: []providers.GeneratedImage{{B64JSON: "ZWRpdGVk", MIMEType: "image/webp"}}}}
	a := newAdminGateway(t, []*Model{{Name: "editor", Routes: []Route{{ProviderName: "gen", Provider: gen, UpstreamModel: "edit-1",
		Price: imagePrices(t, pricing.ImagePrice{Nanos: 20_000_000})}}}}, nil)
	_, std, _ := a.workspace(5 * usdNanos)
	w := a.postEdit(std, map[string]string{"model": "editor", "prompt": "add a hat"}, 2, true)
	var v map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &v); err != nil || w.Code != 200 {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
	if len(gen.got.Images) != 2 || string(gen.got.Images[0].Data) != "\x89PNG picture 0" || gen.got.Mask == nil || gen.got.Mask.FileName != "mask.png" || gen.got.Prompt != "add a hat" {
		t.Fatalf("asked %+v", gen.got)
	}
	if v["output_format"] != "webp" || v["usage"].(map[string]any)["cost_nanos"] != float64(20_000_000) {
		t.Fatalf("answer %v", v)
	}
}
