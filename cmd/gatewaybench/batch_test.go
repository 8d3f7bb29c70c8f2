package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// batchInputLine is a line of a batch input file, as the gateway reads it.
type batchInputLine struct {
	CustomID string          `json:"custom_id"`
	Method   string          `json:"method"`
	URL      string          `json:"url"`
	Body     json.RawMessage `json:"body"`
}

// TestWriteBatchRows: every line is a batch input row of the chat endpoint with the body as
// given and its own custom_id, which reads back as the row's index.
func TestWriteBatchRows(t *testing.T) {
	a := &arm{model: "bench-oa"}
	body := a.body(false, directive{n: 8, latency: time.Millisecond})
	var buf bytes.Buffer
	if err := writeBatchRows(&buf, 1200, body); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(&buf)
	i := 0
	for ; sc.Scan(); i++ {
		var l batchInputLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("line %d: %v: %s", i+1, err, sc.Bytes())
		}
		if idx, ok := parseBatchRowID(l.CustomID); !ok || idx != i {
			t.Fatalf("line %d: custom_id %q reads as %d, %v", i+1, l.CustomID, idx, ok)
		}
		if l.Method != "POST" || l.URL != "/v1/chat/completions" || !bytes.Equal(l.Body, body) {
			t.Fatalf("line %d: %+v", i+1, l)
		}
		var chat struct {
			Model     string `json:"model"`
			MaxTokens int    `json:"max_tokens"`
		}
		if err := json.Unmarshal(l.Body, &chat); err != nil || chat.Model != "bench-oa" || chat.MaxTokens <= 0 {
			t.Fatalf("line %d: the body has model %q and max_tokens %d (%v): the estimate needs a bound", i+1, chat.Model, chat.MaxTokens, err)
		}
	}
	if i != 1200 {
		t.Fatalf("%d lines, want 1200", i)
	}
	for _, bad := range []string{"row-", "row-01", "row--1", "row-1x", "Row-1", "1"} {
		if _, ok := parseBatchRowID(bad); ok {
			t.Errorf("custom_id %q read as a row's", bad)
		}
	}
}

// outputLine is a line of a batch output file as the gateway writes it.
func outputLine(customID string, status int) string {
	return fmt.Sprintf(`{"id":"batch_req_%s","custom_id":%q,"response":{"status_code":%d,"request_id":"req_1","body":{"id":"chatcmpl-bench","object":"chat.completion"}},"error":null}`,
		customID, customID, status)
}

// TestCheckBatchOutput: an output of one 200 line per row passes in any order; a missing,
// repeated, foreign or failed row, an extra line or a line that is not JSON fails, naming
// what is wrong.
func TestCheckBatchOutput(t *testing.T) {
	const n = 50
	good := func() []string {
		var lines []string
		for i := 0; i < n; i++ {
			lines = append(lines, outputLine(batchRowID(i), 200))
		}
		rand.Shuffle(len(lines), func(i, j int) { lines[i], lines[j] = lines[j], lines[i] })
		return lines
	}
	for _, tc := range []struct {
		name  string
		edit  func([]string) []string
		lines int64
		want  string
	}{
		{"every row once, shuffled", func(l []string) []string { return l }, n, ""},
		{"a blank line at the end", func(l []string) []string { return append(l, "") }, n, ""},
		{"a row missing", func(l []string) []string { return l[1:] }, n - 1, "49 lines, want 50"},
		{"a row twice", func(l []string) []string { return append(l, l[3]) }, n + 1, "repeats custom_id"},
		{"a foreign row", func(l []string) []string { l[7] = outputLine("other-7", 200); return l }, n, `custom_id "other-7", no row's`},
		{"a row past the last", func(l []string) []string { l[7] = outputLine(batchRowID(n), 200); return l }, n, "no row's"},
		{"a custom_id that is no index", func(l []string) []string { l[9] = outputLine("row-x", 200); return l }, n, `custom_id "row-x", no row's`},
		{"a row that failed", func(l []string) []string {
			for i, s := range l {
				if strings.Contains(s, `"row-6"`) {
					l[i] = `{"id":"batch_req_6","custom_id":"row-6","response":null,"error":{"code":"server_error","message":"upstream down"}}`
				}
			}
			return l
		}, n, "(row-6) has no 200 answer"},
		{"a row answered 500", func(l []string) []string {
			for i, s := range l {
				if strings.Contains(s, `"row-5"`) {
					l[i] = outputLine("row-5", 500)
				}
			}
			return l
		}, n, "(row-5) has no 200 answer"},
		{"not JSON", func(l []string) []string { l[0] = "{oops"; return l }, n, "line 1 of the output"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lines, err := checkBatchOutput(strings.NewReader(strings.Join(tc.edit(good()), "\n")+"\n"), n)
			if lines != tc.lines {
				t.Errorf("%d lines counted, want %d", lines, tc.lines)
			}
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("%v, want an error with %q", err, tc.want)
			}
		})
	}
}

// fakeBatches speaks the OpenAI Files and Batches wire as the gateway does, running the
// rows itself: a batch is validating at its create, in_progress at its first poll and ends
// at its second, as end says.
type fakeBatches struct {
	t  *testing.T
	mu sync.Mutex
	// files holds the uploads by id; chunked records whether each came without a length.
	files   map[string][]byte
	chunked map[string]bool
	batches map[string]*fakeBatch
	// end is how a batch ends: "completed" (every row answered 200), "failed", or
	// "miscounted" (completed, one row short in request_counts).
	end  string
	auth atomic.Int64 // requests without the key
}

type fakeBatch struct {
	obj   map[string]any
	rows  int
	polls int
}

func newFakeBatches(t *testing.T) (*fakeBatches, *httptest.Server) {
	f := &fakeBatches{t: t, files: map[string][]byte{}, chunked: map[string]bool{}, batches: map[string]*fakeBatch{}, end: "completed"}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/files", f.upload)
	mux.HandleFunc("GET /v1/files/{id}/content", f.content)
	mux.HandleFunc("POST /v1/batches", f.create)
	mux.HandleFunc("GET /v1/batches/{id}", f.get)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer k" {
			f.auth.Add(1)
			http.Error(w, `{"error":{"message":"no key"}}`, http.StatusUnauthorized)
			return
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return f, srv
}

func (f *fakeBatches) upload(w http.ResponseWriter, r *http.Request) {
	mr, err := r.MultipartReader()
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var purpose string
	var data []byte
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		switch p.FormName() {
		case "purpose":
			v, _ := io.ReadAll(p)
			purpose = string(v)
		case "file":
			if purpose != "batch" {
				http.Error(w, "the file came before its purpose", http.StatusBadRequest)
				return
			}
			data, _ = io.ReadAll(p)
		}
	}
	f.mu.Lock()
	id := fmt.Sprintf("file-%d", len(f.files)+1)
	f.files[id], f.chunked[id] = data, r.ContentLength < 0
	f.mu.Unlock()
	fmt.Fprintf(w, `{"id":%q,"object":"file","bytes":%d,"purpose":%q,"status":"processed"}`, id, len(data), purpose)
}

func (f *fakeBatches) content(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	data, ok := f.files[r.PathValue("id")]
	f.mu.Unlock()
	if !ok {
		http.NotFound(w, r)
		return
	}
	_, _ = w.Write(data)
}

func (f *fakeBatches) create(w http.ResponseWriter, r *http.Request) {
	var req struct {
		InputFileID      string `json:"input_file_id"`
		Endpoint         string `json:"endpoint"`
		CompletionWindow string `json:"completion_window"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Endpoint != "/v1/chat/completions" || req.CompletionWindow != "24h" {
		http.Error(w, fmt.Sprintf("bad create %+v: %v", req, err), http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	in, ok := f.files[req.InputFileID]
	if !ok {
		http.Error(w, "no such file", http.StatusNotFound)
		return
	}
	// The rows' answers, in reverse order as a gateway's workers may finish them.
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(in))
	for sc.Scan() {
		var l batchInputLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		out = append([]string{outputLine(l.CustomID, 200)}, out...)
	}
	id := fmt.Sprintf("batch_%d", len(f.batches)+1)
	outID := "file-out-" + id
	f.files[outID] = []byte(strings.Join(out, "\n") + "\n")
	f.batches[id] = &fakeBatch{rows: len(out), obj: map[string]any{"id": id, "object": "batch", "status": "validating", "output_file_id": outID,
		"request_counts": map[string]int{"total": len(out), "completed": 0, "failed": 0}}}
	_ = json.NewEncoder(w).Encode(f.batches[id].obj)
}

func (f *fakeBatches) get(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.batches[r.PathValue("id")]
	if !ok {
		http.NotFound(w, r)
		return
	}
	b.polls++
	switch {
	case b.polls == 1:
		b.obj["status"] = "in_progress"
	case f.end == "failed":
		b.obj["status"] = "failed"
		b.obj["errors"] = map[string]any{"object": "list", "data": []map[string]any{{"code": "insufficient_quota", "message": "the wallet ran dry"}}}
	default:
		done := b.rows
		if f.end == "miscounted" {
			done--
		}
		b.obj["status"] = "completed"
		b.obj["request_counts"] = map[string]int{"total": b.rows, "completed": done, "failed": 0}
	}
	_ = json.NewEncoder(w).Encode(b.obj)
}

// TestRunBatch: the rows go up as a streamed batch file with the purpose first, the batch is
// created over it and polled to its end, its counts and output are checked; a failed batch
// and a batch whose counts are short are errors naming why.
func TestRunBatch(t *testing.T) {
	f, srv := newFakeBatches(t)
	ctx := context.Background()
	body := (&arm{model: "bench-oa"}).body(false, directive{n: 4})
	started := 0
	run, err := runBatch(ctx, srv.Client(), srv.URL, "k", 500, body, func() { started++ })
	if err != nil {
		t.Fatal(err)
	}
	if started != 1 || run.polls != 2 || run.outputLines != 500 || run.obj.RequestCounts.Completed != 500 || run.wait <= 0 || run.upload <= 0 {
		t.Fatalf("run %+v, started %d", run, started)
	}
	if !f.chunked["file-1"] {
		t.Error("the batch file was sent with a length: it was not streamed")
	}
	if n := bytes.Count(f.files["file-1"], []byte("\n")); n != 500 {
		t.Errorf("the uploaded file has %d lines, want 500", n)
	}

	f.end = "failed"
	if _, err := runBatch(ctx, srv.Client(), srv.URL, "k", 5, body, nil); err == nil || !strings.Contains(err.Error(), "failed") || !strings.Contains(err.Error(), "insufficient_quota: the wallet ran dry") {
		t.Fatalf("a failed batch: %v", err)
	}
	f.end = "miscounted"
	if _, err := runBatch(ctx, srv.Client(), srv.URL, "k", 5, body, nil); err == nil || !strings.Contains(err.Error(), "completed 4") {
		t.Fatalf("a batch one row short: %v", err)
	}
	if _, err := runBatch(ctx, srv.Client(), srv.URL, "wrong", 5, body, nil); err == nil || !strings.Contains(err.Error(), "status 401") {
		t.Fatalf("a refused upload: %v", err)
	}
	if f.auth.Load() != 1 {
		t.Errorf("%d requests came without the key, want the one refused upload", f.auth.Load())
	}
}

// TestSendRows: the client sends exactly n rows, never more than conc at once, and counts
// the failed ones as errors, not as rows.
func TestSendRows(t *testing.T) {
	var inFlight, most, seen atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := most.Load(); k > m && !most.CompareAndSwap(m, k); m = most.Load() {
		}
		if seen.Add(1)%10 == 0 {
			http.Error(w, "no", http.StatusServiceUnavailable)
			return
		}
		time.Sleep(time.Millisecond) // so that the workers overlap
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	defer srv.Close()
	a := &arm{url: srv.URL, client: srv.Client(), key: "k"}
	var errs errorLog
	ok, d := sendRows(context.Background(), a, 300, 8, []byte(`{}`), &errs)
	if seen.Load() != 300 || ok != 270 || errs.n.Load() != 30 || d <= 0 {
		t.Fatalf("sent %d, ok %d, errors %d, %s", seen.Load(), ok, errs.n.Load(), d)
	}
	if most.Load() > 8 {
		t.Fatalf("%d rows at once, want at most 8", most.Load())
	}
	if !strings.Contains(errs.first, "status 503") {
		t.Fatalf("first error %q", errs.first)
	}
}

// TestChatWhile: the chat takes turns slot by slot until the phase is done at the end of a
// cycle, one cycle at least, each arm one slot a cycle.
func TestChatWhile(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	defer srv.Close()
	arms := []*arm{{name: "caddy", kind: kindCaddy, url: srv.URL, client: srv.Client()}, {name: batchChatArm, kind: kindGateway, url: srv.URL, client: srv.Client()}}
	body := func(*arm) []byte { return []byte(`{}`) }
	for _, cycles := range []int{1, 3} {
		checks := 0
		res, windows := chatWhile(context.Background(), arms, 200, 20*time.Millisecond, body, func() bool { checks++; return checks >= cycles })
		if len(windows) != cycles {
			t.Errorf("%d cycles: %d windows", cycles, len(windows))
		}
		for k, w := range windows {
			if !w.end.After(w.start) || k > 0 && w.start.Before(windows[k-1].end) {
				t.Errorf("%d cycles: window %d %v–%v out of order", cycles, k, w.start, w.end)
			}
		}
		for _, a := range arms {
			r := res[a.name]
			if len(r.slots) != cycles || r.Errors != 0 || r.Sent == 0 {
				t.Errorf("%d cycles: arm %s has %d slots, %d sent, %d errors", cycles, a.name, len(r.slots), r.Sent, r.Errors)
			}
		}
	}
}

// TestBatchResult: the rates and ratios of a round, and no batch rate for a batch that did
// not complete every row.
func TestBatchResult(t *testing.T) {
	idle, client, during := latResult{P99Us: 2000}, latResult{P99Us: 3000}, latResult{P99Us: 2200}
	r := newBatchResult(idle, client, during, true)
	if r.BatchOverIdleP99 != 1.1 || r.ClientOverIdleP99 != 1.5 {
		t.Fatalf("p99 ratios %v %v, want 1.1 1.5", r.BatchOverIdleP99, r.ClientOverIdleP99)
	}
	run := batchRun{rows: 10000, upload: 500 * time.Millisecond, wait: 4 * time.Second, output: time.Second, polls: 80, outputLines: 10000}
	run.obj.RequestCounts.Completed = 10000
	r.setRows(10000, 16, 9990, 3*time.Second, run, true)
	if r.ClientRowsPerS != 3330 || r.BatchRowsPerS != 2500 || math.Abs(float64(r.BatchOverClient)-2500.0/3330) > 1e-12 {
		t.Fatalf("client %v rows/s, batch %v rows/s, ratio %v", r.ClientRowsPerS, r.BatchRowsPerS, r.BatchOverClient)
	}
	if r.UploadSeconds != 0.5 || r.BatchSeconds != 4 || r.OutputSeconds != 1 || r.BatchCompleted != 10000 || r.ClientConcurrency != 16 {
		t.Fatalf("%+v", r)
	}
	failed := newBatchResult(idle, client, during, false)
	failed.setRows(10000, 16, 10000, 3*time.Second, batchRun{wait: 4 * time.Second}, false)
	if !math.IsNaN(float64(failed.BatchRowsPerS)) || !math.IsNaN(float64(failed.BatchOverClient)) || failed.BatchSeconds != 4 {
		t.Fatalf("a batch that did not complete: %v rows/s, ratio %v, %v s", failed.BatchRowsPerS, failed.BatchOverClient, failed.BatchSeconds)
	}
	if !math.IsNaN(float64(failed.BatchOverIdleP99)) || failed.ClientOverIdleP99 != 1.5 {
		t.Fatalf("a batch that did not complete: p99 ratios %v during it, %v during the client's", failed.BatchOverIdleP99, failed.ClientOverIdleP99)
	}
	created := time.UnixMilli(1_795_963_498_305)
	run.createdAt, run.completedSeen = created, created.Add(4*time.Second)
	r.setSpan(run, batchRowSpan{first: created.Add(1500 * time.Millisecond), last: created.Add(3500 * time.Millisecond), rows: 10000})
	if r.StartSeconds != 1.5 || r.EndSeconds != 0.5 || r.RunningRowsPerS != 9999.0/2 {
		t.Fatalf("span: start %v s, end %v s, %v rows/s while running", r.StartSeconds, r.EndSeconds, r.RunningRowsPerS)
	}
	short := newBatchResult(idle, client, during, false)
	short.setSpan(run, batchRowSpan{first: created.Add(time.Second), last: created.Add(2 * time.Second), rows: 6000})
	if short.StartSeconds != 1 || !math.IsNaN(float64(short.RunningRowsPerS)) {
		t.Fatalf("a span of some rows: start %v s, %v rows/s while running", short.StartSeconds, short.RunningRowsPerS)
	}
	unknown := newBatchResult(latResult{P99Us: nan}, client, during, true)
	if !math.IsNaN(float64(unknown.BatchOverIdleP99)) {
		t.Fatalf("a ratio over an unknown idle p99: %v", unknown.BatchOverIdleP99)
	}
}

// TestBatchOptions: the gateway gets the batch options only for the batch-load test, with
// the flags' values; the batch's row concurrency is the tightest of its bounds, and the
// client's defaults to it.
func TestBatchOptions(t *testing.T) {
	c := config{Tests: "all", BatchChunks: 2, BatchProcessChunks: 4, BatchRowsPerChunk: 8, BatchProviderRows: 16}
	if o := c.batchOptions(); o != "" {
		t.Fatalf("options without the batch-load test: %q", o)
	}
	for _, tc := range []struct {
		batch, process, perChunk, provider, client int
		want, wantClient                           int
	}{
		{2, 4, 8, 16, 0, 16, 16},
		{2, 4, 8, 10, 0, 10, 10},  // the provider's bound
		{4, 3, 8, 100, 0, 24, 24}, // the process's chunks
		{4, 8, 8, 100, 5, 32, 5},  // -batch-c
	} {
		c := config{Tests: "all", BatchChunks: tc.batch, BatchProcessChunks: tc.process, BatchRowsPerChunk: tc.perChunk, BatchProviderRows: tc.provider, BatchConc: tc.client}
		if c.batchRowConc() != tc.want || c.batchClientConc() != tc.wantClient {
			t.Errorf("%+v: row concurrency %d, client %d; want %d, %d", tc, c.batchRowConc(), c.batchClientConc(), tc.want, tc.wantClient)
		}
	}
	for _, tests := range []string{"jobs", "batch-load", "latency,batch-load"} {
		c := config{Tests: tests, BatchChunks: 3, BatchProcessChunks: 5, BatchRowsPerChunk: 7, BatchProviderRows: 40}
		o := c.batchOptions()
		for _, want := range []string{"chunks 5\n", "rows_per_chunk 7\n", "batch_chunks 3\n", "provider_rows 40\n"} {
			if !strings.Contains(o, want) {
				t.Errorf("-tests %s: options %q lack %q", tests, o, want)
			}
		}
		if cf := gatewayCaddyfile(1, 2, 3, 4, "/db", o); !strings.Contains(cf, o) {
			t.Errorf("-tests %s: the Caddyfile lacks the options:\n%s", tests, cf)
		}
	}
}

// TestBuildBatchFigures: the rows ratio and the p99 ratio are judged on the gateway's own
// values, plain Caddy's p99 ratio shown beside as the control; the rows figures have no
// Caddy row; the batch's errors count.
func TestBuildBatchFigures(t *testing.T) {
	round := func(idle, during, client, batchRPS, clientRPS float64, errs int64) roundResult {
		r := newBatchResult(latResult{P99Us: num(idle)}, latResult{P99Us: num(client)}, latResult{P99Us: num(during)}, true)
		r.BatchRowsPerS, r.ClientRowsPerS = num(batchRPS), num(clientRPS)
		r.BatchOverClient = num(ratio(batchRPS, clientRPS))
		r.Errors = errs
		return roundResult{Batch: &r}
	}
	rep := &report{Config: config{Tests: "batch-load", Rounds: 3, BatchRows: 10000, BatchChunks: 2, BatchProcessChunks: 4, BatchRowsPerChunk: 8, BatchProviderRows: 16, BatchRate: 200, BatchIdleDuration: 3 * time.Second},
		Arms: []string{"caddy", batchChatArm},
		Rounds: map[string][]roundResult{
			"caddy":      {round(1000, 1050, 1100, math.NaN(), math.NaN(), 0), round(1000, 1000, 1000, math.NaN(), math.NaN(), 0), round(1000, 1000, 1000, math.NaN(), math.NaN(), 0)},
			batchChatArm: {round(1000, 1100, 1500, 2700, 3000, 0), round(1000, 1300, 1400, 2850, 3000, 1), round(1000, 1150, 1600, 3000, 3000, 0)},
		}}
	rep.build()
	got := targetVerdicts(rep)
	for k, want := range map[string]string{
		"batch_over_client_rows_per_s >= 0.90 x " + batchChatArm:    "pass 0.95 x (per round 0.90 0.95 1.00)",
		"batch_chat_p99_during_over_idle <= 1.20 x " + batchChatArm: "pass 1.15 x (per round 1.10 1.30 1.15)",
		"errors = 0 " + batchChatArm:                                "FAIL 1",
		"errors = 0 caddy":                                          "pass 0",
	} {
		if got[k] != want {
			t.Errorf("%s: %q, want %q (all: %v)", k, got[k], want, got)
		}
	}
	rows := figureArms(rep)
	for key, want := range map[string]string{
		"batch_over_client_rows_per_s":    batchChatArm,
		"batch_client_rows_per_s":         batchChatArm,
		"batch_chat_p99_during_over_idle": "caddy," + batchChatArm,
		"batch_chat_p99_idle":             "caddy," + batchChatArm,
		"throughput":                      "",
	} {
		if rows[key] != want {
			t.Errorf("%s: rows %q, want %q", key, rows[key], want)
		}
	}
	var out bytes.Buffer
	rep.print(&out)
	if !strings.Contains(out.String(), "Batch rows per second over the client's: 10000 chat rows") {
		t.Errorf("no batch figure in the report:\n%s", out.String())
	}
}

// TestBatchRowSpan: the span of a batch's rows is read from the gateway's batch_rows, the
// batch's own and no other's.
func TestBatchRowSpan(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gateway.db")
	db, err := sql.Open("sqlite3", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE batch_rows (batch_id TEXT NOT NULL, idx INTEGER NOT NULL, created_at INTEGER NOT NULL, PRIMARY KEY (batch_id, idx))`); err != nil {
		t.Fatal(err)
	}
	for i, at := range []int64{5000, 4000, 9000, 7000} {
		if _, err := db.Exec(`INSERT INTO batch_rows VALUES ('batch_a', ?, ?)`, i, at); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Exec(`INSERT INTO batch_rows VALUES ('batch_b', 0, 1000), ('batch_b', 1, 99000)`); err != nil {
		t.Fatal(err)
	}
	b := &bench{dbPaths: []string{path}}
	sp, err := b.batchRowSpan("batch_a")
	if err != nil || sp.rows != 4 || sp.first.UnixMilli() != 4000 || sp.last.UnixMilli() != 9000 {
		t.Fatalf("span %+v, %v", sp, err)
	}
	if sp, err := b.batchRowSpan("batch_none"); err != nil || sp.rows != 0 {
		t.Fatalf("span of a batch without rows %+v, %v", sp, err)
	}
}

// TestP99Within: the p99 is of the slots of the cycles whose middle lies in the span, and a
// span that holds no cycle's middle has none.
func TestP99Within(t *testing.T) {
	t0 := time.UnixMilli(1_795_963_000_000)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	cycles := []window{{at(0), at(500)}, {at(500), at(1000)}, {at(1000), at(1500)}, {at(1500), at(2000)}}
	slot := func(base float64) []float64 {
		var xs []float64
		for i := 1; i <= 50; i++ {
			xs = append(xs, base+float64(i))
		}
		return xs
	}
	r := latResult{slots: [][]float64{slot(9000), slot(100), slot(200), slot(9000)}}
	// The span from 0.6 s to 1.7 s holds the middles of cycles 1 (0.75 s) and 2 (1.25 s).
	p, n := p99Within(r, cycles, at(600), at(1700))
	if n != 100 || p != 249 { // nearest rank: the 99th of 101..150, 201..250
		t.Fatalf("p99 %v of %d samples, want 249 of 100", p, n)
	}
	if p, n := p99Within(r, cycles, at(1300), at(1700)); n != 0 || !math.IsNaN(float64(p)) {
		t.Fatalf("a span with no cycle's middle: p99 %v of %d samples", p, n)
	}
	res := newBatchResult(latResult{P99Us: 200}, latResult{}, r, true)
	res.setRunningChat(r, cycles, batchRowSpan{first: at(600), last: at(1700), rows: 10})
	if res.RunningP99Us != 249 || res.RunningSamples != 100 || res.RunningOverIdleP99 != 1.245 {
		t.Fatalf("running chat: p99 %v of %d samples, %vx idle", res.RunningP99Us, res.RunningSamples, res.RunningOverIdleP99)
	}
}
