// Package batch runs batches (POST /batches) as jobs of kind store.JobBatch on the jobs
// engine, in one of two ways:
//
//   - by the gateway, for any route: the input file's rows are cut into chunks, items of
//     queue RowQueue grouped by batch (so that one batch never takes every worker, on any
//     instance), which the Runner of any instance claims and runs row by row through the
//     gateway's own request lifecycle (a Dispatch: routing, fallback, metering), each row
//     settled against the batch's one reservation and its outcome recorded once
//     (store.BatchRows), so that a row recorded is never run again after a crash; or
//   - natively, when the batch's route's adapter is a providers.BatchRunner that supports
//     the endpoint: the upstream runs the rows, the kind polls it and streams its results
//     into the output and error files, each result priced at the route's price and settled
//     against the reservation like a gateway-run row.
//
// The job's poll (Kind) is where a batch's status moves (validating, in_progress,
// finalizing, completed; cancelling, cancelled; expired; failed), where its files are
// written, and where its counts come from. Its charges are piecewise (jobs.PiecewiseKind):
// at its end the engine releases what the reservation has left.
//
// The package knows no HTTP: handlers creates batches and renders them, module runs the
// Runner with the gateway's Dispatch.
package batch

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/modelgateway/caddy-modelgateway/files"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// Statuses of a batch, OpenAI's.
const (
	StatusValidating = "validating"
	StatusInProgress = "in_progress"
	StatusFinalizing = "finalizing"
	StatusCompleted  = "completed"
	StatusFailed     = "failed"
	StatusExpired    = "expired"
	StatusCancelling = "cancelling"
	StatusCancelled  = "cancelled"
)

// RowQueue is the queue of the chunks of rows of gateway-run batches.
const RowQueue = "batch.rows"

// DefaultChunkRows is how many rows one chunk (one claim) holds: enough that a claim's
// cost (a claim ranks every chunk queued, and the chunk's start reads the batch, its
// rows done and its file) is spread over many rows, and that a chunk's last rows, which
// run fewer at once, are few of them; few enough that a batch of some thousands of rows
// spreads over several workers. Measured on batch-load (docs/benchmark-results.md): 64
// rows a chunk ran 10,000 rows at 0.87x the rate of a client sending them, 256 at 0.93x.
const DefaultChunkRows = 256

// Spec is what a batch was created with: the job's Request.
type Spec struct {
	Endpoint         string            `json:"endpoint"`
	InputFileID      string            `json:"input_file_id"`
	CompletionWindow string            `json:"completion_window"`
	Metadata         map[string]string `json:"metadata,omitempty"`
	// Rows is how many requests the input file holds; ChunkRows how many a chunk takes.
	Rows      int `json:"rows"`
	ChunkRows int `json:"chunk_rows"`
	// Native is set when the route's upstream runs the batch (providers.BatchRunner).
	Native bool `json:"native,omitempty"`
	// Deadline is the end of the completion window: the batch expires then, its partial
	// results kept.
	Deadline time.Time `json:"deadline"`
	// EstimatedNanos is the estimate reserved, from the worst case of SampleSize rows
	// read from the start of the file, scaled to Rows (Truncated when the sample is not
	// the whole file).
	EstimatedNanos int64 `json:"estimated_nanos"`
	SampleSize     int   `json:"estimation_sample_size"`
	Truncated      bool  `json:"estimation_truncated"`
}

// State is where a batch stands: the job's Result, which only its poll writes.
type State struct {
	// The spec's timestamps, Unix seconds; 0 until reached.
	InProgressAt int64 `json:"in_progress_at,omitempty"`
	FinalizingAt int64 `json:"finalizing_at,omitempty"`
	CompletedAt  int64 `json:"completed_at,omitempty"`
	FailedAt     int64 `json:"failed_at,omitempty"`
	ExpiredAt    int64 `json:"expired_at,omitempty"`
	CancellingAt int64 `json:"cancelling_at,omitempty"`
	CancelledAt  int64 `json:"cancelled_at,omitempty"`
	// Total, Completed and Failed are the request counts.
	Total     int   `json:"total"`
	Completed int   `json:"completed"`
	Failed    int   `json:"failed"`
	CostNanos int64 `json:"cost_nanos"`
	// Chunked is set once every chunk of a gateway-run batch was queued.
	Chunked bool `json:"chunked,omitempty"`
	// GatewayRun is set on a batch whose route runs batches natively but whose upstream
	// refused this one before making anything (beyond its limits): the gateway runs it.
	GatewayRun bool `json:"gateway_run,omitempty"`
	// Ending is the end a stopping batch is headed for (cancelled or expired), and
	// DoneAtLastPoll how many rows were recorded at the poll before: the batch ends once
	// no row is recorded between two polls, so that rows in flight when it stopped count.
	Ending         string `json:"ending,omitempty"`
	DoneAtLastPoll int    `json:"done_at_last_poll,omitempty"`
	OutputFileID   string `json:"output_file_id,omitempty"`
	ErrorFileID    string `json:"error_file_id,omitempty"`
	// NativeState is the adapter's state of a native batch (its upstream's ids): never
	// shown.
	NativeState []byte `json:"native_state,omitempty"`
	// Errors are the batch's errors (why it failed), OpenAI's errors.data.
	Errors []Error `json:"errors,omitempty"`
}

// Error is one of a batch's errors.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Param   string `json:"param,omitempty"`
	Line    int    `json:"line,omitempty"`
}

// SpecOf reads the spec of batch job j.
func SpecOf(j store.Job) (Spec, error) {
	var s Spec
	if err := json.Unmarshal(j.Request, &s); err != nil {
		return Spec{}, fmt.Errorf("batch %s: its spec does not read: %w", j.ID, err)
	}
	return s, nil
}

// StateOf reads the state of batch job j; a batch whose poll wrote none yet has the zero
// state.
func StateOf(j store.Job) State {
	var s State
	if len(j.Result) > 0 {
		_ = json.Unmarshal(j.Result, &s) // the poll's own; a zero state renders what it can
	}
	return s
}

// RowGenerationID is the generation id of row index of batch batchID: derived from both,
// so that a row run again after a crash settles under the same id and is charged once.
func RowGenerationID(batchID string, index int) string {
	rest := batchID
	if _, r, ok := strings.Cut(batchID, "_"); ok {
		rest = r
	}
	return "gen_batch_" + rest + "_" + strconv.Itoa(index)
}

// OutputFileID and ErrorFileID are the ids of a batch's output and error files: derived
// from its id, so that a poll that wrote them and died before it was recorded finds them
// written rather than writing others.
func OutputFileID(batchID string) string { return "file-" + idRest(batchID) + "-output" }

// ErrorFileID is the id of a batch's error file (see OutputFileID).
func ErrorFileID(batchID string) string { return "file-" + idRest(batchID) + "-errors" }

func idRest(id string) string {
	if _, r, ok := strings.Cut(id, "_"); ok {
		return r
	}
	return id
}

// Chunk is the payload of a chunk of rows in RowQueue: Count rows of batch BatchID from
// row First, whose line starts at byte Offset of the input file, so that no chunk reads
// the file from its start.
type Chunk struct {
	BatchID     string `json:"batch_id"`
	WorkspaceID string `json:"workspace_id"`
	First       int    `json:"first"`
	Count       int    `json:"count"`
	Offset      int64  `json:"offset"`
}

// ChunkID names chunk n of a batch in RowQueue.
func ChunkID(batchID string, n int) string { return batchID + "/" + strconv.Itoa(n) }

// ScanRows reads a batch file from r, calling fn with each request line, its index among
// the requests (from 0) and the byte offset its line starts at, holding one line at a
// time. A line that does not read is a *files.LineError (the file was checked when it was
// stored; a line cut by a ranged read past its end is one too).
func ScanRows(r io.Reader, base int64, firstIndex int, fn func(index int, offset int64, l files.BatchLine) error) error {
	return scanLines(r, base, firstIndex, func(index, lineNo int, offset int64, line []byte) error {
		l, bad := files.ParseBatchLine(line)
		if bad != "" {
			return &files.LineError{Line: lineNo, Reason: bad}
		}
		return fn(index, offset, l)
	})
}

// scanLines reads a batch file from r, calling fn with each request line (trimmed; a blank
// line is no request), its index among the requests (from 0), its line number (from 1)
// and the byte offset its line starts at, holding one line at a time.
func scanLines(r io.Reader, base int64, firstIndex int, fn func(index, lineNo int, offset int64, line []byte) error) error {
	br := bufio.NewReaderSize(r, 64<<10)
	offset, index := base, firstIndex
	for n := 1; ; n++ {
		line, err := files.ReadLine(br)
		start := offset
		offset += int64(len(line))
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		if trimmed := bytes.TrimSpace(line); len(trimmed) > 0 {
			if ferr := fn(index, n, start, trimmed); ferr != nil {
				return ferr
			}
			index++
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
	}
}

// PathOf is the gateway path of a batch endpoint, relative to the API's base path:
// "/v1/chat/completions" → "/chat/completions".
func PathOf(endpoint string) string { return strings.TrimPrefix(endpoint, "/v1") }

// unix is t in Unix seconds.
func unix(t time.Time) int64 { return t.Unix() }
