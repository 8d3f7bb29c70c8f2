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
// the permission its caller needs, the error dialect it answers in, the endpoint family it
// belongs to with the capability it asks of a model's routes, and its handler. A nil handler
// marks a route the specification names whose family is not built yet: it answers 501
// not_implemented_yet, so that clients get a precise answer rather than 404.
type apiRoute struct {
	method, path string
	perm         permission
	surface      Surface
	of           familyRoute
	serve        handler
}

// endpointFamily is a family of endpoints as discovery names it (GET /endpoints, the
// `endpoints` filter, a model's endpoints).
type endpointFamily struct {
	id, name string
}

var (
	chatFamily        = endpointFamily{"chat", "Text generation"}
	embeddingsFamily  = endpointFamily{"embeddings", "Embeddings"}
	moderationsFamily = endpointFamily{"moderations", "Moderation"}
	imagesFamily      = endpointFamily{"images", "Image generation and editing"}
	audioFamily       = endpointFamily{"audio", "Speech, transcription and translation"}
	videoFamily       = endpointFamily{"video", "Video generation"}
	ocrFamily         = endpointFamily{"ocr", "OCR"}
	musicFamily       = endpointFamily{"music", "Music generation"}
)

// familyRoute places a route in its endpoint family: the family, the capability the route
// asks of a model's routes (nil while the family is not built), and whether GET /endpoints
// lists it. The zero value is a route of no family (discovery, administration, health).
type familyRoute struct {
	family     *endpointFamily
	capability *capability
	unlisted   bool
}

// listedIn places a route in family f, listed, asking capability cp of a model's routes.
func listedIn(f *endpointFamily, cp *capability) familyRoute {
	return familyRoute{family: f, capability: cp}
}

// unlistedIn places a route in family f that GET /endpoints does not list: an earlier name of
// a listed route, or a route the specification reserves to answer 501 for good.
func unlistedIn(f *endpointFamily, cp *capability) familyRoute {
	return familyRoute{family: f, capability: cp, unlisted: true}
}

// routeTable is every route of the API, relative to the base path. Discovery lists the
// families in the order of their first listed row, and a family's routes in table order.
// The earlier listing's names (the specification's Versioning: /moderation, /generation,
// /models, /health) answer exactly as their current counterparts.
var routeTable = func() []apiRoute {
	const (
		get, post, patch, put, del = http.MethodGet, http.MethodPost, http.MethodPatch, http.MethodPut, http.MethodDelete
		oa, an                     = SurfaceOpenAI, SurfaceAnthropic
		read, write, remove        = accessRead, accessWrite, accessDelete
	)
	var none familyRoute
	chat, embeddings, moderations, images, audio, video, ocr, musicF := &chatFamily, &embeddingsFamily, &moderationsFamily, &imagesFamily, &audioFamily, &videoFamily, &ocrFamily, &musicFamily
	return []apiRoute{
		// Inference and jobs, by endpoint family.
		{post, "/chat/completions", permInference, oa, listedIn(chat, &chatCompletionsSurface.capability), (*Gateway).chatCompletions},
		{post, "/responses", permInference, oa, listedIn(chat, &responsesSurface.capability), (*Gateway).responses},
		{post, "/messages", permInference, an, listedIn(chat, &messagesSurface.capability), (*Gateway).messages},
		{post, "/embeddings", permInference, oa, listedIn(embeddings, &embeddingsCapability), (*Gateway).embeddings},
		{post, "/moderations", permInference, oa, listedIn(moderations, &moderationsCapability), (*Gateway).moderations},
		{post, "/moderation", permInference, oa, unlistedIn(moderations, &moderationsCapability), (*Gateway).moderations},
		{post, "/images/generations", permInference, oa, listedIn(images, &imageGenerationsCapability), (*Gateway).imageGenerations},
		{post, "/images/edits", permInference, oa, listedIn(images, &imageEditsCapability), (*Gateway).imageEdits},
		{post, "/audio/speech", permInference, oa, listedIn(audio, &speechCapability), (*Gateway).speech},
		{post, "/audio/transcriptions", permInference, oa, listedIn(audio, &transcriptionsCapability), (*Gateway).transcriptions},
		{post, "/audio/translations", permInference, oa, listedIn(audio, &translationsCapability), (*Gateway).translations},
		{post, "/videos", permInference, oa, listedIn(video, &videoCapability), videosOn((*Gateway).createVideo)},
		{get, "/videos", permInference, oa, listedIn(video, &videoCapability), storeBounded((*Gateway).listVideos)},
		{get, "/videos/models", permInference, oa, listedIn(video, &videoCapability), (*Gateway).videoModels},
		{get, "/videos/{video_id}", permInference, oa, listedIn(video, &videoCapability), storeBounded((*Gateway).getVideo)},
		{get, "/videos/{video_id}/content", permInferenceOrLink, oa, listedIn(video, &videoCapability), (*Gateway).videoContent},
		{post, "/videos/{video_id}/download_url", permInference, oa, listedIn(video, &videoCapability), storeBounded((*Gateway).videoDownloadURL)},
		{del, "/videos/{video_id}", permInference, oa, listedIn(video, &videoCapability), (*Gateway).deleteVideo},
		{post, "/videos/{video_id}/cancel", permInference, oa, unlistedIn(video, &videoCapability), storeBounded((*Gateway).cancelVideo)},
		{post, "/ocr", permInference, oa, listedIn(ocr, &ocrCapability), (*Gateway).ocr},
		{post, "/music/generate", permInference, oa, listedIn(musicF, &musicCapability), (*Gateway).createMusic},
		{get, "/music/generate/{music_id}", permInference, oa, listedIn(musicF, &musicCapability), storeBounded((*Gateway).getMusic)},
		{get, "/music/generate/{music_id}/content", permInference, oa, listedIn(musicF, &musicCapability), (*Gateway).musicContent},
		// Live updates of a job of any family (video, music, batch): a websocket.
		{get, "/async/{kind}/{id}/ws", permInference, oa, none, (*Gateway).liveJob},
		// Files and batches.
		{post, "/batches", permInference, oa, none, batchesOn((*Gateway).createBatch)},
		{get, "/batches", permInference, oa, none, batchesOn(storeBounded((*Gateway).listBatches))},
		{get, "/batches/{batch_id}", permInference, oa, none, batchesOn(storeBounded((*Gateway).getBatch))},
		{post, "/batches/{batch_id}/cancel", permInference, oa, none, batchesOn(storeBoundedWrite((*Gateway).cancelBatch))},
		{post, "/files", permInference, oa, none, (*Gateway).createFile},
		{get, "/files", permInference, oa, none, (*Gateway).listFiles},
		{get, "/files/{file_id}", permInference, oa, none, storeBounded((*Gateway).getFile)},
		{get, "/files/{file_id}/content", permInference, oa, none, (*Gateway).fileContent},
		{del, "/files/{file_id}", permInference, oa, none, storeBounded((*Gateway).deleteFile)},
		// Discovery.
		{get, "/models", permAnyKey, oa, none, (*Gateway).listModels},
		{get, "/gateway/models", permAnyKey, oa, none, (*Gateway).gatewayModels},
		{get, "/gateway/models/me", permAnyKey, oa, none, storeBounded((*Gateway).gatewayModelsMe)},
		{get, "/data/models", permAnyKey, oa, none, (*Gateway).dataModels},
		{get, "/providers", permAnyKey, oa, none, (*Gateway).listProviders},
		{get, "/endpoints", permAnyKey, oa, none, (*Gateway).listEndpoints},
		{get, "/organisations", permAnyKey, oa, none, (*Gateway).listOrganisations},
		{get, "/pricing/models", permAnyKey, oa, none, (*Gateway).pricingModels},
		{post, "/pricing/calculate", permAnyKey, oa, none, (*Gateway).pricingCalculate},
		{get, "/generations", permAnyKey, oa, none, storeBounded((*Gateway).getGeneration)},
		{get, "/generation", permAnyKey, oa, none, storeBounded((*Gateway).getGeneration)},
		{get, "/health", permPublic, oa, none, (*Gateway).health},
		{get, "/health/live", permPublic, oa, none, (*Gateway).live},
		// Administration.
		{get, "/key", permAnyKey, oa, none, storeBounded((*Gateway).getKey)},
		{get, "/keys", permManagement("keys", read), oa, none, storeBounded((*Gateway).listKeys)},
		{post, "/keys", permManagement("keys", write), oa, none, storeBoundedWrite((*Gateway).createKey)},
		{get, "/keys/{id}", permManagement("keys", read), oa, none, storeBounded((*Gateway).getKeyByID)},
		{patch, "/keys/{id}", permManagement("keys", write), oa, none, storeBoundedWrite((*Gateway).updateKey)},
		{del, "/keys/{id}", permManagement("keys", remove), oa, none, storeBoundedWrite((*Gateway).revokeKey)},
		{get, "/workspaces", permManagement("workspaces", read), oa, none, storeBounded((*Gateway).listWorkspaces)},
		{post, "/workspaces", permManagement("workspaces", write), oa, none, storeBoundedWrite((*Gateway).createWorkspace)},
		{get, "/credits", permManagement("credits", read), oa, none, storeBounded((*Gateway).getCredits)},
		{post, "/credits", permManagement("credits", write), oa, none, storeBoundedWrite((*Gateway).topUpCredits)},
		{get, "/activity", permManagement("activity", read), oa, none, storeBounded((*Gateway).activity)},
		{post, "/webhook-endpoints", permManagement("webhooks", write), oa, none, webhooksOn((*Gateway).createWebhookEndpoint)},
		{get, "/webhook-endpoints", permManagement("webhooks", read), oa, none, webhooksOn(storeBounded((*Gateway).listWebhookEndpoints))},
		{get, "/webhook-endpoints/{id}", permManagement("webhooks", read), oa, none, webhooksOn(storeBounded((*Gateway).getWebhookEndpoint))},
		{patch, "/webhook-endpoints/{id}", permManagement("webhooks", write), oa, none, webhooksOn((*Gateway).updateWebhookEndpoint)},
		{del, "/webhook-endpoints/{id}", permManagement("webhooks", remove), oa, none, webhooksOn((*Gateway).deleteWebhookEndpoint)},
		{post, "/webhook-endpoints/{id}/rotate-secret", permManagement("webhooks", write), oa, none, webhooksOn((*Gateway).rotateWebhookSecret)},
		{post, "/notifications/destinations", permManagement("notifications", write), oa, none, destinationsOn(storeBoundedWrite((*Gateway).createDestination))},
		{get, "/notifications/destinations", permManagement("notifications", read), oa, none, storeBounded((*Gateway).listDestinations)},
		{get, "/notifications/destinations/{id}", permManagement("notifications", read), oa, none, storeBounded((*Gateway).getDestination)},
		{patch, "/notifications/destinations/{id}", permManagement("notifications", write), oa, none, destinationsOn(storeBoundedWrite((*Gateway).updateDestination))},
		{del, "/notifications/destinations/{id}", permOwnerOrAdmin("notifications", remove), oa, none, storeBoundedWrite((*Gateway).deleteDestination)},
		{post, "/notifications/destinations/{id}/test", permOwnerOrAdmin("notifications", write), oa, none, destinationsOn((*Gateway).testDestination)},
		{get, "/notifications/routes", permManagement("notifications", read), oa, none, storeBounded((*Gateway).listRoutes)},
		{put, "/notifications/routes/{event}", permManagement("notifications", write), oa, none, storeBoundedWrite((*Gateway).setRoute)},
		{get, "/notifications/settings", permManagement("settings", read), oa, none, storeBounded((*Gateway).getNotificationSettings)},
		{patch, "/notifications/settings", permManagement("settings", write), oa, none, storeBoundedWrite((*Gateway).patchNotificationSettings)},
	}
}()

// storeBounded bounds the store reads of a route by StoreTimeout, as a request's key lookup
// and reservation are: a store that does not answer is 503 store_unavailable at the bound,
// not a request left waiting on a cut connection.
func storeBounded(serve handler) handler {
	return boundedBy(serve, "")
}

// storeBoundedWrite bounds a route that writes as storeBounded bounds reads. A write given
// up at the bound may still have committed, so its 503 says the outcome is unknown and to
// look before trying again (a retried top-up would add credit twice).
func storeBoundedWrite(serve handler) handler {
	return boundedBy(serve, "the change may or may not have been made: check its outcome before retrying")
}

// boundedBy runs serve with its store calls bounded by StoreTimeout; outcome, when set, is
// added to the 503's message.
func boundedBy(serve handler, outcome string) handler {
	return func(g *Gateway, w http.ResponseWriter, r *http.Request, c *Caller) error {
		ctx, cancel := g.storeContext(r.Context())
		defer cancel()
		err := serve(g, w, r.WithContext(ctx), c)
		if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) && r.Context().Err() == nil {
			e := g.storeUnavailable("the store for "+r.Method+" "+r.URL.Path, fmt.Errorf("%w: %w", context.DeadlineExceeded, err))
			if outcome != "" {
				e.Message = strings.TrimSuffix(e.Message, "; retry shortly") + "; " + outcome
				e.Extra["outcome_unknown"] = true
			}
			return e
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
		g.routes[rt.path][rt.method] = endpoint{rt.perm, rt.surface, serve}
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
func notImplemented(route string) handler {
	return func(*Gateway, http.ResponseWriter, *http.Request, *Caller) error {
		return newError(http.StatusNotImplemented, CodeNotImplemented, route+" is not implemented yet by this gateway")
	}
}
