package handlers

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/modelgateway/caddy-modelgateway/files"
	"github.com/modelgateway/caddy-modelgateway/internal/ids"
	"github.com/modelgateway/caddy-modelgateway/internal/pricing"
	"github.com/modelgateway/caddy-modelgateway/jobs"
	"github.com/modelgateway/caddy-modelgateway/jobs/batch"
	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// The batches family: POST /batches creates a batch from a batch file of the workspace (or
// rows given inline, saved as one first), estimates its cost from a sample of its rows and
// reserves it; GET /batches/{id}, POST /batches/{id}/cancel and GET /batches serve the
// workspace's batches. Package jobs/batch runs them; this file speaks HTTP.

// Error codes of the batches family.
const (
	CodeBatchNotCancellable = "batch_not_cancellable"
	CodeBatchInvalidFile    = "invalid_batch_file"
)

// Bounds of a batch create.
const (
	// estimationSample is how many rows, from the start of the file, the estimate reads.
	estimationSample = 100
	// Metadata limits, OpenAI's.
	maxMetadataKeys     = 16
	maxMetadataKeyLen   = 64
	maxMetadataValueLen = 512
	// maxBatchWindow is the longest completion_window taken.
	maxBatchWindow = 7 * 24 * time.Hour
)

func init() {
	registerJobRenderer(store.JobBatch, func(g *Gateway, r *http.Request, j store.Job) (any, error) {
		return g.batchObject(r, j)
	})
}

// batchSurfaces are the endpoints a batch's rows may call, and what each asks of a route.
var batchSurfaces = map[string]*capability{
	"/v1/chat/completions": &chatCompletionsSurface.capability,
	"/v1/responses":        &responsesSurface.capability,
	"/v1/messages":         &messagesSurface.capability,
	"/v1/embeddings":       &embeddingsCapability,
}

// batchTextSurfaces are the batch endpoints that generate text, whose rows bound their
// output with max_tokens (or its other names).
var batchTextSurfaces = map[string]*textSurface{
	"/v1/chat/completions": &chatCompletionsSurface,
	"/v1/responses":        &responsesSurface,
	"/v1/messages":         &messagesSurface,
}

// batchesOn answers a batch route while the gateway cannot run batches: it needs a store
// for jobs and a blob store for files.
func batchesOn(serve handler) handler {
	return func(g *Gateway, w http.ResponseWriter, r *http.Request, c *Caller) error {
		if g.Jobs == nil {
			return newError(http.StatusServiceUnavailable, CodeNotConfigured, "batches are off: this gateway has no store to keep jobs in")
		}
		if apiErr := g.filesOff(); apiErr != nil {
			return apiErr
		}
		return serve(g, w, r, c)
	}
}

// batchCreate is the body of POST /batches.
type batchCreate struct {
	InputFileID      *string           `json:"input_file_id"`
	Requests         []batchInlineRow  `json:"requests"`
	Endpoint         string            `json:"endpoint"`
	CompletionWindow string            `json:"completion_window"`
	Metadata         map[string]string `json:"metadata"`
	Webhook          json.RawMessage   `json:"webhook"`
}

// batchInlineRow is a row given inline: a batch file's line, url and method optional.
type batchInlineRow struct {
	CustomID string          `json:"custom_id"`
	Method   string          `json:"method"`
	URL      string          `json:"url"`
	Body     json.RawMessage `json:"body"`
}

// batchEndpoint is the endpoint of a create, "/v1"-prefixed as batch files name it.
func batchEndpoint(e string) (string, *APIError) {
	if !strings.HasPrefix(e, "/v1/") {
		e = "/v1" + e
	}
	if _, ok := batchSurfaces[e]; !ok {
		return "", paramError("endpoint", fmt.Sprintf("endpoint %q is not one a batch runs: it must be one of %s", e, strings.Join(files.BatchEndpoints, ", ")))
	}
	return e, nil
}

// batchWindow reads a completion_window: "24h" (OpenAI's only one) or another number of
// hours up to a week.
func batchWindow(s string) (time.Duration, *APIError) {
	if s == "" {
		return 0, paramError("completion_window", `completion_window is required: "24h"`)
	}
	h, ok := strings.CutSuffix(s, "h")
	n, err := strconv.Atoi(h)
	if !ok || err != nil || n < 1 || time.Duration(n)*time.Hour > maxBatchWindow {
		return 0, paramError("completion_window", fmt.Sprintf(`completion_window %q is not a number of hours from 1h to %dh ("24h")`, s, int(maxBatchWindow.Hours())))
	}
	return time.Duration(n) * time.Hour, nil
}

func checkMetadata(m map[string]string) *APIError {
	if len(m) > maxMetadataKeys {
		return paramError("metadata", fmt.Sprintf("metadata has %d keys, at most %d", len(m), maxMetadataKeys))
	}
	for k, v := range m {
		if len(k) > maxMetadataKeyLen || len(v) > maxMetadataValueLen {
			return paramError("metadata", fmt.Sprintf("metadata keys are at most %d characters and values %d", maxMetadataKeyLen, maxMetadataValueLen))
		}
	}
	return nil
}

// createBatch serves POST /batches.
func (g *Gateway) createBatch(w http.ResponseWriter, r *http.Request, c *Caller) error {
	body, apiErr := g.readBody(w, r)
	if apiErr != nil {
		return apiErr
	}
	var in batchCreate
	if err := json.Unmarshal(body, &in); err != nil {
		return newError(http.StatusBadRequest, CodeInvalidJSON, "the body is not a batch: "+err.Error())
	}
	endpoint, apiErr := batchEndpoint(in.Endpoint)
	if apiErr != nil {
		return apiErr
	}
	window, apiErr := batchWindow(in.CompletionWindow)
	if apiErr != nil {
		return apiErr
	}
	if apiErr := checkMetadata(in.Metadata); apiErr != nil {
		return apiErr
	}
	webhook, err := g.parseJobWebhook(r.Context(), c, store.JobBatch, in.Webhook)
	if err != nil {
		return err
	}
	var fileID string
	switch {
	case in.InputFileID != nil && in.Requests != nil:
		return paramError("input_file_id", "give input_file_id or requests, not both")
	case in.InputFileID != nil:
		fileID = *in.InputFileID
	case len(in.Requests) > 0:
		if fileID, err = g.saveInlineRows(r.Context(), c, endpoint, in.Requests); err != nil {
			return err
		}
	default:
		return paramError("input_file_id", "input_file_id is required: the id of a file uploaded with purpose batch (or give the rows inline as requests)")
	}
	scan, err := g.scanBatchFile(r.Context(), c, fileID, endpoint)
	if err != nil {
		return err
	}
	return g.startBatch(w, r, c, &in, endpoint, window, fileID, webhook, scan)
}

// saveInlineRows saves rows given inline as a batch file of the workspace, checked as an
// uploaded one is, and returns its id.
func (g *Gateway) saveInlineRows(ctx context.Context, c *Caller, endpoint string, rows []batchInlineRow) (string, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	for _, row := range rows {
		line := files.BatchLine{CustomID: row.CustomID, Method: row.Method, URL: row.URL, Body: row.Body}
		if line.Method == "" {
			line.Method = http.MethodPost
		}
		if line.URL == "" {
			line.URL = endpoint
		}
		if err := enc.Encode(line); err != nil {
			return "", paramError("requests", "a request does not encode: "+err.Error())
		}
	}
	check := &files.BatchChecker{}
	_, _ = check.Write(buf.Bytes())
	_ = check.Close()
	if err := check.Err(); err != nil {
		e := paramError("requests", strings.Replace(err.Error(), "the batch file", "requests", 1))
		e.Code = CodeBatchInvalidFile
		return "", e
	}
	f, err := files.Save(ctx, g.Store, g.Blobs, files.Meta{
		WorkspaceID: c.Key.WorkspaceID, Filename: "batch_requests.jsonl", Purpose: files.PurposeBatch,
		ContentType: "application/jsonl", ExpiresAt: g.Now().Add(files.DefaultBatchExpiry),
	}, &buf)
	if err != nil {
		return "", err
	}
	return f.ID, nil
}

// batchScan is what a create learns of its file: its rows, their model, and the worst
// cases of the sample of rows the estimate reads.
type batchScan struct {
	rows, sample int
	model        string
	sampleWorst  int64
	m            *Model
	routes       []Route
	dropped      []droppedRoute
}

// scanBatchFile reads the batch file once, a line at a time: every row must call the
// batch's endpoint and name one model (a batch runs on one model, as OpenAI's do), and
// the first estimationSample rows are priced at their worst case, as the same requests
// made one by one would be held.
func (g *Gateway) scanBatchFile(ctx context.Context, c *Caller, fileID, endpoint string) (*batchScan, error) {
	f, rc, err := files.Open(ctx, g.Store, g.Blobs, c.Key.WorkspaceID, fileID)
	if errors.Is(err, store.ErrNotFound) {
		e := fileNotFound()
		e.Param = "input_file_id"
		return nil, e
	}
	if err != nil {
		return nil, err
	}
	defer func() { _ = rc.Close() }()
	if f.Purpose != files.PurposeBatch {
		return nil, paramError("input_file_id", fmt.Sprintf("file %s has purpose %q: a batch's input file is uploaded with purpose batch", fileID, f.Purpose))
	}
	cp := batchSurfaces[endpoint]
	sc := &batchScan{}
	bad := func(line int, msg string) error {
		e := paramError("input_file_id", fmt.Sprintf("row %d of file %s %s", line+1, fileID, msg))
		e.Code = CodeBatchInvalidFile
		return e
	}
	err = batch.ScanRows(rc, 0, 0, func(i int, _ int64, l files.BatchLine) error {
		if l.URL != endpoint {
			return bad(i, fmt.Sprintf("calls %s, not the batch's endpoint %s", l.URL, endpoint))
		}
		var named struct {
			Model  string `json:"model"`
			Stream bool   `json:"stream"`
		}
		if json.Unmarshal(l.Body, &named) != nil || named.Model == "" {
			return bad(i, "names no model")
		}
		if named.Stream {
			return bad(i, "asks to stream: a batch's rows are answered whole")
		}
		if sc.model == "" {
			sc.model = named.Model
			var apiErr *APIError
			if sc.m, sc.routes, sc.dropped, apiErr = g.Registry.candidates(sc.model, cp); apiErr != nil {
				return apiErr
			}
			if !g.isFor(sc.m, cp) {
				return g.notServed(sc.m, cp)
			}
		} else if named.Model != sc.model {
			return bad(i, fmt.Sprintf("names model %q, and an earlier row %q: a batch runs on one model", named.Model, sc.model))
		}
		sc.rows++
		if sc.sample < estimationSample {
			worst, err := g.rowWorst(endpoint, l.Body, sc.m, sc.routes)
			if err != nil {
				return err
			}
			sc.sampleWorst += worst
			sc.sample++
		}
		return nil
	})
	if le, ok := errors.AsType[*files.LineError](err); ok {
		e := paramError("input_file_id", le.Error())
		e.Code = CodeBatchInvalidFile
		return nil, e
	}
	if err != nil {
		return nil, err
	}
	if sc.rows == 0 {
		e := paramError("input_file_id", "file "+fileID+" has no request lines")
		e.Code = CodeBatchInvalidFile
		return nil, e
	}
	return sc, nil
}

// rowWorst is the worst case of one row, as the same request made alone would be held:
// its prompt estimated from its bytes and its output bound (max_tokens, or the route's
// most when it sets none), at the dearest of the model's routes.
func (g *Gateway) rowWorst(endpoint string, body []byte, m *Model, routes []Route) (int64, error) {
	if m.Free() {
		return 0, nil
	}
	ts, text := batchTextSurfaces[endpoint]
	var maxTokens int64
	if text {
		f, apiErr := parseFields(body, ts.inputKey, ts.stringInput)
		if apiErr != nil {
			return 0, apiErr
		}
		maxTokens = f.maxTokens
	}
	var most int64
	for _, rt := range routes {
		out := int64(0) // embeddings make no output tokens
		if text {
			out = rt.MaxOutputTokens
			if maxTokens > 0 {
				out = maxTokens
			}
		}
		most = max(most, pricing.WorstCase(rt.Price, estimateTokens(len(body)), out))
	}
	return most, nil
}

// estimate scales the sample's worst cases to every row, rounding up.
func (sc *batchScan) estimate() int64 {
	if sc.sample == 0 {
		return 0
	}
	n, d := sc.sampleWorst, int64(sc.sample)
	rows := int64(sc.rows)
	// n*rows/d without overflow for any realistic sum: the sum is below 2^63/50,000.
	return (n*rows + d - 1) / d
}

// startBatch reserves the batch's estimate with a durable hold and creates its job: on
// its route's upstream when that runs batches natively, else to be run by the gateway's
// workers, its rows cut into chunks by its first poll.
func (g *Gateway) startBatch(w http.ResponseWriter, r *http.Request, c *Caller, in *batchCreate, endpoint string, window time.Duration,
	fileID string, webhook json.RawMessage, sc *batchScan) error {
	now := g.Now()
	rt := sc.routes[0]
	runner, native := rt.Provider.(providers.BatchRunner)
	native = native && runner.SupportsBatch(endpoint)
	spec := batch.Spec{
		Endpoint: endpoint, InputFileID: fileID, CompletionWindow: in.CompletionWindow, Metadata: in.Metadata,
		Rows: sc.rows, ChunkRows: cmp.Or(g.BatchChunkRows, batch.DefaultChunkRows), Native: native, Deadline: now.Add(window),
		EstimatedNanos: sc.estimate(), SampleSize: sc.sample, Truncated: sc.sample < sc.rows,
	}
	request, _ := json.Marshal(spec) // plain fields
	id := ids.New("batch")
	sub := jobs.Submission{
		Job: store.Job{
			ID: id, WorkspaceID: c.Key.WorkspaceID, Kind: store.JobBatch, KeyID: c.Key.ID, Model: sc.m.Name,
			Provider: rt.ProviderName, UpstreamModel: rt.UpstreamModel, Request: request, Webhook: webhook,
			CreatedAt: now, ExpiresAt: batch.JobExpiry(spec.Deadline),
		},
		Most: spec.EstimatedNanos, Endpoint: "/batches",
		Start: func(ctx context.Context) (string, jobs.Report, error) {
			if !native {
				// Its first poll queues its chunks from the gateway's own store: at once.
				return "", jobs.Report{Status: batch.StatusValidating, PollNow: true}, nil
			}
			st, err := runner.StartBatch(ctx, &providers.BatchRequest{
				Endpoint: endpoint, Model: rt.UpstreamModel, CompletionWindow: in.CompletionWindow, Metadata: in.Metadata,
				Rows: batch.Rows(ctx, g.Blobs, c.Key.WorkspaceID, fileID),
			})
			if ue, ok := providers.AsUpstreamError(err); ok && ue.Unsupported {
				// Beyond what the upstream's batches take (its row or size limits, a row it
				// cannot translate), before anything was made there: the gateway runs it.
				g.Logger.Info("the route's upstream does not take this batch; the gateway runs it", zap.String("batch_id", id), zapErr(ue))
				state, _ := json.Marshal(batch.State{GatewayRun: true}) // plain fields
				return "", jobs.Report{Status: batch.StatusValidating, PollNow: true, Result: state}, nil
			}
			if err != nil {
				return "", jobs.Report{}, err
			}
			state, _ := json.Marshal(batch.State{Total: sc.rows, NativeState: st.State}) // plain fields
			status := st.Status
			if status != batch.StatusInProgress {
				status = batch.StatusValidating
			}
			return st.NativeID, jobs.Report{Status: status, PollAfter: time.Millisecond, Result: state}, nil
		},
	}
	j, err := g.Jobs.Submit(r.Context(), sub)
	if err != nil {
		if ue, ok := providers.AsUpstreamError(err); ok {
			e := upstreamAPIError(ue)
			e.Message = "the provider did not take the batch: " + e.Message
			return e
		}
		if r.Context().Err() != nil {
			return err
		}
		e := g.admissionRefused(err, spec.EstimatedNanos, "/batches", sc.m.Name)
		if e.Status == http.StatusPaymentRequired {
			e.Message = fmt.Sprintf("insufficient credit: the batch's estimated cost is %s USD (%d rows; the worst case of %d of them, scaled), and the workspace cannot reserve it; add credits or send fewer rows",
				pricing.FormatUSD(spec.EstimatedNanos), spec.Rows, spec.SampleSize)
			e.Extra["estimated_nanos"] = spec.EstimatedNanos
			e.Extra["estimation_sample_size"] = spec.SampleSize
			e.Extra["estimation_total_rows"] = spec.Rows
			e.Extra["estimation_truncated"] = spec.Truncated
		}
		return e
	}
	v, err := g.batchObject(r, j)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, v)
}

// batchObject is the batch job object: OpenAI's batch (what openai-go decodes) and the
// specification's fields beside it.
type batchObject struct {
	ID               string            `json:"id"`
	Object           string            `json:"object"`
	Endpoint         string            `json:"endpoint"`
	Model            string            `json:"model"`
	Errors           any               `json:"errors"`
	InputFileID      string            `json:"input_file_id"`
	CompletionWindow string            `json:"completion_window"`
	Status           string            `json:"status"`
	OutputFileID     *string           `json:"output_file_id"`
	ErrorFileID      *string           `json:"error_file_id"`
	CreatedAt        int64             `json:"created_at"`
	InProgressAt     *int64            `json:"in_progress_at"`
	ExpiresAt        *int64            `json:"expires_at"`
	FinalizingAt     *int64            `json:"finalizing_at"`
	CompletedAt      *int64            `json:"completed_at"`
	FailedAt         *int64            `json:"failed_at"`
	ExpiredAt        *int64            `json:"expired_at"`
	CancellingAt     *int64            `json:"cancelling_at"`
	CancelledAt      *int64            `json:"cancelled_at"`
	RequestCounts    batchCounts       `json:"request_counts"`
	Metadata         map[string]string `json:"metadata"`

	NativeBatchID   string       `json:"native_batch_id,omitempty"`
	Provider        string       `json:"provider"`
	Progress        int          `json:"progress"`
	LifecycleStatus string       `json:"lifecycle_status"`
	PollingURL      string       `json:"polling_url"`
	WebsocketURL    string       `json:"websocket_url"`
	CancelURL       string       `json:"cancel_url,omitempty"`
	Webhook         any          `json:"webhook,omitempty"`
	FinalizedAt     *string      `json:"finalized_at,omitempty"`
	PricingLines    []batchPrice `json:"pricing_lines,omitempty"`
	Billing         batchBilling `json:"billing"`
}

type batchCounts struct {
	Total     int `json:"total"`
	Completed int `json:"completed"`
	Failed    int `json:"failed"`
}

// batchPrice is a pricing line of a batch: its rows, at their prices, summed.
type batchPrice struct {
	Description string     `json:"description"`
	Quantity    int        `json:"quantity"`
	Nanos       int64      `json:"cost_nanos"`
	Cost        costNumber `json:"cost_usd"`
}

// batchBilling is the batch's money: the estimate reserved, then what its rows were
// charged (each against the reservation, as it was answered), and the rest released at
// its end. This gateway has no markup: provider and user costs are the same.
type batchBilling struct {
	Currency              string     `json:"currency"`
	Billed                bool       `json:"billed"`
	Charged               bool       `json:"charged"`
	Reason                string     `json:"reason"`
	ReservationID         string     `json:"reservation_id"`
	ReservationStatus     string     `json:"reservation_status"`
	EstimatedProviderCost string     `json:"estimated_provider_cost"`
	EstimatedUserCost     string     `json:"estimated_user_cost"`
	SettledProviderCost   *string    `json:"settled_provider_cost"`
	SettledUserCost       *string    `json:"settled_user_cost"`
	EstimatedNanos        int64      `json:"estimated_nanos"`
	ReservedNanos         int64      `json:"reserved_nanos"`
	TotalNanos            int64      `json:"total_nanos"`
	CostNanos             int64      `json:"cost_nanos"`
	EstimationTruncated   bool       `json:"estimation_truncated"`
	EstimationSampleSize  int        `json:"estimation_sample_size"`
	EstimationTotalRows   int        `json:"estimation_total_rows"`
	CostUSD               costNumber `json:"cost_usd"`
	FinalizedAt           *string    `json:"finalized_at"`
}

func unixPtr(v int64) *int64 {
	if v == 0 {
		return nil
	}
	return &v
}

func strPtr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// batchObject renders batch job j. While it runs, a cancellation asked of it shows as
// cancelling at once (its poll moves it there); the money is the rows' as recorded.
func (g *Gateway) batchObject(r *http.Request, j store.Job) (*batchObject, error) {
	spec, _ := batch.SpecOf(j) // the job's own; a zero one renders what it can
	st := batch.StateOf(j)
	status := j.Status
	if status == jobs.StatusQueued {
		status = batch.StatusValidating
	}
	cancellable := status == batch.StatusValidating || status == batch.StatusInProgress
	if cancellable {
		at, err := g.Store.BatchCancelRequested(r.Context(), j.ID)
		if err != nil {
			return nil, err
		}
		if !at.IsZero() {
			status, cancellable = batch.StatusCancelling, false
			if st.CancellingAt == 0 {
				st.CancellingAt = at.Unix()
			}
		}
	}
	if !jobs.Terminal(j.Status) && st.Ending == batch.StatusExpired {
		cancellable = false
	}
	counts := batchCounts{Total: max(st.Total, spec.Rows), Completed: st.Completed, Failed: st.Failed}
	v := &batchObject{
		ID: j.ID, Object: "batch", Endpoint: spec.Endpoint, Model: j.Model, InputFileID: spec.InputFileID,
		CompletionWindow: spec.CompletionWindow, Status: status, OutputFileID: strPtr(st.OutputFileID), ErrorFileID: strPtr(st.ErrorFileID),
		CreatedAt: j.CreatedAt.Unix(), InProgressAt: unixPtr(st.InProgressAt), ExpiresAt: unixPtr(spec.Deadline.Unix()),
		FinalizingAt: unixPtr(st.FinalizingAt), CompletedAt: unixPtr(st.CompletedAt), FailedAt: unixPtr(st.FailedAt),
		ExpiredAt: unixPtr(st.ExpiredAt), CancellingAt: unixPtr(st.CancellingAt), CancelledAt: unixPtr(st.CancelledAt),
		RequestCounts: counts, Metadata: spec.Metadata, Provider: j.Provider, LifecycleStatus: batchLifecycle(status),
	}
	if j.NativeID != "" && j.NativeID != j.ID {
		v.NativeBatchID = j.NativeID
	}
	if counts.Total > 0 {
		v.Progress = (counts.Completed + counts.Failed) * 100 / counts.Total
	}
	if j.Status == batch.StatusFailed {
		v.FailedAt = unixPtr(j.CompletedAt.Unix())
		if len(st.Errors) == 0 {
			st.Errors = []batch.Error{{Code: firstNonEmpty(j.ErrorCode, "batch_failed"), Message: firstNonEmpty(j.ErrorMessage, "the batch failed")}}
		}
	}
	if len(st.Errors) > 0 {
		v.Errors = map[string]any{"object": "list", "data": st.Errors}
	}
	v.PollingURL, v.WebsocketURL = g.jobURLs(r, "/batches/"+j.ID, store.JobBatch, j.ID)
	if cancellable {
		v.CancelURL = strings.TrimSuffix(v.PollingURL, "/") + "/cancel"
	}
	wh, err := g.jobWebhook(r.Context(), j)
	if err != nil {
		return nil, err
	}
	if wh != nil {
		v.Webhook = wh
	}
	b := batchBilling{
		Currency: "USD", Reason: "batch_rows_settled_against_reservation", ReservationID: j.ReservationID, ReservationStatus: "held",
		EstimatedProviderCost: pricing.FormatUSD(spec.EstimatedNanos), EstimatedUserCost: pricing.FormatUSD(spec.EstimatedNanos),
		EstimatedNanos: spec.EstimatedNanos, ReservedNanos: j.HeldNanos, TotalNanos: st.CostNanos, CostNanos: st.CostNanos,
		EstimationTruncated: spec.Truncated, EstimationSampleSize: spec.SampleSize, EstimationTotalRows: spec.Rows,
		CostUSD: costNumber(st.CostNanos), Charged: st.CostNanos > 0,
	}
	if jobs.Terminal(j.Status) {
		settled := pricing.FormatUSD(st.CostNanos)
		b.SettledProviderCost, b.SettledUserCost, b.Billed = &settled, &settled, true
		b.ReservationStatus = "released"
		if !j.CompletedAt.IsZero() {
			at := rfc3339(j.CompletedAt)
			b.FinalizedAt, v.FinalizedAt = &at, &at
		}
		v.PricingLines = []batchPrice{{Description: j.Model + " batch rows via " + j.Provider, Quantity: counts.Completed + counts.Failed,
			Nanos: st.CostNanos, Cost: costNumber(st.CostNanos)}}
	}
	v.Billing = b
	return v, nil
}

// batchLifecycle is the lifecycle_status of a batch of status: the specification's
// public states (pending, running...), which the list filter takes too.
func batchLifecycle(status string) string {
	switch status {
	case batch.StatusValidating:
		return "pending"
	case batch.StatusInProgress, batch.StatusFinalizing:
		return "running"
	case batch.StatusCancelling:
		return "cancelling"
	}
	return status
}

// ownBatch returns the workspace's batch named by the path, or 404.
func (g *Gateway) ownBatch(ctx context.Context, workspaceID, id string) (store.Job, error) {
	j, err := g.Store.GetJob(ctx, workspaceID, id)
	if errors.Is(err, store.ErrNotFound) || err == nil && j.Kind != store.JobBatch {
		e := newError(http.StatusNotFound, CodeNotFound, fmt.Sprintf("batch %q not found, or not owned by this workspace", id))
		e.Param = "batch_id"
		return store.Job{}, e
	}
	return j, err
}

// getBatch serves GET /batches/{batch_id}.
func (g *Gateway) getBatch(w http.ResponseWriter, r *http.Request, c *Caller) error {
	j, err := g.ownBatch(r.Context(), c.Key.WorkspaceID, r.PathValue("batch_id"))
	if err != nil {
		return err
	}
	v, err := g.batchObject(r, j)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, v)
}

// cancelBatch serves POST /batches/{batch_id}/cancel: the batch shows cancelling at once,
// its workers stop taking its rows (a native one's upstream is told), and once the rows in
// flight are recorded it ends cancelled, its partial results in its files and what its
// reservation has left released.
func (g *Gateway) cancelBatch(w http.ResponseWriter, r *http.Request, c *Caller) error {
	j, err := g.ownBatch(r.Context(), c.Key.WorkspaceID, r.PathValue("batch_id"))
	if err != nil {
		return err
	}
	st := batch.StateOf(j)
	switch {
	case jobs.Terminal(j.Status) || j.Status == batch.StatusFinalizing || st.Ending == batch.StatusExpired:
		return newError(http.StatusConflict, CodeBatchNotCancellable, fmt.Sprintf("batch %s is %s: only a validating or in-progress batch can be cancelled", j.ID, j.Status))
	case j.Status != batch.StatusCancelling:
		if _, err := g.Store.RequestBatchCancel(r.Context(), j.ID); err != nil {
			return err
		}
		// Its poll, now rather than at its pace, moves it to cancelling.
		if err := g.Store.Reschedule(r.Context(), store.JobQueue(store.JobBatch), j.ID, time.Time{}); err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		g.Jobs.Wake()
	}
	v, err := g.batchObject(r, j)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, v)
}

// batchStatusFilter are the stored statuses of each status value a list may be filtered
// by: the batch's own, and the specification's public values with their aliases (pending
// and queued are validating; in progress, running and processing take finalizing too;
// cancelled and canceled take cancelling too).
var batchStatusFilter = map[string][]string{
	batch.StatusValidating: {batch.StatusValidating, jobs.StatusQueued},
	"pending":              {batch.StatusValidating, jobs.StatusQueued},
	"queued":               {batch.StatusValidating, jobs.StatusQueued},
	batch.StatusInProgress: {batch.StatusInProgress, batch.StatusFinalizing},
	"running":              {batch.StatusInProgress, batch.StatusFinalizing},
	"processing":           {batch.StatusInProgress, batch.StatusFinalizing},
	batch.StatusFinalizing: {batch.StatusFinalizing},
	batch.StatusCompleted:  {batch.StatusCompleted},
	batch.StatusFailed:     {batch.StatusFailed},
	batch.StatusCancelling: {batch.StatusCancelling},
	batch.StatusCancelled:  {batch.StatusCancelling, batch.StatusCancelled},
	"canceled":             {batch.StatusCancelling, batch.StatusCancelled},
	batch.StatusExpired:    {batch.StatusExpired},
}

// batchStatusNames lists the values batchStatusFilter takes, for its errors.
const batchStatusNames = "pending (queued, validating), in_progress (running, processing), finalizing, completed, failed, cancelling, cancelled (canceled), expired"

// parseBatchStatuses reads the status filters of a list: status repeated or
// comma-separated, statuses comma-separated; an unknown value is a 400 naming it.
func parseBatchStatuses(q map[string][]string) ([]string, *APIError) {
	var out []string
	for _, param := range []string{"status", "statuses"} {
		for _, v := range q[param] {
			for _, s := range strings.Split(v, ",") {
				s = strings.ToLower(strings.TrimSpace(s))
				if s == "" {
					continue
				}
				statuses, ok := batchStatusFilter[s]
				if !ok {
					return nil, paramError(param, fmt.Sprintf("status %q is not a batch status: use %s", s, batchStatusNames))
				}
				for _, st := range statuses {
					if !slices.Contains(out, st) {
						out = append(out, st)
					}
				}
			}
		}
	}
	return out, nil
}

// listBatches serves GET /batches: the workspace's own batches, newest first, a page at a
// time (limit, after), of the statuses asked.
func (g *Gateway) listBatches(w http.ResponseWriter, r *http.Request, c *Caller) error {
	q := r.URL.Query()
	p, apiErr := parsePage(q)
	if apiErr != nil {
		return apiErr
	}
	statuses, apiErr := parseBatchStatuses(q)
	if apiErr != nil {
		return apiErr
	}
	query := store.JobQuery{WorkspaceID: c.Key.WorkspaceID, Kind: store.JobBatch, Statuses: statuses, Order: store.NewestFirst, Page: p.store()}
	items, err := g.Store.ListJobs(r.Context(), query)
	env, err := storePage(items, err, func(j store.Job) string { return j.ID }, p)
	if err != nil {
		return err
	}
	page := env["data"].([]store.Job)
	views := make([]*batchObject, 0, len(page))
	for _, j := range page {
		v, err := g.batchObject(r, j)
		if err != nil {
			return err
		}
		views = append(views, v)
	}
	env["data"] = views
	return writeJSON(w, http.StatusOK, env)
}
