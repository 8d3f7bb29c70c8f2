package gemini

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/modelgateway/caddy-modelgateway/providers"
)

// pngBytes starts like a PNG file, which is all that sniffing reads.
var pngBytes = []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00")

func TestImagenPredict(t *testing.T) {
	var calls atomic.Int32
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		var body PredictRequest
		_ = json.NewDecoder(r.Body).Decode(&body)
		calls.Add(1)
		var preds []string
		for i := range body.Parameters.SampleCount {
			preds = append(preds, `{"bytesBase64Encoded":"`+base64.StdEncoding.EncodeToString([]byte{byte(body.Parameters.SampleCount), byte(i)})+`","mimeType":"image/png"}`)
		}
		writeJSON(w, 200, `{"predictions":[`+strings.Join(preds, ",")+`]}`)
	})
	p := f.provider(t)
	resp, err := p.GenerateImages(context.Background(), &providers.ImageRequest{
		Model: "imagen-4.0-generate-001", Prompt: "a lighthouse at dawn", N: 6, Size: "1536x1024", Quality: "hd",
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Images) != 6 || resp.UsageKnown || resp.Usage != (providers.MediaUsage{}) {
		t.Fatalf("response %+v", resp)
	}
	// Calls of four then two, their images in that order.
	for i, img := range resp.Images {
		want := []byte{4, byte(i)}
		if i >= 4 {
			want = []byte{2, byte(i - 4)}
		}
		if img.B64JSON != base64.StdEncoding.EncodeToString(want) || img.MIMEType != "image/png" {
			t.Errorf("image %d: %+v", i, img)
		}
	}
	reqs := f.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d calls, want 2", len(reqs))
	}
	counts := map[string]bool{}
	for _, r := range reqs {
		if r.Path != "/v1beta/models/imagen-4.0-generate-001:predict" || r.RawQuery != "" || r.Header.Get("X-Goog-Api-Key") != testKey {
			t.Errorf("request %s?%s %v", r.Path, r.RawQuery, r.Header)
		}
		counts[string(r.Body)] = true
	}
	// 1536x1024 (3:2) is closest to Imagen's 4:3.
	for _, want := range []string{
		`{"instances":[{"prompt":"a lighthouse at dawn"}],"parameters":{"sampleCount":4,"aspectRatio":"4:3"}}`,
		`{"instances":[{"prompt":"a lighthouse at dawn"}],"parameters":{"sampleCount":2,"aspectRatio":"4:3"}}`,
	} {
		if !counts[want] {
			t.Errorf("no call sent %s; got %v", want, counts)
		}
	}
}

func TestImagenFiltered(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, `{"predictions":[{"raiFilteredReason":"The prompt may violate our policies."}]}`)
	})
	_, err := f.provider(t).GenerateImages(context.Background(), &providers.ImageRequest{Model: "models/imagen-3.0-generate-002", Prompt: "x", N: 1})
	ue := asUpstream(t, err)
	if ue.Category != providers.CategoryInvalidRequest || !strings.Contains(ue.Message, "violate our policies") {
		t.Errorf("got %+v", ue)
	}
}

func TestGeminiImage(t *testing.T) {
	const answer = `{"candidates":[{"content":{"role":"model","parts":[
		{"text":"draft","thought":true},
		{"inlineData":{"mimeType":"image/png","data":"ZHJhZnQ="},"thought":true},
		{"text":"Here is your lighthouse."},
		{"inlineData":{"mimeType":"image/png","data":"aW1hZ2U="}}]},"finishReason":"STOP","index":0}],
		"usageMetadata":{"promptTokenCount":300,"candidatesTokenCount":1300,"thoughtsTokenCount":50,"totalTokenCount":1650,
		"promptTokensDetails":[{"modality":"TEXT","tokenCount":42},{"modality":"IMAGE","tokenCount":258}],
		"candidatesTokensDetails":[{"modality":"TEXT","tokenCount":10},{"modality":"IMAGE","tokenCount":1290}]}}`
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 200, answer) })
	p := f.provider(t)
	mask := pngBytes[:len(pngBytes)-1]
	resp, err := p.GenerateImages(context.Background(), &providers.ImageRequest{
		Model: "gemini-2.5-flash-image", Prompt: "add a boat", N: 2, Size: "1536x1024", OutputFormat: "jpeg",
		Images: []providers.ImageInput{
			{Data: pngBytes, FileName: "a.png"}, // no type: sniffed
			{Data: []byte{0xff, 0xd8, 0xff, 0xe0}, MIMEType: "image/jpeg", FileName: "b.jpg"},
		},
		Mask: &providers.ImageInput{Data: mask, MIMEType: "image/png"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Images) != 2 || resp.Images[0] != (providers.GeneratedImage{B64JSON: "aW1hZ2U=", MIMEType: "image/png"}) || resp.Images[1] != resp.Images[0] {
		t.Errorf("images %+v", resp.Images)
	}
	want := providers.MediaUsage{Input: 84, ImageInputTokens: 516, Output: 120, ImageOutputTokens: 2580}
	if !resp.UsageKnown || resp.Usage != want {
		t.Errorf("usage %+v %v, want %+v (two calls added up)", resp.Usage, resp.UsageKnown, want)
	}
	reqs := f.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d calls, want one per image", len(reqs))
	}
	b64 := base64.StdEncoding.EncodeToString
	for _, r := range reqs {
		if r.Path != "/v1beta/models/gemini-2.5-flash-image:generateContent" {
			t.Errorf("path %s", r.Path)
		}
		jsonEqual(t, r.Body, `{"contents":[{"role":"user","parts":[
			{"text":"add a boat"},
			{"inlineData":{"mimeType":"image/png","data":"`+b64(pngBytes)+`"}},
			{"inlineData":{"mimeType":"image/jpeg","data":"`+b64([]byte{0xff, 0xd8, 0xff, 0xe0})+`"}},
			{"text":"`+maskNote+`"},
			{"inlineData":{"mimeType":"image/png","data":"`+b64(mask)+`"}}]}],
			"generationConfig":{"responseModalities":["TEXT","IMAGE"],"imageConfig":{"aspectRatio":"3:2"}}}`)
	}
}

func TestGeminiImageUsageWithoutDetails(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, `{"candidates":[{"content":{"parts":[{"inlineData":{"mimeType":"image/jpeg","data":"aW1n"}}]},"finishReason":"STOP"}],
			"usageMetadata":{"promptTokenCount":"12","candidatesTokenCount":1290}}`)
	})
	resp, err := f.provider(t).GenerateImages(context.Background(), &providers.ImageRequest{Model: "gemini-3-pro-image-preview", Prompt: "x", Size: "2048x2048"})
	if err != nil {
		t.Fatal(err)
	}
	if want := (providers.MediaUsage{Input: 12, ImageOutputTokens: 1290}); !resp.UsageKnown || resp.Usage != want || resp.Images[0].MIMEType != "image/jpeg" {
		t.Errorf("response %+v, want usage %+v", resp, want)
	}
	jsonEqual(t, f.requests()[0].Body, `{"contents":[{"role":"user","parts":[{"text":"x"}]}],
		"generationConfig":{"responseModalities":["TEXT","IMAGE"],"imageConfig":{"aspectRatio":"1:1","imageSize":"2K"}}}`)
}

func TestGeminiImageNone(t *testing.T) {
	cases := []struct{ name, answer, code, substr string }{
		{"image safety", `{"candidates":[{"content":{"parts":[]},"finishReason":"IMAGE_SAFETY","finishMessage":"Unable to show the generated image.","index":0}]}`,
			"IMAGE_SAFETY", "Unable to show the generated image"},
		{"blocked prompt", `{"promptFeedback":{"blockReason":"SAFETY"},"usageMetadata":{"promptTokenCount":4}}`, "SAFETY", "blocked the prompt"},
		{"text only", `{"candidates":[{"content":{"parts":[{"text":"I can't draw that."}]},"finishReason":"STOP","index":0}]}`, "STOP", "I can't draw that."},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t, func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 200, tc.answer) })
			_, err := f.provider(t).GenerateImages(context.Background(), &providers.ImageRequest{Model: "gemini-2.5-flash-image", Prompt: "x"})
			ue := asUpstream(t, err)
			if ue.Category != providers.CategoryInvalidRequest || ue.Retryable || ue.Code != tc.code || !strings.Contains(ue.Message, tc.substr) {
				t.Errorf("got %+v, want code %s and %q", ue, tc.code, tc.substr)
			}
		})
	}
}

func TestGenerateImagesErrors(t *testing.T) {
	cases := []struct {
		name      string
		status    int
		body      string
		cat       providers.Category
		retryable bool
	}{
		{"rate limited", 429, `{"error":{"code":429,"message":"Resource has been exhausted","status":"RESOURCE_EXHAUSTED",
			"details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"7s"}]}}`, providers.CategoryRateLimited, true},
		{"bad request", 400, `{"error":{"code":400,"message":"Invalid aspect ratio","status":"INVALID_ARGUMENT"}}`, providers.CategoryInvalidRequest, false},
		{"not found", 404, `{"error":{"code":404,"message":"not found","status":"NOT_FOUND"}}`, providers.CategoryModelUnavailable, false},
		{"server error", 500, `{"error":{"code":500,"message":"Internal error","status":"INTERNAL"}}`, providers.CategoryServerError, true},
		{"malformed answer", 200, `{"candidates":"x"}`, providers.CategoryServerError, true},
	}
	for _, model := range []string{"imagen-4.0-generate-001", "gemini-2.5-flash-image"} {
		for _, tc := range cases {
			t.Run(model+"/"+tc.name, func(t *testing.T) {
				if tc.name == "malformed answer" && strings.HasPrefix(model, "imagen") {
					tc.body = `{"predictions":"x"}`
				}
				f := newFake(t, func(w http.ResponseWriter, r *http.Request) { writeJSON(w, tc.status, tc.body) })
				_, err := f.provider(t).GenerateImages(context.Background(), &providers.ImageRequest{Model: model, Prompt: "x", N: 3})
				noKeyIn(t, err)
				ue := asUpstream(t, err)
				if ue.Category != tc.cat || ue.Retryable != tc.retryable {
					t.Errorf("got %+v, want %s retryable %v", ue, tc.cat, tc.retryable)
				}
			})
		}
	}
}

func TestGenerateImagesOneCallFails(t *testing.T) {
	var n atomic.Int32
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 2 {
			writeJSON(w, 503, `{"error":{"code":503,"message":"The model is overloaded.","status":"UNAVAILABLE"}}`)
			return
		}
		writeJSON(w, 200, `{"candidates":[{"content":{"parts":[{"inlineData":{"mimeType":"image/png","data":"aW1n"}}]},"finishReason":"STOP"}]}`)
	})
	_, err := f.provider(t).GenerateImages(context.Background(), &providers.ImageRequest{Model: "gemini-2.5-flash-image", Prompt: "x", N: 3})
	if ue := asUpstream(t, err); ue.Status != 503 || !ue.Retryable {
		t.Errorf("got %+v", ue)
	}
}

func TestGenerateImagesRefusedBeforeSending(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 500, `{}`) })
	p := f.provider(t)
	cases := []struct {
		name string
		req  providers.ImageRequest
		cat  providers.Category
		is   error
	}{
		{"imagen edit", providers.ImageRequest{Model: "imagen-4.0-generate-001", Prompt: "x", Images: []providers.ImageInput{{Data: pngBytes}}},
			providers.CategoryInvalidRequest, ErrUnsupportedRequest},
		{"bad size", providers.ImageRequest{Model: "gemini-2.5-flash-image", Prompt: "x", Size: "large"}, providers.CategoryInvalidRequest, nil},
		{"bad imagen size", providers.ImageRequest{Model: "imagen-4.0-generate-001", Prompt: "x", Size: "0x10"}, providers.CategoryInvalidRequest, nil},
		{"empty prompt", providers.ImageRequest{Model: "gemini-2.5-flash-image"}, providers.CategoryInvalidRequest, nil},
		{"too many", providers.ImageRequest{Model: "gemini-2.5-flash-image", Prompt: "x", N: 11}, providers.CategoryInvalidRequest, nil},
		{"not an image", providers.ImageRequest{Model: "gemini-2.5-flash-image", Prompt: "x", Images: []providers.ImageInput{{Data: []byte("hello")}}},
			providers.CategoryInvalidRequest, nil},
		{"bad model", providers.ImageRequest{Model: "x/../y", Prompt: "x"}, providers.CategoryModelUnavailable, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := p.GenerateImages(context.Background(), &tc.req)
			ue := asUpstream(t, err)
			if ue.Category != tc.cat || ue.Status != 0 {
				t.Errorf("got %+v, want %s", ue, tc.cat)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("%v is not %v", err, tc.is)
			}
		})
	}
	if n := len(f.requests()); n != 0 {
		t.Errorf("%d requests reached the upstream", n)
	}
}

func TestAspectRatio(t *testing.T) {
	cases := []struct {
		size           string
		imagen, gemini string
	}{
		{"", "", ""},
		{"auto", "", ""},
		{"1024x1024", "1:1", "1:1"},
		{"1536x1024", "4:3", "3:2"},
		{"1024x1536", "3:4", "2:3"},
		{"1792x1024", "16:9", "16:9"},
		{"1024x1792", "9:16", "9:16"},
		{"2560x1080", "16:9", "21:9"},
		{"256X256", "1:1", "1:1"},
	}
	for _, tc := range cases {
		im, _, _, err := aspectRatio(tc.size, imagenRatios)
		ge, _, _, err2 := aspectRatio(tc.size, geminiRatios)
		if err != nil || err2 != nil || im != tc.imagen || ge != tc.gemini {
			t.Errorf("%q: imagen %q gemini %q (%v %v), want %q %q", tc.size, im, ge, err, err2, tc.imagen, tc.gemini)
		}
	}
}
