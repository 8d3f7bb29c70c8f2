package module

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// newFakeMistralOCR answers Mistral's POST /v1/ocr with two pages of the document, and
// records the requests.
func newFakeMistralOCR(t *testing.T) (*httptest.Server, func() map[string]any) {
	var mu sync.Mutex
	var last map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req map[string]any
		_ = json.Unmarshal(body, &req)
		mu.Lock()
		last = req
		mu.Unlock()
		if r.URL.Path != "/v1/ocr" {
			http.Error(w, `{"detail":"not found"}`, http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"pages":[`+
			`{"index":0,"markdown":"# Annual report","images":[],"dimensions":{"dpi":200,"height":2200,"width":1700}},`+
			`{"index":1,"markdown":"| year | revenue |\n|---|---|\n| 2025 | 12 |","images":[{"id":"img-0.jpeg","top_left_x":10,"top_left_y":10,"bottom_right_x":90,"bottom_right_y":90}],"dimensions":{"dpi":200,"height":2200,"width":1700}}],`+
			`"model":%q,"document_annotation":null,"usage_info":{"pages_processed":2,"doc_size_bytes":48213}}`, req["model"])
	}))
	t.Cleanup(srv.Close)
	return srv, func() map[string]any {
		mu.Lock()
		defer mu.Unlock()
		return last
	}
}

// ocrAnswer is the gateway's OCR answer, as a client reads it.
type ocrAnswer struct {
	ID     string `json:"id"`
	Object string `json:"object"`
	Model  string `json:"model"`
	Text   string `json:"text"`
	Pages  []struct {
		Index    int    `json:"index"`
		Markdown string `json:"markdown"`
	} `json:"pages"`
	Usage json.RawMessage `json:"usage"`
}

func TestOCREndToEnd(t *testing.T) {
	mistral, lastOCR := newFakeMistralOCR(t)
	const png = "iVBORw0KGgoAAAANSUhEUg=="
	var visionGot []any
	vision := newFakeOpenAI(t, func(w http.ResponseWriter, r *http.Request, req map[string]any) {
		visionGot, _ = req["messages"].([]any)
		chatOK("```markdown\n# Receipt\n\nTotal: 12.50 EUR\n```", 850, 20)(w, r, req)
	})
	cfg := providerBlock("vision", vision.URL) + fmt.Sprintf(`
		provider mistral {
			type mistral
			base_url %s/v1
			api_key mistral-secret
		}
		provider reader {
			type mock
		}`, mistral.URL) +
		embeddingModel("mistral-ocr", embeddingRoute("mistral", "mistral-ocr-latest", "page 0.001")) +
		embeddingModel("reader-ocr", embeddingRoute("reader", "reader-1", "page 0.002")) +
		embeddingModel("vision-ocr", embeddingRoute("vision", "gpt-4o-mini", "input 0.15\n\t\t\t\toutput 0.60\n\t\t\t\tpage 0.0005")) +
		embeddingModel("big-ocr", embeddingRoute("mistral", "mistral-ocr-latest", "page 0.001\n\t\t\t\tmax_upload 16MiB"))
	env := startGateway(t, cfg, "")
	wsID, key := env.workspace(5 * usd)
	balance := env.balance(wsID).BalanceNanos

	ocr := func(t *testing.T, body, lines string) ocrAnswer {
		t.Helper()
		status, h, out := env.post(key, "/ocr", body)
		if status != 200 {
			t.Fatalf("%d %s", status, out)
		}
		var a ocrAnswer
		if err := json.Unmarshal(out, &a); err != nil || a.Object != "ocr" || a.ID != h.Get("X-Generation-Id") {
			t.Fatalf("%v %s", err, out)
		}
		c := readCost(t, string(a.Usage))
		if got := c.lines(); got != lines {
			t.Fatalf("cost lines %s, want %s (%s)", got, lines, a.Usage)
		}
		now := env.balance(wsID).BalanceNanos
		if balance-now != c.CostNanos {
			t.Fatalf("the wallet moved by %d, the answer says %d", balance-now, c.CostNanos)
		}
		balance = now
		if gen := env.generation(wsID, a.ID); gen.CostNanos != c.CostNanos || gen.Endpoint != "/ocr" {
			t.Fatalf("generation %+v", gen)
		}
		return a
	}

	t.Run("mistral wire", func(t *testing.T) {
		a := ocr(t, `{"model":"mistral-ocr","document":{"type":"document_url","document_url":"https://example.com/report.pdf"},"pages":"0-1","include_image_base64":false,"meta":true}`,
			"page×2=2000000")
		if a.Text != "# Annual report\n\n| year | revenue |\n|---|---|\n| 2025 | 12 |" || len(a.Pages) != 2 || a.Model != "mistral-ocr-latest" {
			t.Fatalf("%+v", a)
		}
		var usage map[string]any
		_ = json.Unmarshal(a.Usage, &usage)
		if usage["pages_processed"] != float64(2) || usage["doc_size_bytes"] != float64(48213) {
			t.Fatalf("usage %v", usage)
		}
		got := lastOCR()
		doc, _ := got["document"].(map[string]any)
		if got["model"] != "mistral-ocr-latest" || doc["document_url"] != "https://example.com/report.pdf" || fmt.Sprint(got["pages"]) != "[0 1]" || got["meta"] != nil {
			t.Fatalf("upstream got %v", got)
		}

		// The legacy image field reaches Mistral as an image document.
		ocr(t, `{"model":"mistral-ocr","image":"`+png+`"}`, "page×2=2000000")
		doc, _ = lastOCR()["document"].(map[string]any)
		if doc["type"] != "image_url" || doc["image_url"] != "data:image/jpeg;base64,"+png {
			t.Fatalf("upstream got %v", lastOCR())
		}
	})

	t.Run("inline documents within max_body_size or the route's max_upload", func(t *testing.T) {
		// 12 MB of base64: over the 10 MiB max_body_size, under big-ocr's max_upload.
		doc := `{"type":"document_url","document_url":"data:application/pdf;base64,` + strings.Repeat("QUJD", 3_000_000) + `"}`
		status, _, out := env.post(key, "/ocr", `{"model":"mistral-ocr","document":`+doc+`}`)
		if status != http.StatusRequestEntityTooLarge || !strings.Contains(string(out), "payload_too_large") {
			t.Fatalf("%d %.300s", status, out)
		}
		if env.balance(wsID).BalanceNanos != balance {
			t.Fatal("a refused document was charged")
		}
		ocr(t, `{"model":"big-ocr","document":`+doc+`}`, "page×2=2000000")
	})

	t.Run("document reader", func(t *testing.T) {
		a := ocr(t, `{"model":"reader-ocr","document":{"document_url":"https://example.com/a.pdf"},"pages":[0,1,2]}`, "page×3=6000000")
		if len(a.Pages) != 3 || !strings.HasPrefix(a.Text, "# Page 1\n\nmock text of https://example.com/a.pdf\n\n# Page 2") {
			t.Fatalf("%+v", a)
		}
		// An image is one page, whatever pages the client names.
		a = ocr(t, `{"model":"reader-ocr","document":{"type":"image_url","image_url":"https://example.com/a.png"},"pages":"0-50"}`, "page×1=2000000")
		if len(a.Pages) != 1 || a.Pages[0].Index != 0 {
			t.Fatalf("%+v", a)
		}
	})

	t.Run("vision chat model", func(t *testing.T) {
		a := ocr(t, `{"model":"vision-ocr","document":{"type":"image_url","image_url":{"url":"data:image/png;base64,`+png+`"}}}`,
			// 850 input tokens at 0.15 USD/M, 20 output at 0.60 USD/M, one page at 0.0005.
			"input×850=127500 output×20=12000 page×1=500000")
		if a.Text != "# Receipt\n\nTotal: 12.50 EUR" || len(a.Pages) != 1 || a.Model != "gpt-4o-mini" {
			t.Fatalf("%+v", a)
		}
		if len(visionGot) != 1 {
			t.Fatalf("the chat model got %v", visionGot)
		}
		parts, _ := visionGot[0].(map[string]any)["content"].([]any)
		var image, text string
		for _, p := range parts {
			p := p.(map[string]any)
			switch p["type"] {
			case "image_url":
				image = p["image_url"].(map[string]any)["url"].(string)
			case "text":
				text = p["text"].(string)
			}
		}
		if image != "data:image/png;base64,"+png || !strings.Contains(text, "Markdown") {
			t.Fatalf("the chat model got %v", parts)
		}
		if body := vision.lastBody(); body["model"] != "gpt-4o-mini" {
			t.Fatalf("upstream model %v", body["model"])
		}

		// A PDF cannot be given to a chat model: 400 before any call, nothing charged.
		before := vision.calls.Load()
		status, _, out := env.post(key, "/ocr", `{"model":"vision-ocr","document":{"document_url":"https://example.com/a.pdf"}}`)
		if status != 400 || !strings.Contains(string(out), `"param":"document"`) || vision.calls.Load() != before {
			t.Fatalf("%d %s", status, out)
		}
		if env.balance(wsID).BalanceNanos != balance {
			t.Fatal("a refused document was charged")
		}
	})
}
