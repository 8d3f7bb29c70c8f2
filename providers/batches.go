package providers

import (
	"context"
	"encoding/json"
)

// BatchRunner is an adapter whose upstream runs batches itself (OpenAI's Batch API over its
// Files API, Anthropic's Message Batches), at its batch prices. The gateway runs a batch on
// it natively when the batch's route has it and SupportsBatch says yes for the endpoint;
// every other batch the gateway runs row by row itself (Gateway.Dispatch).
//
// Rows and results are in OpenAI's batch format whatever the upstream speaks: the adapter
// translates rows into its upstream's requests and the upstream's results back into
// OpenAI batch output lines (an Anthropic message answered to a /v1/chat/completions row
// becomes a chat completion), so that the output file is the same on every route.
type BatchRunner interface {
	// SupportsBatch reports whether the upstream can run rows of endpoint natively
	// ("/v1/chat/completions", "/v1/responses", "/v1/messages", "/v1/embeddings").
	SupportsBatch(endpoint string) bool
	// StartBatch creates the batch upstream (uploading its rows first where the upstream
	// takes them as a file), streaming the rows: nothing holds them all in memory.
	StartBatch(ctx context.Context, req *BatchRequest) (*BatchStatus, error)
	// PollBatch asks where the batch stands; state is the last BatchStatus.State.
	PollBatch(ctx context.Context, nativeID string, state []byte) (*BatchStatus, error)
	// CancelBatch asks the upstream to stop the batch; rows already answered stay
	// readable through BatchResults once the upstream says it ended.
	CancelBatch(ctx context.Context, nativeID string, state []byte) (*BatchStatus, error)
	// BatchResults streams the results of an ended batch (completed, cancelled, expired
	// with partial results), one call of fn per row answered or failed, in no promised
	// order. An error of fn stops it and is returned.
	BatchResults(ctx context.Context, nativeID string, state []byte, fn func(BatchResult) error) error
}

// BatchRequest is a batch to run natively.
type BatchRequest struct {
	// Endpoint is the rows' endpoint ("/v1/chat/completions"...).
	Endpoint string
	// Model is the upstream model id: the adapter sets it in every row's body.
	Model string
	// CompletionWindow is the batch's window ("24h").
	CompletionWindow string
	// Metadata is passed on where the upstream keeps it.
	Metadata map[string]string
	// Rows yields the rows in order, each once, streamed from the batch's input file; an
	// error of yield stops it and is returned.
	Rows func(yield func(BatchRow) error) error
}

// BatchRow is one request of a batch, in OpenAI's batch input format.
type BatchRow struct {
	CustomID string
	// Body is the request's body for the batch's endpoint, as the client wrote it.
	Body json.RawMessage
}

// Batch statuses an adapter reports, OpenAI's.
const (
	BatchValidating = "validating"
	BatchInProgress = "in_progress"
	BatchFinalizing = "finalizing"
	BatchCompleted  = "completed"
	BatchFailed     = "failed"
	BatchExpired    = "expired"
	BatchCancelling = "cancelling"
	BatchCancelled  = "cancelled"
)

// BatchStatus is where an upstream says a batch stands.
type BatchStatus struct {
	NativeID string
	// Status is one of the Batch* statuses.
	Status string
	// Total, Completed and Failed count the batch's rows as the upstream does.
	Total, Completed, Failed int
	// State is what the adapter keeps between calls (the upstream's file ids): opaque to
	// the gateway, stored with the batch, never shown.
	State []byte
	// ErrorCode and ErrorMessage say why a failed batch failed.
	ErrorCode, ErrorMessage string
}

// BatchResult is one row's outcome, as a line of OpenAI's batch output or error file.
type BatchResult struct {
	CustomID string
	// StatusCode is the row's HTTP status (200 for an answer); 0 with ErrorCode set for a
	// row the upstream could not run (expired, cancelled, invalid).
	StatusCode int
	// RequestID is the upstream's id of the row's request, when it gives one.
	RequestID string
	// Body is the answer in the batch endpoint's format (a chat completion for
	// /v1/chat/completions rows), or the error object of a non-200 answer.
	Body json.RawMessage
	// Usage is what the row consumed, by dimension, which the gateway prices at the
	// route's batch price; UsageKnown is false when the answer reports none.
	Usage      Usage
	UsageKnown bool
	// ErrorCode and ErrorMessage say why a row without an answer failed.
	ErrorCode, ErrorMessage string
}
