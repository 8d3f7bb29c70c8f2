//go:build unix

package module

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/modelgateway/caddy-modelgateway/jobs/batch"
)

// nativeBatchUpstream is an upstream with a batch API of its own, OpenAI's (Files and
// Batch APIs) or Anthropic's (Message Batches): it records the rows it was given and answers
// each with "answer <custom_id>" and a usage of 1,000 prompt and 500 completion tokens.
type nativeBatchUpstream struct {
	*httptest.Server
	mu sync.Mutex
	// rows are the rows received: custom_id and the body (OpenAI) or params (Anthropic).
	rows  []nativeRow
	calls []string
	polls int
}

type nativeRow struct {
	CustomID string
	Body     map[string]any
}

func (u *nativeBatchUpstream) record(r *http.Request) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.calls = append(u.calls, r.Method+" "+r.URL.Path)
}

// firstPoll counts a poll and tells whether it is the batch's first.
func (u *nativeBatchUpstream) firstPoll() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.polls++
	return u.polls == 1
}

func (u *nativeBatchUpstream) received() ([]nativeRow, []string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.rows), slices.Clone(u.calls)
}

// newOpenAIBatchUpstream speaks OpenAI's Files and Batch APIs: the batch is in progress at
// its first poll and completed after, with an output file answering every row.
func newOpenAIBatchUpstream(t *testing.T) *nativeBatchUpstream {
	u := &nativeBatchUpstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.record(r)
		if r.Header.Get("Authorization") != "Bearer sk-upstream-secret-oai" {
			http.Error(w, `{"error":{"message":"bad key","type":"invalid_request_error","code":"invalid_api_key"}}`, http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		batchObject := func(status, out string) string {
			u.mu.Lock()
			defer u.mu.Unlock()
			done := 0
			if out != "null" {
				done = len(u.rows)
			}
			return fmt.Sprintf(`{"id":"batch_up1","object":"batch","endpoint":"/v1/chat/completions","input_file_id":"file-up-in","completion_window":"24h","status":%q,`+
				`"output_file_id":%s,"error_file_id":null,"created_at":1700000000,"request_counts":{"total":%d,"completed":%d,"failed":0}}`, status, out, len(u.rows), done)
		}
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/v1/files":
			mr, err := r.MultipartReader()
			if err != nil {
				http.Error(w, `{"error":{"message":"not multipart"}}`, http.StatusBadRequest)
				return
			}
			for {
				part, err := mr.NextPart()
				if err != nil {
					break
				}
				if part.FormName() != "file" {
					continue
				}
				sc := bufio.NewScanner(part)
				for sc.Scan() {
					var l struct {
						CustomID string         `json:"custom_id"`
						Body     map[string]any `json:"body"`
					}
					_ = json.Unmarshal(sc.Bytes(), &l)
					u.mu.Lock()
					u.rows = append(u.rows, nativeRow{l.CustomID, l.Body})
					u.mu.Unlock()
				}
			}
			_, _ = io.WriteString(w, `{"id":"file-up-in","object":"file","bytes":1,"created_at":1700000000,"filename":"batch.jsonl","purpose":"batch"}`)
		case r.Method == http.MethodPost && r.URL.Path == "/v1/batches":
			_, _ = io.WriteString(w, batchObject("validating", "null"))
		case r.Method == http.MethodGet && r.URL.Path == "/v1/batches/batch_up1":
			if u.firstPoll() {
				_, _ = io.WriteString(w, batchObject("in_progress", "null"))
				return
			}
			_, _ = io.WriteString(w, batchObject("completed", `"file-up-out"`))
		case r.Method == http.MethodGet && r.URL.Path == "/v1/files/file-up-out/content":
			rows, _ := u.received()
			for i, row := range rows {
				fmt.Fprintf(w, `{"id":"batch_req_%d","custom_id":%q,"response":{"status_code":200,"request_id":"req_%d","body":{"id":"chatcmpl-up%d","object":"chat.completion","created":1700000000,"model":"gpt-4o-mini",`+
					`"choices":[{"index":0,"message":{"role":"assistant","content":"answer %s"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1000,"completion_tokens":500,"total_tokens":1500}}},"error":null}`+"\n",
					i, row.CustomID, i, i, row.CustomID)
			}
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(u.Close)
	return u
}

// newAnthropicBatchUpstream speaks Anthropic's Message Batches: the batch is in progress at
// its first poll and ended after, every request succeeded.
func newAnthropicBatchUpstream(t *testing.T) *nativeBatchUpstream {
	u := &nativeBatchUpstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.record(r)
		if r.Header.Get("X-Api-Key") != "sk-ant-upstream-secret" || r.Header.Get("Anthropic-Version") == "" {
			http.Error(w, `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`, http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		object := func(status string) string {
			u.mu.Lock()
			defer u.mu.Unlock()
			processing, succeeded := len(u.rows), 0
			if status == "ended" {
				processing, succeeded = 0, len(u.rows)
			}
			return fmt.Sprintf(`{"id":"msgbatch_up1","type":"message_batch","processing_status":%q,"request_counts":{"processing":%d,"succeeded":%d,"errored":0,"canceled":0,"expired":0},`+
				`"created_at":"2026-11-29T09:00:00Z","expires_at":"2026-11-30T09:00:00Z","cancel_initiated_at":null,"results_url":null}`, status, processing, succeeded)
		}
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/v1/messages/batches":
			var body struct {
				Requests []struct {
					CustomID string         `json:"custom_id"`
					Params   map[string]any `json:"params"`
				} `json:"requests"`
			}
			if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
				http.Error(w, `{"type":"error","error":{"type":"invalid_request_error","message":"bad body"}}`, http.StatusBadRequest)
				return
			}
			u.mu.Lock()
			for _, req := range body.Requests {
				u.rows = append(u.rows, nativeRow{req.CustomID, req.Params})
			}
			u.mu.Unlock()
			_, _ = io.WriteString(w, object("in_progress"))
		case r.Method == http.MethodGet && r.URL.Path == "/v1/messages/batches/msgbatch_up1":
			if u.firstPoll() {
				_, _ = io.WriteString(w, object("in_progress"))
				return
			}
			_, _ = io.WriteString(w, object("ended"))
		case r.Method == http.MethodGet && r.URL.Path == "/v1/messages/batches/msgbatch_up1/results":
			rows, _ := u.received()
			for i, row := range rows {
				fmt.Fprintf(w, `{"custom_id":%q,"result":{"type":"succeeded","message":{"id":"msg_up%d","type":"message","role":"assistant","model":"claude-sonnet-4-5",`+
					`"content":[{"type":"text","text":"answer %s"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":1000,"output_tokens":500}}}}`+"\n",
					row.CustomID, i, row.CustomID)
			}
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(u.Close)
	return u
}

// TestNativeBatchesEndToEnd drives a batch with openai-go through in-process Caddy on a route
// whose upstream runs batches itself, OpenAI's Batch API and Anthropic's Message Batches:
// Files.New, Batches.New, polling to completed, and the output file. The upstream receives
// every row once with the route's upstream model (translated into Messages params for
// Anthropic), the output file has one line a row with the upstream's answer as a chat
// completion and its custom_id, and each row is charged at the route's batch price, half
// its interactive price by default.
func TestNativeBatchesEndToEnd(t *testing.T) {
	oai, anth := newOpenAIBatchUpstream(t), newAnthropicBatchUpstream(t)
	// The OpenAI-wire fake is not api.openai.com: batch_api on says it has the Batch API.
	env := startGateway(t, `
		provider oai {
			type openai
			base_url `+oai.URL+`/v1
			api_key sk-upstream-secret-oai
			batch_api on
			retries 0
		}
		provider anth {
			type anthropic
			base_url `+anth.URL+`
			api_key sk-ant-upstream-secret
			batch_api on
			retries 0
		}
		model gpt-batch {
			route oai gpt-4o-mini {
				input 2
				output 8
			}
		}
		model claude-batch {
			route anth claude-sonnet-4-5 {
				input 2
				output 8
			}
		}`, "")
	ctx := context.Background()
	for _, tc := range []struct {
		name, model, upstreamModel string
		upstream                   *nativeBatchUpstream
		create, poll, results      string
	}{
		{name: "openai", model: "gpt-batch", upstreamModel: "gpt-4o-mini", upstream: oai,
			create: "POST /v1/batches", poll: "GET /v1/batches/batch_up1", results: "GET /v1/files/file-up-out/content"},
		{name: "anthropic", model: "claude-batch", upstreamModel: "claude-sonnet-4-5", upstream: anth,
			create: "POST /v1/messages/batches", poll: "GET /v1/messages/batches/msgbatch_up1", results: "GET /v1/messages/batches/msgbatch_up1/results"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws, key := env.workspace(10 * usd)
			client := env.openai(key)
			var input bytes.Buffer
			ids := []string{"row-a", "row-b", "row-c"}
			for _, id := range ids {
				fmt.Fprintf(&input, `{"custom_id":%q,"method":"POST","url":"/v1/chat/completions","body":{"model":%q,"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"question %s"}],"max_tokens":600}}`+"\n", id, tc.model, id)
			}
			f, err := client.Files.New(ctx, openai.FileNewParams{File: openai.File(bytes.NewReader(input.Bytes()), "rows.jsonl", "application/jsonl"), Purpose: openai.FilePurposeBatch})
			if err != nil {
				t.Fatalf("Files.New: %v", err)
			}
			b, err := client.Batches.New(ctx, openai.BatchNewParams{InputFileID: f.ID, Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions,
				CompletionWindow: openai.BatchNewParamsCompletionWindow24h})
			if err != nil {
				t.Fatalf("Batches.New: %v", err)
			}
			deadline := time.Now().Add(2 * time.Minute)
			for b.Status != openai.BatchStatusCompleted {
				if b.Status == openai.BatchStatusFailed || b.Status == openai.BatchStatusExpired || b.Status == openai.BatchStatusCancelled || time.Now().After(deadline) {
					t.Fatalf("batch %s", b.RawJSON())
				}
				time.Sleep(200 * time.Millisecond)
				if b, err = client.Batches.Get(ctx, b.ID); err != nil {
					t.Fatalf("Batches.Get: %v", err)
				}
			}
			if b.RequestCounts.Total != 3 || b.RequestCounts.Completed != 3 || b.RequestCounts.Failed != 0 || b.OutputFileID == "" {
				t.Fatalf("completed batch %s", b.RawJSON())
			}

			rows, calls := tc.upstream.received()
			if len(rows) != 3 {
				t.Fatalf("the upstream received %d rows: %+v", len(rows), rows)
			}
			for i, row := range rows {
				if row.CustomID != ids[i] || row.Body["model"] != tc.upstreamModel {
					t.Errorf("row %d upstream: %+v", i, row)
				}
				// Anthropic's params are Messages: the system prompt lifted out of the messages.
				if tc.name == "anthropic" && (row.Body["system"] == nil || len(row.Body["messages"].([]any)) != 1 || row.Body["max_tokens"] != 600.0) {
					t.Errorf("row %d params %v", i, row.Body)
				}
			}
			for _, c := range []string{tc.create, tc.poll, tc.results} {
				if !slices.Contains(calls, c) {
					t.Errorf("the upstream got no %s: %v", c, calls)
				}
			}

			resp, err := client.Files.Content(ctx, b.OutputFileID)
			if err != nil {
				t.Fatalf("Files.Content: %v", err)
			}
			out, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			if len(lines) != 3 {
				t.Fatalf("output file %s", out)
			}
			seen := map[string]bool{}
			for _, line := range lines {
				var l struct {
					CustomID string `json:"custom_id"`
					Response struct {
						StatusCode int                   `json:"status_code"`
						Body       openai.ChatCompletion `json:"body"`
					} `json:"response"`
				}
				if err := json.Unmarshal([]byte(line), &l); err != nil {
					t.Fatalf("output line %s: %v", line, err)
				}
				cc := l.Response.Body
				if l.Response.StatusCode != 200 || len(cc.Choices) != 1 || cc.Choices[0].Message.Content != "answer "+l.CustomID || cc.Usage.PromptTokens != 1000 || cc.Usage.CompletionTokens != 500 {
					t.Fatalf("output line %s", line)
				}
				seen[l.CustomID] = true
			}
			if len(seen) != 3 {
				t.Fatalf("custom_ids %v", seen)
			}

			// 1,000 input tokens at $2/M and 500 output tokens at $8/M are $0.006 a row
			// interactively; the batch price is half: $0.003 a row, $0.009 in all.
			for i := range ids {
				g := env.generation(ws, batch.RowGenerationID(b.ID, i))
				if g.CostNanos != 3_000_000 || g.InputTokens != 1000 || g.OutputTokens != 500 {
					t.Errorf("row %d charged %d nanodollars for %d+%d tokens, want 3000000", i, g.CostNanos, g.InputTokens, g.OutputTokens)
				}
			}
			deadline = time.Now().Add(10 * time.Second)
			for {
				bal := env.balance(ws)
				if bal.BalanceNanos == 10*usd-9_000_000 && bal.ReservedNanos == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("balance %+v, want %d spent and nothing reserved", bal, 9_000_000)
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
}
