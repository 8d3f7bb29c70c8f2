package main

import (
	"bufio"
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The batch-load test measures a batch that the gateway runs itself, row by row (the fake
// upstream has no batch API, so the gateway's workers send each row through the normal
// request path), against the same rows sent by a client. It belongs to the jobs tests
// (-tests jobs or batch-load) and has an arm of the gateway of its own, with plain Caddy
// beside it as the machine's control. Each round:
//
//  1. idle: chat completions at -batch-rate, open loop, on the gateway and on plain Caddy
//     taking turns in slots, for -batch-idle-duration each: the chat p99 of an idle gateway;
//  2. client: -batch-rows chat completions sent through the gateway by -batch-c closed-loop
//     workers (by default the batch's row concurrency, batchRowConc), the chat of step 1
//     running meanwhile: rows per second from the first send to the last answer;
//  3. batch: the same rows as one JSONL file, streamed to POST /v1/files, a batch created
//     over it (POST /v1/batches) and polled every 50 ms until completed, the same chat
//     running from the create's answer until then: rows per second from the create's answer
//     to the first poll that saw it completed, request_counts checked, and the output file
//     read back (one line per row, each row's custom_id once, each answered 200).
//
// Targets: the batch's rows per second at least 0.9x the client's, and the chat p99 during
// the batch at most 1.2x the idle p99 (plain Caddy's ratio is the machine's drift between the
// spells). The chat runs during the client's rows too, so that both ways of sending the rows
// compete with the same interactive load, and the p99 during the client's rows tells what the
// same rows cost the interactive traffic when a client sends them.

// batchChatArm is the batch-load test's arm of the gateway: the chat measured beside the
// batch, whose rows go to the same model.
const batchChatArm = "gw-batch-chat"

const (
	// batchEndpoint is the endpoint of every row of the benchmark's batches.
	batchEndpoint = "/v1/chat/completions"
	// batchPollEvery is how often the test polls the batch: it bounds how late the test can
	// see the batch complete, 50 ms on batches of seconds.
	batchPollEvery = 50 * time.Millisecond
	// batchSanityRows are the rows of the batch that checks the wire before the rounds.
	batchSanityRows = 3
)

// maxBatchRows is the most rows the gateway takes in a batch file (files.MaxBatchRows).
const maxBatchRows = 50_000

// batchOptions are the gateway's batch options, set from the flags, for its model_gateway
// block; "" when the batch-load test does not run, so that the other tests' gateway does
// not depend on them.
func (c *config) batchOptions() string {
	if !c.runs("batch-load") {
		return ""
	}
	return fmt.Sprintf("batches {\n\t\t\tchunks %d\n\t\t\trows_per_chunk %d\n\t\t\tbatch_chunks %d\n\t\t\tprovider_rows %d\n\t\t}",
		c.BatchProcessChunks, c.BatchRowsPerChunk, c.BatchChunks, c.BatchProviderRows)
}

// batchRowConc is how many rows of the one batch the gateway runs at once: its chunks at
// once (the batch's bound, or the process's if lower) times the rows of a chunk at once,
// at most the rows of one provider at once.
func (c *config) batchRowConc() int {
	return min(min(c.BatchChunks, c.BatchProcessChunks)*c.BatchRowsPerChunk, c.BatchProviderRows)
}

// batchClientConc is -batch-c, by default the batch's row concurrency: the client sends the
// rows as many at a time as the batch runs them.
func (c *config) batchClientConc() int { return cmp.Or(c.BatchConc, c.batchRowConc()) }

// batchSlot is the length of the chat's slots in the batch-load test: -slot, or 250 ms with
// -slot 0, since the chat during a phase of unknown length can only take turns.
func (c *config) batchSlot() time.Duration { return cmp.Or(c.Slot, 250*time.Millisecond) }

// batchRowID is row i's custom_id.
func batchRowID(i int) string { return "row-" + strconv.Itoa(i) }

// parseBatchRowID is the index of a custom_id of batchRowID's, false for any other.
func parseBatchRowID(id string) (int, bool) {
	s, ok := strings.CutPrefix(id, "row-")
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(s)
	if err != nil || i < 0 || strconv.Itoa(i) != s {
		return 0, false
	}
	return i, true
}

// writeBatchRows writes n rows, each a chat completion of body, as lines of OpenAI's batch
// input format.
func writeBatchRows(w io.Writer, n int, body []byte) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	for i := 0; i < n; i++ {
		fmt.Fprintf(bw, `{"custom_id":%q,"method":"POST","url":%q,"body":`, batchRowID(i), batchEndpoint)
		_, _ = bw.Write(body)
		_, _ = bw.WriteString("}\n")
	}
	// A bufio.Writer keeps its first error and answers it here.
	return bw.Flush()
}

// uploadBatchFile streams n rows of body to POST /v1/files as a batch file, as it writes
// them (nothing holds the file whole), and returns the file's id.
func uploadBatchFile(ctx context.Context, client *http.Client, base, key string, n int, body []byte) (string, error) {
	pr, pw := io.Pipe()
	defer pr.Close()
	mw := multipart.NewWriter(pw)
	go func() {
		pw.CloseWithError(func() error {
			// The purpose before the file: the gateway then refuses a bad line as it arrives.
			if err := mw.WriteField("purpose", "batch"); err != nil {
				return err
			}
			h := textproto.MIMEHeader{}
			h.Set("Content-Disposition", `form-data; name="file"; filename="batch-load.jsonl"`)
			h.Set("Content-Type", "application/jsonl")
			part, err := mw.CreatePart(h)
			if err != nil {
				return err
			}
			if err := writeBatchRows(part, n, body); err != nil {
				return err
			}
			return mw.Close()
		}())
	}()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/files", pr)
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	var f struct {
		ID      string `json:"id"`
		Purpose string `json:"purpose"`
	}
	if err := readJSONAnswer(resp, "POST "+base+"/v1/files", &f); err != nil {
		return "", err
	}
	if f.ID == "" || f.Purpose != "batch" {
		return "", fmt.Errorf("POST %s/v1/files answered file %q of purpose %q", base, f.ID, f.Purpose)
	}
	return f.ID, nil
}

// batchObjectOf is the part of a batch object the test reads.
type batchObjectOf struct {
	ID            string `json:"id"`
	Status        string `json:"status"`
	OutputFileID  string `json:"output_file_id"`
	ErrorFileID   string `json:"error_file_id"`
	RequestCounts struct {
		Total     int64 `json:"total"`
		Completed int64 `json:"completed"`
		Failed    int64 `json:"failed"`
	} `json:"request_counts"`
	Errors *struct {
		Data []struct {
			Code    string `json:"code"`
			Message string `json:"message"`
			Line    *int   `json:"line"`
		} `json:"data"`
	} `json:"errors"`
}

// why is what the batch says of its failure, for an error message.
func (o *batchObjectOf) why() string {
	if o.Errors == nil || len(o.Errors.Data) == 0 {
		return "no errors given"
	}
	e := o.Errors.Data[0]
	return e.Code + ": " + e.Message
}

// createBatch creates a batch over the file and returns its id.
func createBatch(ctx context.Context, client *http.Client, base, key, fileID string) (string, error) {
	body := fmt.Appendf(nil, `{"input_file_id":%q,"endpoint":%q,"completion_window":"24h","metadata":{"bench":"batch-load"}}`, fileID, batchEndpoint)
	var o batchObjectOf
	if err := callJSON(ctx, client, http.MethodPost, base+"/v1/batches", key, body, &o); err != nil {
		return "", err
	}
	if o.ID == "" {
		return "", fmt.Errorf("POST %s/v1/batches answered no id", base)
	}
	return o.ID, nil
}

// awaitBatch polls GET /v1/batches/{id} every period until the batch has completed, and
// returns its object, when the answer that said so arrived, and the polls made. A batch that
// ends otherwise (failed, expired, cancelled) is an error.
func awaitBatch(ctx context.Context, client *http.Client, base, key, id string, period time.Duration) (batchObjectOf, time.Time, int, error) {
	for polls := 1; ; polls++ {
		var o batchObjectOf
		if err := callJSON(ctx, client, http.MethodGet, base+"/v1/batches/"+id, key, nil, &o); err != nil {
			return o, time.Time{}, polls, err
		}
		at := time.Now()
		switch o.Status {
		case "completed":
			return o, at, polls, nil
		case "failed", "expired", "cancelling", "cancelled":
			return o, at, polls, fmt.Errorf("batch %s %s (%d of %d rows completed, %d failed): %s",
				id, o.Status, o.RequestCounts.Completed, o.RequestCounts.Total, o.RequestCounts.Failed, o.why())
		}
		if !sleepCtx(ctx, period) {
			return o, time.Time{}, polls, fmt.Errorf("batch %s still %s: %w", id, o.Status, ctx.Err())
		}
	}
}

// checkBatchCounts checks a completed batch's request_counts against its n rows.
func checkBatchCounts(o batchObjectOf, n int) error {
	c := o.RequestCounts
	if c.Total != int64(n) || c.Completed != int64(n) || c.Failed != 0 {
		return fmt.Errorf("batch %s completed with request_counts total %d, completed %d, failed %d; want %d, %d, 0", o.ID, c.Total, c.Completed, c.Failed, n, n)
	}
	if o.OutputFileID == "" {
		return fmt.Errorf("batch %s completed without an output file", o.ID)
	}
	return nil
}

// batchOutputLine is the part of a line of a batch's output file the test reads.
type batchOutputLine struct {
	CustomID string `json:"custom_id"`
	Response *struct {
		StatusCode int             `json:"status_code"`
		Body       json.RawMessage `json:"body"`
	} `json:"response"`
}

// checkBatchOutput reads a batch output file of n rows line by line and checks that it
// holds one line per row, each row's custom_id once, each answered 200 with a body.
func checkBatchOutput(r io.Reader, n int) (lines int64, err error) {
	seen := make([]bool, n)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 32<<20)
	var bad error
	for sc.Scan() {
		line := sc.Bytes()
		if len(strings.TrimSpace(string(line))) == 0 {
			continue
		}
		lines++
		if bad != nil {
			continue // counting on, to name the count
		}
		var l batchOutputLine
		if err := json.Unmarshal(line, &l); err != nil {
			bad = fmt.Errorf("line %d of the output: %w", lines, err)
			continue
		}
		i, ok := parseBatchRowID(l.CustomID)
		switch {
		case !ok || i >= n:
			bad = fmt.Errorf("line %d of the output has custom_id %q, no row's", lines, l.CustomID)
		case seen[i]:
			bad = fmt.Errorf("line %d of the output repeats custom_id %q", lines, l.CustomID)
		case l.Response == nil || l.Response.StatusCode != http.StatusOK || len(l.Response.Body) == 0:
			bad = fmt.Errorf("line %d of the output (%s) has no 200 answer: %.200s", lines, l.CustomID, line)
		}
		if ok && i < n {
			seen[i] = true
		}
	}
	if err := sc.Err(); err != nil {
		return lines, fmt.Errorf("reading the output after %d lines: %w", lines, err)
	}
	if bad != nil {
		return lines, bad
	}
	if lines != int64(n) {
		return lines, fmt.Errorf("the output has %d lines, want %d", lines, n)
	}
	return lines, nil
}

// readBatchOutput downloads a batch's output file and checks it (checkBatchOutput).
func readBatchOutput(ctx context.Context, client *http.Client, base, key, fileID string, n int) (int64, error) {
	url := base + "/v1/files/" + fileID + "/content"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		return 0, fmt.Errorf("GET %s: status %d: %s", url, resp.StatusCode, strings.TrimSpace(string(msg)))
	}
	return checkBatchOutput(resp.Body, n)
}

// batchRowSpan is when the gateway recorded a batch's first and last rows (its store's
// batch_rows, stamped as each row's outcome is recorded), and how many it recorded.
type batchRowSpan struct {
	first, last time.Time
	rows        int64
}

// batchRowSpan reads the span of a batch's rows from the gateway's SQLite file.
func (b *bench) batchRowSpan(id string) (batchRowSpan, error) {
	db, err := sql.Open("sqlite3", "file:"+b.dbPaths[0]+"?mode=ro&_busy_timeout=10000")
	if err != nil {
		return batchRowSpan{}, err
	}
	defer db.Close()
	var sp batchRowSpan
	var first, last sql.NullInt64
	if err := db.QueryRow(`SELECT COUNT(*), MIN(created_at), MAX(created_at) FROM batch_rows WHERE batch_id = ?`, id).Scan(&sp.rows, &first, &last); err != nil {
		return sp, err
	}
	sp.first, sp.last = time.UnixMilli(first.Int64), time.UnixMilli(last.Int64)
	return sp, nil
}

// batchRun is one batch run through the gateway, start to end.
type batchRun struct {
	rows          int
	upload, wait  time.Duration // the upload, and the create's answer to the completed poll
	output        time.Duration // reading the output file back
	polls         int
	obj           batchObjectOf
	outputLines   int64
	createdAt     time.Time
	completedSeen time.Time
}

// runBatch uploads n rows of body, creates a batch over them, calls started once the
// create has answered, polls the batch until it has completed, and checks its counts and
// its output.
func runBatch(ctx context.Context, client *http.Client, base, key string, n int, body []byte, started func()) (batchRun, error) {
	r := batchRun{rows: n}
	t0 := time.Now()
	fileID, err := uploadBatchFile(ctx, client, base, key, n, body)
	if err != nil {
		return r, fmt.Errorf("uploading the batch file: %w", err)
	}
	r.upload = time.Since(t0)
	id, err := createBatch(ctx, client, base, key, fileID)
	if err != nil {
		return r, fmt.Errorf("creating the batch: %w", err)
	}
	r.createdAt = time.Now()
	if started != nil {
		started()
	}
	if r.obj, r.completedSeen, r.polls, err = awaitBatch(ctx, client, base, key, id, batchPollEvery); err != nil {
		return r, err
	}
	r.wait = r.completedSeen.Sub(r.createdAt)
	if err := checkBatchCounts(r.obj, n); err != nil {
		return r, err
	}
	t1 := time.Now()
	r.outputLines, err = readBatchOutput(ctx, client, base, key, r.obj.OutputFileID, n)
	r.output = time.Since(t1)
	return r, err
}

// sendRows sends n requests of body through a, conc closed-loop workers each taking the
// next row as soon as its last one has been answered; it returns the rows answered 200 and
// the time from the first send to the last answer.
func sendRows(ctx context.Context, a *arm, n, conc int, body []byte, errs *errorLog) (int64, time.Duration) {
	var next, ok atomic.Int64
	var wg sync.WaitGroup
	t0 := time.Now()
	for w := 0; w < conc; w++ {
		wg.Go(func() {
			for next.Add(1) <= int64(n) && ctx.Err() == nil {
				rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				err := a.do(rctx, body)
				cancel()
				if err != nil {
					errs.add(fmt.Errorf("a client row: %w", err))
					continue
				}
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	return ok.Load(), time.Since(t0)
}

// chatWhile runs the fixed-rate chat on the arms in turn, slot by slot, from now until done
// reports true at the end of a cycle (one cycle at least): the chat beside a phase whose
// length is not known in advance. Every cycle gives each arm one slot, so the arms' samples
// stay paired; the last cycle may outlast the phase by up to a cycle. There is no warm-up:
// the idle spell before it warmed the arms' connections. It also returns when each cycle
// ran: slot k of every arm's result is cycle k's.
func chatWhile(ctx context.Context, arms []*arm, rate int, slot time.Duration, body func(*arm) []byte, done func() bool) (map[string]latResult, []window) {
	samples := make([]latSamples, len(arms))
	var cycles []window
	for ctx.Err() == nil {
		w := window{start: time.Now()}
		for _, i := range cycleOrder(arms) {
			samples[i].sample(ctx, arms[i], rate, 0, slot, body(arms[i]))
		}
		w.end = time.Now()
		cycles = append(cycles, w)
		if done() {
			break
		}
	}
	out := make(map[string]latResult, len(arms))
	for i, a := range arms {
		out[a.name] = samples[i].result()
	}
	return out, cycles
}

// window is a spell of time.
type window struct{ start, end time.Time }

// p99Within is the p99 of r's samples of the cycles whose middle lies between from and to,
// and how many samples that is: the chat of the part of a phase that matters, here while a
// batch's rows ran, without its start and its end. NaN when no cycle's middle is in it.
func p99Within(r latResult, cycles []window, from, to time.Time) (num, int) {
	var xs []float64
	for k, c := range cycles {
		mid := c.start.Add(c.end.Sub(c.start) / 2)
		if k < len(r.slots) && !mid.Before(from) && !mid.After(to) {
			xs = append(xs, r.slots[k]...)
		}
	}
	return num(percentile(xs, 99)), len(xs)
}

// batchResult is the batch-load test of one arm in one round: its chat latency idle, during
// the client's rows and during the batch, and, for the gateway's arm, the rows.
type batchResult struct {
	Idle         latResult `json:"idle"`
	DuringClient latResult `json:"during_client"`
	DuringBatch  latResult `json:"during_batch"`
	// BatchOverIdleP99 is the chat p99 during the batch over the idle p99, and
	// ClientOverIdleP99 during the client's rows over the idle p99.
	BatchOverIdleP99  num `json:"batch_over_idle_p99"`
	ClientOverIdleP99 num `json:"client_over_idle_p99"`
	// Where the batch's seconds went, from the gateway's records of its rows (ms stamps): the
	// create's answer to the first row recorded, the rows per second from the first row
	// recorded to the last, and the last row recorded to the poll that saw it completed.
	StartSeconds    num `json:"batch_start_seconds"`
	RunningRowsPerS num `json:"batch_running_rows_per_s"`
	EndSeconds      num `json:"batch_end_seconds"`
	// RunningP99Us is the chat p99 of the cycles of slots that ran while the batch's rows did
	// (p99Within: from the first row recorded to the last), without the batch's start and
	// end, when the gateway runs no row; RunningSamples the samples behind it, and
	// RunningOverIdleP99 its ratio to the idle p99.
	RunningP99Us       num `json:"chat_p99_rows_running_us"`
	RunningSamples     int `json:"chat_rows_running_samples"`
	RunningOverIdleP99 num `json:"rows_running_over_idle_p99"`
	// The gateway's arm only (0 or NaN on the others): the rows of each way; the client's
	// rows answered 200 and their seconds, first send to last answer; the batch's seconds,
	// the create's answer to the first poll that saw it completed, and its rows completed
	// and failed (request_counts); the rows per second of each and their ratio; the
	// seconds the upload and the read of the output took (not in the rows per second), the
	// output's lines and the polls made.
	Rows              int    `json:"rows"`
	ClientConcurrency int    `json:"client_concurrency"`
	ClientRows        int64  `json:"client_rows_ok"`
	ClientSeconds     num    `json:"client_seconds"`
	BatchSeconds      num    `json:"batch_seconds"`
	BatchCompleted    int64  `json:"batch_completed"`
	BatchFailed       int64  `json:"batch_failed"`
	ClientRowsPerS    num    `json:"client_rows_per_s"`
	BatchRowsPerS     num    `json:"batch_rows_per_s"`
	BatchOverClient   num    `json:"batch_over_client_rows_per_s"`
	UploadSeconds     num    `json:"upload_seconds"`
	OutputSeconds     num    `json:"output_seconds"`
	OutputLines       int64  `json:"output_lines"`
	Polls             int    `json:"polls"`
	Errors            int64  `json:"errors"`
	FirstError        string `json:"first_error,omitempty"`
	Note              string `json:"note,omitempty"`
}

// newBatchResult is an arm's result before its rows figures: the chat of the three phases.
// The chat beside a batch that did not complete was not beside a batch's whole run: its
// ratio is unknown, not a pass.
func newBatchResult(idle, client, batch latResult, batchOK bool) batchResult {
	during := nan
	if batchOK {
		during = num(ratio(float64(batch.P99Us), float64(idle.P99Us)))
	}
	return batchResult{Idle: idle, DuringClient: client, DuringBatch: batch,
		BatchOverIdleP99:  during,
		ClientOverIdleP99: num(ratio(float64(client.P99Us), float64(idle.P99Us))),
		ClientSeconds:     nan, BatchSeconds: nan, ClientRowsPerS: nan, BatchRowsPerS: nan, BatchOverClient: nan,
		UploadSeconds: nan, OutputSeconds: nan, StartSeconds: nan, RunningRowsPerS: nan, EndSeconds: nan,
		RunningP99Us: nan, RunningOverIdleP99: nan}
}

// setRows sets the gateway arm's rows figures: the client's rows per second counts the rows
// answered 200; the batch's counts its rows only if every one completed (a batch with a
// failed row has no rate to compare, and its failure is an error of the run).
func (r *batchResult) setRows(rows, conc int, clientOK int64, clientDur time.Duration, run batchRun, batchOK bool) {
	r.Rows, r.ClientConcurrency, r.ClientRows = rows, conc, clientOK
	r.ClientSeconds = num(clientDur.Seconds())
	r.ClientRowsPerS = num(ratio(float64(clientOK), clientDur.Seconds()))
	r.BatchCompleted, r.BatchFailed = run.obj.RequestCounts.Completed, run.obj.RequestCounts.Failed
	r.Polls, r.OutputLines = run.polls, run.outputLines
	if run.upload > 0 {
		r.UploadSeconds = num(run.upload.Seconds())
	}
	if run.output > 0 {
		r.OutputSeconds = num(run.output.Seconds())
	}
	if run.wait > 0 {
		r.BatchSeconds = num(run.wait.Seconds())
		if batchOK {
			r.BatchRowsPerS = num(float64(rows) / run.wait.Seconds())
		}
	}
	r.BatchOverClient = num(ratio(float64(r.BatchRowsPerS), float64(r.ClientRowsPerS)))
}

// setRunningChat sets the chat p99 while the batch's rows ran, from the chat beside the
// batch (whose slot k ran in cycles[k]) and the span of its rows.
func (r *batchResult) setRunningChat(during latResult, cycles []window, sp batchRowSpan) {
	r.RunningP99Us, r.RunningSamples = p99Within(during, cycles, sp.first, sp.last)
	r.RunningOverIdleP99 = num(ratio(float64(r.RunningP99Us), float64(r.Idle.P99Us)))
}

// setSpan sets where the batch's seconds went from the span of its rows; a span of fewer
// rows than the batch's, or of one row, says nothing of its rate.
func (r *batchResult) setSpan(run batchRun, sp batchRowSpan) {
	if sp.rows == 0 || run.createdAt.IsZero() {
		return
	}
	r.StartSeconds = num(sp.first.Sub(run.createdAt).Seconds())
	if !run.completedSeen.IsZero() {
		r.EndSeconds = num(run.completedSeen.Sub(sp.last).Seconds())
	}
	if d := sp.last.Sub(sp.first); sp.rows == int64(run.rows) && sp.rows > 1 && d > 0 {
		r.RunningRowsPerS = num(float64(sp.rows-1) / d.Seconds())
	}
}

// batchRowBody is every row's request, the client's and the batch's alike: the gateway's
// priced chat model, the fake's answer of -answer-pieces after -latency, and max_tokens, so
// that the batch's estimate is the rows' bound and not the model's maximum output.
func (b *bench) batchRowBody(gw *arm) []byte {
	return gw.body(false, directive{n: b.cfg.AnswerPieces, latency: b.cfg.Latency})
}

// batchSanity runs a batch of a few rows through the gateway's arm, so that a broken batch
// wire stops the run at once rather than after the first round's idle and client phases.
func (b *bench) batchSanity(ctx context.Context, gw *arm) error {
	_, err := runBatch(ctx, gw.client, b.gatewayURL, gw.key, batchSanityRows, b.batchRowBody(gw), nil)
	if err == nil {
		b.batchRows.Add(batchSanityRows)
	}
	return err
}

// batchRound runs the three phases of the batch-load test on the arms (plain Caddy and the
// gateway's, taking turns in the chat's slots).
func (b *bench) batchRound(ctx context.Context, arms []*arm) map[string]batchResult {
	cfg := b.cfg
	var gw *arm
	for _, a := range arms {
		if a.kind == kindGateway {
			gw = a
		}
	}
	chat := func(a *arm) []byte { return a.body(false, directive{n: cfg.AnswerPieces, latency: cfg.Latency}) }
	rowBody := b.batchRowBody(gw)
	slot := cfg.batchSlot()
	conc := cfg.batchClientConc()
	var errs errorLog

	b.quiesce(ctx)
	idle := interleaved(ctx, arms, cfg.BatchRate, cfg.Warmup, slot, cfg.BatchIdleDuration, chat)

	var clientDone atomic.Bool
	var clientOK int64
	var clientDur time.Duration
	var wg sync.WaitGroup
	wg.Go(func() {
		defer clientDone.Store(true)
		clientOK, clientDur = sendRows(ctx, gw, cfg.BatchRows, conc, rowBody, &errs)
	})
	duringClient, _ := chatWhile(ctx, arms, cfg.BatchRate, slot, chat, clientDone.Load)
	wg.Wait()
	// The client's rows are settled before the batch starts: the batch does not share the
	// gateway's store writer with the settlements of the rows before it.
	if rc := b.waitRecords(ctx, 2*time.Minute); rc.Lost > 0 {
		errs.add(fmt.Errorf("%d answers still without a generation record %.0f s after the client's rows", rc.Lost, rc.WaitSeconds))
	}

	var batchDone atomic.Bool
	started := make(chan struct{})
	var run batchRun
	var runErr error
	wg.Go(func() {
		defer batchDone.Store(true)
		bctx, cancel := context.WithTimeout(ctx, cfg.BatchTimeout)
		defer cancel()
		run, runErr = runBatch(bctx, gw.client, b.gatewayURL, gw.key, cfg.BatchRows, rowBody, func() { close(started) })
		select {
		case <-started:
		default:
			close(started) // the batch never started: the chat below measures nothing long
		}
	})
	<-started
	duringBatch, cycles := chatWhile(ctx, arms, cfg.BatchRate, slot, chat, batchDone.Load)
	wg.Wait()
	batchOK := runErr == nil
	if runErr != nil {
		errs.add(runErr)
	}
	b.batchRows.Add(run.obj.RequestCounts.Completed)
	var span batchRowSpan
	var spanErr error
	if run.obj.ID != "" {
		span, spanErr = b.batchRowSpan(run.obj.ID)
	}

	out := make(map[string]batchResult, len(arms))
	for _, a := range arms {
		r := newBatchResult(idle[a.name], duringClient[a.name], duringBatch[a.name], batchOK)
		if batchOK && spanErr == nil && span.rows == int64(cfg.BatchRows) {
			r.setRunningChat(duringBatch[a.name], cycles, span)
		}
		if a == gw {
			r.setRows(cfg.BatchRows, conc, clientOK, clientDur, run, batchOK)
			if spanErr == nil {
				r.setSpan(run, span)
			} else {
				r.Note = fmt.Sprintf("the batch's rows could not be read from the gateway's store: %v", spanErr)
			}
			r.Errors, r.FirstError = errs.n.Load(), errs.first
		}
		out[a.name] = r
	}
	return out
}

// batchFigureDefs are the figures of the batch-load test.
func (rep *report) batchFigureDefs() []figureDef {
	c := rep.Config
	batch := func(f func(*batchResult) num) func(roundResult) float64 {
		return testValue(func(r roundResult) *batchResult { return r.Batch }, f)
	}
	conc := c.batchClientConc()
	return []figureDef{
		{key: "batch_over_client_rows_per_s", test: "batch-load", arm: batchChatArm, unit: "x", compare: byRatio, proxiesOnly: true, absolute: true,
			title: fmt.Sprintf("Batch rows per second over the client's: %d chat rows run by the gateway as one batch (%d rows at once: batch_chunks %d, chunks %d, rows_per_chunk %d, provider_rows %d) over the same rows sent through the gateway by %d closed-loop workers, each with the same chat beside it",
				c.BatchRows, c.batchRowConc(), c.BatchChunks, c.BatchProcessChunks, c.BatchRowsPerChunk, c.BatchProviderRows, conc),
			value: batch(func(b *batchResult) num { return b.BatchOverClient }), target: gatewayLimit(atLeast, 0.9)},
		{key: "batch_rows_per_s", test: "batch-load", arm: batchChatArm, unit: "rows/s", compare: byRatio, proxiesOnly: true, absolute: true,
			title: fmt.Sprintf("Batch rows per second: %d rows over the time from the create's answer (POST /v1/batches, over a file uploaded before) to the first poll, every %s, that saw the batch completed", c.BatchRows, batchPollEvery),
			value: batch(func(b *batchResult) num { return b.BatchRowsPerS })},
		{key: "batch_client_rows_per_s", test: "batch-load", arm: batchChatArm, unit: "rows/s", compare: byRatio, proxiesOnly: true, absolute: true,
			title: fmt.Sprintf("Client rows per second: the same %d rows as chat completions through the gateway, %d closed-loop workers, first send to last answer", c.BatchRows, conc),
			value: batch(func(b *batchResult) num { return b.ClientRowsPerS })},
		{key: "batch_start_seconds", test: "batch-load", arm: batchChatArm, unit: "s", compare: byRatio, proxiesOnly: true, absolute: true,
			title: "Batch, seconds from the create's answer to the first row recorded (the gateway's batch_rows stamps): validation, queueing of the chunks and their first claim",
			value: batch(func(b *batchResult) num { return b.StartSeconds })},
		{key: "batch_running_rows_per_s", test: "batch-load", arm: batchChatArm, unit: "rows/s", compare: byRatio, proxiesOnly: true, absolute: true,
			title: "Batch rows per second while its rows ran: from the first row recorded to the last",
			value: batch(func(b *batchResult) num { return b.RunningRowsPerS })},
		{key: "batch_end_seconds", test: "batch-load", arm: batchChatArm, unit: "s", compare: byRatio, proxiesOnly: true, absolute: true,
			title: "Batch, seconds from the last row recorded to the poll that saw the batch completed: the batch's end (finalizing, the output file) and the polls' lateness",
			value: batch(func(b *batchResult) num { return b.EndSeconds })},
		{key: "batch_chat_p99_idle", test: "batch-load", arm: batchChatArm, unit: "µs", compare: byAdded,
			title: fmt.Sprintf("Chat latency p99 of an idle gateway: chat completions at %d rps, open loop, %s measured a round, the arms taking turns in %s slots", c.BatchRate, c.BatchIdleDuration, c.batchSlot()),
			value: batch(func(b *batchResult) num { return b.Idle.P99Us })},
		{key: "batch_chat_p99_during", test: "batch-load", arm: batchChatArm, unit: "µs", compare: byAdded,
			title: "Chat latency p99 during the batch (same rate and slots, from the create's answer until the batch completed)",
			value: batch(func(b *batchResult) num { return b.DuringBatch.P99Us })},
		{key: "batch_chat_p99_during_over_idle", test: "batch-load", arm: batchChatArm, unit: "x", compare: byRatio, absolute: true,
			title: "Chat latency p99 during the batch over the idle p99, each arm its own (plain Caddy's, which runs no batch, is the machine's drift between the spells)",
			value: batch(func(b *batchResult) num { return b.BatchOverIdleP99 }), target: gatewayLimit(atMost, 1.2)},
		{key: "batch_chat_p99_rows_running_over_idle", test: "batch-load", arm: batchChatArm, unit: "x", compare: byRatio, absolute: true,
			title: "Chat latency p99 while the batch's rows ran over the idle p99: the chat of the cycles of slots whose middle fell between the first row recorded and the last, without the batch's start and end, when no row runs (fewer samples than the figure above)",
			value: batch(func(b *batchResult) num { return b.RunningOverIdleP99 })},
		{key: "batch_chat_p99_during_client", test: "batch-load", arm: batchChatArm, unit: "µs", compare: byAdded,
			title: "Chat latency p99 while the client sent the same rows through the gateway (same rate and slots)",
			value: batch(func(b *batchResult) num { return b.DuringClient.P99Us })},
		{key: "batch_chat_p99_during_client_over_idle", test: "batch-load", arm: batchChatArm, unit: "x", compare: byRatio, absolute: true,
			title: "Chat latency p99 while the client sent the rows over the idle p99 (what the same rows cost the interactive traffic when a client sends them)",
			value: batch(func(b *batchResult) num { return b.ClientOverIdleP99 })},
		{key: "batch_chat_p50_during", test: "batch-load", arm: batchChatArm, unit: "µs", compare: byAdded,
			title: "Chat latency p50 during the batch",
			value: batch(func(b *batchResult) num { return b.DuringBatch.P50Us })},
		{key: "batch_upload_seconds", test: "batch-load", arm: batchChatArm, unit: "s", compare: byRatio, proxiesOnly: true, absolute: true,
			title: fmt.Sprintf("Seconds to upload the batch file of %d rows (POST /v1/files, streamed; the gateway checks each line as it arrives)", c.BatchRows),
			value: batch(func(b *batchResult) num { return b.UploadSeconds })},
		{key: "batch_output_seconds", test: "batch-load", arm: batchChatArm, unit: "s", compare: byRatio, proxiesOnly: true, absolute: true,
			title: "Seconds to read the batch's output file back (GET /v1/files/{id}/content), each line checked",
			value: batch(func(b *batchResult) num { return b.OutputSeconds })},
	}
}

// batchLog is the log line of an arm's batch-load round.
func batchLog(name string, r batchResult) string {
	s := fmt.Sprintf("  batch load %-23s chat p99 idle %6.0f µs, during client %6.0f µs (%.2fx), during batch %6.0f µs (%.2fx), while its rows ran %6.0f µs (%.2fx, %d samples)",
		name, r.Idle.P99Us, r.DuringClient.P99Us, r.ClientOverIdleP99, r.DuringBatch.P99Us, r.BatchOverIdleP99, r.RunningP99Us, r.RunningOverIdleP99, r.RunningSamples)
	if r.Rows > 0 {
		s += fmt.Sprintf("  rows %d: client %.0f/s, batch %.0f/s (%.2fx; %d completed, %d failed, %d output lines, %d polls; first row after %.2f s, %.0f rows/s while running, completed %.2f s after the last), upload %.2f s, output %.2f s %s",
			r.Rows, r.ClientRowsPerS, r.BatchRowsPerS, r.BatchOverClient, r.BatchCompleted, r.BatchFailed, r.OutputLines, r.Polls,
			r.StartSeconds, r.RunningRowsPerS, r.EndSeconds, r.UploadSeconds, r.OutputSeconds, r.Note)
	}
	n, first := r.Errors, r.FirstError
	for _, l := range []latResult{r.Idle, r.DuringClient, r.DuringBatch} {
		n += l.Errors + l.Dropped
		first = cmp.Or(first, l.FirstError)
	}
	return s + fmt.Sprintf("  (errors %d %s)", n, first)
}
