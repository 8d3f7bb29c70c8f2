package handlers

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/modelgateway/caddy-modelgateway/internal/pricing"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// listModels serves GET /models in OpenAI's list shape, so the SDKs' models.list() works.
// include_endpoints=true (the earlier listing's parameter) adds each model's endpoints.
// The list is paged only when the request sets limit or after (see pagination.go).
func (g *Gateway) listModels(w http.ResponseWriter, r *http.Request, _ *Caller) error {
	q := r.URL.Query()
	p, apiErr := parsePage(q)
	if apiErr != nil {
		return apiErr
	}
	withEndpoints := false
	if vs, ok := q["include_endpoints"]; ok {
		b, err := strconv.ParseBool(first(vs))
		if err != nil {
			return paramError("include_endpoints", "include_endpoints must be true or false")
		}
		withEndpoints = b
	}
	offered := g.offeredModels()
	data := make([]map[string]any, 0, len(offered))
	for _, o := range offered {
		m := o.model
		v := map[string]any{
			"id": m.Name, "object": "model", "created": m.Created, "owned_by": modelOwner(m),
			"free": m.Free(), "pricing": priceView(m.Routes[0].Price),
		}
		if withEndpoints {
			v["endpoints"] = o.endpoints
		}
		data = append(data, v)
	}
	if !p.set {
		return writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
	}
	env, apiErr := page(data, offeredID, p)
	if apiErr != nil {
		return apiErr
	}
	return writeJSON(w, http.StatusOK, env)
}

// getGeneration serves GET /generations?id=: a record of the caller's own workspace only.
func (g *Gateway) getGeneration(w http.ResponseWriter, r *http.Request, c *Caller) error {
	id := r.URL.Query().Get("id")
	if id == "" {
		e := newError(http.StatusBadRequest, CodeValidation, "the id query parameter is required")
		e.Param = "id"
		return e
	}
	gen, err := g.Store.GetGeneration(r.Context(), c.Key.WorkspaceID, id)
	if errors.Is(err, store.ErrNotFound) {
		return newError(http.StatusNotFound, CodeNotFound, "no generation "+id+" in this workspace")
	}
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"data": generationView(gen)})
}

func generationView(g store.Generation) map[string]any {
	lines := g.CostLines
	if lines == nil {
		lines = []store.CostLine{}
	}
	attempts := g.Attempts
	if attempts == nil {
		attempts = []store.Attempt{}
	}
	return map[string]any{
		"id": g.ID, "created_at": g.CreatedAt.UTC().Format(time.RFC3339Nano), "endpoint": g.Endpoint,
		"model": g.Model, "provider_name": g.Provider, "upstream_model": g.UpstreamModel, "upstream_id": g.UpstreamID,
		"key_id": g.KeyID, "streamed": g.Streamed, "cancelled": g.Cancelled, "status": g.Status,
		"finish_reason": g.FinishReason, "error_code": g.ErrorCode, "error_message": g.ErrorMessage, "error_origin": g.ErrorOrigin,
		"tokens_prompt": g.InputTokens + g.CacheReadTokens + g.CacheWriteTokens, "tokens_completion": g.OutputTokens + g.ReasoningTokens,
		"usage": map[string]any{
			"input_tokens": g.InputTokens, "cache_read_tokens": g.CacheReadTokens, "cache_write_tokens": g.CacheWriteTokens,
			"output_tokens": g.OutputTokens, "reasoning_tokens": g.ReasoningTokens,
		},
		"total_cost": costNumber(g.CostNanos), "cost_nanos": g.CostNanos, "unbilled_nanos": g.UnbilledNanos, "cost_lines": lines,
		"latency": g.LatencyMs, "generation_time": g.GenerationMs, "end_to_end_ms": g.EndToEndMs,
		"attempts": attempts,
	}
}

// getKey serves GET /key: the calling key, its spending limit and use, and its
// workspace's wallet.
func (g *Gateway) getKey(w http.ResponseWriter, r *http.Request, c *Caller) error {
	bal, err := g.Store.GetBalance(r.Context(), c.Key.WorkspaceID)
	if err != nil {
		return err
	}
	v, err := g.keyWithSpend(r.Context(), c.Key)
	if err != nil {
		return err
	}
	v["credits"] = balanceView(bal)
	return writeJSON(w, http.StatusOK, map[string]any{"data": v})
}

func balanceView(b store.Balance) map[string]any {
	return map[string]any{
		"currency": "USD", "balance": costNumber(b.BalanceNanos), "reserved": costNumber(b.ReservedNanos),
		"available": costNumber(b.Available()), "balance_nanos": b.BalanceNanos,
		"reserved_nanos": b.ReservedNanos, "available_nanos": b.Available(),
		"display": pricing.FormatUSD(b.Available()),
	}
}

// health serves GET /health without authentication: readiness. 200 when the store answers
// within healthProbeTimeout (at most StoreTimeout), 503 store_unavailable with the reason
// when it does not, so that a load balancer stops sending requests the gateway cannot
// serve, and sends them again, with no restart, once the store is back.
func (g *Gateway) health(w http.ResponseWriter, r *http.Request, _ *Caller) error {
	if err := g.ready.check(r.Context(), g); err != nil {
		e := newError(http.StatusServiceUnavailable, CodeStoreUnavailable, "not ready: "+storeProblem(err, g.probeTimeout()))
		e.Type, e.Origin = "system", "gateway"
		e.Extra = map[string]any{"status": "unavailable", "reason": CodeStoreUnavailable}
		return e
	}
	return writeJSON(w, http.StatusOK, map[string]any{"ok": true, "status": "ok", "models": len(g.Registry.names)})
}

// live serves GET /health/live without authentication: liveness, 200 while the process
// serves HTTP, whatever the store does. A process that fails it is to be restarted; one that
// fails only /health is to be left alone, out of rotation, until its store comes back.
func (g *Gateway) live(w http.ResponseWriter, _ *http.Request, _ *Caller) error {
	return writeJSON(w, http.StatusOK, map[string]any{"ok": true, "status": "live"})
}

// Readiness probes.
//
// One probe (store.Ping) runs at a time, bounded by healthProbeTimeout, and its answer
// serves every /health for healthCacheTTL: a load balancer polling every second costs one
// probe a second, and a flood of health checks, at most four a second, never a pile of
// waits on a database that does not answer.
const (
	healthProbeTimeout = time.Second
	healthCacheTTL     = 250 * time.Millisecond
)

// probeTimeout is the bound of a readiness probe: what requests get, at most
// healthProbeTimeout.
func (g *Gateway) probeTimeout() time.Duration { return min(healthProbeTimeout, g.StoreTimeout) }

// readiness is the cached answer of the last probe and the probe in flight.
type readiness struct {
	mu      sync.Mutex
	at      time.Time // when the last probe ended; zero before the first
	err     error
	probing chan struct{} // closed when the probe in flight ends
}

// check returns the store's readiness, probing it if the last answer is too old. A caller
// that finds a probe in flight waits for its answer (or for its own ctx).
func (rd *readiness) check(ctx context.Context, g *Gateway) error {
	for {
		rd.mu.Lock()
		if !rd.at.IsZero() && time.Since(rd.at) < healthCacheTTL {
			err := rd.err
			rd.mu.Unlock()
			return err
		}
		if ch := rd.probing; ch != nil {
			rd.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		ch := make(chan struct{})
		rd.probing = ch
		was := rd.err
		first := rd.at.IsZero()
		rd.mu.Unlock()

		// Not the caller's context: the probe's answer is everyone's.
		pctx, cancel := context.WithTimeout(context.Background(), g.probeTimeout())
		err := g.Store.Ping(pctx)
		cancel()
		switch {
		case err != nil && (was == nil || first):
			g.Logger.Error("the store is unavailable: not ready", zapErr(err))
		case err == nil && was != nil:
			g.Logger.Info("the store answers again: ready")
		}
		rd.mu.Lock()
		rd.at, rd.err, rd.probing = time.Now(), err, nil
		close(ch)
		rd.mu.Unlock()
		return err
	}
}

// storeProblem says why the store is not ready, without the store's own words, which may
// name hosts, users and files.
func storeProblem(err error, bound time.Duration) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "the store did not answer within " + bound.String()
	case errors.Is(err, store.ErrClosed):
		return "the store is closed"
	}
	return "the store cannot be reached"
}
