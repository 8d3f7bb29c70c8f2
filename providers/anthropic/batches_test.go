package anthropic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/internal/upstreamtest"
)

// fakeMessageBatches speaks Anthropic's Message Batches: the create's requests array is
// decoded element by element as it arrives; a batch is in_progress at its first poll and
// ended after; its results answer each request by its custom_id's prefix: "bad" errored,
// "late" expired, "gone" canceled, any other succeeded with a message.
type fakeMessageBatches struct {
	mu       sync.Mutex
	requests []string
	headers  []http.Header
	// batch holds the last create's requests (when keep), received counts them as they
	// arrive, and onRequest is told of each count.
	batch     []batchRequest
	keep      bool
	received  int
	onRequest func(n int)
	polls     int
	cancelled bool
	// created counts the batches created.
	created int
	// createStatus, when set, answers the create with it.
	createStatus int
}

type batchRequest struct {
	CustomID string          `json:"custom_id"`
	Params   json.RawMessage `json:"params"`
}

func newFakeMessageBatches(t *testing.T, mods ...func(*Config)) (*fakeMessageBatches, *Provider) {
	t.Helper()
	f := &fakeMessageBatches{keep: true}
	srv, tr := upstreamtest.NewServer(t, f.serve)
	on := true
	p := upstreamtest.NewProvider(t, New, Config{Name: "claude", BaseURL: srv.URL, APIKey: testKey, Transport: tr, BatchAPI: &on}, mods...)
	return f, p
}

func writeAnthropicJSON(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(body))
}

func (f *fakeMessageBatches) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.requests = append(f.requests, r.Method+" "+r.URL.Path)
	f.headers = append(f.headers, r.Header.Clone())
	f.mu.Unlock()
	if r.Header.Get("X-Api-Key") != testKey {
		writeAnthropicJSON(w, 401, `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`)
		return
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/v1/messages/batches")
	switch {
	case !ok:
		http.NotFound(w, r)
	case rest == "" && r.Method == http.MethodPost:
		f.create(w, r)
	case rest == "/msgbatch_1" && r.Method == http.MethodGet:
		f.mu.Lock()
		defer f.mu.Unlock()
		f.polls++
		switch {
		case f.cancelled:
			writeAnthropicJSON(w, 200, f.object("ended", `"2026-11-29T10:00:00Z"`))
		case f.polls == 1:
			writeAnthropicJSON(w, 200, f.object("in_progress", "null"))
		default:
			writeAnthropicJSON(w, 200, f.object("ended", "null"))
		}
	case rest == "/msgbatch_1/cancel" && r.Method == http.MethodPost:
		f.mu.Lock()
		defer f.mu.Unlock()
		f.cancelled = true
		writeAnthropicJSON(w, 200, f.object("canceling", `"2026-11-29T10:00:00Z"`))
	case rest == "/msgbatch_1/results" && r.Method == http.MethodGet:
		f.results(w)
	case r.Method == http.MethodGet:
		writeAnthropicJSON(w, 404, `{"type":"error","error":{"type":"not_found_error","message":"No batch with that id"}}`)
	default:
		http.NotFound(w, r)
	}
}

// create decodes {"requests":[...]} one element at a time.
func (f *fakeMessageBatches) create(w http.ResponseWriter, r *http.Request) {
	if f.createStatus != 0 {
		writeAnthropicJSON(w, f.createStatus, `{"type":"error","error":{"type":"rate_limit_error","message":"Number of batch requests exceeds your rate limit"}}`)
		return
	}
	dec := json.NewDecoder(r.Body)
	bad := func(msg string) {
		writeAnthropicJSON(w, 400, `{"type":"error","error":{"type":"invalid_request_error","message":"`+msg+`"}}`)
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		bad("body is not an object")
		return
	}
	if tok, err := dec.Token(); err != nil || tok != "requests" {
		bad("requests: Field required")
		return
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
		bad("requests: not an array")
		return
	}
	f.mu.Lock()
	f.batch, f.received, f.cancelled, f.polls = nil, 0, false, 0
	f.mu.Unlock()
	for dec.More() {
		var req batchRequest
		if err := dec.Decode(&req); err != nil {
			bad("requests: element is not an object")
			return
		}
		f.mu.Lock()
		f.received++
		n, on := f.received, f.onRequest
		if f.keep {
			f.batch = append(f.batch, req)
		}
		f.mu.Unlock()
		if on != nil {
			on(n)
		}
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim(']') {
		bad("requests: unterminated")
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.created++
	writeAnthropicJSON(w, 200, f.object("in_progress", "null"))
}

func (f *fakeMessageBatches) object(status, cancelInitiated string) string {
	var processing, succeeded, errored, canceled, expired int
	for _, r := range f.batch {
		switch {
		case status != "ended":
			processing++
		case strings.HasPrefix(r.CustomID, "bad"):
			errored++
		case strings.HasPrefix(r.CustomID, "late"):
			expired++
		case strings.HasPrefix(r.CustomID, "gone"):
			canceled++
		default:
			succeeded++
		}
	}
	return fmt.Sprintf(`{"id":"msgbatch_1","type":"message_batch","processing_status":%q,"request_counts":{"processing":%d,"succeeded":%d,"errored":%d,"canceled":%d,"expired":%d},`+
		`"ended_at":null,"created_at":"2026-11-29T09:00:00Z","expires_at":"2026-11-30T09:00:00Z","archived_at":null,"cancel_initiated_at":%s,"results_url":null}`,
		status, processing, succeeded, errored, canceled, expired, cancelInitiated)
}

func (f *fakeMessageBatches) results(w http.ResponseWriter) {
	f.mu.Lock()
	defer f.mu.Unlock()
	w.Header().Set("Content-Type", "application/binary")
	for i, r := range f.batch {
		var result string
		switch {
		case strings.HasPrefix(r.CustomID, "bad"):
			result = `{"type":"errored","error":{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: Field required"}}}`
		case strings.HasPrefix(r.CustomID, "late"):
			result = `{"type":"expired"}`
		case strings.HasPrefix(r.CustomID, "gone"):
			result = `{"type":"canceled"}`
		default:
			result = fmt.Sprintf(`{"type":"succeeded","message":{"id":"msg_%d","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929",`+
				`"content":[{"type":"text","text":"answer %s"}],"stop_reason":"end_turn","stop_sequence":null,`+
				`"usage":{"input_tokens":%d,"cache_creation_input_tokens":0,"cache_read_input_tokens":5,"output_tokens":9}}}`, i, r.CustomID, 10+i)
		}
		fmt.Fprintf(w, `{"custom_id":%q,"result":%s}`+"\n", r.CustomID, result)
	}
}

func (f *fakeMessageBatches) calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.requests)
}

func rowsOf(bodies map[string]string, ids ...string) func(func(providers.BatchRow) error) error {
	return func(yield func(providers.BatchRow) error) error {
		for _, id := range ids {
			if err := yield(providers.BatchRow{CustomID: id, Body: json.RawMessage(bodies[id])}); err != nil {
				return err
			}
		}
		return nil
	}
}

func collectResults(t *testing.T, p *Provider, st *providers.BatchStatus) map[string]providers.BatchResult {
	t.Helper()
	out := map[string]providers.BatchResult{}
	if err := p.BatchResults(context.Background(), st.NativeID, st.State, func(r providers.BatchResult) error {
		out[r.CustomID] = r
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestChatBatch: chat completion rows are sent as Messages params translated as an
// interactive request is (system prompt lifted, upstream model, no stream), the batch is
// polled to completed with its counts, and its results come back as chat completions with
// their custom_ids and usage, an errored request as an OpenAI error with its status, an
// expired one as batch_expired.
func TestChatBatch(t *testing.T) {
	f, p := newFakeMessageBatches(t)
	ctx := context.Background()
	bodies := map[string]string{
		"q-1":    `{"model":"alias","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"What is 2+2?"}],"max_tokens":50,"stream":true}`,
		"q-2":    `{"model":"alias","messages":[{"role":"user","content":"Hi"}],"temperature":0.5}`,
		"bad-1":  `{"model":"alias","messages":[{"role":"user","content":"?"}]}`,
		"late-1": `{"model":"alias","messages":[{"role":"user","content":"later"}]}`,
	}
	st, err := p.StartBatch(ctx, &providers.BatchRequest{Endpoint: "/v1/chat/completions", Model: "claude-sonnet-4-5", CompletionWindow: "24h",
		Rows: rowsOf(bodies, "q-1", "q-2", "bad-1", "late-1")})
	if err != nil {
		t.Fatal(err)
	}
	if st.NativeID != "msgbatch_1" || st.Status != providers.BatchInProgress || st.Total != 4 {
		t.Fatalf("started %+v", st)
	}
	if h := f.headers[0]; h.Get("Anthropic-Version") != DefaultVersion || h.Get("Content-Type") != "application/json" {
		t.Fatalf("headers %v", h)
	}
	var q1 struct {
		Model     string          `json:"model"`
		System    json.RawMessage `json:"system"`
		Messages  []MessageParam  `json:"messages"`
		MaxTokens int             `json:"max_tokens"`
		Stream    *bool           `json:"stream"`
	}
	if len(f.batch) != 4 || f.batch[0].CustomID != "q-1" {
		t.Fatalf("requests %+v", f.batch)
	}
	if err := json.Unmarshal(f.batch[0].Params, &q1); err != nil {
		t.Fatal(err)
	}
	if q1.Model != "claude-sonnet-4-5" || !strings.Contains(string(q1.System), "Be brief.") || len(q1.Messages) != 1 || q1.Messages[0].Role != "user" ||
		q1.MaxTokens != 50 || q1.Stream != nil && *q1.Stream {
		t.Fatalf("q-1 params %s", f.batch[0].Params)
	}
	// Without max_tokens, the provider's default, which the API requires.
	if !strings.Contains(string(f.batch[1].Params), `"max_tokens":4096`) || !strings.Contains(string(f.batch[1].Params), `"temperature":0.5`) {
		t.Fatalf("q-2 params %s", f.batch[1].Params)
	}

	if s, err := p.PollBatch(ctx, st.NativeID, st.State); err != nil || s.Status != providers.BatchInProgress {
		t.Fatalf("poll %+v %v", s, err)
	}
	s, err := p.PollBatch(ctx, st.NativeID, st.State)
	if err != nil || s.Status != providers.BatchCompleted || s.Total != 4 || s.Completed != 2 || s.Failed != 2 {
		t.Fatalf("poll %+v %v", s, err)
	}

	results := collectResults(t, p, s)
	if len(results) != 4 {
		t.Fatalf("results %+v", results)
	}
	q := results["q-1"]
	var cc struct {
		Object  string `json:"object"`
		Choices []struct {
			Message      struct{ Role, Content string } `json:"message"`
			FinishReason string                         `json:"finish_reason"`
		} `json:"choices"`
		Usage struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(q.Body, &cc); err != nil {
		t.Fatal(err)
	}
	if cc.Object != "chat.completion" || cc.Choices[0].Message.Content != "answer q-1" || cc.Choices[0].FinishReason != "stop" || cc.Usage.PromptTokens != 15 || cc.Usage.CompletionTokens != 9 {
		t.Fatalf("q-1 body %s", q.Body)
	}
	if q.StatusCode != 200 || !q.UsageKnown || q.Usage != (providers.Usage{Input: 10, CacheRead: 5, Output: 9}) {
		t.Fatalf("q-1 %+v", q)
	}
	bad := results["bad-1"]
	var oe struct {
		Error struct{ Message, Type string } `json:"error"`
	}
	if err := json.Unmarshal(bad.Body, &oe); err != nil || oe.Error.Type != "invalid_request_error" || !strings.Contains(oe.Error.Message, "max_tokens") {
		t.Fatalf("bad-1 body %s", bad.Body)
	}
	if bad.StatusCode != 400 || bad.ErrorCode != "invalid_request_error" || bad.UsageKnown {
		t.Fatalf("bad-1 %+v", bad)
	}
	if late := results["late-1"]; late.StatusCode != 0 || late.ErrorCode != "batch_expired" {
		t.Fatalf("late-1 %+v", late)
	}
}

// TestMessagesBatch: Messages rows go as they are, with the upstream model and without
// stream, and their results are the messages as they came.
func TestMessagesBatch(t *testing.T) {
	f, p := newFakeMessageBatches(t)
	ctx := context.Background()
	bodies := map[string]string{"m1": `{"model":"alias","max_tokens":20,"stream":true,"messages":[{"role":"user","content":"Hi"}],"metadata":{"user_id":"u1"}}`}
	st, err := p.StartBatch(ctx, &providers.BatchRequest{Endpoint: "/v1/messages", Model: "claude-haiku-4-5", Rows: rowsOf(bodies, "m1")})
	if err != nil {
		t.Fatal(err)
	}
	var params map[string]any
	if err := json.Unmarshal(f.batch[0].Params, &params); err != nil {
		t.Fatal(err)
	}
	if _, stream := params["stream"]; stream || params["model"] != "claude-haiku-4-5" || params["max_tokens"] != 20.0 || params["metadata"] == nil {
		t.Fatalf("params %s", f.batch[0].Params)
	}
	f.polls = 1
	results := collectResults(t, p, st)
	m := results["m1"]
	if !strings.Contains(string(m.Body), `"type":"message"`) || !strings.Contains(string(m.Body), `"cache_read_input_tokens":5`) || m.RequestID != "msg_0" ||
		m.Usage != (providers.Usage{Input: 10, CacheRead: 5, Output: 9}) {
		t.Fatalf("m1 %+v %s", m, m.Body)
	}
}

// TestMessageBatchCancel: a cancel answers cancelling, the batch ends cancelled, and its
// results hold what ran and batch_cancelled for what did not.
func TestMessageBatchCancel(t *testing.T) {
	_, p := newFakeMessageBatches(t)
	ctx := context.Background()
	bodies := map[string]string{"done": `{"max_tokens":5,"messages":[{"role":"user","content":"a"}]}`, "gone-1": `{"max_tokens":5,"messages":[{"role":"user","content":"b"}]}`}
	st, err := p.StartBatch(ctx, &providers.BatchRequest{Endpoint: "/v1/messages", Model: "m", Rows: rowsOf(bodies, "done", "gone-1")})
	if err != nil {
		t.Fatal(err)
	}
	c, err := p.CancelBatch(ctx, st.NativeID, st.State)
	if err != nil || c.Status != providers.BatchCancelling {
		t.Fatalf("cancel %+v %v", c, err)
	}
	s, err := p.PollBatch(ctx, st.NativeID, c.State)
	if err != nil || s.Status != providers.BatchCancelled || s.Completed != 1 || s.Failed != 1 {
		t.Fatalf("poll %+v %v", s, err)
	}
	results := collectResults(t, p, s)
	if results["done"].StatusCode != 200 || results["gone-1"].ErrorCode != "batch_cancelled" {
		t.Fatalf("results %+v", results)
	}
}

// TestMessageBatchStatuses: processing_status and the counts map onto the providers'
// statuses.
func TestMessageBatchStatuses(t *testing.T) {
	for _, tc := range []struct {
		name, status, cancel string
		counts               string
		want                 string
	}{
		{name: "in progress", status: "in_progress", cancel: "null", counts: `"processing":3`, want: providers.BatchInProgress},
		{name: "canceling", status: "canceling", cancel: `"2026-11-29T10:00:00Z"`, counts: `"processing":3`, want: providers.BatchCancelling},
		{name: "ended", status: "ended", cancel: "null", counts: `"succeeded":2,"errored":1`, want: providers.BatchCompleted},
		{name: "ended after a cancel", status: "ended", cancel: `"2026-11-29T10:00:00Z"`, counts: `"succeeded":1,"canceled":2`, want: providers.BatchCancelled},
		{name: "all expired", status: "ended", cancel: "null", counts: `"expired":3`, want: providers.BatchExpired},
		{name: "partly expired", status: "ended", cancel: "null", counts: `"succeeded":1,"expired":2`, want: providers.BatchCompleted},
		{name: "unknown", status: "archiving", cancel: "null", counts: `"processing":3`, want: providers.BatchInProgress},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, tr := upstreamtest.NewServer(t, func(w http.ResponseWriter, r *http.Request) {
				writeAnthropicJSON(w, 200, `{"id":"msgbatch_9","type":"message_batch","processing_status":"`+tc.status+`","request_counts":{`+tc.counts+`},"cancel_initiated_at":`+tc.cancel+`}`)
			})
			p := upstreamtest.NewProvider(t, New, Config{BaseURL: srv.URL, APIKey: testKey, Transport: tr})
			s, err := p.PollBatch(context.Background(), "msgbatch_9", nil)
			if err != nil || s.Status != tc.want || s.Total != 3 {
				t.Fatalf("status %+v %v, want %s", s, err, tc.want)
			}
		})
	}
}

// TestMessageBatchErrors: the API's refusals keep their categories; what Message Batches
// cannot take is refused as Unsupported before anything is created.
func TestMessageBatchErrors(t *testing.T) {
	ctx := context.Background()
	chat := map[string]string{"a": `{"messages":[{"role":"user","content":"a"}]}`, "b c": `{"messages":[{"role":"user","content":"b"}]}`,
		"broken": `{"messages":"not a list"}`}
	t.Run("bad key", func(t *testing.T) {
		_, p := newFakeMessageBatches(t, func(c *Config) { c.APIKey = "sk-ant-wrong" })
		_, err := p.StartBatch(ctx, &providers.BatchRequest{Endpoint: "/v1/chat/completions", Model: "m", Rows: rowsOf(chat, "a")})
		if ue, ok := providers.AsUpstreamError(err); !ok || ue.Category != providers.CategoryCredentialsInvalid || strings.Contains(err.Error(), "sk-ant-wrong") {
			t.Fatalf("error %v", err)
		}
	})
	t.Run("rate limited", func(t *testing.T) {
		f, p := newFakeMessageBatches(t)
		f.createStatus = 429
		_, err := p.StartBatch(ctx, &providers.BatchRequest{Endpoint: "/v1/chat/completions", Model: "m", Rows: rowsOf(chat, "a")})
		if ue, ok := providers.AsUpstreamError(err); !ok || ue.Category != providers.CategoryRateLimited || !ue.Retryable {
			t.Fatalf("error %v", err)
		}
	})
	t.Run("unknown batch", func(t *testing.T) {
		_, p := newFakeMessageBatches(t)
		_, err := p.PollBatch(ctx, "msgbatch_nope", nil)
		if ue, ok := providers.AsUpstreamError(err); !ok || ue.Category != providers.CategoryNotFound {
			t.Fatalf("error %v", err)
		}
	})
	for _, tc := range []struct {
		name, endpoint, want string
		ids                  []string
	}{
		{name: "custom_id", endpoint: "/v1/chat/completions", ids: []string{"a", "b c"}, want: `custom_id "b c"`},
		{name: "untranslatable row", endpoint: "/v1/chat/completions", ids: []string{"broken"}, want: `row "broken"`},
		{name: "endpoint", endpoint: "/v1/embeddings", ids: []string{"a"}, want: "no native batch of /v1/embeddings"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, p := newFakeMessageBatches(t)
			_, err := p.StartBatch(ctx, &providers.BatchRequest{Endpoint: tc.endpoint, Model: "m", Rows: rowsOf(chat, tc.ids...)})
			ue, ok := providers.AsUpstreamError(err)
			if !ok || !ue.Unsupported || !errors.Is(err, ErrUnsupportedBatch) || !strings.Contains(ue.Message, tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			if f.created != 0 {
				t.Fatalf("a batch was created: %v", f.calls())
			}
		})
	}
	t.Run("too many requests", func(t *testing.T) {
		f, p := newFakeMessageBatches(t)
		f.keep = false
		_, err := p.StartBatch(ctx, &providers.BatchRequest{Endpoint: "/v1/messages", Model: "m", Rows: func(yield func(providers.BatchRow) error) error {
			body := json.RawMessage(`{"max_tokens":1,"messages":[{"role":"user","content":"a"}]}`)
			for i := range MaxBatchRows + 1 {
				if err := yield(providers.BatchRow{CustomID: fmt.Sprint("r", i), Body: body}); err != nil {
					return err
				}
			}
			return nil
		}})
		if ue, ok := providers.AsUpstreamError(err); !ok || !ue.Unsupported || ue.Code != "batch_too_large" || !strings.Contains(ue.Message, "100,000 requests") {
			t.Fatalf("error %v", err)
		}
	})
}

// TestMessageBatchSupport: Message Batches run on Anthropic's own API by default, on
// another server only when configured, and for Messages and chat completion rows only.
func TestMessageBatchSupport(t *testing.T) {
	on := true
	for _, tc := range []struct {
		name    string
		baseURL string
		batch   *bool
		want    bool
	}{
		{name: "anthropic", want: true},
		{name: "compatible", baseURL: "http://localhost:4000"},
		{name: "compatible on", baseURL: "http://localhost:4000", batch: &on, want: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := upstreamtest.NewProvider(t, New, Config{BaseURL: tc.baseURL, BatchAPI: tc.batch})
			if p.SupportsBatch("/v1/messages") != tc.want || p.SupportsBatch("/v1/chat/completions") != tc.want {
				t.Fatal("wrong support")
			}
			if p.SupportsBatch("/v1/embeddings") || p.SupportsBatch("/v1/responses") {
				t.Fatal("runs batches of an endpoint it has not")
			}
		})
	}
}

// TestMessageBatchStreams: a batch of 20,000 requests reaches the API while Rows is still
// yielding: past its 15,000th row, Rows waits until the API has decoded the 5,000th, which an
// adapter that built the requests array whole would never let happen.
func TestMessageBatchStreams(t *testing.T) {
	f, p := newFakeMessageBatches(t)
	f.keep = false
	pad := strings.Repeat("y", 1000)
	streamed, seen := upstreamtest.StreamedRows(20_000, 5_000, 15_000, func(int) string { return `{"messages":[{"role":"user","content":"` + pad + `"}]}` })
	f.onRequest = seen
	_, err := p.StartBatch(context.Background(), &providers.BatchRequest{Endpoint: "/v1/chat/completions", Model: "m", Rows: streamed})
	if err != nil {
		t.Fatal(err)
	}
	if f.received != 20_000 {
		t.Fatalf("the API received %d requests", f.received)
	}
}

// TestMessageBatchResultLines: each kind of result line becomes its row's result, in the
// shapes of the rows' endpoint; an answer that cannot be read fails its row only, and a
// line that names no row fails the reading.
func TestMessageBatchResultLines(t *testing.T) {
	for _, tc := range []struct {
		name, endpoint, line string
		status               int
		code, body           string
		fatal                bool
	}{
		{name: "unreadable answer, chat", endpoint: "/v1/chat/completions", line: `{"custom_id":"x","result":{"type":"succeeded","message":{"type":"completion"}}}`,
			status: 502, code: "upstream_answer_unreadable", body: `{"error":{"message":"the upstream's answer could not be read: decoding message: type is \"completion\", not message","type":"api_error","param":null,"code":null}}`},
		{name: "unreadable answer, messages", endpoint: "/v1/messages", line: `{"custom_id":"x","result":{"type":"succeeded","message":{"type":"message","content":[{"type":"tool_use","id":"t","name":"f","input":[1]}]}}}`,
			status: 502, code: "upstream_answer_unreadable"},
		{name: "errored, messages", endpoint: "/v1/messages", line: `{"custom_id":"x","result":{"type":"errored","error":{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}}}`,
			status: 529, code: "overloaded_error", body: `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`},
		{name: "errored, inner error alone", endpoint: "/v1/chat/completions", line: `{"custom_id":"x","result":{"type":"errored","error":{"type":"rate_limit_error","message":"slow down"}}}`,
			status: 429, code: "rate_limit_error", body: `{"error":{"message":"slow down","type":"rate_limit_error","param":null,"code":null}}`},
		{name: "unknown result type", endpoint: "/v1/messages", line: `{"custom_id":"x","result":{"type":"archived"}}`, fatal: true},
		{name: "no custom_id", endpoint: "/v1/messages", line: `{"result":{"type":"expired"}}`, fatal: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := batchResult([]byte(tc.line), tc.endpoint, 1700000000)
			if tc.fatal {
				if err == nil {
					t.Fatalf("no error: %+v", r)
				}
				return
			}
			if err != nil || r.CustomID != "x" || r.StatusCode != tc.status || r.ErrorCode != tc.code || tc.body != "" && string(r.Body) != tc.body || r.UsageKnown {
				t.Fatalf("result %+v %s, %v", r, r.Body, err)
			}
		})
	}
}
