//go:build unix

package module

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"

	"github.com/modelgateway/caddy-modelgateway/internal/pricing"
	"github.com/modelgateway/caddy-modelgateway/jobs"
	"github.com/modelgateway/caddy-modelgateway/jobs/batch"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// batchUpstream is a chat-only OpenAI-compatible upstream (no batch API): it answers
// each request "answer: <the last user message>", with 10 prompt and 5 completion tokens,
// after delay, counting the requests it was sent by their content.
type batchUpstream struct {
	*fakeOpenAI
	delay atomic.Int64
	seen  chan string
}

func newBatchUpstream(t *testing.T) *batchUpstream {
	b := &batchUpstream{seen: make(chan string, 4096)}
	b.fakeOpenAI = newFakeOpenAI(t, func(w http.ResponseWriter, r *http.Request, req map[string]any) {
		msgs, _ := req["messages"].([]any)
		content := ""
		if len(msgs) > 0 {
			m, _ := msgs[len(msgs)-1].(map[string]any)
			content, _ = m["content"].(string)
		}
		if d := time.Duration(b.delay.Load()); d > 0 {
			select {
			case <-time.After(d):
			case <-r.Context().Done():
				return
			}
		}
		b.seen <- content
		chatOK("answer: "+content, 10, 5)(w, r, req)
	})
	return b
}

// batchGatewayBlock configures model chat on the upstream at 1 USD per million input
// tokens and 2 per million output, with max_output_tokens 1000, and the batch bounds.
func batchGatewayBlock(upURL, extra string) string {
	return providerBlock("up", upURL) + `
		model chat {
			route up chat-1 {
				input 1.00
				output 2.00
				max_output_tokens 1000
			}
		}
` + extra
}

// rowCost is what one row costs on the upstream above: 10 input and 5 output tokens.
const rowCost = 10*usd/1_000_000 + 5*2*usd/1_000_000

// batchRaw reads the gateway's batch object as JSON (the fields openai-go does not decode).
func batchRaw(t *testing.T, b *openai.Batch) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal([]byte(b.RawJSON()), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// waitBatch polls the batch until its status is one of want.
func waitBatch(t *testing.T, client openai.Client, id string, want ...string) *openai.Batch {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		b, err := client.Batches.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range want {
			if string(b.Status) == w {
				return b
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("batch %s is %s after a minute; want %v: %s", id, b.Status, want, b.RawJSON())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// outputLines reads a batch output or error file.
func outputLines(t *testing.T, client openai.Client, fileID string) []batch.OutputLine {
	t.Helper()
	resp, err := client.Files.Content(context.Background(), fileID)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out []batch.OutputLine
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var l batch.OutputLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("output line %q: %v", sc.Text(), err)
		}
		out = append(out, l)
	}
	return out
}

// answerOf is the answer text of an output line.
func answerOf(t *testing.T, l batch.OutputLine) string {
	t.Helper()
	if l.Response == nil {
		t.Fatalf("line %s has no response: %+v", l.CustomID, l.Error)
	}
	var cc openai.ChatCompletion
	if err := json.Unmarshal(l.Response.Body, &cc); err != nil || len(cc.Choices) == 0 {
		t.Fatalf("line %s: body %s: %v", l.CustomID, l.Response.Body, err)
	}
	return cc.Choices[0].Message.Content
}

// rowCharges sums the charges of a batch's rows, read from their generations.
func rowCharges(t *testing.T, s store.Store, ws, batchID string, rows int) (sum int64, charged int) {
	t.Helper()
	for i := range rows {
		g, err := s.GetGeneration(context.Background(), ws, batch.RowGenerationID(batchID, i))
		if err != nil {
			continue
		}
		sum += g.CostNanos
		charged++
	}
	return sum, charged
}

func uploadBatchFile(t *testing.T, client openai.Client, rows []byte) string {
	t.Helper()
	f, err := client.Files.New(context.Background(), openai.FileNewParams{
		File: openai.File(bytes.NewReader(rows), "rows.jsonl", "application/jsonl"), Purpose: openai.FilePurposeBatch,
	})
	if err != nil {
		t.Fatal(err)
	}
	return f.ID
}

func newBatch(t *testing.T, client openai.Client, fileID string) *openai.Batch {
	t.Helper()
	b, err := client.Batches.New(context.Background(), openai.BatchNewParams{
		InputFileID: fileID, Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions,
		CompletionWindow: openai.BatchNewParamsCompletionWindow24h, Metadata: shared.Metadata{"purpose": "test"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestBatchGatewayRunEndToEnd drives a gateway-run batch with openai-go through in-process
// Caddy, its files in each blob store backend: a JSONL file of rows on a chat-only upstream
// is estimated, reserved, run row by row and completed; its output file (the batch
// workspace's, no one else's) has one line per row in order, each the upstream's answer
// to that row under its custom_id; the estimate is what the rows' worst cases add up to,
// and the settlement is exactly the sum of the rows' charges, each row charged once, with
// nothing left held.
func TestBatchGatewayRunEndToEnd(t *testing.T) {
	_, s3 := startFakeS3(t, "batches")
	for _, bc := range []struct{ name, blobStore string }{
		{"file", ""},
		{"s3", `blob_store s3 {
			endpoint ` + strings.TrimPrefix(s3.URL, "http://") + `
			bucket batches
			region us-east-1
			access_key_id k
			secret_access_key s
			use_tls off
			path_style on
		}`},
	} {
		t.Run(bc.name, func(t *testing.T) {
			up := newBatchUpstream(t)
			env := startGateway(t, batchGatewayBlock(up.URL, bc.blobStore+"\n\t\tbatches {\n\t\t\trows_per_chunk 3\n\t\t}"), "")
			ws, key := env.workspace(10 * usd)
			_, otherKey := env.workspace(usd)
			client, other := env.openai(key), env.openai(otherKey)
			const rows = 70 // two chunks
			fileID := uploadBatchFile(t, client, batchRows(rows))

			created := newBatch(t, client, fileID)
			if created.Status != openai.BatchStatusValidating && created.Status != openai.BatchStatusInProgress {
				t.Fatalf("created %s", created.RawJSON())
			}
			raw := batchRaw(t, created)
			bill := raw["billing"].(map[string]any)
			// Each row's worst case: its body's bytes as tokens at the input price, and
			// max_output_tokens 1000 at the output price.
			est := int64(bill["estimated_nanos"].(float64))
			if est <= 0 || int64(bill["reserved_nanos"].(float64)) != est || bill["estimation_total_rows"].(float64) != rows ||
				bill["estimation_sample_size"].(float64) != rows || bill["estimation_truncated"] != false {
				t.Fatalf("billing at create: %v", bill)
			}
			if min := int64(rows) * 1000 * 2 * usd / 1_000_000; est < min {
				t.Fatalf("estimate %d is below the rows' output bound %d", est, min)
			}
			if raw["cancel_url"] == nil || created.Metadata["purpose"] != "test" {
				t.Fatalf("created: %s", created.RawJSON())
			}
			if _, err := other.Batches.Get(context.Background(), created.ID); err == nil {
				t.Fatal("another workspace read the batch")
			}

			done := waitBatch(t, client, created.ID, "completed", "failed")
			if done.Status != openai.BatchStatusCompleted || done.RequestCounts.Total != rows || done.RequestCounts.Completed != rows ||
				done.RequestCounts.Failed != 0 || done.ErrorFileID != "" || done.CompletedAt == 0 || done.InProgressAt == 0 || done.FinalizingAt == 0 {
				t.Fatalf("done: %s", done.RawJSON())
			}
			lines := outputLines(t, client, done.OutputFileID)
			if len(lines) != rows {
				t.Fatalf("%d output lines, want %d", len(lines), rows)
			}
			for i, l := range lines {
				if l.CustomID != fmt.Sprintf("row-%d", i) || l.Response.StatusCode != 200 || l.Error != nil {
					t.Fatalf("line %d: %+v", i, l)
				}
				if got, want := answerOf(t, l), fmt.Sprintf("answer: say %d", i); got != want {
					t.Fatalf("line %d answered %q, want %q", i, got, want)
				}
			}
			if _, err := other.Files.Get(context.Background(), done.OutputFileID); err == nil {
				t.Fatal("another workspace read the output file")
			}
			if got := len(up.seen); got != rows {
				t.Fatalf("the upstream was sent %d rows, want %d (each once)", got, rows)
			}

			sum, charged := rowCharges(t, env.store, ws, done.ID, rows)
			raw = batchRaw(t, done)
			bill = raw["billing"].(map[string]any)
			if charged != rows || sum != rows*rowCost || int64(bill["cost_nanos"].(float64)) != sum || bill["reservation_status"] != "released" ||
				bill["settled_user_cost"] != pricing.FormatUSD(sum) {
				t.Fatalf("rows charged %d (%d of %d rows); billing %v", sum, charged, rows, bill)
			}
			if b := env.balance(ws); b.BalanceNanos != 10*usd-sum || b.ReservedNanos != 0 {
				t.Fatalf("wallet %+v; want 10 USD less the rows' %d, nothing held", b, sum)
			}
			if raw["cancel_url"] != nil {
				t.Fatalf("a completed batch has a cancel_url: %v", raw["cancel_url"])
			}
		})
	}
}

// TestBatchCancelListAndRefusal drives the rest of the batch API with openai-go: a slow
// batch cancelled mid-way ends cancelled with the rows that ran in its output file, each
// charged once, and the rest of its reservation released; a batch the wallet cannot
// cover is refused with 402 and its estimate, reserving nothing; and the list shows the
// workspace's own batches, newest first, by status (aliases included), a page at a time.
func TestBatchCancelListAndRefusal(t *testing.T) {
	up := newBatchUpstream(t)
	env := startGateway(t, batchGatewayBlock(up.URL, "\t\tbatches {\n\t\t\trows_per_chunk 2\n\t\t\tbatch_chunks 1\n\t\t}"), "")
	ws, key := env.workspace(10 * usd)
	_, otherKey := env.workspace(10 * usd)
	client, other := env.openai(key), env.openai(otherKey)
	ctx := context.Background()

	first := newBatch(t, client, uploadBatchFile(t, client, batchRows(3)))
	waitBatch(t, client, first.ID, "completed")

	// Cancelled mid-way.
	up.delay.Store(int64(300 * time.Millisecond))
	const rows = 40
	slow := newBatch(t, client, uploadBatchFile(t, client, batchRows(rows)))
	waitFor(t, "four rows answered", func() bool { return len(up.seen) >= 3+4 })
	cancelling, err := client.Batches.Cancel(ctx, slow.ID)
	if err != nil {
		t.Fatal(err)
	}
	if cancelling.Status != openai.BatchStatusCancelling || cancelling.CancellingAt == 0 || batchRaw(t, cancelling)["cancel_url"] != nil {
		t.Fatalf("after cancel: %s", cancelling.RawJSON())
	}
	if _, err := other.Batches.Cancel(ctx, slow.ID); err == nil {
		t.Fatal("another workspace cancelled the batch")
	}
	cancelled := waitBatch(t, client, slow.ID, "cancelled")
	up.delay.Store(0)
	ran := len(up.seen) - 3
	n := int(cancelled.RequestCounts.Completed)
	if n == 0 || n >= rows || cancelled.CancelledAt == 0 || cancelled.RequestCounts.Total != rows {
		t.Fatalf("cancelled: %s", cancelled.RawJSON())
	}
	lines := outputLines(t, client, cancelled.OutputFileID)
	if len(lines) != n {
		t.Fatalf("%d output lines for %d rows completed", len(lines), n)
	}
	for _, l := range lines {
		var i int
		if _, err := fmt.Sscanf(l.CustomID, "row-%d", &i); err != nil || answerOf(t, l) != fmt.Sprintf("answer: say %d", i) {
			t.Fatalf("line %+v", l)
		}
	}
	// Every other row is in the error file as cancelled: every custom_id is accounted for.
	if cancelled.RequestCounts.Failed != int64(rows-n) {
		t.Fatalf("cancelled: %d failed, want the %d rows not run", cancelled.RequestCounts.Failed, rows-n)
	}
	accounted := map[string]bool{}
	for _, l := range lines {
		accounted[l.CustomID] = true
	}
	for _, l := range outputLines(t, client, cancelled.ErrorFileID) {
		if l.Error == nil || l.Error.Code != "batch_cancelled" || accounted[l.CustomID] {
			t.Fatalf("error line %+v", l)
		}
		accounted[l.CustomID] = true
	}
	if len(accounted) != rows {
		t.Fatalf("%d of %d rows in the files", len(accounted), rows)
	}
	if _, err := client.Batches.Cancel(ctx, slow.ID); err == nil {
		t.Fatal("a cancelled batch was cancelled again")
	}
	// Every row the upstream answered is charged once; what the reservation had left is
	// back in the wallet.
	time.Sleep(500 * time.Millisecond) // a row the drain missed settles meanwhile
	firstCost, _ := rowCharges(t, env.store, ws, first.ID, 3)
	slowCost, charged := rowCharges(t, env.store, ws, slow.ID, rows)
	if charged != ran || slowCost != int64(ran)*rowCost {
		t.Fatalf("%d rows charged %d; the upstream answered %d", charged, slowCost, ran)
	}
	if b := env.balance(ws); b.ReservedNanos != 0 || b.BalanceNanos != 10*usd-firstCost-slowCost {
		t.Fatalf("wallet %+v; want 10 USD less %d and %d, nothing held", b, firstCost, slowCost)
	}

	// A wallet that cannot cover the estimate.
	poorWS, poorKey := env.workspace(usd + usd/10)
	poor := env.openai(poorKey)
	big := []byte(`{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"chat","max_tokens":1000000,"messages":[{"role":"user","content":"long"}]}}` + "\n")
	bigFile := uploadBatchFile(t, poor, big)
	_, err = poor.Batches.New(ctx, openai.BatchNewParams{
		InputFileID: bigFile, Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions,
		CompletionWindow: openai.BatchNewParamsCompletionWindow24h,
	})
	wantAPIError(t, "a batch beyond the wallet", err, http.StatusPaymentRequired, "insufficient_funds", "estimated cost is 2.")
	status, _, refusal := env.call(http.MethodPost, poorKey, "/batches", `{"input_file_id":"`+bigFile+`","endpoint":"/v1/chat/completions","completion_window":"24h"}`)
	if est, _ := refusal["estimated_nanos"].(float64); status != http.StatusPaymentRequired || est < 2*float64(usd) || refusal["estimation_total_rows"] != 1.0 || refusal["estimation_sample_size"] != 1.0 {
		t.Fatalf("402 without the estimate: %d %v", status, refusal)
	}
	if b := env.balance(poorWS); b.ReservedNanos != 0 || b.BalanceNanos != usd+usd/10 {
		t.Fatalf("refused batch left the wallet %+v", b)
	}

	// The list.
	third := newBatch(t, client, uploadBatchFile(t, client, batchRows(2)))
	waitBatch(t, client, third.ID, "completed")
	ids := func(p []openai.Batch) []string {
		var out []string
		for _, b := range p {
			out = append(out, b.ID)
		}
		return out
	}
	page, err := client.Batches.List(ctx, openai.BatchListParams{Limit: openai.Int(2)})
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(page.Data); !page.HasMore || fmt.Sprint(got) != fmt.Sprint([]string{third.ID, slow.ID}) {
		t.Fatalf("first page %v (has_more %v)", got, page.HasMore)
	}
	next, err := page.GetNextPage()
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(next.Data); next.HasMore || fmt.Sprint(got) != fmt.Sprint([]string{first.ID}) {
		t.Fatalf("second page %v (has_more %v)", got, next.HasMore)
	}
	for _, tc := range []struct {
		query string
		want  []string
	}{
		{"status=completed", []string{third.ID, first.ID}},
		{"status=canceled", []string{slow.ID}},
		{"statuses=cancelled,completed", []string{third.ID, slow.ID, first.ID}},
		{"status=running", nil},
		{"status=expired&status=pending", nil},
	} {
		status, _, v := env.call(http.MethodGet, key, "/batches?"+tc.query, "")
		data, _ := v["data"].([]any)
		var got []string
		for _, d := range data {
			got = append(got, d.(map[string]any)["id"].(string))
		}
		if status != 200 || fmt.Sprint(got) != fmt.Sprint(tc.want) || v["object"] != "list" {
			t.Fatalf("%s: %d %v; want %v", tc.query, status, got, tc.want)
		}
	}
	env.expectError(http.StatusBadRequest, "validation_error", "status", http.MethodGet, key, "/batches?status=done", "")
	env.expectError(http.StatusBadRequest, "validation_error", "limit", http.MethodGet, key, "/batches?limit=0", "")
	if theirs, err := other.Batches.List(ctx, openai.BatchListParams{}); err != nil || len(theirs.Data) != 0 {
		t.Fatalf("another workspace listed %v, %v", theirs, err)
	}
}

// TestBatchNativeHook runs batches on a route whose adapter is a providers.BatchRunner
// (batch_fake): the batch is started upstream once with every row, polled through its
// adapter to its end, and its results, in no order upstream, become an output file in
// the input's order and an error file; each answered row is priced at the route's batch
// price and settled against the reservation once, the rest released. A native batch cancelled
// is cancelled upstream and ends cancelled with the rows the upstream had answered.
func TestBatchNativeHook(t *testing.T) {
	batch.Registered.SetPaces(100*time.Millisecond, 50*time.Millisecond)
	t.Cleanup(func() { batch.Registered.SetPaces(0, 0) })
	batchFakeState.Lock()
	batchFakeState.completeAfter, batchFakeState.failRows = 3, map[string]bool{"row-2": true}
	batchFakeState.Unlock()
	env := startGateway(t, `
		provider native {
			type batch_fake
		}
		model chat {
			route native chat-native {
				input 1.00
				output 2.00
				max_output_tokens 1000
			}
		}`, "")
	ws, key := env.workspace(10 * usd)
	client := env.openai(key)
	const rows = 5

	b := newBatch(t, client, uploadBatchFile(t, client, batchRows(rows)))
	if raw := batchRaw(t, b); raw["native_batch_id"] == nil || raw["provider"] != "native" {
		t.Fatalf("created: %s", b.RawJSON())
	}
	done := waitBatch(t, client, b.ID, "completed", "failed")
	if done.Status != openai.BatchStatusCompleted || done.RequestCounts.Completed != rows-1 || done.RequestCounts.Failed != 1 || done.ErrorFileID == "" {
		t.Fatalf("done: %s", done.RawJSON())
	}
	lines := outputLines(t, client, done.OutputFileID)
	var ids []string
	for _, l := range lines {
		ids = append(ids, l.CustomID)
		if answerOf(t, l) != "native: "+l.CustomID {
			t.Fatalf("line %+v", l)
		}
	}
	if fmt.Sprint(ids) != "[row-0 row-1 row-3 row-4]" {
		t.Fatalf("output rows %v", ids)
	}
	errs := outputLines(t, client, done.ErrorFileID)
	if len(errs) != 1 || errs[0].CustomID != "row-2" || errs[0].Error == nil || errs[0].Error.Code != "batch_expired" || errs[0].Response != nil {
		t.Fatalf("error file %+v", errs)
	}
	sum, charged := rowCharges(t, env.store, ws, done.ID, rows)
	bill := batchRaw(t, done)["billing"].(map[string]any)
	// A native batch's rows are charged at the route's batch price: half its price, the
	// default on a route whose upstream runs batches.
	nativeRowCost := int64(rowCost / 2)
	if charged != rows-1 || sum != (rows-1)*nativeRowCost || int64(bill["cost_nanos"].(float64)) != sum {
		t.Fatalf("charged %d rows %d; billing %v", charged, sum, bill)
	}
	if bal := env.balance(ws); bal.ReservedNanos != 0 || bal.BalanceNanos != 10*usd-sum {
		t.Fatalf("wallet %+v", bal)
	}
	batchFakeState.Lock()
	started := batchFakeState.started
	batchFakeState.completeAfter, batchFakeState.failRows = 1<<30, nil // the next batch runs until cancelled
	batchFakeState.Unlock()

	// Cancelled: upstream too, and the rows it answered are kept and charged.
	c := newBatch(t, client, uploadBatchFile(t, client, batchRows(4)))
	if _, err := client.Batches.Cancel(context.Background(), c.ID); err != nil {
		t.Fatal(err)
	}
	cancelled := waitBatch(t, client, c.ID, "cancelled")
	batchFakeState.Lock()
	nativeCancelled := batchFakeState.batches[cancelled.JSON.ExtraFields["native_batch_id"].Raw()[1:len(cancelled.JSON.ExtraFields["native_batch_id"].Raw())-1]].cancelled
	nowStarted := batchFakeState.started
	batchFakeState.Unlock()
	if !nativeCancelled || nowStarted != started+1 {
		t.Fatalf("upstream cancelled %v, batches started %d (was %d)", nativeCancelled, nowStarted, started)
	}
	if cancelled.RequestCounts.Completed != 2 || len(outputLines(t, client, cancelled.OutputFileID)) != 2 {
		t.Fatalf("cancelled: %s", cancelled.RawJSON())
	}
	if bal := env.balance(ws); bal.ReservedNanos != 0 || bal.BalanceNanos != 10*usd-sum-2*nativeRowCost {
		t.Fatalf("wallet after the cancelled batch %+v", bal)
	}

	// A batch beyond the upstream's limits, refused as unsupported before anything was
	// made there, is run by the gateway on the same route (the mock answers its rows).
	large := newBatch(t, client, uploadBatchFile(t, client, batchRows(batchFakeMaxRows+2)))
	largeDone := waitBatch(t, client, large.ID, "completed", "failed")
	batchFakeState.Lock()
	startedAfter := batchFakeState.started
	batchFakeState.Unlock()
	if raw := batchRaw(t, largeDone); largeDone.Status != openai.BatchStatusCompleted || raw["native_batch_id"] != nil ||
		largeDone.RequestCounts.Completed != batchFakeMaxRows+2 || startedAfter != nowStarted {
		t.Fatalf("the large batch: %s (native batches started %d, before %d)", largeDone.RawJSON(), startedAfter, nowStarted)
	}
	if got := len(outputLines(t, client, largeDone.OutputFileID)); got != batchFakeMaxRows+2 {
		t.Fatalf("the large batch's output has %d lines", got)
	}
}

// TestBatchWebhooks: a batch created with a webhook sends its events through the jobs
// engine's outbox: batch.created, batch.status_changed as it moves, batch.progress at most
// once per 10 % of its rows (each a new tenth), and batch.completed, each event's data the
// batch's public fields.
func TestBatchWebhooks(t *testing.T) {
	secretKey := newSecretKey(t)
	t.Setenv("GATEWAY_TEST_SECRET_KEY", secretKey)
	tuneDeliveries(t, 200*time.Millisecond, nil)
	rcv := newHookReceiver(t, nil, func(receivedHook) int { return http.StatusOK })
	up := newBatchUpstream(t)
	up.delay.Store(int64(20 * time.Millisecond))
	env := startGateway(t, "\t\tsecret_key {env.GATEWAY_TEST_SECRET_KEY}\n\t\twebhook_allow 127.0.0.1\n"+
		batchGatewayBlock(up.URL, "\t\tbatches {\n\t\t\trows_per_chunk 2\n\t\t\tbatch_chunks 1\n\t\t}"), "")
	tm := env.team(10 * usd)
	endpoint := env.expect(201, http.MethodPost, tm.mgmt, "/webhook-endpoints", `{"name": "r", "url": "`+rcv.URL+`/ep", "events": ["*"]}`)["id"].(string)
	client := env.openai(tm.std)
	fileID := uploadBatchFile(t, client, batchRows(30))
	created := env.expect(200, http.MethodPost, tm.std, "/batches",
		`{"input_file_id":"`+fileID+`","endpoint":"/v1/chat/completions","completion_window":"24h","webhook":{"endpoint_id":"`+endpoint+`"}}`)
	id := created["id"].(string)
	if wh, _ := created["webhook"].(map[string]any); wh == nil || wh["endpoint_id"] != endpoint {
		t.Fatalf("created without its webhook: %v", created)
	}
	// Its live updates show the batch object, from a snapshot to its completion.
	wsCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	live, _, err := websocket.Dial(wsCtx, created["websocket_url"].(string), &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + tm.std}}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = live.CloseNow() }()
	var last liveMessage
	for n := 0; ; n++ {
		m, err := readLive(live)
		if err != nil {
			var ce websocket.CloseError
			if !errors.As(err, &ce) || ce.Code != websocket.StatusNormalClosure {
				t.Fatalf("live updates ended with %v", err)
			}
			break
		}
		if m.Data["object"] != "batch" || m.Data["id"] != id || (n == 0) != (m.Type == "snapshot") {
			t.Fatalf("live message %d: %+v", n, m)
		}
		last = m
	}
	if last.Data["status"] != "completed" || last.Data["output_file_id"] == nil {
		t.Fatalf("the last live update: %+v", last)
	}
	waitBatch(t, client, id, "completed")
	events := func() map[string][]jobs.Event {
		out := map[string][]jobs.Event{}
		for _, h := range rcv.hooks("") {
			var ev jobs.Event
			if json.Unmarshal(h.body, &ev) == nil && ev.Data.ID == id {
				out[ev.Type] = append(out[ev.Type], ev)
			}
		}
		return out
	}
	waitFor(t, "the batch's completed event", func() bool { return len(events()["batch.completed"]) > 0 })
	got := events()
	if len(got["batch.created"]) != 1 || len(got["batch.status_changed"]) == 0 || got["batch.completed"][0].Data.Status != "completed" {
		t.Fatalf("events %v", got)
	}
	seen := map[int]bool{}
	for _, ev := range got["batch.progress"] {
		p := ev.Data.Progress
		if p%10 != 0 || seen[p] {
			t.Fatalf("progress events %v: each must be a new tenth", got["batch.progress"])
		}
		seen[p] = true
	}
	if n := len(got["batch.progress"]); n == 0 || n > 10 {
		t.Fatalf("%d progress events for 30 rows", n)
	}
}

// TestBatchRowsBeyondTheEstimate: the estimate reads the first 100 rows; later rows that
// are dearer than it (here: they set no max_tokens, where the sampled rows asked for one
// token) do not fit their chunk's share of the reservation, and are admitted from the
// wallet like the same requests alone: every row runs, each is charged once, and nothing
// stays held.
func TestBatchRowsBeyondTheEstimate(t *testing.T) {
	up := newBatchUpstream(t)
	env := startGateway(t, batchGatewayBlock(up.URL, ""), "")
	ws, key := env.workspace(10 * usd)
	client := env.openai(key)
	var file bytes.Buffer
	const rows = 105
	for i := range rows {
		maxTokens := `"max_tokens":1,`
		if i >= 100 {
			maxTokens = ""
		}
		fmt.Fprintf(&file, `{"custom_id":"row-%d","method":"POST","url":"/v1/chat/completions","body":{"model":"chat",%s"messages":[{"role":"user","content":"say %d"}]}}`+"\n", i, maxTokens, i)
	}
	b := newBatch(t, client, uploadBatchFile(t, client, file.Bytes()))
	bill := batchRaw(t, b)["billing"].(map[string]any)
	if bill["estimation_truncated"] != true || bill["estimation_sample_size"] != 100.0 {
		t.Fatalf("billing at create: %v", bill)
	}
	done := waitBatch(t, client, b.ID, "completed", "failed")
	if done.RequestCounts.Completed != rows || done.ErrorFileID != "" {
		t.Fatalf("done: %s", done.RawJSON())
	}
	sum, charged := rowCharges(t, env.store, ws, b.ID, rows)
	if charged != rows || sum != rows*rowCost {
		t.Fatalf("%d rows charged %d", charged, sum)
	}
	if bal := env.balance(ws); bal.ReservedNanos != 0 || bal.BalanceNanos != 10*usd-sum {
		t.Fatalf("wallet %+v", bal)
	}
}
