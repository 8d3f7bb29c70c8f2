package batch

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/blobs"
	"github.com/modelgateway/caddy-modelgateway/files"
	"github.com/modelgateway/caddy-modelgateway/jobs"
	"github.com/modelgateway/caddy-modelgateway/store"
	"github.com/modelgateway/caddy-modelgateway/store/sqlite"
)

func rowsFile(n int) []byte {
	var b bytes.Buffer
	for i := range n {
		// Blank lines and varying lengths: offsets must count them.
		fmt.Fprintf(&b, `{"custom_id":"r%d","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[{"role":"user","content":"%s"}]}}`+"\n", i, strings.Repeat("x", i*7))
		if i%3 == 0 {
			b.WriteString("\n")
		}
	}
	return b.Bytes()
}

// ScanRows gives each row the byte offset its line starts at, so that reading from the
// offset of row i (as a chunk does, with i its first index) yields row i first and the
// rows after it, in order.
func TestScanRowsOffsets(t *testing.T) {
	data := rowsFile(20)
	var offsets []int64
	if err := ScanRows(bytes.NewReader(data), 0, 0, func(i int, off int64, l files.BatchLine) error {
		if l.CustomID != fmt.Sprintf("r%d", i) {
			t.Fatalf("row %d is %s", i, l.CustomID)
		}
		offsets = append(offsets, off)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(offsets) != 20 {
		t.Fatalf("%d rows", len(offsets))
	}
	for first := range 20 {
		var got []string
		err := ScanRows(bytes.NewReader(data[offsets[first]:]), offsets[first], first, func(i int, off int64, l files.BatchLine) error {
			if off != offsets[i] {
				t.Fatalf("from row %d: row %d at offset %d, want %d", first, i, off, offsets[i])
			}
			got = append(got, l.CustomID)
			return nil
		})
		if err != nil || len(got) != 20-first || got[0] != fmt.Sprintf("r%d", first) {
			t.Fatalf("from row %d: %v, %v", first, got, err)
		}
	}
	// A line that does not read is a *files.LineError.
	err := ScanRows(strings.NewReader("{\"custom_id\":\"a\"}\n"), 0, 0, func(int, int64, files.BatchLine) error { return nil })
	if _, ok := err.(*files.LineError); !ok {
		t.Fatalf("a bad line: %v", err)
	}
}

// A gateway-run batch whose window ended stops taking rows (its cancellation is asked,
// which the row workers read), waits until no row is recorded between two polls, then
// ends expired with the rows that ran in its output file.
func TestBatchExpiresWithPartialResults(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := sqlite.Open(ctx, filepath.Join(dir, "b.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	b, err := blobs.NewFS(filepath.Join(dir, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	const ws = "ws_expiry"
	if err := s.CreateWorkspace(ctx, store.Workspace{ID: ws, Name: "expiry"}); err != nil {
		t.Fatal(err)
	}
	// Rows over two pages of the unrun rows' writes, two of them run.
	const rows = 2*store.MaxBatchRowPage + 3
	ran := []int{1, store.MaxBatchRowPage + 7}
	if _, err := b.Put(ctx, files.BlobKey(ws, "file-in"), bytes.NewReader(rowsFile(rows)), -1, ""); err != nil {
		t.Fatal(err)
	}
	spec, _ := json.Marshal(Spec{Endpoint: "/v1/chat/completions", InputFileID: "file-in", CompletionWindow: "1h", Rows: rows,
		ChunkRows: DefaultChunkRows, Deadline: time.Now().Add(-time.Second)})
	state, _ := json.Marshal(State{Chunked: true, Total: rows})
	j := store.Job{ID: "batch_expiry", WorkspaceID: ws, Kind: store.JobBatch, Status: StatusInProgress, Request: spec, Result: state}
	for _, i := range ran {
		if _, err := s.RecordBatchRow(ctx, store.BatchRow{BatchID: j.ID, Index: i, CustomID: fmt.Sprintf("r%d", i), StatusCode: 200, Body: json.RawMessage(`{"ok":true}`), CostNanos: 5}); err != nil {
			t.Fatal(err)
		}
	}
	k := &Kind{}
	env := jobs.Env{Store: s, Blobs: b}

	rep, err := k.Poll(ctx, env, j)
	if err != nil {
		t.Fatal(err)
	}
	if at, _ := s.BatchCancelRequested(ctx, j.ID); rep.Status != StatusInProgress || at.IsZero() {
		t.Fatalf("first poll past the window: %+v; stop asked at %v", rep, at)
	}
	j.Result = rep.Result
	rep, err = k.Poll(ctx, env, j)
	if err != nil {
		t.Fatal(err)
	}
	var st State
	_ = json.Unmarshal(rep.Result, &st)
	if rep.Status != StatusExpired || rep.ErrorCode != "batch_expired" || !strings.Contains(rep.ErrorMessage, fmt.Sprintf("2 of %d rows ran", rows)) ||
		st.ExpiredAt == 0 || st.Completed != 2 || st.Failed != rows-2 || st.CostNanos != 10 ||
		st.OutputFileID != OutputFileID(j.ID) || st.ErrorFileID != ErrorFileID(j.ID) {
		t.Fatalf("second poll: %+v, state %+v", rep, st)
	}
	// The rows that never ran are in the error file, in order, as expired.
	_, erc, err := files.Open(ctx, s, b, ws, st.ErrorFileID)
	if err != nil {
		t.Fatal(err)
	}
	errs, _ := io.ReadAll(erc)
	_ = erc.Close()
	var unrun []string
	for _, raw := range bytes.Split(bytes.TrimSpace(errs), []byte("\n")) {
		var l OutputLine
		if err := json.Unmarshal(raw, &l); err != nil || l.Response != nil || l.Error == nil || l.Error.Code != "batch_expired" {
			t.Fatalf("error line %s: %v", raw, err)
		}
		unrun = append(unrun, l.CustomID)
	}
	var want []string
	for i := range rows {
		if !slices.Contains(ran, i) {
			want = append(want, fmt.Sprintf("r%d", i))
		}
	}
	if !slices.Equal(unrun, want) {
		t.Fatalf("error file: %d rows, want the %d never run, each once, in order", len(unrun), len(want))
	}
	_, rc, err := files.Open(ctx, s, b, ws, st.OutputFileID)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(rc)
	_ = rc.Close()
	outLines := bytes.Split(bytes.TrimSpace(out), []byte("\n"))
	if len(outLines) != len(ran) {
		t.Fatalf("output %q: want the %d rows that ran", out, len(ran))
	}
	for k, raw := range outLines {
		var line OutputLine
		if err := json.Unmarshal(raw, &line); err != nil || line.CustomID != fmt.Sprintf("r%d", ran[k]) || line.Response.StatusCode != 200 {
			t.Fatalf("output line %s: %v", raw, err)
		}
	}
	// A poll of the ended batch that died before its end was recorded writes nothing anew.
	rep2, err := k.Poll(ctx, env, j)
	if err != nil || rep2.Status != StatusExpired {
		t.Fatalf("a repeated end: %+v, %v", rep2, err)
	}
}
