package handlers

import (
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/modelgateway/caddy-modelgateway/internal/pricing"
	"github.com/modelgateway/caddy-modelgateway/providers"
)

func TestParseOCR(t *testing.T) {
	for _, tc := range []struct {
		body  string
		param string // the invalid field, "" when valid
		says  string // what the error says, when checked
		want  ocrRequest
	}{
		{body: `{"model":"m","document":{"type":"document_url","document_url":"https://example.com/a.pdf"}}`,
			want: ocrRequest{model: "m", kind: "document_url", url: "https://example.com/a.pdf"}},
		{body: `{"model":"m","document":{"type":"image_url","image_url":{"url":"https://example.com/a.png","detail":"high"}},"pages":[0,2]}`,
			want: ocrRequest{model: "m", kind: "image_url", url: "https://example.com/a.png", isImage: true, pages: []int{0, 2}}},
		{body: `{"model":"m","document":{"image_url":"data:image/png;base64,iVBORw=="},"pages":"0-2,5","include_image_base64":true,"table_format":"html"}`,
			want: ocrRequest{model: "m", kind: "image_url", url: "data:image/png;base64,iVBORw==", isImage: true, typeless: true,
				pages: []int{0, 1, 2, 5}, pagesText: true, includeImages: true, options: []string{"include_image_base64", "table_format"}}},
		{body: `{"model":"m","document":{"type":"document_url","document_url":"data:image/jpeg;base64,/9j/"}}`,
			want: ocrRequest{model: "m", kind: "document_url", url: "data:image/jpeg;base64,/9j/", isImage: true}},
		{body: `{"model":"m","document":{"type":"file","file_id":"3b6d1b8c"}}`, want: ocrRequest{model: "m", kind: "file", fileID: "3b6d1b8c"}},
		{body: `{"model":"m","image":"iVBORw0KGgo="}`,
			want: ocrRequest{model: "m", kind: "image_url", url: "data:image/jpeg;base64,iVBORw0KGgo=", isImage: true, legacy: true}},
		{body: `{"model":"m","image":"https://example.com/scan.png"}`,
			want: ocrRequest{model: "m", kind: "image_url", url: "https://example.com/scan.png", isImage: true, legacy: true}},
		{body: `{"document":{"document_url":"https://example.com/a.pdf"}}`, param: "model"},
		{body: `{"model":"m"}`, param: "document"},
		{body: `{"model":"m","image":"https://x/a.png","document":{"document_url":"https://x/a.pdf"}}`, param: "document"},
		{body: `{"model":"m","document":{"type":"video_url"}}`, param: "document.type"},
		{body: `{"model":"m","document":{"type":"document_url","document_url":"ftp://x/a.pdf"}}`, param: "document.document_url"},
		{body: `{"model":"m","document":{"type":"image_url"}}`, param: "document.image_url"},
		{body: `{"model":"m","document":{"type":"file"}}`, param: "document.file_id"},
		{body: `{"model":"m","image":"not base64!"}`, param: "image"},
		{body: `{"model":"m","image":"https://x/a.png","pages":"2-1"}`, param: "pages", says: `runs backwards; write it low-high, such as "1-2"`},
		{body: `{"model":"m","image":"https://x/a.png","pages":"0-5000"}`, param: "pages", says: "from 1 to 1000 pages"},
		{body: `{"model":"m","image":"https://x/a.png","pages":"0-1000"}`, param: "pages", says: "from 1 to 1000 pages"},
		{body: `{"model":"m","image":"https://x/a.png","pages":[-1]}`, param: "pages"},
		{body: `{"model":"m","image":"https://x/a.png","pages":[]}`, param: "pages"},
		{body: `{"model":"m","image":"https://x/a.png","table_format":"csv"}`, param: "table_format"},
		{body: `{"model":"m","image":"https://x/a.png","image_limit":-1}`, param: "image_limit"},
		{body: `{"model":"m","image":"https://x/a.png","document_annotation_prompt":"summarise"}`, param: "document_annotation_prompt"},
	} {
		q, apiErr := parseOCR([]byte(tc.body))
		if tc.param != "" {
			if apiErr == nil || apiErr.Param != tc.param || !strings.Contains(apiErr.Message, tc.says) {
				t.Errorf("%s: error %v, want one on %s saying %q", tc.body, apiErr, tc.param, tc.says)
			}
			continue
		}
		if apiErr != nil {
			t.Errorf("%s: %v", tc.body, apiErr)
			continue
		}
		if !reflect.DeepEqual(*q, tc.want) {
			t.Errorf("%s:\nread %+v\nwant %+v", tc.body, *q, tc.want)
		}
	}
}

func TestOCRUpstreamBody(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"model":"ocr","image":"https://x/a.png","meta":true}`, `{"model":"mistral-ocr-latest","document":{"type":"image_url","image_url":"https://x/a.png"}}`},
		{`{"model":"ocr","document":{"document_url":"https://x/a.pdf"},"pages":"1-2"}`, `{"model":"mistral-ocr-latest","document":{"document_url":"https://x/a.pdf","type":"document_url"},"pages":[1,2]}`},
		{`{"model":"ocr","document":{"type":"document_url","document_url":"https://x/a.pdf"},"pages":[3],"include_image_base64":true}`,
			`{"model":"mistral-ocr-latest","document":{"type":"document_url","document_url":"https://x/a.pdf"},"pages":[3],"include_image_base64":true}`},
	} {
		q, apiErr := parseOCR([]byte(tc.in))
		if apiErr != nil {
			t.Fatal(apiErr)
		}
		got, err := q.upstreamBody([]byte(tc.in), "mistral-ocr-latest")
		var a, b any
		_ = json.Unmarshal(got, &a)
		_ = json.Unmarshal([]byte(tc.want), &b)
		if err != nil || !reflect.DeepEqual(a, b) {
			t.Errorf("%s: %s %v, want %s", tc.in, got, err, tc.want)
		}
	}
}

func TestOCRWorstCase(t *testing.T) {
	page := pricing.Price{Page: 1_000_000, PerRequest: 5}
	reader := Route{Provider: &fakeReader{name: "r"}, Price: page}
	chat := Route{Provider: stubChat{"c"}, Price: pricing.Price{Input: 2 * usdNanos, Output: 8 * usdNanos, Page: 1_000_000}, MaxOutputTokens: 1000}
	for _, tc := range []struct {
		body string
		rt   Route
		want int64
	}{
		{`{"model":"m","document":{"document_url":"https://x/a.pdf"}}`, reader, maxOCRPages*1_000_000 + 5},
		{`{"model":"m","document":{"document_url":"https://x/a.pdf"},"pages":"0-9"}`, reader, 10*1_000_000 + 5},
		{`{"model":"m","image":"https://x/a.png"}`, reader, 1_000_000 + 5},
		// An image is one page, whatever pages are asked.
		{`{"model":"m","document":{"type":"image_url","image_url":"https://x/a.png"},"pages":"0-50"}`, reader, 1_000_000 + 5},
		// The prompt and one image in, the route's largest answer out, and the page.
		{`{"model":"m","image":"https://x/a.png"}`, chat, (int64(len(ocrPrompt))+visionImageTokens)*2000 + 1000*8000 + 1_000_000},
	} {
		q, _ := parseOCR([]byte(tc.body))
		if got, err := q.worst(tc.rt); err != nil || got != tc.want {
			t.Errorf("%s: worst %d %v, want %d", tc.body, got, err, tc.want)
		}
	}
	// A chat route cannot read a PDF: it is dropped before the hold, not reserved for.
	q, _ := parseOCR([]byte(`{"model":"m","document":{"document_url":"https://x/a.pdf"}}`))
	if why := q.fit(100, 1000).why(chat); why != reasonUnsupportedDocument {
		t.Errorf("a chat route given a PDF: %q, want %q", why, reasonUnsupportedDocument)
	}
}

func TestUnfence(t *testing.T) {
	for in, want := range map[string]string{
		"# Title\n\nText":                   "# Title\n\nText",
		"```markdown\n# Title\n\nText\n```": "# Title\n\nText",
		"```\n| a | b |\n```\n":             "| a | b |",
		"```inline```":                      "```inline```",
	} {
		if got := unfence(in); got != want {
			t.Errorf("unfence(%q) = %q, want %q", in, got, want)
		}
	}
}

// fakeReader is a DocumentReader that reads two pages of any document.
type fakeReader struct {
	name string
	got  *providers.OCRRequest
}

func (f *fakeReader) Name() string { return f.name }
func (f *fakeReader) ReadDocument(_ context.Context, req *providers.OCRRequest) (*providers.OCRResponse, error) {
	f.got = req
	return &providers.OCRResponse{Pages: []providers.OCRPage{{Index: 0, Markdown: "# Page one"}, {Index: 1, Markdown: "Page two"}}, Usage: providers.MediaUsage{Pages: 2}}, nil
}

// fakeVision is a chat model that transcribes any image, in a code fence.
type fakeVision struct {
	name string
	got  *providers.Request
}

func (f *fakeVision) Name() string { return f.name }
func (f *fakeVision) Chat(_ context.Context, req *providers.Request) (*providers.Response, error) {
	f.got = req
	return &providers.Response{ID: "chat-1", Text: "```markdown\n# Invoice 42\n```", FinishReason: providers.FinishStop, Usage: providers.Usage{Input: 900, Output: 12}}, nil
}
func (f *fakeVision) ChatStream(context.Context, *providers.Request) (providers.Stream, error) {
	panic("not streamed")
}

func TestOCRNeutral(t *testing.T) {
	reader := &fakeReader{name: "reader"}
	vision := &fakeVision{name: "vision"}
	a := newAdminGateway(t, []*Model{
		{Name: "reader-ocr", Routes: []Route{{ProviderName: "reader", Provider: reader, UpstreamModel: "ocr-1", Price: pricing.Price{Page: 1_000_000}}}},
		{Name: "vision-ocr", Routes: []Route{{ProviderName: "vision", Provider: vision, UpstreamModel: "gpt-vision",
			Price: pricing.Price{Input: 2 * usdNanos, Output: 8 * usdNanos, Page: 500_000}}}},
	}, nil)
	ws, std, _ := a.workspace(5 * usdNanos)

	status, h, v := a.doHeader(http.MethodPost, "/ocr", std, `{"model":"reader-ocr","document":{"type":"document_url","document_url":"https://example.com/a.pdf"},"pages":[0,1]}`)
	if status != 200 || v["object"] != "ocr" || v["id"] != h.Get("X-Generation-Id") || v["text"] != "# Page one\n\nPage two" || len(v["pages"].([]any)) != 2 {
		t.Fatalf("%d %v", status, v)
	}
	if reader.got.DocumentURL != "https://example.com/a.pdf" || reader.got.IsImage || !reflect.DeepEqual(reader.got.Pages, []int{0, 1}) || reader.got.Model != "ocr-1" {
		t.Fatalf("asked %+v", reader.got)
	}
	if u := v["usage"].(map[string]any); u["pages_processed"] != float64(2) || u["cost_nanos"] != float64(2_000_000) {
		t.Fatalf("usage %v", u)
	}
	if g, err := a.s.GetGeneration(context.Background(), ws, h.Get("X-Generation-Id")); err != nil || g.Pages != 2 || g.InputTokens != 0 {
		t.Fatalf("record %+v, %v; want 2 pages", g, err)
	}

	status, _, v = a.doHeader(http.MethodPost, "/ocr", std, `{"model":"vision-ocr","image":"iVBORw0KGgo=","pages":[3]}`)
	if status != 200 || v["text"] != "# Invoice 42" {
		t.Fatalf("%d %v", status, v)
	}
	parts := vision.got.Messages[0].Content
	if vision.got.Model != "gpt-vision" || len(parts) != 2 || parts[0].Type != providers.PartImage || parts[0].MediaType != "image/jpeg" ||
		string(parts[0].Data) != "\x89PNG\r\n\x1a\n" || parts[1].Text != ocrPrompt {
		t.Fatalf("asked %+v", vision.got)
	}
	page := v["pages"].([]any)[0].(map[string]any)
	u := v["usage"].(map[string]any)
	// 900 input tokens at 2 USD/M, 12 output at 8 USD/M, one page at 0.0005.
	const want = 900*2000 + 12*8000 + 500_000
	if page["index"] != float64(3) || u["pages_processed"] != float64(1) || u["input_tokens"] != float64(900) || u["cost_nanos"] != float64(want) {
		t.Fatalf("page %v usage %v", page, u)
	}
	lines := u["cost_lines"].([]any)
	if len(lines) != 3 || lines[2].(map[string]any)["dimension"] != "page" {
		t.Fatalf("cost lines %v", lines)
	}
	if b, _ := a.s.GetBalance(context.Background(), ws); b.BalanceNanos != 5*usdNanos-2_000_000-want {
		t.Fatalf("balance %d", b.BalanceNanos)
	}

	// A chat model is given images only.
	status, v = a.do(http.MethodPost, "/ocr", std, `{"model":"vision-ocr","document":{"document_url":"https://example.com/a.pdf"}}`)
	wantError(t, "a PDF to a chat model", status, v, 400, CodeValidation, "document")
	status, v = a.do(http.MethodPost, "/ocr", std, `{"model":"reader-ocr","document":{"type":"file","file_id":"f1"}}`)
	wantError(t, "a file id to a reader", status, v, 400, CodeValidation, "document")
}
