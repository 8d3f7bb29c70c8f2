package handlers

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/modelgateway/caddy-modelgateway/billing"
	"github.com/modelgateway/caddy-modelgateway/internal/pricing"
	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// Every metered endpoint runs the same lifecycle, one step a function:
//
//	authenticate (ServeHTTP) → validate (the endpoint's handler) →
//	begin: the model's routes whose adapter has the endpoint's capability, a generation id,
//	       the worst-case cost reserved (or admitted from a credit lease) →
//	tryRoutes: each route in order under its resilience policy (breaker, retries with
//	       backoff, timeouts, fallback) → the endpoint's attempt: relay or translate, and meter
//	       the usage on the call →
//	settle: price the usage by dimension, charge, record the generation.
//
// An endpoint family is one handler file that validates its request, names its capability
// and worst case, and writes its attempt.

// capability is what an endpoint needs of a route's adapter: its wire format, which a
// Forwarder may accept and serve byte for byte, or the neutral interface of the capability.
type capability struct {
	endpoint string
	format   providers.WireFormat
	// neutral reports whether the adapter implements the capability's interface.
	neutral func(providers.Provider) bool
	// meters are the pricing dimensions the endpoint measures. A route of a paid model that
	// prices none of them could only charge 0: it does not serve the endpoint.
	meters []string
}

// textMeters are the dimensions the text surfaces measure.
var textMeters = []string{pricing.DimInput, pricing.DimCachedInput, pricing.DimCacheWrite, pricing.DimOutput, pricing.DimReasoning, pricing.DimRequest}

// unmetered names a dimension p prices when it prices none of meters (a route billed by what
// its endpoint never measures could only charge 0), "" otherwise. Only a price of none of
// meters counts: a route's derived prices (cached input at the input price...) may well
// name dimensions an endpoint does not measure beside one it does.
func unmetered(p pricing.Price, meters []string) string {
	other := ""
	if len(p.Images()) > 0 {
		if slices.Contains(meters, pricing.DimImage) {
			return ""
		}
		other = pricing.DimImage
	}
	if len(p.VideoSeconds()) > 0 {
		if slices.Contains(meters, pricing.DimOutputVideoSeconds) {
			return ""
		}
		other = pricing.DimOutputVideoSeconds
	}
	for _, d := range pricing.Dimensions() {
		if d.Keyed || p.PerUnit(d.Name) == 0 {
			continue
		}
		if slices.Contains(meters, d.Name) {
			return ""
		}
		if other == "" {
			other = d.Name
		}
	}
	return other
}

func isChatProvider(p providers.Provider) bool {
	_, ok := p.(providers.ChatProvider)
	return ok
}

// supports tells whether a route's adapter has the capability.
func (cp *capability) supports(rt Route) bool {
	if _, ok := forwarderFor(rt, cp.format); ok {
		return true
	}
	return cp.neutral != nil && cp.neutral(rt.Provider)
}

// routeFit is what a request asks of a route beyond its endpoint (an upload within its
// limit, a document it can read): why tells why a route cannot serve the request ("" when
// it can), refuse answers when none of candidates, the routes with the capability, can.
type routeFit struct {
	why    func(Route) string
	refuse func(candidates []Route) *APIError
}

// notServed refuses a request to a model of another endpoint family (a chat model asked for
// embeddings), which discovery does not list for it, whatever its routes' adapters could be
// sent.
func (g *Gateway) notServed(m *Model, cp *capability) *APIError {
	e := newError(http.StatusBadRequest, CodeUnsupportedModel, fmt.Sprintf(
		"model %q does not serve %s: it is a model for %s (its catalogue entry, its configured endpoints, or else its prices say so); GET /gateway/models lists what each model serves",
		m.Name, cp.endpoint, strings.Join(g.families[m], ", ")))
	e.Param = "model"
	dropped := make([]droppedRoute, len(m.Routes))
	for i, rt := range m.Routes {
		dropped[i] = droppedRoute{stageEndpoint, rt.ProviderName, reasonUnsupportedEndpoint}
	}
	return withRouting(e, m, dropped)
}

// begin is beginFitting for a request that any route with the capability can serve.
func (g *Gateway) begin(w http.ResponseWriter, r *http.Request, caller *Caller, cp *capability, modelName string, promptBytes int, wantMeta bool, worst func(Route) (int64, error)) (*call, *APIError) {
	return g.beginFitting(w, r, caller, cp, modelName, promptBytes, wantMeta, nil, worst)
}

// beginFitting picks the routes that have the capability and that fit allows, issues the
// generation id and reserves worst(route) at its largest over them, the most the call may
// cost: a route that cannot serve the request never sizes its hold. A route whose prices
// cannot price the request (worst fails with a *pricing.UnpricedError: an image size it has
// no price for) or that prices none of what the endpoint measures is dropped; the request
// is refused when none is left. Each route dropped is noted with its stage and reason for
// routing_diagnostics.
func (g *Gateway) beginFitting(w http.ResponseWriter, r *http.Request, caller *Caller, cp *capability, modelName string, promptBytes int, wantMeta bool, fit *routeFit, worst func(Route) (int64, error)) (*call, *APIError) {
	m, routes, dropped, apiErr := g.Registry.candidates(modelName, cp)
	if apiErr != nil {
		return nil, apiErr
	}
	if !g.isFor(m, cp) {
		return nil, g.notServed(m, cp)
	}
	if fit != nil {
		candidates := routes
		if routes, dropped = dropRoutes(routes, dropped, stageRequestFit, fit.why); len(routes) == 0 {
			return nil, withRouting(fit.refuse(candidates), m, dropped)
		}
	}
	var most int64
	if !m.Free() {
		var unpriced error
		routes, dropped = dropRoutes(routes, dropped, stagePricing, func(rt Route) string {
			if dim := unmetered(rt.Price, cp.meters); dim != "" {
				// Billed by what the endpoint never measures, the route could only charge 0:
				// mostly a model of another endpoint (a transcription model asked for
				// speech), else prices the operator must fix. Either way it does not serve it.
				e := newError(http.StatusBadRequest, CodeUnsupportedModel, fmt.Sprintf(
					"model %q does not serve %s: route %s bills it by %s, which %s does not measure (it measures %s); GET /gateway/models lists what each model serves",
					m.Name, cp.endpoint, rt.ProviderName, dim, cp.endpoint, strings.Join(cp.meters, ", ")))
				e.Param = "model"
				unpriced = e
				return reasonMissingPricing
			}
			n, err := worst(rt)
			if err != nil {
				unpriced = err
				if _, ok := errors.AsType[*pricing.UnpricedError](err); ok {
					return reasonMissingPricing
				}
				return reasonUnbillable
			}
			most = max(most, n)
			return ""
		})
		if len(routes) == 0 {
			return nil, withRouting(priceError(unpriced, ""), m, dropped)
		}
	}
	c := &call{
		Charge: billing.Charge{
			GenerationID: generationID(r.Context()), WorkspaceID: caller.Key.WorkspaceID, KeyID: caller.Key.ID,
			Endpoint: cp.endpoint, Model: m.Name, Most: most, Start: g.Now(),
		},
		g: g, caller: caller, model: m, routes: routes, skipped: dropped,
		wantMeta: wantMeta, promptBytes: promptBytes, reqCtx: r.Context(),
	}
	setGenerationID(w.Header(), c.GenerationID)
	if g.Observer != nil {
		g.Observer.Began(r.Context(), Outcome{c})
	}
	if m.Free() {
		return c, nil
	}
	// The credit comes from the request's admission: by default a key's lease, else a
	// reservation of its own, both within StoreTimeout.
	req := billing.Request{
		WorkspaceID: caller.Key.WorkspaceID, KeyID: caller.Key.ID, Most: most,
		GenerationID: c.GenerationID, Endpoint: cp.endpoint, Model: m.Name, Start: c.Start,
	}
	var hold billing.Hold
	var err error
	if adm := g.admission(r.Context()); adm != billing.Admission(g.ledger) {
		hold, err = adm.Admit(r.Context(), req)
	} else {
		// The default admission keeps a lease's hold in the call: no allocation of its own
		// on the hot path.
		hold, err = g.ledger.AdmitInto(r.Context(), req, &c.leaseHold)
	}
	if err != nil {
		return nil, g.admissionRefused(err, most, cp.endpoint, m.Name)
	}
	c.Hold = hold
	return c, nil
}

// admissionRefused answers a request whose hold of most was refused with err: 402 for a
// wallet short of it, 429 for a key past its limit, 503 for a store that cannot say.
func (g *Gateway) admissionRefused(err error, most int64, endpoint, model string) *APIError {
	if errors.Is(err, store.ErrInsufficientFunds) {
		e := newError(http.StatusPaymentRequired, CodeInsufficientFunds, fmt.Sprintf(
			"insufficient credit: this request needs an available balance of at least %s USD (1.00 USD minimum, worst-case cost %s USD); add credits to the workspace",
			pricing.FormatUSD(max(most, MinPreflightNanos)), pricing.FormatUSD(most)))
		e.Extra = map[string]any{"required_nanos": max(most, MinPreflightNanos)}
		return g.Metrics.refused(endpoint, model, e)
	}
	if e := keyLimitError(err, g.Now()); e != nil {
		return g.Metrics.refused(endpoint, model, e)
	}
	return g.Metrics.refused(endpoint, model, g.storeUnavailable("reserving credit", err))
}

// admissionKey carries, in a request's context, the admission its credit comes from when
// it is not the Gateway's default (Dispatch: a batch row drawing on its batch's budget).
type admissionKey struct{}

// admission is where the credit of the request of ctx comes from: the admission Dispatch
// gave it, else the Gateway's ledger (a key lease, else a reservation of its own).
func (g *Gateway) admission(ctx context.Context) billing.Admission {
	if a, ok := ctx.Value(admissionKey{}).(billing.Admission); ok {
		return a
	}
	return g.ledger
}

// tryRoutes works the call's routes in order until one answers: a route whose circuit is
// open is skipped, a failure before anything reached the client is retried on the same
// route while the policy allows (never after a timeout), then the next route is tried. A
// request the upstream refused as invalid is answered at once, except one too long for the
// route's context window, which only a route with a larger window may take, and one the
// adapter refused as Unsupported, which another route's upstream may express; either is the
// answer when no later route does better. prepare, when set, readies a route before its
// first attempt (a request decoded for translation); its error answers the request. attempt is the endpoint's one try: it writes the answer and
// settles on success, and returns the upstream's failure (an *UpstreamError) or an *APIError
// to answer with. The result is the error to answer with, nil once answered. ctx is the
// client's: once it ends ("the client left"), no route more is tried; each attempt gets
// it, or a context of its own that ends with the attempt's timers.
func (c *call) tryRoutes(ctx context.Context, stream bool, prepare func(Route) *APIError, attempt func(ctx context.Context, rt Route) error) error {
	g := c.g
	var tooLong, refused *providers.UpstreamError
	var tooLongWindow int64
	for _, rt := range c.routes {
		// After a context-length refusal only a larger window can help.
		if tooLong != nil && (rt.ContextWindow == 0 || rt.ContextWindow <= tooLongWindow) {
			c.skipped = append(c.skipped, droppedRoute{stageAvailability, rt.ProviderName, reasonContextWindow})
			continue
		}
		if !rt.breaker.allow(g.Now(), rt.Policy) {
			c.skipped = append(c.skipped, droppedRoute{stageAvailability, rt.ProviderName, reasonCircuitOpen})
			continue
		}
		if prepare != nil {
			if apiErr := prepare(rt); apiErr != nil {
				rt.breaker.release()
				return c.failed(apiErr)
			}
		}
		g.Metrics.routeTried(c, rt.ProviderName)
		for try := 0; ; try++ {
			err := c.attempt(ctx, rt, stream, func(actx context.Context) error { return attempt(actx, rt) })
			if err == nil {
				// The answer was written whole (a client that left during it was noted by
				// the relay); one that leaves after it cancelled nothing.
				rt.breaker.record(g.Now(), rt.Policy, true)
				return nil
			}
			if c.gone() {
				rt.breaker.release()
				c.clientGone()
				return nil
			}
			rt.breaker.fail(g.Now(), rt.Policy, err)
			var apiErr *APIError
			if errors.As(err, &apiErr) {
				return c.failed(apiErr)
			}
			ue, ok := providers.AsUpstreamError(err)
			if !ok {
				g.Logger.Error("calling a provider failed", zap.String("endpoint", c.Endpoint), zapErr(err))
				return c.failed(newError(http.StatusInternalServerError, CodeGateway, "the gateway failed to call the provider"))
			}
			if !ue.Fallbackable() {
				if ue.Code == CodeContextLengthExceeded {
					tooLong, tooLongWindow = ue, rt.ContextWindow
					break
				}
				if ue.Unsupported {
					// Refused by the adapter before any call: this upstream cannot express
					// the request (a speech format ElevenLabs does not make), another may.
					refused = ue
					break
				}
				return c.upstreamFailure(ue)
			}
			if try >= rt.Policy.Retries || !retrySame(ue, rt.Policy) {
				if ce := g.Logger.Check(zapcore.DebugLevel, "moving on to the next route"); ce != nil {
					ce.Write(zap.String("generation_id", c.GenerationID), zap.String("provider", rt.ProviderName), zapErr(ue))
				}
				break
			}
			g.Metrics.retry(rt.ProviderName)
			if ce := g.Logger.Check(zapcore.DebugLevel, "retrying the route"); ce != nil {
				ce.Write(zap.String("generation_id", c.GenerationID), zap.String("provider", rt.ProviderName), zap.Int("try", try+1), zapErr(ue))
			}
			if !c.sleep(rt.Policy.backoff(try+1, ue.RetryAfter)) {
				c.clientGone()
				return nil
			}
		}
	}
	// When the last route refused the request as the caller's to change, that is the answer.
	if len(c.Failures) > 0 {
		if last := c.lastFailure; last == tooLong || last == refused {
			return c.upstreamFailure(last)
		}
	}
	return c.allFailed()
}
