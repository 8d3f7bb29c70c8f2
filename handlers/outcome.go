package handlers

import "context"

// Observer is told of each metered request, so that the server around the Gateway can
// publish it (module/handler.go makes Caddy placeholders and events of it). Both calls
// are made on the request's goroutine.
type Observer interface {
	// Began is called once the request has its generation id, before anything is answered.
	// The Outcome it is given stays current as the request goes on: read later (when the
	// access log is written), it tells how the request ended.
	Began(ctx context.Context, o Outcome)
	// Finished is called once the request is settled: charged and recorded, or failed to be.
	Finished(ctx context.Context, o Outcome)
}

// Outcome is what a metered request came to, as far as it has gone. Read it on the
// request's goroutine.
type Outcome struct{ c *call }

// GenerationID names the request's generation record.
func (o Outcome) GenerationID() string { return o.c.GenerationID }

// WorkspaceID is the workspace of the key that sent the request.
func (o Outcome) WorkspaceID() string { return o.c.caller.Key.WorkspaceID }

// Endpoint is the API path served ("/chat/completions").
func (o Outcome) Endpoint() string { return o.c.Endpoint }

// Model is the public model name the request asked for.
func (o Outcome) Model() string { return o.c.model.Name }

// Provider is the provider whose route answered, "" while none has.
func (o Outcome) Provider() string {
	if o.c.route == nil {
		return ""
	}
	return o.c.route.ProviderName
}

// Status is the HTTP status of the answer, 0 until it is known.
func (o Outcome) Status() int { return o.c.Status }

// CostNanos is what the request was charged in nanodollars: 0 until it is settled, and
// when its settlement failed (its answer was then withheld).
func (o Outcome) CostNanos() int64 { return o.c.costNanos }
