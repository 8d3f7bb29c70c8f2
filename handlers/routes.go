package handlers

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
)

// apiRoute is one row of the route table: a method and a path (with {parameter} segments),
// who may call it, the error dialect it answers in, and its handler. A nil handler marks a
// route the specification names whose family is not built yet: it answers 501
// not_implemented_yet, so that clients get a precise answer rather than 404.
type apiRoute struct {
	method, path string
	auth         authLevel
	surface      Surface
	serve        func(w http.ResponseWriter, r *http.Request, c *Caller) error
}

// routeTable is every route of the API, relative to the base path. The earlier listing's
// names (the specification's Versioning: /moderation, /generation, /models, /health) answer
// exactly as their current counterparts.
func (g *Gateway) routeTable() []apiRoute {
	const (
		get, post, patch, del = http.MethodGet, http.MethodPost, http.MethodPatch, http.MethodDelete
		oa, an                = SurfaceOpenAI, SurfaceAnthropic
	)
	return []apiRoute{
		// Inference.
		{post, "/chat/completions", authStandard, oa, g.chatCompletions},
		{post, "/responses", authStandard, oa, g.responses},
		{post, "/messages", authStandard, an, g.messages},
		{post, "/embeddings", authStandard, oa, g.embeddings},
		{post, "/moderations", authStandard, oa, g.moderations},
		{post, "/moderation", authStandard, oa, g.moderations},
		{post, "/audio/speech", authStandard, oa, g.speech},
		{post, "/audio/transcriptions", authStandard, oa, g.transcriptions},
		{post, "/audio/translations", authStandard, oa, g.translations},
		{post, "/images/generations", authStandard, oa, g.imageGenerations},
		{post, "/images/edits", authStandard, oa, g.imageEdits},
		{post, "/ocr", authStandard, oa, g.ocr},
		// Jobs, files and batches.
		{post, "/videos", authStandard, oa, nil},
		{get, "/videos", authStandard, oa, nil},
		{get, "/videos/models", authStandard, oa, nil},
		{get, "/videos/{video_id}", authStandard, oa, nil},
		{del, "/videos/{video_id}", authStandard, oa, nil},
		{get, "/videos/{video_id}/content", authStandard, oa, nil},
		{post, "/videos/{video_id}/download_url", authStandard, oa, nil},
		{post, "/videos/{video_id}/cancel", authStandard, oa, nil},
		{post, "/music/generate", authStandard, oa, nil},
		{get, "/music/generate/{music_id}", authStandard, oa, nil},
		{post, "/batches", authStandard, oa, nil},
		{get, "/batches", authStandard, oa, nil},
		{get, "/batches/{batch_id}", authStandard, oa, nil},
		{post, "/batches/{batch_id}/cancel", authStandard, oa, nil},
		{post, "/files", authStandard, oa, nil},
		{get, "/files", authStandard, oa, nil},
		{get, "/files/{file_id}", authStandard, oa, nil},
		{get, "/files/{file_id}/content", authStandard, oa, nil},
		// Discovery.
		{get, "/models", authAny, oa, g.listModels},
		{get, "/gateway/models", authAny, oa, g.gatewayModels},
		{get, "/gateway/models/me", authAny, oa, g.storeBounded(g.gatewayModelsMe)},
		{get, "/data/models", authAny, oa, g.dataModels},
		{get, "/providers", authAny, oa, g.listProviders},
		{get, "/endpoints", authAny, oa, g.listEndpoints},
		{get, "/organisations", authAny, oa, g.listOrganisations},
		{get, "/pricing/models", authAny, oa, g.pricingModels},
		{post, "/pricing/calculate", authAny, oa, g.pricingCalculate},
		{get, "/generations", authAny, oa, g.storeBounded(g.getGeneration)},
		{get, "/generation", authAny, oa, g.storeBounded(g.getGeneration)},
		{get, "/health", authNone, oa, g.health},
		{get, "/health/live", authNone, oa, g.live},
		// Administration.
		{get, "/key", authAny, oa, g.storeBounded(g.getKey)},
		{get, "/keys", authManagement, oa, g.storeBounded(g.listKeys)},
		{post, "/keys", authManagement, oa, g.createKey},
		{get, "/keys/{id}", authManagement, oa, g.storeBounded(g.getKeyByID)},
		{patch, "/keys/{id}", authManagement, oa, g.updateKey},
		{del, "/keys/{id}", authManagement, oa, g.revokeKey},
		{get, "/workspaces", authManagement, oa, g.storeBounded(g.listWorkspaces)},
		{post, "/workspaces", authManagement, oa, g.createWorkspace},
		{get, "/credits", authManagement, oa, g.storeBounded(g.getCredits)},
		{post, "/credits", authManagement, oa, g.topUpCredits},
		{get, "/activity", authManagement, oa, g.storeBounded(g.activity)},
		{post, "/webhook-endpoints/{id}/rotate-secret", authManagement, oa, nil},
		{post, "/notifications/destinations/{id}/test", authManagement, oa, nil},
		{del, "/notifications/destinations/{id}", authManagement, oa, nil},
	}
}

// storeBounded bounds the store reads of a route by StoreTimeout, as a request's key lookup
// and reservation are: a store that does not answer is 503 store_unavailable at the bound,
// not a request left waiting on a cut connection. Writes are not bounded: one given up
// after it committed would be answered as failed, and tried again.
func (g *Gateway) storeBounded(serve func(w http.ResponseWriter, r *http.Request, c *Caller) error) func(w http.ResponseWriter, r *http.Request, c *Caller) error {
	return func(w http.ResponseWriter, r *http.Request, c *Caller) error {
		ctx, cancel := g.storeContext(r.Context())
		defer cancel()
		err := serve(w, r.WithContext(ctx), c)
		if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) && r.Context().Err() == nil {
			return g.storeUnavailable("reading the store for "+r.URL.Path, fmt.Errorf("%w: %w", context.DeadlineExceeded, err))
		}
		return err
	}
}

// routePattern is a route whose path has {parameter} segments, such as /keys/{id}.
type routePattern struct {
	path     string
	segments []string
	methods  map[string]endpoint
}

// buildRoutes indexes the route table: exact paths in g.routes, parameterised ones in
// g.patterns, and the routes not built yet in g.placeholders.
func (g *Gateway) buildRoutes(table []apiRoute) {
	g.routes = map[string]map[string]endpoint{}
	g.placeholders = map[string]bool{}
	for _, rt := range table {
		serve := rt.serve
		if serve == nil {
			serve = notImplemented(rt.method + " " + rt.path)
			g.placeholders[rt.method+" "+rt.path] = true
		}
		if g.routes[rt.path] == nil {
			g.routes[rt.path] = map[string]endpoint{}
		}
		g.routes[rt.path][rt.method] = endpoint{rt.auth, rt.surface, serve}
	}
	g.patterns = g.patterns[:0]
	for path, methods := range g.routes {
		if !strings.Contains(path, "{") {
			continue
		}
		g.patterns = append(g.patterns, routePattern{path: path, segments: strings.Split(path, "/"), methods: methods})
		// A literal request for "/keys/{id}" must not reach the handler without its parameter.
		delete(g.routes, path)
	}
	sort.Slice(g.patterns, func(i, j int) bool { return g.patterns[i].path < g.patterns[j].path })
}

// matchPattern finds the parameterised route of path and sets its parameters as the
// request's path values (r.PathValue("id")). A parameter matches one non-empty segment.
func (g *Gateway) matchPattern(r *http.Request, path string) (map[string]endpoint, bool) {
	if len(g.patterns) == 0 {
		return nil, false
	}
	segs := strings.Split(path, "/")
	for _, p := range g.patterns {
		if len(p.segments) != len(segs) || !p.matches(segs) {
			continue
		}
		for i, s := range p.segments {
			if isParam(s) {
				r.SetPathValue(s[1:len(s)-1], segs[i])
			}
		}
		return p.methods, true
	}
	return nil, false
}

func (p routePattern) matches(segs []string) bool {
	for i, s := range p.segments {
		if isParam(s) {
			if segs[i] == "" {
				return false
			}
		} else if s != segs[i] {
			return false
		}
	}
	return true
}

func isParam(seg string) bool { return len(seg) > 2 && seg[0] == '{' && seg[len(seg)-1] == '}' }

// notImplemented answers a route the specification reserves but this gateway does not serve yet.
func notImplemented(route string) func(w http.ResponseWriter, r *http.Request, c *Caller) error {
	return func(w http.ResponseWriter, r *http.Request, c *Caller) error {
		return newError(http.StatusNotImplemented, CodeNotImplemented, route+" is not implemented yet by this gateway")
	}
}
