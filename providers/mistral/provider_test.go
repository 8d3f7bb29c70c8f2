package mistral

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/internal/upstreamtest"
)

const testKey = "sk-mistral-secret"

// upstream is a fake Mistral API.
type upstream struct {
	*httptest.Server
	transport *http.Transport
	requests  chan *recorded
}

type recorded struct {
	path   string
	header http.Header
	body   []byte
}

// newUpstream starts a fake whose handler h reads the request body itself when read is
// false; otherwise the body is read whole and recorded before h runs.
func newUpstream(t *testing.T, read bool, h http.HandlerFunc) *upstream {
	t.Helper()
	u := &upstream{requests: make(chan *recorded, 16)}
	u.Server, u.transport = upstreamtest.NewServer(t, func(w http.ResponseWriter, r *http.Request) {
		rec := &recorded{path: r.URL.Path, header: r.Header.Clone()}
		if read {
			rec.body, _ = io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(rec.body))
		}
		u.requests <- rec
		h(w, r)
	})
	return u
}

func (u *upstream) provider(t *testing.T, mod func(*Config)) *Provider {
	t.Helper()
	return upstreamtest.NewProvider(t, New, Config{BaseURL: u.URL + "/v1", APIKey: testKey, Transport: u.transport}, mod)
}

func (u *upstream) last(t *testing.T) *recorded {
	t.Helper()
	return upstreamtest.Next(t, u.requests)
}

func writeJSON(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

func readAll(t *testing.T, resp *providers.RawResponse) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestMistralNew(t *testing.T) {
	p, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Name() != "mistral" || p.base != DefaultBaseURL {
		t.Fatalf("name %q base %q", p.Name(), p.base)
	}
	for _, cfg := range []Config{{BaseURL: "api.mistral.ai"}, {Timeout: -time.Second}} {
		if _, err := New(cfg); err == nil {
			t.Fatalf("%+v accepted", cfg)
		}
	}
}

// TestMistralCapabilities: Mistral serves chat, embeddings, transcriptions and OCR, and
// none of the openai adapter's other formats. Should the openai adapter gain a neutral
// capability Mistral lacks (Moderator, SpeechSynthesizer, ImageGenerator), embedding it
// would lend it to this adapter: this test then fails, and the Provider must stop
// embedding the openai adapter and delegate what it serves instead.
func TestMistralCapabilities(t *testing.T) {
	p, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	want := []providers.WireFormat{providers.FormatOpenAIChat, providers.FormatOpenAIEmbeddings, providers.FormatOpenAITranscriptions, providers.FormatMistralOCR}
	if !slices.Equal(p.Formats(), want) {
		t.Fatalf("formats %v", p.Formats())
	}
	var a providers.Provider = p
	if _, ok := a.(providers.ChatProvider); !ok {
		t.Fatal("not a ChatProvider")
	}
	if _, ok := a.(providers.Moderator); ok {
		t.Fatal("Mistral's moderation API is not OpenAI's")
	}
	if _, ok := a.(providers.SpeechSynthesizer); ok {
		t.Fatal("speech is not served")
	}
	if _, ok := a.(providers.ImageGenerator); ok {
		t.Fatal("images are not served")
	}
	for _, f := range []providers.WireFormat{providers.FormatOpenAIModerations, providers.FormatOpenAISpeech, providers.FormatOpenAITranslations,
		providers.FormatOpenAIImages, providers.FormatOpenAIImageEdits, providers.FormatOpenAIResponses} {
		if _, err := p.Forward(context.Background(), &providers.RawRequest{Format: f, Body: []byte(`{}`)}); err == nil {
			t.Fatalf("forwarded %s", f)
		}
	}
}

// TestMistralChatAndEmbeddings: the OpenAI-compatible endpoints go through the openai
// adapter, under Mistral's base URL, with max_tokens (Mistral refuses
// max_completion_tokens).
func TestMistralChatAndEmbeddings(t *testing.T) {
	u := newUpstream(t, true, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/chat/completions":
			writeJSON(w, 200, `{"id":"c1","object":"chat.completion","created":1,"model":"mistral-small-latest","choices":[{"index":0,"message":{"role":"assistant","content":"Bonjour"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}`)
		case "/v1/embeddings":
			writeJSON(w, 200, `{"id":"e1","object":"list","data":[{"object":"embedding","embedding":[0.1,0.2],"index":0}],"model":"mistral-embed","usage":{"prompt_tokens":3,"total_tokens":3}}`)
		default:
			http.NotFound(w, r)
		}
	})
	p := u.provider(t, nil)
	maxTokens := int64(20)
	res, err := p.Chat(context.Background(), &providers.Request{Model: "mistral-small-latest", MaxTokens: &maxTokens,
		Messages: []providers.Message{{Role: providers.RoleUser, Content: []providers.Part{{Type: providers.PartText, Text: "hi"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Text != "Bonjour" || res.Usage.Output != 2 {
		t.Fatalf("answer %+v", res)
	}
	got := u.last(t)
	if got.header.Get("Authorization") != "Bearer "+testKey || !bytes.Contains(got.body, []byte(`"max_tokens":20`)) ||
		bytes.Contains(got.body, []byte("max_completion_tokens")) {
		t.Fatalf("chat request %v %s", got.header, got.body)
	}

	body := `{"model":"mistral-embed","input":["a"]}`
	resp, err := p.Forward(context.Background(), &providers.RawRequest{Format: providers.FormatOpenAIEmbeddings, Body: []byte(body)})
	if err != nil {
		t.Fatal(err)
	}
	if out := readAll(t, resp); !strings.Contains(out, `"embedding":[0.1,0.2]`) {
		t.Fatalf("embeddings answer %s", out)
	}
	if got := u.last(t); got.path != "/v1/embeddings" || string(got.body) != body {
		t.Fatalf("embeddings request %s %s", got.path, got.body)
	}
}

func TestMistralForwardOCR(t *testing.T) {
	const answer = `{"pages":[{"index":0,"markdown":"# Invoice\n\nTotal: 12 €","images":[],"dimensions":{"dpi":200,"height":2200,"width":1700}}],` +
		`"model":"mistral-ocr-2505-completion","document_annotation":null,"usage_info":{"pages_processed":1,"doc_size_bytes":34567}}`
	u := newUpstream(t, true, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Request-Id", "req_ocr")
		writeJSON(w, 200, answer)
	})
	p := u.provider(t, nil)
	body := `{"model":"mistral-ocr-latest","document":{"type":"document_url","document_url":"data:application/pdf;base64,JVBERi0xLjQK"},"pages":[0],"include_image_base64":false}`
	in := http.Header{}
	in.Set("Authorization", "Bearer client-key")
	in.Set("Traceparent", "00-abc-def-01")
	resp, err := p.Forward(context.Background(), &providers.RawRequest{Format: providers.FormatMistralOCR, Body: []byte(body), Header: in})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != 200 || resp.Header.Get("X-Request-Id") != "req_ocr" {
		t.Fatalf("response %d %v", resp.Status, resp.Header)
	}
	if out := readAll(t, resp); out != answer {
		t.Fatalf("answer changed: %s", out)
	}
	got := u.last(t)
	if got.path != "/v1/ocr" || string(got.body) != body {
		t.Fatalf("request %s %s", got.path, got.body)
	}
	for k, v := range map[string]string{"Authorization": "Bearer " + testKey, "Accept": "application/json",
		"Content-Type": "application/json", "Traceparent": "00-abc-def-01"} {
		if got.header.Get(k) != v {
			t.Errorf("header %s = %q, want %q", k, got.header.Get(k), v)
		}
	}
}

// multipartUpload is a transcription request as OpenAI's SDKs encode it.
func multipartUpload(t *testing.T, file []byte, stream bool) (body []byte, contentType string) {
	t.Helper()
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	_ = mw.WriteField("model", "voxtral-mini-latest")
	_ = mw.WriteField("language", "fr")
	_ = mw.WriteField("temperature", "0.2")
	_ = mw.WriteField("timestamp_granularities[]", "segment")
	if stream {
		_ = mw.WriteField("stream", "true")
	}
	h := textproto.MIMEHeader{}
	h.Set("Content-Disposition", `form-data; name="file"; filename="talk.m4a"`)
	h.Set("Content-Type", "audio/mp4")
	fw, err := mw.CreatePart(h)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = fw.Write(file)
	_ = mw.Close()
	return b.Bytes(), mw.FormDataContentType()
}

// upload is what the fake read of a multipart transcription request.
type upload struct {
	fields      map[string][]string
	fileName    string
	fileType    string
	fileSize    int64
	fileSum     [32]byte
	contentType string
	chunked     bool
}

// readUpload reads a multipart request as a server does, part by part, the file hashed as
// it streams by.
func readUpload(r *http.Request) (*upload, error) {
	up := &upload{fields: map[string][]string{}, contentType: r.Header.Get("Content-Type"), chunked: slices.Contains(r.TransferEncoding, "chunked")}
	mr, err := r.MultipartReader()
	if err != nil {
		return nil, err
	}
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			return up, nil
		}
		if err != nil {
			return nil, err
		}
		if part.FormName() == "file" {
			up.fileName, up.fileType = part.FileName(), part.Header.Get("Content-Type")
			h := sha256.New()
			if up.fileSize, err = io.Copy(h, part); err != nil {
				return nil, err
			}
			copy(up.fileSum[:], h.Sum(nil))
			continue
		}
		v, _ := io.ReadAll(part)
		up.fields[part.FormName()] = append(up.fields[part.FormName()], string(v))
	}
}

const mistralTranscription = `{"model":"voxtral-mini-2507","text":"Bonjour à tous.","language":"fr",` +
	`"segments":[{"text":"Bonjour à tous.","start":0.0,"end":1.4,"type":"transcription_segment"}],` +
	`"usage":{"prompt_audio_seconds":2,"prompt_tokens":4,"total_tokens":3270,"completion_tokens":6}}`

func TestMistralForwardTranscription(t *testing.T) {
	uploads := make(chan *upload, 1)
	u := newUpstream(t, false, func(w http.ResponseWriter, r *http.Request) {
		up, err := readUpload(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		uploads <- up
		writeJSON(w, 200, mistralTranscription)
	})
	p := u.provider(t, nil)
	file := bytes.Repeat([]byte("\x00\x00\x00\x20ftypM4A "), 1000)
	body, ct := multipartUpload(t, file, false)
	resp, err := p.Forward(context.Background(), &providers.RawRequest{Format: providers.FormatOpenAITranscriptions,
		Reader: bytes.NewReader(body), Length: int64(len(body)), ContentType: ct})
	if err != nil {
		t.Fatal(err)
	}
	out := readAll(t, resp)
	want := strings.Replace(mistralTranscription, `{"prompt_audio_seconds":2,"prompt_tokens":4,"total_tokens":3270,"completion_tokens":6}`,
		`{"type":"duration","seconds":2}`, 1)
	if out != want || resp.ContentLength != int64(len(want)) || resp.Header.Get("Content-Length") != "" {
		t.Fatalf("answer %d %v\n%s\nwant %s", resp.ContentLength, resp.Header, out, want)
	}
	got := u.last(t)
	if got.path != "/v1/audio/transcriptions" || got.header.Get("Authorization") != "Bearer "+testKey || got.header.Get("Accept") != "application/json" {
		t.Fatalf("request %s %v", got.path, got.header)
	}
	up := <-uploads
	wantFields := map[string][]string{"model": {"voxtral-mini-latest"}, "language": {"fr"}, "temperature": {"0.2"}, "timestamp_granularities[]": {"segment"}}
	if len(up.fields) != len(wantFields) {
		t.Fatalf("fields %v", up.fields)
	}
	for k, v := range wantFields {
		if !slices.Equal(up.fields[k], v) {
			t.Fatalf("field %s = %v, want %v", k, up.fields[k], v)
		}
	}
	if up.fileName != "talk.m4a" || up.fileType != "audio/mp4" || up.fileSize != int64(len(file)) || up.fileSum != sha256.Sum256(file) || up.contentType != ct {
		t.Fatalf("upload %+v", up)
	}
}

// TestMistralForwardTranscriptionStreamsUpload: a 5 MB upload of unknown length goes
// through an io.Pipe as it is written, sent chunked, never held whole.
func TestMistralForwardTranscriptionStreamsUpload(t *testing.T) {
	uploads := make(chan *upload, 1)
	u := newUpstream(t, false, func(w http.ResponseWriter, r *http.Request) {
		up, err := readUpload(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		uploads <- up
		writeJSON(w, 200, `{"model":"voxtral-mini-2507","text":"ok","language":null,"segments":[],"usage":{"prompt_audio_seconds":300,"prompt_tokens":1,"total_tokens":2,"completion_tokens":1}}`)
	})
	p := u.provider(t, nil)
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	file := make([]byte, 5<<20)
	for i := range file {
		file[i] = byte(i * 7)
	}
	go func() {
		_ = mw.WriteField("model", "voxtral-mini-latest")
		fw, err := mw.CreateFormFile("file", "long.wav")
		if err != nil {
			pw.CloseWithError(err)
			return
		}
		for chunk := file; len(chunk) > 0; chunk = chunk[min(len(chunk), 64<<10):] {
			if _, err := fw.Write(chunk[:min(len(chunk), 64<<10)]); err != nil {
				pw.CloseWithError(err)
				return
			}
		}
		pw.CloseWithError(mw.Close())
	}()
	resp, err := p.Forward(context.Background(), &providers.RawRequest{Format: providers.FormatOpenAITranscriptions,
		Reader: pr, Length: -1, ContentType: mw.FormDataContentType()})
	if err != nil {
		t.Fatal(err)
	}
	if out := readAll(t, resp); !strings.Contains(out, `"usage":{"type":"duration","seconds":300}`) {
		t.Fatalf("answer %s", out)
	}
	up := <-uploads
	if !up.chunked || up.fileName != "long.wav" || up.fileSize != int64(len(file)) || up.fileSum != sha256.Sum256(file) ||
		!slices.Equal(up.fields["model"], []string{"voxtral-mini-latest"}) {
		t.Fatalf("upload chunked %v name %q size %d fields %v", up.chunked, up.fileName, up.fileSize, up.fields)
	}
}

// TestMistralTranscriptionUsage: the usage of a complete transcription becomes OpenAI's
// union, every other member kept.
func TestMistralTranscriptionUsage(t *testing.T) {
	for _, tc := range []struct {
		name, usage, want string
	}{
		{"audio seconds", `{"prompt_audio_seconds":12,"prompt_tokens":4,"total_tokens":3270,"completion_tokens":6}`, `{"type":"duration","seconds":12}`},
		{"fractional seconds", `{"prompt_audio_seconds":7.5,"prompt_tokens":4,"total_tokens":20,"completion_tokens":6}`, `{"type":"duration","seconds":7.5}`},
		{"no seconds", `{"prompt_audio_seconds":null,"prompt_tokens":150,"total_tokens":180,"completion_tokens":30}`, `{"type":"tokens","input_tokens":150,"output_tokens":30,"total_tokens":180}`},
		{"zero seconds", `{"prompt_audio_seconds":0,"prompt_tokens":10,"completion_tokens":5}`, `{"type":"tokens","input_tokens":10,"output_tokens":5,"total_tokens":15}`},
		{"null usage", `null`, `null`},
		{"empty usage", `{}`, `{}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := newUpstream(t, true, func(w http.ResponseWriter, r *http.Request) {
				writeJSON(w, 200, `{"model":"voxtral-mini-2507","text":"hi","language":"en","segments":[],"usage":`+tc.usage+`}`)
			})
			p := u.provider(t, nil)
			resp, err := p.Forward(context.Background(), &providers.RawRequest{Format: providers.FormatOpenAITranscriptions,
				Body: []byte("--x--\r\n"), ContentType: "multipart/form-data; boundary=x"})
			if err != nil {
				t.Fatal(err)
			}
			if out, want := readAll(t, resp), `{"model":"voxtral-mini-2507","text":"hi","language":"en","segments":[],"usage":`+tc.want+`}`; out != want {
				t.Fatalf("got  %s\nwant %s", out, want)
			}
		})
	}

	u := newUpstream(t, true, func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 200, `{"text":"cut`) })
	_, err := u.provider(t, nil).Forward(context.Background(), &providers.RawRequest{Format: providers.FormatOpenAITranscriptions, Body: []byte("x"), ContentType: "multipart/form-data; boundary=x"})
	if ue, ok := providers.AsUpstreamError(err); !ok || !ue.Retryable || strings.Contains(err.Error(), testKey) {
		t.Fatalf("malformed answer: %v", err)
	}
}

func TestMistralErrors(t *testing.T) {
	for _, tc := range []struct {
		name       string
		status     int
		header     map[string]string
		body       string
		category   providers.Category
		retryable  bool
		message    string
		retryAfter time.Duration
	}{
		{name: "unauthorized", status: 401, body: `{"message":"Unauthorized","request_id":"4d8c"}`,
			category: providers.CategoryCredentialsInvalid, message: "Unauthorized"},
		{name: "rate limited", status: 429, header: map[string]string{"Retry-After": "3"},
			body:     `{"object":"error","message":"Requests rate limit exceeded","type":"rate_limited","param":null,"code":"1300"}`,
			category: providers.CategoryRateLimited, retryable: true, message: "Requests rate limit exceeded", retryAfter: 3 * time.Second},
		{name: "server error", status: 500, body: `{"object":"error","message":"Service unavailable.","type":"internal_server_error","param":null,"code":"1000"}`,
			category: providers.CategoryServerError, retryable: true, message: "Service unavailable."},
		{name: "validation", status: 422,
			body:     `{"object":"error","message":{"detail":[{"type":"missing","loc":["body","model"],"msg":"Field required","input":null}]},"type":"invalid_request_message_error","param":null,"code":null}`,
			category: providers.CategoryInvalidRequest, message: "Field required"},
		{name: "detail", status: 422, body: `{"detail":[{"type":"extra_forbidden","loc":["body","response_format"],"msg":"Extra inputs are not permitted","input":"srt"}]}`,
			category: providers.CategoryInvalidRequest, message: "Extra inputs are not permitted"},
		{name: "key echoed", status: 401, body: `{"message":"bad key ` + testKey + `"}`,
			category: providers.CategoryCredentialsInvalid, message: "bad key [redacted]"},
	} {
		for _, f := range []providers.WireFormat{providers.FormatMistralOCR, providers.FormatOpenAITranscriptions, providers.FormatOpenAIChat} {
			t.Run(tc.name+"/"+string(f), func(t *testing.T) {
				u := newUpstream(t, true, func(w http.ResponseWriter, r *http.Request) {
					for k, v := range tc.header {
						w.Header().Set(k, v)
					}
					writeJSON(w, tc.status, tc.body)
				})
				p := u.provider(t, nil)
				_, err := p.Forward(context.Background(), &providers.RawRequest{Format: f, Body: []byte(`{"model":"m"}`)})
				ue, ok := providers.AsUpstreamError(err)
				if !ok {
					t.Fatalf("err %v", err)
				}
				if ue.Status != tc.status || ue.Category != tc.category || ue.Retryable != tc.retryable || ue.Message != tc.message ||
					ue.RetryAfter != tc.retryAfter || ue.Provider != "mistral" {
					t.Fatalf("error %+v", ue)
				}
				if strings.Contains(ue.Error(), testKey) || strings.Contains(ue.Payload, testKey) {
					t.Fatalf("the key leaked: %+v", ue)
				}
			})
		}
	}
}

// TestMistralNoCredential: an api_key configured but empty refuses every call at once.
func TestMistralNoCredential(t *testing.T) {
	u := newUpstream(t, true, func(w http.ResponseWriter, r *http.Request) { t.Error("the upstream was called") })
	p := u.provider(t, func(c *Config) { c.APIKey, c.RequireKey = "", true })
	for _, f := range p.Formats() {
		_, err := p.Forward(context.Background(), &providers.RawRequest{Format: f, Body: []byte(`{}`)})
		if ue, ok := providers.AsUpstreamError(err); !ok || ue.Category != providers.CategoryCredentialsNotConfigured {
			t.Fatalf("%s: %v", f, err)
		}
	}
}

// TestMistralTranscriptionContentType: the multipart body keeps its boundary.
func TestMistralTranscriptionContentType(t *testing.T) {
	u := newUpstream(t, true, func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 200, `{"text":""}`) })
	p := u.provider(t, nil)
	body, ct := multipartUpload(t, []byte("RIFF"), false)
	resp, err := p.Forward(context.Background(), &providers.RawRequest{Format: providers.FormatOpenAITranscriptions, Body: body, ContentType: ct})
	if err != nil {
		t.Fatal(err)
	}
	_ = readAll(t, resp)
	got := u.last(t)
	mt, params, err := mime.ParseMediaType(got.header.Get("Content-Type"))
	if err != nil || mt != "multipart/form-data" || params["boundary"] == "" || !bytes.Equal(got.body, body) {
		t.Fatalf("content type %q body intact %v", got.header.Get("Content-Type"), bytes.Equal(got.body, body))
	}
}
