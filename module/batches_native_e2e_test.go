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
	// hold keeps the batch in progress until it is cancelled; cancelled, it ends with its
	// first row answered and the others cancelled.
	hold, cancelled bool
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

// pollEnds counts a poll and tells whether the batch has ended: at its second poll, or
// after its cancel when it is held.
func (u *nativeBatchUpstream) pollEnds() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.polls++
	if u.hold {
		return u.cancelled
	}
	return u.polls > 1
}

// cancel records the batch's cancel.
func (u *nativeBatchUpstream) cancel() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.cancelled = true
}

// answered are the rows the batch answered: all, or the first after a cancel.
func (u *nativeBatchUpstream) answered() []nativeRow {
	rows, _ := u.received()
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.cancelled {
		return rows[:min(len(rows), 1)]
	}
	return rows
}

func (u *nativeBatchUpstream) received() ([]nativeRow, []string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.rows), slices.Clone(u.calls)
}

// newOpenAIBatchUpstream speaks OpenAI's Files and Batch APIs: the batch is in progress at
// its first poll and completed after, with an output file answering every row.
func newOpenAIBatchUpstream(t *testing.T, hold bool) *nativeBatchUpstream {
	u := &nativeBatchUpstream{hold: hold}
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
				if u.cancelled {
					done = min(done, 1)
				}
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
			switch {
			case !u.pollEnds():
				_, _ = io.WriteString(w, batchObject("in_progress", "null"))
			case u.hold:
				_, _ = io.WriteString(w, batchObject("cancelled", `"file-up-out"`))
			default:
				_, _ = io.WriteString(w, batchObject("completed", `"file-up-out"`))
			}
		case r.Method == http.MethodPost && r.URL.Path == "/v1/batches/batch_up1/cancel":
			u.cancel()
			_, _ = io.WriteString(w, batchObject("cancelling", "null"))
		case r.Method == http.MethodGet && r.URL.Path == "/v1/files/file-up-out/content":
			for i, row := range u.answered() {
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
func newAnthropicBatchUpstream(t *testing.T, hold bool) *nativeBatchUpstream {
	u := &nativeBatchUpstream{hold: hold}
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
			processing, succeeded, canceled, cancelAt := len(u.rows), 0, 0, "null"
			if u.cancelled {
				cancelAt = `"2026-11-29T10:00:00Z"`
			}
			switch {
			case status == "ended" && u.cancelled:
				processing, succeeded, canceled = 0, min(len(u.rows), 1), max(len(u.rows)-1, 0)
			case status == "ended":
				processing, succeeded = 0, len(u.rows)
			}
			return fmt.Sprintf(`{"id":"msgbatch_up1","type":"message_batch","processing_status":%q,"request_counts":{"processing":%d,"succeeded":%d,"errored":0,"canceled":%d,"expired":0},`+
				`"created_at":"2026-11-29T09:00:00Z","expires_at":"2026-11-30T09:00:00Z","cancel_initiated_at":%s,"results_url":null}`, status, processing, succeeded, canceled, cancelAt)
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
			if !u.pollEnds() {
				_, _ = io.WriteString(w, object("in_progress"))
				return
			}
			_, _ = io.WriteString(w, object("ended"))
		case r.Method == http.MethodPost && r.URL.Path == "/v1/messages/batches/msgbatch_up1/cancel":
			u.cancel()
			_, _ = io.WriteString(w, object("canceling"))
		case r.Method == http.MethodGet && r.URL.Path == "/v1/messages/batches/msgbatch_up1/results":
			rows, _ := u.received()
			answered := len(u.answered())
			for i, row := range rows {
				if i >= answered {
					fmt.Fprintf(w, `{"custom_id":%q,"result":{"type":"canceled"}}`+"\n", row.CustomID)
					continue
				}
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
// nativeBatchGateway starts a gateway whose model gpt-batch is routed to oai, an upstream
// with OpenAI's Batch API, and claude-batch to anth, one with Anthropic's Message Batches,
// both at $2 and $8 per million input and output tokens.
func nativeBatchGateway(t *testing.T, oai, anth *nativeBatchUpstream) *gatewayEnv {
	t.Helper()
	// The OpenAI-wire fake is not api.openai.com: batch_api on says it has the Batch API.
	return startGateway(t, `
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
}

// nativeBatchIDs are the custom_ids of the native batches' rows.
var nativeBatchIDs = []string{"row-a", "row-b", "row-c"}

// nativeBatchRows is a chat batch file of nativeBatchIDs for model.
func nativeBatchRows(model string) []byte {
	var input bytes.Buffer
	for _, id := range nativeBatchIDs {
		fmt.Fprintf(&input, `{"custom_id":%q,"method":"POST","url":"/v1/chat/completions","body":{"model":%q,"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"question %s"}],"max_tokens":600}}`+"\n", id, model, id)
	}
	return input.Bytes()
}

// wantSpent waits until the workspace spent spent of its 10 USD and holds nothing reserved.
func wantSpent(t *testing.T, env *gatewayEnv, ws string, spent int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		bal := env.balance(ws)
		if bal.BalanceNanos == 10*usd-spent && bal.ReservedNanos == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("balance %+v, want %d spent and nothing reserved", bal, spent)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestNativeBatchesEndToEnd drives a batch with openai-go through in-process Caddy on a route
// whose upstream runs batches itself, OpenAI's Batch API and Anthropic's Message Batches:
// Files.New, Batches.New, polling to completed, and the output file. The upstream receives
// every row once with the route's upstream model (translated into Messages params for
// Anthropic), the output file has one line a row with the upstream's answer as a chat
// completion and its custom_id, and each row is charged at the route's batch price, half
// its interactive price by default.
func TestNativeBatchesEndToEnd(t *testing.T) {
	oai, anth := newOpenAIBatchUpstream(t, false), newAnthropicBatchUpstream(t, false)
	env := nativeBatchGateway(t, oai, anth)
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
			b := newBatch(t, client, uploadBatchFile(t, client, nativeBatchRows(tc.model)))
			b = waitBatch(t, client, b.ID, string(openai.BatchStatusCompleted))
			if b.RequestCounts.Total != 3 || b.RequestCounts.Completed != 3 || b.RequestCounts.Failed != 0 || b.OutputFileID == "" {
				t.Fatalf("completed batch %s", b.RawJSON())
			}
			// The reservation is the rows' worst cases at the interactive price, each row's
			// body bytes as its prompt tokens at $2/M and its 600 max_tokens at $8/M: a
			// batch the upstream does not take after all is run by the gateway at that price.
			var estimate int64
			for _, line := range bytes.Split(bytes.TrimSpace(nativeBatchRows(tc.model)), []byte("\n")) {
				var l struct{ Body json.RawMessage }
				if err := json.Unmarshal(line, &l); err != nil {
					t.Fatal(err)
				}
				estimate += int64(len(l.Body))*2_000 + 600*8_000
			}
			if billing, _ := batchRaw(t, b)["billing"].(map[string]any); billing["estimated_nanos"] != float64(estimate) {
				t.Fatalf("estimated %v, want %d: %s", billing["estimated_nanos"], estimate, b.RawJSON())
			}

			rows, calls := tc.upstream.received()
			if len(rows) != 3 {
				t.Fatalf("the upstream received %d rows: %+v", len(rows), rows)
			}
			for i, row := range rows {
				if row.CustomID != nativeBatchIDs[i] || row.Body["model"] != tc.upstreamModel {
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

			lines := outputLines(t, client, b.OutputFileID)
			seen := map[string]bool{}
			for _, l := range lines {
				var cc openai.ChatCompletion
				if answerOf(t, l) != "answer "+l.CustomID || l.Response.StatusCode != 200 || json.Unmarshal(l.Response.Body, &cc) != nil ||
					cc.Usage.PromptTokens != 1000 || cc.Usage.CompletionTokens != 500 {
					t.Fatalf("output line %+v %s", l, l.Response.Body)
				}
				seen[l.CustomID] = true
			}
			if len(lines) != 3 || len(seen) != 3 {
				t.Fatalf("output file %+v", lines)
			}

			// 1,000 input tokens at $2/M and 500 output tokens at $8/M are $0.006 a row
			// interactively; the batch price is half: $0.003 a row, $0.009 in all.
			for i := range nativeBatchIDs {
				g := env.generation(ws, batch.RowGenerationID(b.ID, i))
				if g.CostNanos != 3_000_000 || g.InputTokens != 1000 || g.OutputTokens != 500 {
					t.Errorf("row %d charged %d nanodollars for %d+%d tokens, want 3000000", i, g.CostNanos, g.InputTokens, g.OutputTokens)
				}
			}
			wantSpent(t, env, ws, 9_000_000)
		})
	}
}

// TestNativeBatchCancelEndToEnd: Batches.Cancel on a batch its upstream runs passes the
// cancel on (OpenAI's cancel, Anthropic's); the batch ends cancelled with the row the
// upstream answered in its output file and the others in its error file as
// batch_cancelled, only that row is charged (at the batch price), and the rest of the
// reservation is released.
func TestNativeBatchCancelEndToEnd(t *testing.T) {
	oai, anth := newOpenAIBatchUpstream(t, true), newAnthropicBatchUpstream(t, true)
	env := nativeBatchGateway(t, oai, anth)
	for _, tc := range []struct {
		name, model, cancel string
		upstream            *nativeBatchUpstream
	}{
		{name: "openai", model: "gpt-batch", cancel: "POST /v1/batches/batch_up1/cancel", upstream: oai},
		{name: "anthropic", model: "claude-batch", cancel: "POST /v1/messages/batches/msgbatch_up1/cancel", upstream: anth},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws, key := env.workspace(10 * usd)
			client := env.openai(key)
			b := newBatch(t, client, uploadBatchFile(t, client, nativeBatchRows(tc.model)))
			b = waitBatch(t, client, b.ID, string(openai.BatchStatusInProgress))
			c, err := client.Batches.Cancel(context.Background(), b.ID)
			if err != nil {
				t.Fatalf("Batches.Cancel: %v", err)
			}
			if c.Status != openai.BatchStatusCancelling && c.Status != openai.BatchStatusCancelled {
				t.Fatalf("cancel answered %s", c.RawJSON())
			}
			b = waitBatch(t, client, c.ID, string(openai.BatchStatusCancelled))
			if _, calls := tc.upstream.received(); !slices.Contains(calls, tc.cancel) {
				t.Fatalf("the upstream got no %s: %v", tc.cancel, calls)
			}
			out := outputLines(t, client, b.OutputFileID)
			if len(out) != 1 || out[0].CustomID != "row-a" || answerOf(t, out[0]) != "answer row-a" {
				t.Fatalf("output file %+v", out)
			}
			// The rows the upstream did not run are in the error file as batch_cancelled:
			// Anthropic reports them canceled, OpenAI's files leave them out and the gateway
			// accounts for them.
			if b.ErrorFileID == "" || b.RequestCounts.Failed != 2 {
				t.Fatalf("cancelled batch: %s", b.RawJSON())
			}
			errs := outputLines(t, client, b.ErrorFileID)
			for _, l := range errs {
				if l.CustomID == "row-a" || l.Error == nil || l.Error.Code != "batch_cancelled" {
					t.Fatalf("error line %+v", l)
				}
			}
			if len(errs) != 2 {
				t.Fatalf("error file %+v", errs)
			}
			if g := env.generation(ws, batch.RowGenerationID(b.ID, 0)); g.CostNanos != 3_000_000 {
				t.Fatalf("row-a charged %d", g.CostNanos)
			}
			wantSpent(t, env, ws, 3_000_000)
		})
	}
}

// TestNativeBatchRefusedEndToEnd: a batch its upstream cannot take (a custom_id outside
// what Message Batches accept) is refused by the adapter before anything is created there
// (the request's body broken off before its end), and the gateway runs the batch itself,
// each row through the route's chat endpoint at the interactive price.
func TestNativeBatchRefusedEndToEnd(t *testing.T) {
	oai, anth := newOpenAIBatchUpstream(t, false), newAnthropicBatchUpstream(t, false)
	env := nativeBatchGateway(t, oai, anth)
	ws, key := env.workspace(10 * usd)
	client := env.openai(key)
	rows := `{"custom_id":"row one","method":"POST","url":"/v1/chat/completions","body":{"model":"claude-batch","messages":[{"role":"user","content":"hi"}],"max_tokens":10}}` + "\n"
	b := newBatch(t, client, uploadBatchFile(t, client, []byte(rows)))
	b = waitBatch(t, client, b.ID, string(openai.BatchStatusCompleted), string(openai.BatchStatusFailed))
	sent, calls := anth.received()
	if len(sent) != 0 || slices.Contains(calls, "GET /v1/messages/batches/msgbatch_up1") {
		t.Fatalf("the upstream has a batch of %+v: %v", sent, calls)
	}
	// The fake has no /v1/messages: the row the gateway ran failed there, and nothing is
	// charged for it.
	if !slices.Contains(calls, "POST /v1/messages") || b.RequestCounts.Total != 1 || b.RequestCounts.Completed != 0 {
		t.Fatalf("the gateway did not run the row itself: %v %s", calls, b.RawJSON())
	}
	wantSpent(t, env, ws, 0)
}

// TestNativeMessagesBatchEndToEnd: a batch of Messages rows on an Anthropic route is sent
// to Message Batches as it is (the upstream model set, stream left out), and its output
// file has the upstream's messages under their custom_ids, each charged at the batch price.
func TestNativeMessagesBatchEndToEnd(t *testing.T) {
	oai, anth := newOpenAIBatchUpstream(t, false), newAnthropicBatchUpstream(t, false)
	env := nativeBatchGateway(t, oai, anth)
	ws, key := env.workspace(10 * usd)
	client := env.openai(key)
	var rows bytes.Buffer
	for _, id := range nativeBatchIDs {
		fmt.Fprintf(&rows, `{"custom_id":%q,"method":"POST","url":"/v1/messages","body":{"model":"claude-batch","max_tokens":600,"system":"Be brief.","messages":[{"role":"user","content":"question %s"}]}}`+"\n", id, id)
	}
	b, err := client.Batches.New(context.Background(), openai.BatchNewParams{InputFileID: uploadBatchFile(t, client, rows.Bytes()),
		Endpoint: openai.BatchNewParamsEndpoint("/v1/messages"), CompletionWindow: openai.BatchNewParamsCompletionWindow24h})
	if err != nil {
		t.Fatalf("Batches.New: %v", err)
	}
	b = waitBatch(t, client, b.ID, string(openai.BatchStatusCompleted))
	sent, _ := anth.received()
	if len(sent) != 3 || sent[0].Body["model"] != "claude-sonnet-4-5" || sent[0].Body["system"] != "Be brief." || sent[0].Body["max_tokens"] != 600.0 {
		t.Fatalf("the upstream received %+v", sent)
	}
	lines := outputLines(t, client, b.OutputFileID)
	if len(lines) != 3 {
		t.Fatalf("output file %+v", lines)
	}
	for i, l := range lines {
		var msg struct {
			Type    string `json:"type"`
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
		}
		if l.Response == nil || json.Unmarshal(l.Response.Body, &msg) != nil || msg.Type != "message" || len(msg.Content) != 1 || msg.Content[0].Text != "answer "+l.CustomID {
			t.Fatalf("output line %d: %+v", i, l)
		}
	}
	for i := range nativeBatchIDs {
		if g := env.generation(ws, batch.RowGenerationID(b.ID, i)); g.CostNanos != 3_000_000 {
			t.Errorf("row %d charged %d, want 3000000", i, g.CostNanos)
		}
	}
	wantSpent(t, env, ws, 9_000_000)
}
