package handlers

import (
	"context"
	"net/http"
	"slices"

	"github.com/modelgateway/caddy-modelgateway/internal/pricing"
)

// The non-text families (embeddings, moderations, speech, transcription and translation,
// image generation and edit, OCR) share one driver, as the text surfaces share theirs
// (surface.go): a family reads and parses its request into a mediaRequest, and serveMedia
// runs the lifecycle: begin (routes, generation id, hold), the one settlement of whatever
// outcome did not settle itself, the routes tried in order.

// mediaEndpoint is what a non-text family is to the driver beyond each request.
type mediaEndpoint struct {
	cp *capability
	// capAtHold reports whether the request's worst case bounds what a route priced so can
	// charge: then the charge is capped at the hold (a usage above it is the upstream's
	// error, not the caller's to pay from a wallet others draw on). nil: never capped.
	capAtHold func(p pricing.Price) bool
}

// mediaRequest is one parsed request of a non-text family.
type mediaRequest struct {
	model string
	// promptBytes sizes the input estimate when the upstream reports no usage; prompt, when
	// set, estimates it by its text instead.
	promptBytes int
	prompt      []byte
	meta        bool
	// relayed: the answer may be relayed as it comes (a stream, audio), which tryRoutes
	// must know; streamed: it is recorded as a stream.
	relayed, streamed bool
	// fit, when set, keeps the routes that can serve the request (an upload's size, a
	// document's kind).
	fit *routeFit
	// worst is the most the request may cost on a route.
	worst func(Route) (int64, error)
	// metered, when set, is the usage billed until the answer says more (characters,
	// checks, seconds).
	metered *pricing.Usage
	// attempt is one try of one route: it writes the answer and settles, or returns the
	// failure.
	attempt func(c *call, ar *http.Request, rt Route) error
}

// serveMedia runs a non-text request through the lifecycle.
func (g *Gateway) serveMedia(w http.ResponseWriter, r *http.Request, caller *Caller, f *mediaEndpoint, q *mediaRequest) error {
	c, apiErr := g.beginFitting(w, r, caller, f.cp, q.model, q.promptBytes, q.meta, q.fit, q.worst)
	if apiErr != nil {
		return apiErr
	}
	defer c.endMedia(r)
	c.Streamed, c.prompt = q.streamed, q.prompt
	if q.metered != nil {
		c.meter(*q.metered)
	}
	return c.tryRoutes(r.Context(), q.relayed, nil, func(ctx context.Context, rt Route) error {
		c.capAtHold = f.capAtHold != nil && f.capAtHold(c.priceOf(rt))
		return q.attempt(c, requestIn(r, ctx), rt)
	})
}

// endMedia settles a media call when its handler returns and cuts off a binary answer that
// broke after its first bytes (see abortResponse).
func (c *call) endMedia(r *http.Request) {
	c.settleOutcome(r.Context())
	if c.abortResponse {
		panic(http.ErrAbortHandler)
	}
}

// pricedOnlyBy tells whether p prices a request by dims, its images when images is set, and
// per request, and by nothing else: then a worst case computed from those bounds what the
// upstream can charge.
func pricedOnlyBy(p pricing.Price, images bool, dims ...string) bool {
	if len(p.VideoSeconds()) > 0 || !images && len(p.Images()) > 0 {
		return false
	}
	for _, d := range pricing.Dimensions() {
		if !d.Keyed && d.Name != pricing.DimRequest && p.PerUnit(d.Name) > 0 && !slices.Contains(dims, d.Name) {
			return false
		}
	}
	return true
}

func always(pricing.Price) bool { return true }
