package module

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// received is one part of a multipart body as an upstream got it.
type received struct {
	name, filename, contentType, content string
}

// fakeImages is an upstream speaking OpenAI's Images API: generations as JSON or as an event
// stream, edits from multipart bodies, each recorded.
type fakeImages struct {
	*httptest.Server
	calls atomic.Int64
	mu    sync.Mutex
	// bodies are the raw bodies received, parts the parts of the multipart ones.
	bodies [][]byte
	parts  [][]received
}

func newFakeImages(t *testing.T) *fakeImages {
	f := &fakeImages{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.calls.Add(1)
		body, _ := io.ReadAll(r.Body)
		var parts []received
		req := map[string]any{}
		if mt, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt == "multipart/form-data" {
			mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
			for {
				p, err := mr.NextPart()
				if err != nil {
					break
				}
				content, _ := io.ReadAll(p)
				parts = append(parts, received{p.FormName(), p.FileName(), p.Header.Get("Content-Type"), string(content)})
				if p.FileName() == "" {
					req[p.FormName()] = string(content)
				}
			}
			if req["stream"] == "true" {
				req["stream"] = true
			}
		} else {
			_ = json.Unmarshal(body, &req)
		}
		f.mu.Lock()
		f.bodies, f.parts = append(f.bodies, body), append(f.parts, parts)
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/v1/images/generations" && req["model"] == "gpt-image-nousage":
			fmt.Fprint(w, `{"created":1700000000,"data":[{"b64_json":"Z3B0LWltYWdl"}]}`)
		case r.URL.Path == "/v1/images/generations" && req["model"] == "gpt-image-cut":
			// Two partial images, then the stream ends without its completed event.
			w.Header().Set("Content-Type", "text/event-stream")
			for i := range 2 {
				fmt.Fprintf(w, "event: image_generation.partial_image\ndata: {\"type\":\"image_generation.partial_image\",\"b64_json\":\"cGFydGlhbA%d\",\"partial_image_index\":%d}\n\n", i, i)
			}
		case r.URL.Path == "/v1/images/generations" && req["model"] == "dall-e-3":
			fmt.Fprint(w, `{"created":1700000000,"data":[{"url":"https://images.example/1.png","revised_prompt":"a red fox, revised"}]}`)
		case r.URL.Path == "/v1/images/generations" && req["stream"] == true:
			imageStream(w, "image_generation", 2, `{"input_tokens":20,"input_tokens_details":{"image_tokens":0,"text_tokens":20},"output_tokens":1256,"total_tokens":1276}`)
		case r.URL.Path == "/v1/images/generations":
			fmt.Fprint(w, `{"created":1700000000,"data":[{"b64_json":"Z3B0LWltYWdl"}],"background":"opaque","output_format":"png","quality":"high","size":"1024x1024",`+
				`"usage":{"input_tokens":50,"input_tokens_details":{"image_tokens":0,"text_tokens":50},"output_tokens":4160,"total_tokens":4210}}`)
		case r.URL.Path == "/v1/images/edits" && req["stream"] == true:
			imageStream(w, "image_edit", 1, `{"input_tokens":1200,"input_tokens_details":{"image_tokens":1000,"text_tokens":200},"output_tokens":1056,"total_tokens":2256}`)
		case r.URL.Path == "/v1/images/edits":
			fmt.Fprintf(w, `{"created":1700000000,"data":[{"b64_json":"ZWRpdGVk"}],"quality":"medium","size":"1024x1536","output_format":"png",`+
				`"usage":{"input_tokens":1200,"input_tokens_details":{"image_tokens":1000,"text_tokens":200},"output_tokens":1056,"total_tokens":2256},"model_seen":%q}`, req["model"])
		default:
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"error":{"message":"no such path","type":"invalid_request_error"}}`)
		}
	}))
	t.Cleanup(f.Close)
	return f
}

// imageStream writes partial image events and the completed one, as OpenAI frames them.
func imageStream(w http.ResponseWriter, prefix string, partials int, usage string) {
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	for i := range partials {
		fmt.Fprintf(w, "event: %s.partial_image\ndata: {\"type\":\"%s.partial_image\",\"b64_json\":\"cGFydGlhbA%d\",\"partial_image_index\":%d,\"created_at\":1700000000,\"size\":\"1024x1024\",\"quality\":\"medium\",\"background\":\"opaque\",\"output_format\":\"png\"}\n\n",
			prefix, prefix, i, i)
		fl.Flush()
	}
	fmt.Fprintf(w, "event: %s.completed\ndata: {\"type\":\"%s.completed\",\"b64_json\":\"ZmluYWw\",\"created_at\":1700000000,\"size\":\"1024x1024\",\"quality\":\"medium\",\"background\":\"opaque\",\"output_format\":\"png\",\"usage\":%s}\n\n",
		prefix, prefix, usage)
	fl.Flush()
}

func (f *fakeImages) last() ([]byte, []received) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.bodies[len(f.bodies)-1], f.parts[len(f.parts)-1]
}

// costOf reads the gateway's cost members of a usage object.
type costOf struct {
	CostNanos int64 `json:"cost_nanos"`
	CostLines []struct {
		Dimension      string `json:"dimension"`
		Quantity       int64  `json:"quantity"`
		UnitPriceNanos int64  `json:"unit_price_nanos"`
		Nanos          int64  `json:"nanos"`
	} `json:"cost_lines"`
}

func readCost(t *testing.T, usage string) costOf {
	t.Helper()
	var c costOf
	if err := json.Unmarshal([]byte(usage), &c); err != nil {
		t.Fatalf("usage %s: %v", usage, err)
	}
	return c
}

// lines renders cost lines as "dimension×quantity=nanos".
func (c costOf) lines() string {
	var s []string
	for _, l := range c.CostLines {
		s = append(s, fmt.Sprintf("%s×%d=%d", l.Dimension, l.Quantity, l.Nanos))
	}
	return strings.Join(s, " ")
}

func TestImagesEndToEnd(t *testing.T) {
	up := newFakeImages(t)
	down := newScripted(t, func(int) behaviour { return upstreamError(500, "server_error", "", "the image service is down", nil) })
	gptImage := "\n\t\t\t\tinput 5\n\t\t\t\timage_input_tokens 10\n\t\t\t\timage_output_tokens 40"
	cfg := providerBlock("oa", up.URL) + resilientProvider("down", down.URL, "retries 0") + `
		provider media {
			type media_fake
		}
		provider mk {
			type mock
		}` +
		embeddingModel("gpt-image", embeddingRoute("oa", "gpt-image-1", gptImage)) +
		embeddingModel("dalle", embeddingRoute("oa", "dall-e-3", `image 0.04 size 1024x1024 quality standard
				image 0.08 size 1024x1024 quality hd
				image 0.08 size 1792x1024 quality standard`)) +
		embeddingModel("gpt-image-nousage", embeddingRoute("oa", "gpt-image-nousage", gptImage)) +
		embeddingModel("gpt-image-cut", embeddingRoute("oa", "gpt-image-cut", gptImage)) +
		embeddingModel("gpt-image-fallback", embeddingRoute("down", "gpt-image-1", gptImage)+embeddingRoute("oa", "gpt-image-1", gptImage)) +
		embeddingModel("gpt-image-small", embeddingRoute("oa", "gpt-image-1", gptImage+"\n\t\t\t\tmax_upload 1KiB")) +
		embeddingModel("dalle-sizes", embeddingRoute("down", "dall-e-3", "image 0.04 size 1024x1024 quality standard")+
			embeddingRoute("oa", "dall-e-3", "image 0.08 size 1024x1792 quality standard")) +
		embeddingModel("gpt-image-limits", embeddingRoute("down", "gpt-image-1", gptImage+"\n\t\t\t\tmax_upload 1KiB")+embeddingRoute("oa", "gpt-image-1", gptImage)) +
		embeddingModel("image-per-size", embeddingRoute("oa", "gpt-image-1", "image 0.04 size 1024x1024 quality medium")) +
		embeddingModel("neutral-image", embeddingRoute("media", "fake-image-1", "image 0.02\n\t\t\t\tinput 1")) +
		embeddingModel("mock-image", embeddingRoute("mk", "mock-image", "image 0.04 size 1024x1024 quality standard\n\t\t\t\timage 0.08 size 1024x1024 quality hd"))
	env := startGateway(t, cfg, "")
	wsID, key := env.workspace(5 * usd)
	ctx := context.Background()
	oc := env.openai(key)

	// charged checks that the wallet moved by exactly what the answer says it cost, and
	// that the generation recorded the same lines.
	balance := env.balance(wsID).BalanceNanos
	charged := func(t *testing.T, genID string, c costOf, lines string) {
		t.Helper()
		if got := c.lines(); got != lines {
			t.Fatalf("cost lines %s, want %s", got, lines)
		}
		now := env.balance(wsID).BalanceNanos
		if balance-now != c.CostNanos {
			t.Fatalf("the wallet moved by %d, the answer says %d", balance-now, c.CostNanos)
		}
		balance = now
		if gen := env.generation(wsID, genID); gen.CostNanos != c.CostNanos || len(gen.CostLines) != len(c.CostLines) {
			t.Fatalf("generation %+v", gen)
		}
	}

	t.Run("gpt image priced by tokens", func(t *testing.T) {
		var httpResp *http.Response
		resp, err := oc.Images.Generate(ctx, openai.ImageGenerateParams{Model: "gpt-image", Prompt: "a red fox", Quality: openai.ImageGenerateParamsQualityHigh},
			option.WithResponseInto(&httpResp))
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Data) != 1 || resp.Data[0].B64JSON != "Z3B0LWltYWdl" || resp.Usage.OutputTokens != 4160 || resp.Size != "1024x1024" {
			t.Fatalf("%s", resp.RawJSON())
		}
		body, _ := up.last()
		if !strings.Contains(string(body), `"model":"gpt-image-1"`) {
			t.Fatalf("upstream got %s", body)
		}
		// 50 text tokens at 5 USD/M, 4160 image output tokens at 40 USD/M.
		charged(t, httpResp.Header.Get("X-Generation-Id"), readCost(t, resp.Usage.RawJSON()), "input×50=250000 image_output_tokens×4160=166400000")
	})

	t.Run("dall-e priced per image at its default size", func(t *testing.T) {
		var httpResp *http.Response
		resp, err := oc.Images.Generate(ctx, openai.ImageGenerateParams{Model: "dalle", Prompt: "a red fox"}, option.WithResponseInto(&httpResp))
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Data) != 1 || resp.Data[0].URL != "https://images.example/1.png" || resp.Data[0].RevisedPrompt != "a red fox, revised" {
			t.Fatalf("%s", resp.RawJSON())
		}
		charged(t, httpResp.Header.Get("X-Generation-Id"), readCost(t, resp.Usage.RawJSON()), "image×1=40000000")

		resp, err = oc.Images.Generate(ctx, openai.ImageGenerateParams{Model: "dalle", Prompt: "a red fox", Quality: openai.ImageGenerateParamsQualityHD},
			option.WithResponseInto(&httpResp))
		if err != nil {
			t.Fatal(err)
		}
		charged(t, httpResp.Header.Get("X-Generation-Id"), readCost(t, resp.Usage.RawJSON()), "image×1=80000000")
	})

	t.Run("an unpriced size is refused before any upstream call", func(t *testing.T) {
		before := up.calls.Load()
		status, _, body := env.post(key, "/images/generations", `{"model":"dalle","prompt":"a red fox","size":"1024x1792"}`)
		if status != 400 || !strings.Contains(string(body), `"param":"size"`) || !strings.Contains(string(body), "1024x1792") {
			t.Fatalf("%d %s", status, body)
		}
		if up.calls.Load() != before {
			t.Fatal("the upstream was called")
		}
	})

	t.Run("a route that cannot price the size is passed over", func(t *testing.T) {
		beforeDown := down.calls.Load()
		var httpResp *http.Response
		resp, err := oc.Images.Generate(ctx, openai.ImageGenerateParams{Model: "dalle-sizes", Prompt: "a red fox", Size: openai.ImageGenerateParamsSize1024x1792},
			option.WithResponseInto(&httpResp))
		if err != nil {
			t.Fatal(err)
		}
		if down.calls.Load() != beforeDown {
			t.Fatal("the route without a price for the size was called")
		}
		charged(t, httpResp.Header.Get("X-Generation-Id"), readCost(t, resp.Usage.RawJSON()), "image×1=80000000")
	})

	t.Run("tokens untold are estimated, never nothing", func(t *testing.T) {
		// No usage in the answer: the prompt's 9 bytes as tokens and the image at the most
		// its size makes (6240 tokens), as the reservation counted them.
		var httpResp *http.Response
		resp, err := oc.Images.Generate(ctx, openai.ImageGenerateParams{Model: "gpt-image-nousage", Prompt: "a red fox"}, option.WithResponseInto(&httpResp))
		if err != nil {
			t.Fatal(err)
		}
		charged(t, httpResp.Header.Get("X-Generation-Id"), readCost(t, resp.Usage.RawJSON()), "input×9=45000 image_output_tokens×6240=249600000")

		// Cut after two partial images: an error for the client, the partials billed.
		stream := oc.Images.GenerateStreaming(ctx, openai.ImageGenerateParams{Model: "gpt-image-cut", Prompt: "a red fox", PartialImages: openai.Int(2)},
			option.WithResponseInto(&httpResp))
		partials := 0
		for stream.Next() {
			partials++
		}
		if err := stream.Err(); err == nil || partials != 2 {
			t.Fatalf("%d partial images, then %v", partials, err)
		}
		gen := env.generation(wsID, httpResp.Header.Get("X-Generation-Id"))
		if want := int64(9*5000 + 200*40000); gen.CostNanos != want || gen.ErrorCode != "upstream_error" {
			t.Fatalf("generation %+v, want %d nanos charged", gen, want)
		}
		balance -= gen.CostNanos
		if now := env.balance(wsID).BalanceNanos; now != balance {
			t.Fatalf("the wallet is at %d, want %d", now, balance)
		}
	})

	t.Run("streamed partial images", func(t *testing.T) {
		var httpResp *http.Response
		stream := oc.Images.GenerateStreaming(ctx, openai.ImageGenerateParams{Model: "gpt-image", Prompt: "a red fox", PartialImages: openai.Int(2)},
			option.WithResponseInto(&httpResp))
		var types []string
		var last openai.ImageGenStreamEventUnion
		for stream.Next() {
			last = stream.Current()
			types = append(types, last.Type)
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if strings.Join(types, ",") != "image_generation.partial_image,image_generation.partial_image,image_generation.completed" {
			t.Fatalf("events %v", types)
		}
		if body, _ := up.last(); !strings.Contains(string(body), `"partial_images":2`) || !strings.Contains(string(body), `"stream":true`) {
			t.Fatalf("upstream got %s", body)
		}
		done := last.AsImageGenerationCompleted()
		if done.B64JSON != "ZmluYWw" || done.Usage.OutputTokens != 1256 {
			t.Fatalf("completed %s", last.RawJSON())
		}
		// Only the completed event's usage is billed.
		charged(t, httpResp.Header.Get("X-Generation-Id"), readCost(t, done.Usage.RawJSON()), "input×20=100000 image_output_tokens×1256=50240000")
	})

	// Two pictures and a mask, as openai-go sends them: the upstream must get each file whole
	// with its name and type, under the route's model.
	pictures := []received{
		{"image[]", "fox.png", "image/png", "\x89PNG\r\n\x1a\nfox pixels"},
		{"image[]", "hat.webp", "image/webp", "RIFF....WEBPhat pixels"},
		{"mask", "mask.png", "image/png", "\x89PNG\r\n\x1a\nmask pixels"},
	}
	editParams := func(model string) openai.ImageEditParams {
		return openai.ImageEditParams{
			Model: model, Prompt: "put the hat on the fox",
			Image: openai.ImageEditParamsImageUnion{OfFileArray: []io.Reader{
				openai.File(strings.NewReader(pictures[0].content), pictures[0].filename, pictures[0].contentType),
				openai.File(strings.NewReader(pictures[1].content), pictures[1].filename, pictures[1].contentType),
			}},
			Mask: openai.File(strings.NewReader(pictures[2].content), pictures[2].filename, pictures[2].contentType),
		}
	}
	checkParts := func(t *testing.T, parts []received) {
		t.Helper()
		var files []received
		fields := map[string]string{}
		for _, p := range parts {
			if p.filename != "" {
				files = append(files, p)
			} else {
				fields[p.name] = p.content
			}
		}
		if fmt.Sprint(files) != fmt.Sprint(pictures) {
			t.Fatalf("upstream files %q, want %q", files, pictures)
		}
		if fields["model"] != "gpt-image-1" || fields["prompt"] != "put the hat on the fox" {
			t.Fatalf("upstream fields %v", fields)
		}
	}

	t.Run("edit with two images and a mask", func(t *testing.T) {
		var httpResp *http.Response
		resp, err := oc.Images.Edit(ctx, editParams("gpt-image"), option.WithResponseInto(&httpResp))
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Data) != 1 || resp.Data[0].B64JSON != "ZWRpdGVk" || resp.Usage.InputTokensDetails.ImageTokens != 1000 {
			t.Fatalf("%s", resp.RawJSON())
		}
		_, parts := up.last()
		checkParts(t, parts)
		charged(t, httpResp.Header.Get("X-Generation-Id"), readCost(t, resp.Usage.RawJSON()),
			"input×200=1000000 image_input_tokens×1000=10000000 image_output_tokens×1056=42240000")
	})

	// A lone picture keeps the name the client gave it (servers that read one picture want
	// `image`); pictures under a repeated plain name go on as the list they are.
	t.Run("picture names as the client sent them", func(t *testing.T) {
		params := editParams("gpt-image")
		params.Image = openai.ImageEditParamsImageUnion{OfFile: openai.File(strings.NewReader(pictures[0].content), pictures[0].filename, pictures[0].contentType)}
		params.Mask = nil
		if _, err := oc.Images.Edit(ctx, params); err != nil {
			t.Fatal(err)
		}
		_, parts := up.last()
		var names []string
		for _, p := range parts {
			if p.filename != "" {
				names = append(names, p.name)
			}
		}
		if fmt.Sprint(names) != "[image]" {
			t.Fatalf("a lone picture went on as %v", names)
		}
		balance = env.balance(wsID).BalanceNanos

		var b bytes.Buffer
		mw := multipart.NewWriter(&b)
		for _, f := range []string{"fox.png", "hat.png"} {
			fw, _ := mw.CreateFormFile("image", f)
			_, _ = fw.Write([]byte("\x89PNG\r\n\x1a\n" + f))
		}
		_ = mw.WriteField("model", "gpt-image")
		_ = mw.WriteField("prompt", "put the hat on the fox")
		_ = mw.Close()
		req, _ := http.NewRequest(http.MethodPost, env.baseURL+"/v1/images/edits", &b)
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", mw.FormDataContentType())
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		_, parts = up.last()
		names = names[:0]
		for _, p := range parts {
			if p.filename != "" {
				names = append(names, p.name+" "+p.filename)
			}
		}
		if resp.StatusCode != http.StatusOK || fmt.Sprint(names) != "[image[] fox.png image[] hat.png]" {
			t.Fatalf("%d; two pictures named image went on as %v", resp.StatusCode, names)
		}
		balance = env.balance(wsID).BalanceNanos
	})

	t.Run("streamed edit", func(t *testing.T) {
		var httpResp *http.Response
		stream := oc.Images.EditStreaming(ctx, editParams("gpt-image"), option.WithResponseInto(&httpResp))
		var last openai.ImageEditStreamEventUnion
		n := 0
		for stream.Next() {
			last = stream.Current()
			n++
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if n != 2 || last.Type != "image_edit.completed" {
			t.Fatalf("%d events, last %s", n, last.RawJSON())
		}
		_, parts := up.last()
		checkParts(t, parts[:len(parts)-1]) // less the stream field
		charged(t, httpResp.Header.Get("X-Generation-Id"), readCost(t, last.AsImageEditCompleted().Usage.RawJSON()), "input×200=1000000 image_input_tokens×1000=10000000 image_output_tokens×1056=42240000")
	})

	t.Run("fallback resends the whole upload", func(t *testing.T) {
		beforeDown, beforeUp := down.calls.Load(), up.calls.Load()
		var httpResp *http.Response
		resp, err := oc.Images.Edit(ctx, editParams("gpt-image-fallback"), option.WithResponseInto(&httpResp))
		if err != nil {
			t.Fatal(err)
		}
		if down.calls.Load() != beforeDown+1 || up.calls.Load() != beforeUp+1 {
			t.Fatalf("calls: down %d, up %d", down.calls.Load()-beforeDown, up.calls.Load()-beforeUp)
		}
		_, parts := up.last()
		checkParts(t, parts)
		gen := env.generation(wsID, httpResp.Header.Get("X-Generation-Id"))
		if gen.Provider != "oa" || len(gen.Attempts) != 2 || gen.Attempts[0].Status != 500 {
			t.Fatalf("generation %+v", gen)
		}
		charged(t, gen.ID, readCost(t, resp.Usage.RawJSON()), "input×200=1000000 image_input_tokens×1000=10000000 image_output_tokens×1056=42240000")
	})

	t.Run("413 past the route's max_upload, nothing sent", func(t *testing.T) {
		before := up.calls.Load()
		params := editParams("gpt-image-small")
		params.Image = openai.ImageEditParamsImageUnion{OfFile: openai.File(bytes.NewReader(make([]byte, 4096)), "big.png", "image/png")}
		_, err := oc.Images.Edit(ctx, params)
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 413 || !strings.Contains(apiErr.Message, "1 KiB") {
			t.Fatalf("%v", err)
		}
		if up.calls.Load() != before {
			t.Fatal("the upstream was called")
		}
		if env.balance(wsID).BalanceNanos != balance {
			t.Fatal("a refused upload was charged")
		}
	})

	t.Run("a route whose max_upload the edit passes is skipped", func(t *testing.T) {
		beforeDown, beforeUp := down.calls.Load(), up.calls.Load()
		var httpResp *http.Response
		params := editParams("gpt-image-limits")
		big := bytes.Repeat([]byte("fox."), 1024)
		params.Image.OfFileArray[0] = openai.File(bytes.NewReader(big), "big.png", "image/png")
		resp, err := oc.Images.Edit(ctx, params, option.WithResponseInto(&httpResp))
		if err != nil {
			t.Fatal(err)
		}
		if down.calls.Load() != beforeDown || up.calls.Load() != beforeUp+1 {
			t.Fatalf("calls: down %d, up %d", down.calls.Load()-beforeDown, up.calls.Load()-beforeUp)
		}
		if _, parts := up.last(); len(parts) == 0 || !slices.ContainsFunc(parts, func(p received) bool { return p.filename == "big.png" && p.content == string(big) }) {
			t.Fatalf("upstream parts %d, the 4 KiB image not among them intact", len(parts))
		}
		charged(t, httpResp.Header.Get("X-Generation-Id"), readCost(t, resp.Usage.RawJSON()), "input×200=1000000 image_input_tokens×1000=10000000 image_output_tokens×1056=42240000")
	})

	t.Run("an answer of a size the route has no price for is charged the worst case", func(t *testing.T) {
		// Asked no size, the edit is admitted at the model's default, 1024x1024; the upstream
		// answers 1024x1536, which the route does not price: never charged nothing.
		var httpResp *http.Response
		resp, err := oc.Images.Edit(ctx, editParams("image-per-size"), option.WithResponseInto(&httpResp))
		if err != nil {
			t.Fatal(err)
		}
		charged(t, httpResp.Header.Get("X-Generation-Id"), readCost(t, resp.Usage.RawJSON()), "image×1=40000000")
	})

	t.Run("neutral route", func(t *testing.T) {
		var httpResp *http.Response
		resp, err := oc.Images.Generate(ctx, openai.ImageGenerateParams{Model: "neutral-image", Prompt: "a red fox", N: openai.Int(2)}, option.WithResponseInto(&httpResp))
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Data) != 2 || resp.Data[1].B64JSON != "ZmFrZQ1" || resp.Size != "1024x1024" || resp.Usage.InputTokens != 3 {
			t.Fatalf("%s", resp.RawJSON())
		}
		charged(t, httpResp.Header.Get("X-Generation-Id"), readCost(t, resp.Usage.RawJSON()), "input×3=3000 image×2=40000000")

		stream := oc.Images.GenerateStreaming(ctx, openai.ImageGenerateParams{Model: "neutral-image", Prompt: "a red fox"}, option.WithResponseInto(&httpResp))
		var events []openai.ImageGenStreamEventUnion
		for stream.Next() {
			events = append(events, stream.Current())
		}
		if err := stream.Err(); err != nil || len(events) != 1 || events[0].Type != "image_generation.completed" || events[0].B64JSON != "ZmFrZQ0" {
			t.Fatalf("%v %v", err, events)
		}
		charged(t, httpResp.Header.Get("X-Generation-Id"), readCost(t, events[0].AsImageGenerationCompleted().Usage.RawJSON()), "input×3=3000 image×1=20000000")
	})

	t.Run("mock route, priced by size and quality", func(t *testing.T) {
		var httpResp *http.Response
		resp, err := oc.Images.Generate(ctx, openai.ImageGenerateParams{Model: "mock-image", Prompt: "a red fox", N: openai.Int(2), Quality: "hd"}, option.WithResponseInto(&httpResp))
		if err != nil {
			t.Fatal(err)
		}
		png, _ := base64.StdEncoding.DecodeString(resp.Data[0].B64JSON)
		if len(resp.Data) != 2 || !bytes.HasPrefix(png, []byte("\x89PNG")) {
			t.Fatalf("%s", resp.RawJSON())
		}
		charged(t, httpResp.Header.Get("X-Generation-Id"), readCost(t, resp.Usage.RawJSON()), "image×2=160000000")
	})
}
