package anthropic

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/modelgateway/caddy-modelgateway/internal/rawjson"
	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/internal/upstreamhttp"
	"github.com/modelgateway/caddy-modelgateway/providers/openai"
)

// Limits of one Message Batch. The API refuses a larger one whole; the adapter refuses it
// while streaming the request, before anything is created.
const (
	MaxBatchRows  = 100_000
	MaxBatchBytes = 256 << 20
)

// maxBatchLine bounds one line of a batch's results: a line holds one message, which an
// interactive call would not read past the same bound.
const maxBatchLine = upstreamhttp.MaxResponseBody

// Batch endpoints of the gateway that Message Batches run: Messages rows as they are, chat
// completion rows translated.
const (
	endpointMessages = "/v1/messages"
	endpointChat     = "/v1/chat/completions"
)

// ErrUnsupportedBatch is the cause of a batch refused before any batch is created upstream
// (an endpoint Message Batches do not run, more rows or bytes than they take, a custom_id
// they refuse, a row that cannot be translated): the gateway may run such a batch itself.
var ErrUnsupportedBatch = errors.New("batch not supported by Anthropic Message Batches")

// batchState is what the adapter keeps between calls, BatchStatus.State: the endpoint of the
// rows, which says what the results are translated into.
type batchState struct {
	Endpoint string `json:"endpoint"`
}

// messageBatch is Anthropic's batch object.
type messageBatch struct {
	ID                string  `json:"id"`
	ProcessingStatus  string  `json:"processing_status"`
	CancelInitiatedAt *string `json:"cancel_initiated_at"`
	RequestCounts     struct {
		Processing int `json:"processing"`
		Succeeded  int `json:"succeeded"`
		Errored    int `json:"errored"`
		Canceled   int `json:"canceled"`
		Expired    int `json:"expired"`
	} `json:"request_counts"`
}

// batchResultLine is a line of a batch's results.
type batchResultLine struct {
	CustomID string `json:"custom_id"`
	Result   struct {
		Type    string          `json:"type"`
		Message json.RawMessage `json:"message"`
		Error   json.RawMessage `json:"error"`
	} `json:"result"`
}

// SupportsBatch reports whether Message Batches run rows of endpoint: Messages rows, and
// chat completion rows, which the adapter translates as it does interactive requests. It is
// false for every endpoint when the provider is not configured for them (Config.BatchAPI).
func (p *Provider) SupportsBatch(endpoint string) bool {
	return p.batchAPI && (endpoint == endpointMessages || endpoint == endpointChat)
}

// StartBatch creates the batch: POST {base}/v1/messages/batches with {"requests":
// [{custom_id, params}]}, the array streamed as Rows yields the rows. A Messages row's
// params are its body with model set to the upstream model and stream removed; a chat
// completion row is translated as Chat translates an interactive request (parameters the
// API cannot honour are clamped or dropped as Unsupported lists). More than MaxBatchRows
// rows or MaxBatchBytes bytes, a custom_id outside ^[a-zA-Z0-9_-]{1,64}$, and a row that
// cannot be read are refused as an invalid request marked Unsupported, and no batch is
// created.
func (p *Provider) StartBatch(ctx context.Context, req *providers.BatchRequest) (*providers.BatchStatus, error) {
	if !p.SupportsBatch(req.Endpoint) {
		return nil, providers.Unsupported(p.name, "endpoint", fmt.Sprintf("provider %s runs no native batch of %s", p.name, req.Endpoint), ErrUnsupportedBatch)
	}
	resp, at, err := p.up.SendWritten(ctx, p.url+"/batches", "", func(w io.Writer) error { return p.writeBatchRequest(w, req) })
	if err != nil {
		return nil, err
	}
	return p.readBatch(ctx, at, resp, batchState{Endpoint: req.Endpoint})
}

// writeBatchRequest writes the body of a batch's creation to w.
func (p *Provider) writeBatchRequest(w io.Writer, req *providers.BatchRequest) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	if _, err := bw.WriteString(`{"requests":[`); err != nil {
		return err
	}
	model := rawjson.AppendString(nil, req.Model)
	var line []byte
	var rows, size int64
	err := req.Rows(func(row providers.BatchRow) error {
		rows++
		if rows > MaxBatchRows {
			return p.batchTooLarge(fmt.Sprintf("more than %d rows", MaxBatchRows))
		}
		line = line[:0]
		if rows > 1 {
			line = append(line, ',')
		}
		var err error
		if line, err = p.appendBatchRequest(line, row, req, model); err != nil {
			return err
		}
		if size += int64(len(line)); size > MaxBatchBytes {
			return p.batchTooLarge(fmt.Sprintf("more than %d MB of requests", MaxBatchBytes>>20))
		}
		_, err = bw.Write(line)
		return err
	})
	if err != nil {
		return err
	}
	if _, err := bw.WriteString("]}"); err != nil {
		return err
	}
	return bw.Flush()
}

// appendBatchRequest appends one element of the requests array: {custom_id, params}.
func (p *Provider) appendBatchRequest(dst []byte, row providers.BatchRow, req *providers.BatchRequest, model []byte) ([]byte, error) {
	if !validCustomID(row.CustomID) {
		return dst, providers.Unsupported(p.name, "custom_id", fmt.Sprintf("custom_id %q: Message Batches take 1 to 64 letters, digits, - and _", row.CustomID), ErrUnsupportedBatch)
	}
	dst = append(dst, `{"custom_id":`...)
	dst = rawjson.AppendString(dst, row.CustomID)
	dst = append(dst, `,"params":`...)
	if req.Endpoint == endpointChat {
		neutral, err := openai.DecodeChatRequest(row.Body)
		if err != nil {
			return dst, p.badRow(row.CustomID, err)
		}
		neutral.Model, neutral.Stream = req.Model, false
		params, err := encodeRequest(neutral, p.maxTokens)
		if err != nil {
			return dst, p.badRow(row.CustomID, err)
		}
		dst = append(dst, params...)
		return append(dst, '}'), nil
	}
	body := rawjson.TrimSpace(row.Body)
	if len(body) == 0 || body[0] != '{' {
		return dst, p.badRow(row.CustomID, errors.New("the body is not a JSON object"))
	}
	// A batch answers each request whole: stream is not a parameter the API takes here.
	body, err := rawjson.Delete(body, "stream")
	if err != nil {
		return dst, p.badRow(row.CustomID, err)
	}
	if dst, err = rawjson.AppendSetMany(dst, body, rawjson.Edit{Key: "model", Value: model}); err != nil {
		return dst, p.badRow(row.CustomID, err)
	}
	return append(dst, '}'), nil
}

// badRow refuses a row that cannot be sent.
func (p *Provider) badRow(customID string, err error) *providers.UpstreamError {
	return providers.Unsupported(p.name, "body", fmt.Sprintf("row %q: %v", customID, err), ErrUnsupportedBatch)
}

// batchTooLarge refuses a batch past the API's limits.
func (p *Provider) batchTooLarge(what string) *providers.UpstreamError {
	e := providers.Unsupported(p.name, "input_file_id", "Anthropic Message Batches take at most 100,000 requests and 256 MB a batch; this batch has "+what, ErrUnsupportedBatch)
	e.Code = "batch_too_large"
	return e
}

// validCustomID tells whether id is one Message Batches take: ^[a-zA-Z0-9_-]{1,64}$.
func validCustomID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// PollBatch reads GET {base}/v1/messages/batches/{id}. A 404 is CategoryNotFound.
func (p *Provider) PollBatch(ctx context.Context, nativeID string, state []byte) (*providers.BatchStatus, error) {
	return p.batchCall(ctx, http.MethodGet, nativeID, "", state)
}

// CancelBatch posts {base}/v1/messages/batches/{id}/cancel: the batch is cancelling until
// the API ended it, and its results then hold the requests answered before.
func (p *Provider) CancelBatch(ctx context.Context, nativeID string, state []byte) (*providers.BatchStatus, error) {
	return p.batchCall(ctx, http.MethodPost, nativeID, "/cancel", state)
}

// batchCall sends a bodiless request about a batch and reads the batch answered.
func (p *Provider) batchCall(ctx context.Context, method, nativeID, rest string, state []byte) (*providers.BatchStatus, error) {
	if nativeID == "" {
		return nil, upstreamhttp.NotFound(p.name, "the batch has no upstream id")
	}
	st := decodeBatchState(state)
	resp, at, err := p.up.Fetch(ctx, upstreamhttp.Fetch{Method: method, URL: p.url + "/batches/" + url.PathEscape(nativeID) + rest})
	if err != nil {
		return nil, upstreamhttp.JobNotFound(err)
	}
	return p.readBatch(ctx, at, resp, st)
}

// decodeBatchState reads the state the adapter kept; without one (or one it cannot read),
// the rows are taken for Messages rows, answered as they came.
func decodeBatchState(state []byte) batchState {
	st := batchState{Endpoint: endpointMessages}
	if len(state) > 0 {
		_ = json.Unmarshal(state, &st)
	}
	return st
}

// readBatch reads a batch object into a status. processing_status maps onto the providers'
// statuses: in_progress is in_progress, canceling is cancelling, and ended is cancelled when
// a cancel was initiated, expired when every request expired, else completed. Completed
// counts the succeeded requests, Failed the errored, canceled and expired ones.
func (p *Provider) readBatch(ctx context.Context, at *upstreamhttp.Attempt, resp *http.Response, st batchState) (*providers.BatchStatus, error) {
	b, err := p.up.ReadBody(ctx, at, resp)
	if err != nil {
		return nil, err
	}
	var o messageBatch
	if err := json.Unmarshal(b, &o); err != nil || o.ID == "" {
		if err == nil {
			err = errors.New("message batch without an id")
		}
		return nil, p.up.Malformed(resp.StatusCode, b, err)
	}
	state, err := json.Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("provider %s: encoding batch state: %w", p.name, err)
	}
	c := o.RequestCounts
	out := &providers.BatchStatus{
		NativeID: o.ID, State: state,
		Total:     c.Processing + c.Succeeded + c.Errored + c.Canceled + c.Expired,
		Completed: c.Succeeded,
		Failed:    c.Errored + c.Canceled + c.Expired,
	}
	switch o.ProcessingStatus {
	case "canceling":
		out.Status = providers.BatchCancelling
	case "ended":
		switch {
		case o.CancelInitiatedAt != nil && *o.CancelInitiatedAt != "":
			out.Status = providers.BatchCancelled
		case c.Expired > 0 && c.Succeeded+c.Errored+c.Canceled == 0:
			out.Status = providers.BatchExpired
		default:
			out.Status = providers.BatchCompleted
		}
	default:
		// in_progress, and any status the adapter does not know: the gateway's window
		// bounds a batch that never ends.
		out.Status = providers.BatchInProgress
	}
	return out, nil
}

// BatchResults streams GET {base}/v1/messages/batches/{id}/results line by line (the
// results_url the API gives, built from the provider's own base URL so that its key never
// goes to a host it was not configured for). Each result becomes one BatchResult:
//
//   - succeeded: status 200 and the message, as it is for Messages rows, or turned into a
//     chat completion (as Chat's answers are) for chat completion rows, with its usage.
//   - errored: the status the error's type stands for (invalid_request_error 400...), the
//     error as Body (Anthropic's error for Messages rows, OpenAI's {"error":{...}} for chat
//     completion rows), and its type and message as ErrorCode and ErrorMessage.
//   - canceled and expired: no status, ErrorCode batch_cancelled or batch_expired, the codes
//     of OpenAI's error files.
//   - a succeeded answer the adapter cannot read (or translate): status 502 and ErrorCode
//     upstream_answer_unreadable, so that one bad answer does not hold up the others.
//
// A line that is not JSON, or names no custom_id, cannot be given to any row: it fails the
// reading as a malformed answer.
func (p *Provider) BatchResults(ctx context.Context, nativeID string, state []byte, fn func(providers.BatchResult) error) error {
	if nativeID == "" {
		return upstreamhttp.NotFound(p.name, "the batch has no upstream id")
	}
	st := decodeBatchState(state)
	resp, at, err := p.up.Fetch(ctx, upstreamhttp.Fetch{URL: p.url + "/batches/" + url.PathEscape(nativeID) + "/results",
		Header: http.Header{"Accept": {"application/x-jsonl, application/jsonl, */*"}}})
	if err != nil {
		return upstreamhttp.JobNotFound(err)
	}
	created := time.Now().Unix()
	return p.up.EachLine(ctx, at, resp, p.idle, maxBatchLine, func(n int, line []byte) error {
		r, err := batchResult(line, st.Endpoint, created)
		if err != nil {
			return p.up.Malformed(resp.StatusCode, line, fmt.Errorf("batch results line %d: %w", n, err))
		}
		return fn(r)
	})
}

// batchResult reads one line of results for rows of endpoint.
func batchResult(line []byte, endpoint string, created int64) (providers.BatchResult, error) {
	var l batchResultLine
	if err := json.Unmarshal(line, &l); err != nil {
		return providers.BatchResult{}, err
	}
	if l.CustomID == "" {
		return providers.BatchResult{}, errors.New("a result without a custom_id")
	}
	r := providers.BatchResult{CustomID: l.CustomID}
	switch l.Result.Type {
	case "succeeded":
		msg, err := DecodeResponse(l.Result.Message)
		if err == nil && endpoint == endpointChat {
			r.Body, err = openai.EncodeChatResponse(msg, "", created)
		}
		if err != nil {
			// One answer the adapter cannot read must not hold up the others': the row
			// fails as a bad answer of the upstream, which is not charged.
			r.StatusCode, r.ErrorCode = http.StatusBadGateway, "upstream_answer_unreadable"
			r.ErrorMessage = upstreamhttp.Truncate("the upstream's answer could not be read: "+err.Error(), upstreamhttp.MaxMessage)
			r.Body = resultErrorBody(endpoint, "api_error", r.ErrorMessage)
			return r, nil
		}
		r.StatusCode, r.RequestID = http.StatusOK, msg.ID
		raw, _ := rawjson.Get(l.Result.Message, "usage")
		r.Usage, r.UsageKnown = msg.Usage, !rawjson.IsNull(raw)
		if endpoint != endpointChat {
			r.Body = l.Result.Message
		}
	case "errored":
		typ, msg := resultError(l.Result.Error)
		r.ErrorCode, r.ErrorMessage = typ, msg
		r.StatusCode = http.StatusInternalServerError
		if s, ok := typeStatus[typ]; ok {
			r.StatusCode = s
		}
		r.Body = l.Result.Error
		if endpoint == endpointChat {
			r.Body = resultErrorBody(endpoint, typ, msg)
		}
	case "canceled":
		r.ErrorCode, r.ErrorMessage = "batch_cancelled", "The batch was cancelled before this request ran."
	case "expired":
		r.ErrorCode, r.ErrorMessage = "batch_expired", "This request could not be executed before the completion window expired."
	default:
		return r, fmt.Errorf("custom_id %q: unknown result type %q", l.CustomID, l.Result.Type)
	}
	return r, nil
}

// resultError reads the type and message of an errored result's error: the API's error
// response {"type":"error","error":{type, message}}, or the inner error alone.
func resultError(raw json.RawMessage) (typ, msg string) {
	var e struct {
		Type    string `json:"type"`
		Message string `json:"message"`
		Error   *struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	_ = json.Unmarshal(raw, &e)
	if e.Error != nil {
		e.Type, e.Message = e.Error.Type, e.Error.Message
	}
	if e.Type == "" {
		e.Type = "api_error"
	}
	return e.Type, upstreamhttp.Truncate(e.Message, upstreamhttp.MaxMessage)
}

// resultErrorBody is an error as a row's error body: OpenAI's {"error":{message, type, param,
// code}} for chat completion rows, Anthropic's {"type":"error","error":{type, message}} for
// Messages rows.
func resultErrorBody(endpoint, typ, msg string) json.RawMessage {
	if endpoint != endpointChat {
		b := append([]byte(`{"type":"error","error":{"type":`), rawjson.AppendString(nil, typ)...)
		b = append(b, `,"message":`...)
		b = rawjson.AppendString(b, msg)
		return append(b, "}}"...)
	}
	b := append([]byte(`{"error":{"message":`), rawjson.AppendString(nil, msg)...)
	b = append(b, `,"type":`...)
	b = rawjson.AppendString(b, typ)
	return append(b, `,"param":null,"code":null}}`...)
}

// Interface guard.
var _ providers.BatchRunner = (*Provider)(nil)
