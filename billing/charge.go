package billing

import (
	"time"

	"github.com/modelgateway/caddy-modelgateway/internal/meter"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// Charge is a metered call as billing sees it, free of HTTP: who it is for, what it may
// cost, where it may go and went, what it consumed, what failed and what it is to record.
// A job keeps its Charge in its row between polls (it is JSON, its hold excepted: a job
// keeps its durable hold's reservation id and re-opens it with ResumeDurable); the
// handlers' per-request state embeds it beside the exchange (writer, request, stream
// state).
type Charge struct {
	GenerationID string `json:"generation_id"`
	WorkspaceID  string `json:"workspace_id"`
	KeyID        string `json:"key_id"`
	Endpoint     string `json:"endpoint"`
	Model        string `json:"model"`
	// Most is the worst case the call was admitted for: what its hold holds, and what an
	// answer whose usage turns out unpriceable is charged.
	Most int64 `json:"most_nanos"`
	// Routes are the routes the call may take, in the order they are tried.
	Routes []RouteName `json:"routes,omitempty"`
	// Hold is the credit the call holds; nil for a call that holds nothing (a free model).
	Hold Hold `json:"-"`
	// Provider and UpstreamModel name the route that answered ("" until one did).
	Provider      string `json:"provider,omitempty"`
	UpstreamModel string `json:"upstream_model,omitempty"`
	// Attempts are the upstream calls made, in order.
	Attempts []store.Attempt `json:"attempts,omitempty"`
	// Failures are the upstream errors of the attempts that failed, in order: what a
	// client is told when every route failed.
	Failures []Failure `json:"failures,omitempty"`

	// Usage is what the call consumed, by dimension: as the upstream reported it, or as
	// estimated when it reported none. A text call's is its tokens (providers.Usage's
	// Metered); a failed-over stream's counts what its broken attempts consumed too.
	Usage meter.Usage `json:"usage,omitzero"`
	// UsageKnown: Usage is what the upstream reported or the gateway measured, not yet to
	// be estimated from what was seen.
	UsageKnown bool `json:"usage_known,omitempty"`
	// Metered: the call is priced by every dimension of its Usage (the characters, seconds,
	// images, pages or checks of a media call), not by its tokens alone.
	Metered bool `json:"metered,omitempty"`
	// Carried is what the broken attempts of a stream continued on another route consumed
	// and cost, priced at their own routes: the route that ends the stream is charged only
	// the rest. nil unless a stream failed over, so that other calls stay small.
	Carried *Carried `json:"carried,omitempty"`

	// What the answer was.
	UpstreamID   string    `json:"upstream_id,omitempty"`
	FinishReason string    `json:"finish_reason,omitempty"`
	Streamed     bool      `json:"streamed,omitempty"`
	Cancelled    bool      `json:"cancelled,omitempty"`
	Status       int       `json:"status,omitempty"`
	ErrorCode    string    `json:"error_code,omitempty"`
	ErrorMessage string    `json:"error_message,omitempty"`
	ErrorOrigin  string    `json:"error_origin,omitempty"`
	Start        time.Time `json:"start"`
	// FirstByte is when the answer's first byte reached the client (zero: none did).
	FirstByte time.Time `json:"first_byte,omitzero"`
}

// RouteName names a route of a model: the provider it calls and the model it asks for
// there. The route itself (its adapter, breaker and policy) is the handlers', and is not
// kept.
type RouteName struct {
	Provider      string `json:"provider"`
	UpstreamModel string `json:"upstream_model,omitempty"`
}

// Failure is one failed attempt: the route it was made on and the upstream's error, as
// far as a client is told of it.
type Failure struct {
	RouteName
	// Category is the error's neutral classification (providers.Category).
	Category string `json:"category"`
	// Status is the upstream's HTTP status, 0 when no response arrived.
	Status int `json:"status,omitempty"`
	// Code, Message and Param are the upstream's; Message is the transport's error, or the
	// status, when the upstream said nothing.
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
	Param   string `json:"param,omitempty"`
	// Retryable tells whether another attempt may succeed; RetryAfter is the upstream's
	// Retry-After (nanoseconds in JSON).
	Retryable  bool          `json:"retryable,omitempty"`
	RetryAfter time.Duration `json:"retry_after_ns,omitempty"`
	// PayloadPreview is a short preview of the upstream's body.
	PayloadPreview string `json:"payload_preview,omitempty"`
}

// Carried is what the broken attempts of a failed-over stream consumed and what they cost.
type Carried struct {
	Usage meter.Usage      `json:"usage,omitzero"`
	Lines []store.CostLine `json:"lines,omitempty"`
	Nanos int64            `json:"nanos,omitempty"`
}

// Record is the generation record of the charge as it stands at end, priced at total by
// lines; its token counts are the caller's to fill.
func (ch *Charge) Record(end time.Time, lines []store.CostLine, total int64) *store.Generation {
	g := &store.Generation{
		ID: ch.GenerationID, WorkspaceID: ch.WorkspaceID, KeyID: ch.KeyID, Endpoint: ch.Endpoint,
		Model: ch.Model, Provider: ch.Provider, UpstreamModel: ch.UpstreamModel, UpstreamID: ch.UpstreamID,
		Streamed: ch.Streamed, Cancelled: ch.Cancelled, Status: ch.Status, FinishReason: ch.FinishReason,
		ErrorCode: ch.ErrorCode, ErrorMessage: ch.ErrorMessage, ErrorOrigin: ch.ErrorOrigin,
		CostNanos: total, CostLines: lines, Attempts: ch.Attempts,
		EndToEndMs: end.Sub(ch.Start).Milliseconds(), CreatedAt: ch.Start,
	}
	if !ch.FirstByte.IsZero() {
		g.LatencyMs = ch.FirstByte.Sub(ch.Start).Milliseconds()
		g.GenerationMs = end.Sub(ch.FirstByte).Milliseconds()
	}
	return g
}
