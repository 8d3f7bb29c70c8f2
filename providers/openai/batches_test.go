package openai

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/internal/upstreamtest"
)

// fakeBatchAPI speaks OpenAI's Files and Batch APIs: an upload is read as multipart as it
// arrives, line by line; a batch moves on at each poll (validating, in_progress, finalizing,
// completed), or to cancelled after a cancel; its output file answers every row with a chat
// completion, except rows whose custom_id starts with "bad" (a 400 in the error file) or
// "late" (expired, in the error file).
type fakeBatchAPI struct {
	mu sync.Mutex
	// requests records method and path of each request.
	requests []string
	// purpose, fileName and fileType are the last upload's; rows its lines.
	purpose, fileName, fileType string
	rows                        []batchInputLine
	// received counts the lines of the upload in progress as they arrive; onLine, when
	// set, is told of each count.
	received int
	onLine   func(n int)
	// keepRows false keeps counts only (a large upload).
	keepRows bool
	// created is the last batch create's body.
	created map[string]any
	polls   map[string]int
	// cancelled batches end cancelled, with the rows before the cancel answered.
	cancelled map[string]bool
	deleted   []string
	// createStatus, when set, answers the batch create with it.
	createStatus int
	uploadStatus int
}

type batchInputLine struct {
	CustomID string          `json:"custom_id"`
	Method   string          `json:"method"`
	URL      string          `json:"url"`
	Body     json.RawMessage `json:"body"`
}

func newFakeBatchAPI(t *testing.T, mods ...func(*Config)) (*fakeBatchAPI, *Provider) {
	t.Helper()
	f := &fakeBatchAPI{polls: map[string]int{}, cancelled: map[string]bool{}, keepRows: true}
	srv, tr := upstreamtest.NewServer(t, f.serve)
	on := true
	p := upstreamtest.NewProvider(t, New, Config{Name: "oai", BaseURL: srv.URL + "/v1", APIKey: "sk-test-secret", Transport: tr, BatchAPI: &on}, mods...)
	return f, p
}

func (f *fakeBatchAPI) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.requests = append(f.requests, r.Method+" "+r.URL.Path)
	f.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer sk-test-secret" {
		writeOpenAIJSON(w, 401, `{"error":{"message":"Incorrect API key provided.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`)
		return
	}
	path := strings.TrimPrefix(r.URL.Path, "/v1")
	switch {
	case r.Method == http.MethodPost && path == "/files":
		f.upload(w, r)
	case r.Method == http.MethodPost && path == "/batches":
		f.create(w, r)
	case r.Method == http.MethodGet && strings.HasPrefix(path, "/batches/"):
		f.mu.Lock()
		defer f.mu.Unlock()
		id := strings.TrimPrefix(path, "/batches/")
		if id != "batch_1" {
			writeOpenAIJSON(w, 404, `{"error":{"message":"No batch found with id '`+id+`'.","type":"invalid_request_error","param":null,"code":null}}`)
			return
		}
		f.polls[id]++
		writeOpenAIJSON(w, 200, f.batch(id))
	case r.Method == http.MethodPost && strings.HasSuffix(path, "/cancel"):
		f.mu.Lock()
		defer f.mu.Unlock()
		f.cancelled["batch_1"] = true
		writeOpenAIJSON(w, 200, f.batchObject("batch_1", "cancelling", "", ""))
	case r.Method == http.MethodGet && strings.HasPrefix(path, "/files/") && strings.HasSuffix(path, "/content"):
		f.content(w, strings.TrimSuffix(strings.TrimPrefix(path, "/files/"), "/content"))
	case r.Method == http.MethodDelete && strings.HasPrefix(path, "/files/"):
		f.mu.Lock()
		f.deleted = append(f.deleted, strings.TrimPrefix(path, "/files/"))
		f.mu.Unlock()
		writeOpenAIJSON(w, 200, `{"id":"`+strings.TrimPrefix(path, "/files/")+`","object":"file","deleted":true}`)
	default:
		http.NotFound(w, r)
	}
}

// upload reads the multipart form as it arrives: the upload is never whole here either.
func (f *fakeBatchAPI) upload(w http.ResponseWriter, r *http.Request) {
	if f.uploadStatus != 0 {
		writeOpenAIJSON(w, f.uploadStatus, `{"error":{"message":"Rate limit reached for files.","type":"requests","param":null,"code":"rate_limit_exceeded"}}`)
		return
	}
	mr, err := r.MultipartReader()
	if err != nil {
		writeOpenAIJSON(w, 400, `{"error":{"message":"not multipart","type":"invalid_request_error"}}`)
		return
	}
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			writeOpenAIJSON(w, 400, `{"error":{"message":"broken multipart","type":"invalid_request_error"}}`)
			return
		}
		switch part.FormName() {
		case "purpose":
			b, _ := io.ReadAll(part)
			f.mu.Lock()
			f.purpose = string(b)
			f.mu.Unlock()
		case "file":
			f.mu.Lock()
			f.fileName, f.fileType, f.received, f.rows = part.FileName(), part.Header.Get("Content-Type"), 0, nil
			f.mu.Unlock()
			sc := bufio.NewScanner(part)
			sc.Buffer(nil, 1<<20)
			for sc.Scan() {
				var l batchInputLine
				if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
					writeOpenAIJSON(w, 400, `{"error":{"message":"line is not JSON","type":"invalid_request_error"}}`)
					return
				}
				f.mu.Lock()
				f.received++
				n, onLine := f.received, f.onLine
				if f.keepRows {
					f.rows = append(f.rows, l)
				}
				f.mu.Unlock()
				if onLine != nil {
					onLine(n)
				}
			}
			if sc.Err() != nil {
				return // the client broke the upload off
			}
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	writeOpenAIJSON(w, 200, fmt.Sprintf(`{"id":"file-in1","object":"file","bytes":%d,"created_at":1700000000,"filename":%q,"purpose":"batch"}`, f.received, f.fileName))
}

func (f *fakeBatchAPI) create(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.createStatus != 0 {
		writeOpenAIJSON(w, f.createStatus, `{"error":{"message":"Enqueued token limit reached for gpt-4o-mini.","type":"invalid_request_error","param":null,"code":"token_limit_exceeded"}}`)
		return
	}
	f.created = map[string]any{}
	_ = json.NewDecoder(r.Body).Decode(&f.created)
	writeOpenAIJSON(w, 200, f.batchObject("batch_1", "validating", "", ""))
}

// batch is the batch at its current poll.
func (f *fakeBatchAPI) batch(id string) string {
	if f.cancelled[id] {
		return f.batchObject(id, "cancelled", "file-out1", "")
	}
	switch f.polls[id] {
	case 1:
		return f.batchObject(id, "in_progress", "", "")
	case 2:
		return f.batchObject(id, "finalizing", "", "")
	}
	return f.batchObject(id, "completed", "file-out1", "file-err1")
}

func (f *fakeBatchAPI) batchObject(id, status, out, errFile string) string {
	failed := 0
	for _, r := range f.rows {
		if strings.HasPrefix(r.CustomID, "bad") || strings.HasPrefix(r.CustomID, "late") {
			failed++
		}
	}
	null := func(s string) string {
		if s == "" {
			return "null"
		}
		return `"` + s + `"`
	}
	return fmt.Sprintf(`{"id":%q,"object":"batch","endpoint":"/v1/chat/completions","errors":null,"input_file_id":"file-in1","completion_window":"24h",`+
		`"status":%q,"output_file_id":%s,"error_file_id":%s,"created_at":1700000000,"request_counts":{"total":%d,"completed":%d,"failed":%d},"metadata":{}}`,
		id, status, null(out), null(errFile), len(f.rows), len(f.rows)-failed, failed)
}

// content serves the output file (every answered row) or the error file.
func (f *fakeBatchAPI) content(w http.ResponseWriter, id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	w.Header().Set("Content-Type", "application/octet-stream")
	bw := bufio.NewWriter(w)
	defer bw.Flush()
	for i, r := range f.rows {
		bad, late := strings.HasPrefix(r.CustomID, "bad"), strings.HasPrefix(r.CustomID, "late")
		switch {
		case id == "file-out1" && !bad && !late:
			if f.cancelled["batch_1"] && i > 0 {
				continue // cancelled after the first row
			}
			fmt.Fprintf(bw, `{"id":"batch_req_%d","custom_id":%q,"response":{"status_code":200,"request_id":"req_%d","body":{"id":"chatcmpl-%d","object":"chat.completion","created":1700000000,"model":"gpt-4o-mini-2024-07-18",`+
				`"choices":[{"index":0,"message":{"role":"assistant","content":"answer %d"},"finish_reason":"stop"}],`+
				`"usage":{"prompt_tokens":%d,"completion_tokens":7,"total_tokens":%d,"prompt_tokens_details":{"cached_tokens":4},"completion_tokens_details":{"reasoning_tokens":2}}}},"error":null}`+"\n",
				i, r.CustomID, i, i, i, 20+i, 27+i)
		case id == "file-err1" && bad:
			fmt.Fprintf(bw, `{"id":"batch_req_%d","custom_id":%q,"response":{"status_code":400,"request_id":"req_%d","body":{"error":{"message":"Invalid 'messages': empty array.","type":"invalid_request_error","param":"messages","code":"empty_array"}}},"error":null}`+"\n", i, r.CustomID, i)
		case id == "file-err1" && late:
			fmt.Fprintf(bw, `{"id":"batch_req_%d","custom_id":%q,"response":null,"error":{"code":"batch_expired","message":"This request could not be executed before the completion window expired."}}`+"\n", i, r.CustomID)
		}
	}
}

func (f *fakeBatchAPI) calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.requests)
}

// rowsOf yields rows of the given custom ids, each a chat request.
func rowsOf(ids ...string) func(func(providers.BatchRow) error) error {
	return func(yield func(providers.BatchRow) error) error {
		for _, id := range ids {
			body := `{"model":"client-alias","messages":[{"role":"user","content":"question ` + id + `"}],"max_tokens":50}`
			if err := yield(providers.BatchRow{CustomID: id, Body: json.RawMessage(body)}); err != nil {
				return err
			}
		}
		return nil
	}
}

func chatBatch(ids ...string) *providers.BatchRequest {
	return &providers.BatchRequest{Endpoint: "/v1/chat/completions", Model: "gpt-4o-mini", CompletionWindow: "24h",
		Metadata: map[string]string{"gateway_batch_id": "batch_gw1"}, Rows: rowsOf(ids...)}
}

// TestBatchLifecycle: a batch is uploaded as OpenAI's batch input file (purpose batch, one
// line a row with the upstream model in each body), created over it, polled through its
// statuses, and its output and error files are read into one result a row, with usage.
func TestBatchLifecycle(t *testing.T) {
	f, p := newFakeBatchAPI(t)
	ctx := context.Background()
	st, err := p.StartBatch(ctx, chatBatch("r1", "r2", "bad-1", "late-1"))
	if err != nil {
		t.Fatal(err)
	}
	if st.NativeID != "batch_1" || st.Status != providers.BatchValidating {
		t.Fatalf("started %+v", st)
	}
	if f.purpose != "batch" || f.fileName != "batch.jsonl" || f.fileType != "application/jsonl" || len(f.rows) != 4 {
		t.Fatalf("upload purpose %q file %q type %q rows %d", f.purpose, f.fileName, f.fileType, len(f.rows))
	}
	for i, r := range f.rows {
		var body struct {
			Model     string `json:"model"`
			Messages  []any  `json:"messages"`
			MaxTokens int    `json:"max_tokens"`
		}
		if err := json.Unmarshal(r.Body, &body); err != nil {
			t.Fatal(err)
		}
		if r.Method != "POST" || r.URL != "/v1/chat/completions" || r.CustomID != []string{"r1", "r2", "bad-1", "late-1"}[i] ||
			body.Model != "gpt-4o-mini" || len(body.Messages) != 1 || body.MaxTokens != 50 {
			t.Errorf("row %d: %+v %s", i, r, r.Body)
		}
	}
	want := map[string]any{"input_file_id": "file-in1", "endpoint": "/v1/chat/completions", "completion_window": "24h", "metadata": map[string]any{"gateway_batch_id": "batch_gw1"}}
	if fmt.Sprint(f.created) != fmt.Sprint(want) {
		t.Fatalf("batch created with %v, want %v", f.created, want)
	}

	var statuses []string
	state := st.State
	for range 3 {
		s, err := p.PollBatch(ctx, st.NativeID, state)
		if err != nil {
			t.Fatal(err)
		}
		statuses, state = append(statuses, s.Status), s.State
		if s.Status == providers.BatchCompleted && (s.Total != 4 || s.Completed != 2 || s.Failed != 2) {
			t.Fatalf("completed counts %+v", s)
		}
	}
	if !slices.Equal(statuses, []string{"in_progress", "finalizing", "completed"}) {
		t.Fatalf("statuses %v", statuses)
	}
	if strings.Contains(string(state), "sk-test") || !strings.Contains(string(state), "file-out1") || !strings.Contains(string(state), "file-err1") {
		t.Fatalf("state %s", state)
	}

	results := map[string]providers.BatchResult{}
	err = p.BatchResults(ctx, st.NativeID, state, func(r providers.BatchResult) error {
		if _, dup := results[r.CustomID]; dup {
			t.Errorf("%s twice", r.CustomID)
		}
		results[r.CustomID] = r
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 4 {
		t.Fatalf("%d results: %+v", len(results), results)
	}
	r1 := results["r1"]
	var cc struct {
		Object  string `json:"object"`
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(r1.Body, &cc); err != nil || cc.Object != "chat.completion" || cc.Choices[0].Message.Content != "answer 0" {
		t.Fatalf("r1 body %s: %v", r1.Body, err)
	}
	// 20 prompt tokens of which 4 cached, 7 completion tokens of which 2 reasoning.
	if r1.StatusCode != 200 || r1.RequestID != "req_0" || !r1.UsageKnown || r1.Usage != (providers.Usage{Input: 16, CacheRead: 4, Output: 5, Reasoning: 2}) {
		t.Fatalf("r1 %+v", r1)
	}
	if r2 := results["r2"]; r2.Usage.Input != 17 || !r2.UsageKnown {
		t.Fatalf("r2 usage %+v", r2.Usage)
	}
	bad := results["bad-1"]
	if bad.StatusCode != 400 || bad.UsageKnown || bad.ErrorCode != "empty_array" || !strings.Contains(bad.ErrorMessage, "empty array") || !strings.Contains(string(bad.Body), `"param":"messages"`) {
		t.Fatalf("bad-1 %+v", bad)
	}
	late := results["late-1"]
	if late.StatusCode != 0 || late.ErrorCode != "batch_expired" || !strings.Contains(late.ErrorMessage, "completion window") {
		t.Fatalf("late-1 %+v", late)
	}
	if len(f.deleted) != 0 {
		t.Fatalf("deleted %v", f.deleted)
	}
}

// TestBatchCancel: a cancel answers cancelling, the batch then polls cancelled, and the
// rows answered before are read from its output file, without an error file.
func TestBatchCancel(t *testing.T) {
	f, p := newFakeBatchAPI(t)
	ctx := context.Background()
	st, err := p.StartBatch(ctx, chatBatch("a", "b", "c"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := p.CancelBatch(ctx, st.NativeID, st.State)
	if err != nil || c.Status != providers.BatchCancelling {
		t.Fatalf("cancel %+v %v", c, err)
	}
	s, err := p.PollBatch(ctx, st.NativeID, c.State)
	if err != nil || s.Status != providers.BatchCancelled {
		t.Fatalf("poll %+v %v", s, err)
	}
	var got []string
	if err := p.BatchResults(ctx, st.NativeID, s.State, func(r providers.BatchResult) error {
		got = append(got, r.CustomID)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []string{"a"}) {
		t.Fatalf("results %v", got)
	}
	if calls := f.calls(); !slices.Contains(calls, "POST /v1/batches/batch_1/cancel") || slices.Contains(calls, "GET /v1/files/file-err1/content") {
		t.Fatalf("calls %v", calls)
	}
}

// TestBatchResultsWithoutState: results asked with no state (a batch recorded before its
// files were known) poll the batch for its files first.
func TestBatchResultsWithoutState(t *testing.T) {
	f, p := newFakeBatchAPI(t)
	ctx := context.Background()
	st, err := p.StartBatch(ctx, chatBatch("x"))
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.polls["batch_1"] = 5
	f.mu.Unlock()
	n := 0
	if err := p.BatchResults(ctx, st.NativeID, nil, func(providers.BatchResult) error { n++; return nil }); err != nil || n != 1 {
		t.Fatalf("%d results, %v", n, err)
	}
	// An error of fn stops the reading and is returned.
	stop := errors.New("stop")
	if err := p.BatchResults(ctx, st.NativeID, nil, func(providers.BatchResult) error { return stop }); !errors.Is(err, stop) {
		t.Fatalf("fn's error: %v", err)
	}
}

// TestBatchUpstreamErrors: the upstream's refusals keep their categories; a refused batch
// create deletes the input file it was to read, and an unknown batch is not found.
func TestBatchUpstreamErrors(t *testing.T) {
	ctx := context.Background()
	t.Run("bad key", func(t *testing.T) {
		f, p := newFakeBatchAPI(t, func(c *Config) { c.APIKey = "sk-wrong" })
		_, err := p.StartBatch(ctx, chatBatch("a"))
		ue, ok := providers.AsUpstreamError(err)
		if !ok || ue.Category != providers.CategoryCredentialsInvalid || strings.Contains(err.Error(), "sk-wrong") {
			t.Fatalf("error %v", err)
		}
		if calls := f.calls(); !slices.Equal(calls, []string{"POST /v1/files"}) {
			t.Fatalf("calls %v", calls)
		}
	})
	t.Run("upload rate limited", func(t *testing.T) {
		f, p := newFakeBatchAPI(t)
		f.uploadStatus = 429
		_, err := p.StartBatch(ctx, chatBatch("a"))
		if ue, ok := providers.AsUpstreamError(err); !ok || ue.Category != providers.CategoryRateLimited || !ue.Retryable {
			t.Fatalf("error %v", err)
		}
	})
	t.Run("create refused", func(t *testing.T) {
		f, p := newFakeBatchAPI(t)
		f.createStatus = 400
		_, err := p.StartBatch(ctx, chatBatch("a"))
		if ue, ok := providers.AsUpstreamError(err); !ok || ue.Category != providers.CategoryInvalidRequest || ue.Code != "token_limit_exceeded" {
			t.Fatalf("error %v", err)
		}
		if !slices.Equal(f.deleted, []string{"file-in1"}) {
			t.Fatalf("deleted %v", f.deleted)
		}
	})
	t.Run("create failed upstream", func(t *testing.T) {
		f, p := newFakeBatchAPI(t)
		f.createStatus = 500
		if _, err := p.StartBatch(ctx, chatBatch("a")); err == nil {
			t.Fatal("no error")
		}
		// The batch may exist after a 5xx: its file stays.
		if len(f.deleted) != 0 {
			t.Fatalf("deleted %v", f.deleted)
		}
	})
	t.Run("unknown batch", func(t *testing.T) {
		_, p := newFakeBatchAPI(t)
		_, err := p.PollBatch(ctx, "batch_nope", nil)
		if ue, ok := providers.AsUpstreamError(err); !ok || ue.Category != providers.CategoryNotFound {
			t.Fatalf("error %v", err)
		}
	})
}

// TestBatchRefusals: what the Batch API cannot run is refused as Unsupported, before a
// batch is created: an endpoint it has not, a row that is not a JSON object, more rows than
// it takes; a failure of Rows is returned as it is.
func TestBatchRefusals(t *testing.T) {
	ctx := context.Background()
	f, p := newFakeBatchAPI(t)
	_, err := p.StartBatch(ctx, &providers.BatchRequest{Endpoint: "/v1/messages", Model: "m", Rows: rowsOf("a")})
	if ue, ok := providers.AsUpstreamError(err); !ok || !ue.Unsupported || !errors.Is(err, ErrUnsupportedBatch) || len(f.calls()) != 0 {
		t.Fatalf("messages batch: %v, calls %v", err, f.calls())
	}

	_, err = p.StartBatch(ctx, &providers.BatchRequest{Endpoint: "/v1/embeddings", Model: "m", Rows: func(yield func(providers.BatchRow) error) error {
		if err := yield(providers.BatchRow{CustomID: "ok", Body: json.RawMessage(`{"input":"a"}`)}); err != nil {
			return err
		}
		return yield(providers.BatchRow{CustomID: "list", Body: json.RawMessage(`["input"]`)})
	}})
	if ue, ok := providers.AsUpstreamError(err); !ok || !ue.Unsupported || !strings.Contains(ue.Message, `row "list"`) {
		t.Fatalf("bad row: %v", err)
	}

	broken := errors.New("input file unreadable")
	_, err = p.StartBatch(ctx, &providers.BatchRequest{Endpoint: "/v1/embeddings", Model: "m", Rows: func(yield func(providers.BatchRow) error) error {
		_ = yield(providers.BatchRow{CustomID: "ok", Body: json.RawMessage(`{"input":"a"}`)})
		return broken
	}})
	if !errors.Is(err, broken) {
		t.Fatalf("rows error: %v", err)
	}

	f.keepRows = false
	_, err = p.StartBatch(ctx, &providers.BatchRequest{Endpoint: "/v1/embeddings", Model: "m", Rows: func(yield func(providers.BatchRow) error) error {
		body := json.RawMessage(`{"input":"a"}`)
		for i := range MaxBatchRows + 1 {
			if err := yield(providers.BatchRow{CustomID: fmt.Sprint(i), Body: body}); err != nil {
				return err
			}
		}
		return nil
	}})
	if ue, ok := providers.AsUpstreamError(err); !ok || !ue.Unsupported || ue.Code != "batch_too_large" || !strings.Contains(ue.Message, "50,000 rows") {
		t.Fatalf("too many rows: %v", err)
	}
	if slices.Contains(f.calls(), "POST /v1/batches") {
		t.Fatalf("a batch was created: %v", f.calls())
	}
}

// TestSupportsBatch: only an upstream configured for the Batch API runs batches, of chat
// completions, responses and embeddings; api.openai.com is, compatible servers are not.
func TestSupportsBatch(t *testing.T) {
	on, off := true, false
	for _, tc := range []struct {
		name    string
		baseURL string
		batch   *bool
		want    bool
	}{
		{name: "openai", want: true},
		{name: "openai off", batch: &off},
		{name: "compatible", baseURL: "http://localhost:11434/v1"},
		{name: "compatible on", baseURL: "http://localhost:11434/v1", batch: &on, want: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := upstreamtest.NewProvider(t, New, Config{BaseURL: tc.baseURL, BatchAPI: tc.batch})
			for _, e := range []string{"/v1/chat/completions", "/v1/responses", "/v1/embeddings"} {
				if p.SupportsBatch(e) != tc.want {
					t.Errorf("%s: %v", e, !tc.want)
				}
			}
			if p.SupportsBatch("/v1/messages") || p.SupportsBatch("/v1/completions") {
				t.Error("runs batches of an endpoint it has not")
			}
		})
	}
}

// TestBatchAnswerUsage: a batch answer's usage is read in its endpoint's shape.
func TestBatchAnswerUsage(t *testing.T) {
	for _, tc := range []struct {
		name  string
		body  string
		want  providers.Usage
		known bool
	}{
		{name: "chat", body: `{"object":"chat.completion","usage":{"prompt_tokens":10,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":3}}}`, want: providers.Usage{Input: 7, CacheRead: 3, Output: 5}, known: true},
		{name: "responses", body: `{"object":"response","usage":{"input_tokens":12,"output_tokens":9,"input_tokens_details":{"cached_tokens":2},"output_tokens_details":{"reasoning_tokens":4}}}`, want: providers.Usage{Input: 10, CacheRead: 2, Output: 5, Reasoning: 4}, known: true},
		{name: "embeddings", body: `{"object":"list","data":[],"usage":{"prompt_tokens":8,"total_tokens":8}}`, want: providers.Usage{Input: 8}, known: true},
		{name: "none", body: `{"object":"chat.completion"}`},
		{name: "null", body: `{"usage":null}`},
		{name: "unreadable", body: `{"usage":{"prompt_tokens":"many"}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, known := answerUsage([]byte(tc.body))
			if known != tc.known || known && u != tc.want {
				t.Fatalf("usage %+v known %v, want %+v %v", u, known, tc.want, tc.known)
			}
		})
	}
}

// TestBatchUploadStreams: a batch of 20,000 rows of 1 KiB reaches the upstream while Rows is
// still yielding: past its 15,000th row, Rows waits until the upstream has read the
// 5,000th, which an adapter that held the rows before sending them would never let happen.
func TestBatchUploadStreams(t *testing.T) {
	f, p := newFakeBatchAPI(t)
	f.keepRows = false
	pad := strings.Repeat("x", 1000)
	const rows = 20_000
	streamed, seen := upstreamtest.StreamedRows(rows, 5_000, 15_000, func(int) string { return `{"messages":[{"role":"user","content":"` + pad + `"}]}` })
	f.onLine = seen
	_, err := p.StartBatch(context.Background(), &providers.BatchRequest{Endpoint: "/v1/chat/completions", Model: "gpt-4o-mini", Rows: streamed})
	if err != nil {
		t.Fatal(err)
	}
	if f.received != rows {
		t.Fatalf("the upstream received %d rows", f.received)
	}
}

// TestBatchStatuses: OpenAI's statuses are kept, the cancel spellings of compatible servers
// read, an unknown status is in_progress, and a failed batch says why with the line at
// fault.
func TestBatchStatuses(t *testing.T) {
	for _, tc := range []struct {
		name, status, errors string
		want, code, message  string
	}{
		{name: "validating", status: "validating", want: providers.BatchValidating},
		{name: "finalizing", status: "finalizing", want: providers.BatchFinalizing},
		{name: "expired", status: "expired", want: providers.BatchExpired},
		{name: "canceling", status: "canceling", want: providers.BatchCancelling},
		{name: "canceled", status: "canceled", want: providers.BatchCancelled},
		{name: "unknown", status: "queued_for_gpu", want: providers.BatchInProgress},
		{name: "failed", status: "failed", errors: `{"object":"list","data":[{"code":"invalid_json_line","message":"This line is not parseable as valid JSON.","param":null,"line":2}]}`,
			want: providers.BatchFailed, code: "invalid_json_line", message: "line 2: This line is not parseable as valid JSON."},
		{name: "failed without errors", status: "failed", errors: "null", want: providers.BatchFailed, code: "batch_failed", message: "the upstream reports the batch failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, tr := upstreamtest.NewServer(t, func(w http.ResponseWriter, r *http.Request) {
				errs := tc.errors
				if errs == "" {
					errs = "null"
				}
				writeOpenAIJSON(w, 200, `{"id":"batch_9","object":"batch","status":"`+tc.status+`","errors":`+errs+`,"request_counts":{"total":3,"completed":1,"failed":1}}`)
			})
			p := upstreamtest.NewProvider(t, New, Config{BaseURL: srv.URL + "/v1", Transport: tr})
			s, err := p.PollBatch(context.Background(), "batch_9", nil)
			if err != nil || s.Status != tc.want || s.Total != 3 || s.Completed != 1 || s.Failed != 1 || s.ErrorCode != tc.code || s.ErrorMessage != tc.message {
				t.Fatalf("status %+v %v", s, err)
			}
		})
	}
}

// TestBatchResultLines: the lines of output and error files become their rows' results; a
// line that says nothing of its row fails that row alone, one that names no row fails the
// reading.
func TestBatchResultLines(t *testing.T) {
	p := upstreamtest.NewProvider(t, New, Config{})
	for _, tc := range []struct {
		name, line string
		status     int
		code       string
		fatal      bool
	}{
		{name: "answer", line: `{"custom_id":"x","response":{"status_code":200,"request_id":"r","body":{"usage":{"prompt_tokens":1}}},"error":null}`, status: 200},
		{name: "refused", line: `{"custom_id":"x","response":{"status_code":429,"body":{"error":{"message":"slow","type":"requests","code":"rate_limit_exceeded"}}}}`, status: 429, code: "rate_limit_exceeded"},
		{name: "expired", line: `{"custom_id":"x","response":null,"error":{"code":"batch_expired","message":"late"}}`, code: "batch_expired"},
		{name: "neither", line: `{"custom_id":"x","response":null,"error":null}`, status: 502, code: "upstream_answer_unreadable"},
		{name: "no custom_id", line: `{"response":{"status_code":200,"body":{}}}`, fatal: true},
		{name: "not JSON", line: `<html>`, fatal: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := p.batchResult([]byte(tc.line))
			if tc.fatal != (err != nil) || !tc.fatal && (r.CustomID != "x" || r.StatusCode != tc.status || r.ErrorCode != tc.code) {
				t.Fatalf("result %+v, %v", r, err)
			}
		})
	}
}
