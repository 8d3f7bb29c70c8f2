package openai

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"

	"github.com/modelgateway/caddy-modelgateway/internal/rawjson"
	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/internal/upstreamhttp"
)

// Limits of one OpenAI batch: the Batch API fails a batch whose input file has more rows
// or bytes than this only after it was uploaded and validated, so the adapter refuses it
// while streaming the upload, before any batch is created.
const (
	MaxBatchRows  = 50_000
	MaxBatchBytes = 200 << 20
)

// maxBatchLine bounds one line of a batch's output or error file: a line holds one answer,
// which an interactive call would not read past the same bound.
const maxBatchLine = upstreamhttp.MaxResponseBody

// batchEndpoints are the batch endpoints of the gateway that OpenAI's Batch API runs.
var batchEndpoints = map[string]bool{"/v1/chat/completions": true, "/v1/responses": true, "/v1/embeddings": true}

// ErrUnsupportedBatch is the cause of a batch refused before any batch is created upstream
// (an endpoint the Batch API does not run, more rows than it takes, a row it cannot read):
// the gateway may run such a batch itself.
var ErrUnsupportedBatch = errors.New("batch not supported by the OpenAI Batch API")

// batchState is what the adapter keeps between calls, BatchStatus.State: the batch's
// files at the upstream.
type batchState struct {
	InputFileID  string `json:"input_file_id,omitempty"`
	OutputFileID string `json:"output_file_id,omitempty"`
	ErrorFileID  string `json:"error_file_id,omitempty"`
}

// batchObject is OpenAI's batch, as POST /batches, GET /batches/{id} and the cancel
// answer it.
type batchObject struct {
	ID            string `json:"id"`
	Status        string `json:"status"`
	InputFileID   string `json:"input_file_id"`
	OutputFileID  string `json:"output_file_id"`
	ErrorFileID   string `json:"error_file_id"`
	RequestCounts struct {
		Total     int `json:"total"`
		Completed int `json:"completed"`
		Failed    int `json:"failed"`
	} `json:"request_counts"`
	Errors *struct {
		Data []struct {
			Code    looseString `json:"code"`
			Message string      `json:"message"`
			Line    *int        `json:"line"`
		} `json:"data"`
	} `json:"errors"`
}

// batchOutputLine is a line of a batch's output or error file.
type batchOutputLine struct {
	CustomID string `json:"custom_id"`
	Response *struct {
		StatusCode int             `json:"status_code"`
		RequestID  string          `json:"request_id"`
		Body       json.RawMessage `json:"body"`
	} `json:"response"`
	Error *struct {
		Code    looseString `json:"code"`
		Message string      `json:"message"`
	} `json:"error"`
}

// SupportsBatch reports whether the upstream runs rows of endpoint as a batch: only when the
// provider is configured for OpenAI's Batch API (Config.BatchAPI), which compatible servers
// mostly lack, and for chat completions, responses and embeddings.
func (p *Provider) SupportsBatch(endpoint string) bool {
	return p.batchAPI && batchEndpoints[endpoint]
}

// StartBatch uploads the rows as a JSONL file of purpose batch (POST {base}/files, multipart,
// streamed as Rows yields them: each line {custom_id, method POST, url: the endpoint, body}
// with the body's model set to the upstream model), then creates the batch over it (POST
// {base}/batches). More rows or bytes than the Batch API takes (MaxBatchRows,
// MaxBatchBytes), and a row whose body is not a JSON object, are refused as an invalid
// request marked Unsupported while uploading, and no batch is created. The input file is
// deleted again when the upstream refuses the batch.
func (p *Provider) StartBatch(ctx context.Context, req *providers.BatchRequest) (*providers.BatchStatus, error) {
	if !p.SupportsBatch(req.Endpoint) {
		return nil, providers.Unsupported(p.name, "endpoint", fmt.Sprintf("provider %s runs no native batch of %s", p.name, req.Endpoint), ErrUnsupportedBatch)
	}
	fileID, err := p.uploadBatchFile(ctx, req)
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(struct {
		InputFileID      string            `json:"input_file_id"`
		Endpoint         string            `json:"endpoint"`
		CompletionWindow string            `json:"completion_window"`
		Metadata         map[string]string `json:"metadata,omitempty"`
	}{fileID, req.Endpoint, cmp.Or(req.CompletionWindow, "24h"), req.Metadata})
	if err != nil {
		return nil, fmt.Errorf("provider %s: encoding batch: %w", p.name, err)
	}
	resp, at, err := p.up.Send(ctx, p.base+"/batches", body, false, nil)
	if err != nil {
		// Only a refusal proves that no batch reads the file; after a timeout one may.
		if ue, ok := providers.AsUpstreamError(err); ok && ue.Status >= 400 && ue.Status < 500 {
			p.deleteFile(ctx, fileID)
		}
		return nil, err
	}
	return p.readBatch(ctx, at, resp, batchState{InputFileID: fileID})
}

// uploadBatchFile streams the rows to POST {base}/files as they are encoded, and returns
// the file's id.
func (p *Provider) uploadBatchFile(ctx context.Context, req *providers.BatchRequest) (string, error) {
	// The Content-Type names the boundary before the writer that uses it exists.
	form := multipart.NewWriter(io.Discard)
	resp, at, err := p.up.SendWritten(ctx, p.base+"/files", form.FormDataContentType(), func(w io.Writer) error {
		mw := multipart.NewWriter(w)
		if err := mw.SetBoundary(form.Boundary()); err != nil {
			return err
		}
		return p.writeBatchForm(mw, req)
	})
	if err != nil {
		return "", err
	}
	b, err := p.up.ReadBody(ctx, at, resp)
	if err != nil {
		return "", err
	}
	var f struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(b, &f); err != nil || f.ID == "" {
		return "", p.up.Malformed(resp.StatusCode, b, cmpErr(err, "file object without an id"))
	}
	return f.ID, nil
}

// writeBatchForm writes the multipart form of a batch upload: purpose, then the file part
// with one JSONL line a row.
func (p *Provider) writeBatchForm(mw *multipart.Writer, req *providers.BatchRequest) error {
	if err := mw.WriteField("purpose", "batch"); err != nil {
		return err
	}
	h := textproto.MIMEHeader{}
	h.Set("Content-Disposition", multipart.FileContentDisposition("file", "batch.jsonl"))
	h.Set("Content-Type", "application/jsonl")
	part, err := mw.CreatePart(h)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(part, 64<<10)
	model := rawjson.AppendString(nil, req.Model)
	var line []byte
	var rows, size int64
	err = req.Rows(func(row providers.BatchRow) error {
		rows++
		if rows > MaxBatchRows {
			return p.batchTooLarge(fmt.Sprintf("more than %d rows", MaxBatchRows))
		}
		var err error
		line, err = appendBatchInputLine(line[:0], row, req.Endpoint, model)
		if err != nil {
			return providers.Unsupported(p.name, "body", fmt.Sprintf("row %q: %v", row.CustomID, err), ErrUnsupportedBatch)
		}
		if size += int64(len(line)); size > MaxBatchBytes {
			return p.batchTooLarge(fmt.Sprintf("more than %d MB of rows", MaxBatchBytes>>20))
		}
		_, err = w.Write(line)
		return err
	})
	if err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return mw.Close()
}

// batchTooLarge refuses a batch past the Batch API's limits.
func (p *Provider) batchTooLarge(what string) *providers.UpstreamError {
	e := providers.Unsupported(p.name, "input_file_id", "the OpenAI Batch API takes at most 50,000 rows and 200 MB a batch; this batch has "+what, ErrUnsupportedBatch)
	e.Code = "batch_too_large"
	return e
}

// appendBatchInputLine appends the JSONL line of a row to dst: its body with model set.
func appendBatchInputLine(dst []byte, row providers.BatchRow, endpoint string, model []byte) ([]byte, error) {
	dst = append(dst, `{"custom_id":`...)
	dst = rawjson.AppendString(dst, row.CustomID)
	dst = append(dst, `,"method":"POST","url":`...)
	dst = rawjson.AppendString(dst, endpoint)
	dst = append(dst, `,"body":`...)
	body := rawjson.TrimSpace(row.Body)
	if len(body) == 0 || body[0] != '{' {
		return dst, errors.New("the body is not a JSON object")
	}
	dst, err := rawjson.AppendSetMany(dst, body, rawjson.Edit{Key: "model", Value: model})
	if err != nil {
		return dst, fmt.Errorf("the body is not a JSON object: %w", err)
	}
	return append(dst, "}\n"...), nil
}

// PollBatch reads GET {base}/batches/{id}. A 404 is CategoryNotFound.
func (p *Provider) PollBatch(ctx context.Context, nativeID string, state []byte) (*providers.BatchStatus, error) {
	return p.batchCall(ctx, http.MethodGet, nativeID, "", state)
}

// CancelBatch posts {base}/batches/{id}/cancel; the batch is cancelling until the upstream
// has stopped it, and its output file then holds the rows answered before.
func (p *Provider) CancelBatch(ctx context.Context, nativeID string, state []byte) (*providers.BatchStatus, error) {
	return p.batchCall(ctx, http.MethodPost, nativeID, "/cancel", state)
}

// batchCall sends a bodiless request about a batch and reads the batch object answered.
func (p *Provider) batchCall(ctx context.Context, method, nativeID, rest string, state []byte) (*providers.BatchStatus, error) {
	if nativeID == "" {
		return nil, upstreamhttp.NotFound(p.name, "the batch has no upstream id")
	}
	var st batchState
	if len(state) > 0 {
		// State the adapter did not write (another version's) only loses the input file
		// id, which nothing but the record needs.
		_ = json.Unmarshal(state, &st)
	}
	resp, at, err := p.up.Fetch(ctx, upstreamhttp.Fetch{Method: method, URL: p.base + "/batches/" + url.PathEscape(nativeID) + rest})
	if err != nil {
		return nil, upstreamhttp.JobNotFound(err)
	}
	return p.readBatch(ctx, at, resp, st)
}

// readBatch reads a batch object into a status, with st's file ids updated from it.
func (p *Provider) readBatch(ctx context.Context, at *upstreamhttp.Attempt, resp *http.Response, st batchState) (*providers.BatchStatus, error) {
	b, err := p.up.ReadBody(ctx, at, resp)
	if err != nil {
		return nil, err
	}
	var o batchObject
	if err := json.Unmarshal(b, &o); err != nil || o.ID == "" {
		return nil, p.up.Malformed(resp.StatusCode, b, cmpErr(err, "batch object without an id"))
	}
	st.InputFileID = cmp.Or(o.InputFileID, st.InputFileID)
	st.OutputFileID = cmp.Or(o.OutputFileID, st.OutputFileID)
	st.ErrorFileID = cmp.Or(o.ErrorFileID, st.ErrorFileID)
	state, err := json.Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("provider %s: encoding batch state: %w", p.name, err)
	}
	out := &providers.BatchStatus{
		NativeID: o.ID, Status: batchStatus(o.Status), State: state,
		Total: o.RequestCounts.Total, Completed: o.RequestCounts.Completed, Failed: o.RequestCounts.Failed,
	}
	if out.Status == providers.BatchFailed {
		out.ErrorCode, out.ErrorMessage = "batch_failed", "the upstream reports the batch failed"
		if o.Errors != nil && len(o.Errors.Data) > 0 {
			e := o.Errors.Data[0]
			out.ErrorCode = cmp.Or(string(e.Code), out.ErrorCode)
			msg := p.up.Redact([]byte(e.Message))
			if e.Line != nil {
				msg = fmt.Appendf(nil, "line %d: %s", *e.Line, msg)
			}
			out.ErrorMessage = cmp.Or(upstreamhttp.Truncate(string(msg), upstreamhttp.MaxMessage), out.ErrorMessage)
		}
	}
	return out, nil
}

// batchStatus is the providers' status of an OpenAI status: the same names, with the
// American cancel spellings of compatible servers read too; a status the adapter does not
// know is in_progress, so that a server's own name for a running batch does not end it (the
// gateway's window bounds a batch that never ends).
func batchStatus(s string) string {
	switch s {
	case providers.BatchValidating, providers.BatchInProgress, providers.BatchFinalizing, providers.BatchCompleted,
		providers.BatchFailed, providers.BatchExpired, providers.BatchCancelling, providers.BatchCancelled:
		return s
	case "canceling":
		return providers.BatchCancelling
	case "canceled":
		return providers.BatchCancelled
	}
	return providers.BatchInProgress
}

// BatchResults streams the batch's output file, then its error file (GET
// {base}/files/{id}/content), line by line: each line is one row's BatchResult, with the
// usage of its answer (a chat completion's, a response's or embeddings') when it reports
// one. The file ids are the state's; when it has neither, the batch is polled for them.
func (p *Provider) BatchResults(ctx context.Context, nativeID string, state []byte, fn func(providers.BatchResult) error) error {
	var st batchState
	if len(state) > 0 {
		_ = json.Unmarshal(state, &st)
	}
	if st.OutputFileID == "" && st.ErrorFileID == "" {
		s, err := p.PollBatch(ctx, nativeID, state)
		if err != nil {
			return err
		}
		_ = json.Unmarshal(s.State, &st)
	}
	for _, id := range []string{st.OutputFileID, st.ErrorFileID} {
		if id == "" {
			continue
		}
		if err := p.streamResultFile(ctx, id, fn); err != nil {
			return err
		}
	}
	return nil
}

// streamResultFile reads one output or error file line by line into fn.
func (p *Provider) streamResultFile(ctx context.Context, fileID string, fn func(providers.BatchResult) error) error {
	resp, at, err := p.up.Fetch(ctx, upstreamhttp.Fetch{URL: p.base + "/files/" + url.PathEscape(fileID) + "/content",
		Header: http.Header{"Accept": {"application/jsonl, application/octet-stream, */*"}}})
	if err != nil {
		return upstreamhttp.JobNotFound(err)
	}
	return p.up.EachLine(ctx, at, resp, p.idle, maxBatchLine, func(n int, line []byte) error {
		r, err := p.batchResult(line)
		if err != nil {
			return p.up.Malformed(resp.StatusCode, line, fmt.Errorf("batch file %s line %d: %w", fileID, n, err))
		}
		return fn(r)
	})
}

// batchResult reads one line of an output or error file. A line that is not JSON, or names
// no custom_id, cannot be given to any row: it is an error.
func (p *Provider) batchResult(line []byte) (providers.BatchResult, error) {
	var l batchOutputLine
	if err := json.Unmarshal(line, &l); err != nil {
		return providers.BatchResult{}, err
	}
	if l.CustomID == "" {
		return providers.BatchResult{}, errors.New("a line without a custom_id")
	}
	r := providers.BatchResult{CustomID: l.CustomID}
	if l.Response != nil {
		r.StatusCode, r.RequestID, r.Body = l.Response.StatusCode, l.Response.RequestID, l.Response.Body
		if r.StatusCode >= 200 && r.StatusCode < 300 {
			r.Usage, r.UsageKnown = answerUsage(r.Body)
		} else {
			e := &providers.UpstreamError{}
			fillFromBody(e, r.Body)
			r.ErrorCode, r.ErrorMessage = cmp.Or(e.Code, e.Type), e.Message
		}
	}
	if l.Error != nil {
		r.ErrorCode, r.ErrorMessage = string(l.Error.Code), upstreamhttp.Truncate(l.Error.Message, upstreamhttp.MaxMessage)
	}
	if r.StatusCode == 0 && r.ErrorCode == "" {
		// The row is known but not what became of it: it fails alone, as a bad answer of
		// the upstream, rather than hold up the others.
		r.StatusCode, r.ErrorCode, r.ErrorMessage = http.StatusBadGateway, "upstream_answer_unreadable", "the upstream's line for this row has neither a response nor an error"
	}
	return r, nil
}

// answerUsage reads the usage of a batch answer: a response's (input_tokens...) or a chat
// completion's and embeddings' (prompt_tokens...). known is false when the answer has none
// or one that cannot be read.
func answerUsage(body []byte) (u providers.Usage, known bool) {
	raw, err := rawjson.Get(body, "usage")
	if err != nil || rawjson.IsNull(raw) {
		return u, false
	}
	if _, ok, _ := rawjson.Lookup(raw, "input_tokens"); ok {
		u, err = ParseResponsesUsage(raw)
	} else {
		u, err = ParseChatUsage(raw)
	}
	return u, err == nil
}

// deleteFile deletes an uploaded file that no batch reads, as a courtesy to the account's
// storage: a failure leaves it to OpenAI's expiry.
func (p *Provider) deleteFile(ctx context.Context, fileID string) {
	resp, at, err := p.up.Fetch(ctx, upstreamhttp.Fetch{Method: http.MethodDelete, URL: p.base + "/files/" + url.PathEscape(fileID)})
	if err != nil {
		return
	}
	_, _ = p.up.ReadBody(ctx, at, resp)
}

// cmpErr is err, or a new error saying msg when err is nil.
func cmpErr(err error, msg string) error {
	if err != nil {
		return err
	}
	return errors.New(msg)
}

// Interface guard.
var _ providers.BatchRunner = (*Provider)(nil)
