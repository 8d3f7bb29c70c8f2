package handlers

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/modelgateway/caddy-modelgateway/delivery"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// Webhook endpoints, with a management key, always of the key's own workspace:
//
//	POST   /webhook-endpoints                    create; the answer carries signing_secret, once
//	GET    /webhook-endpoints                    the workspace's endpoints (oldest first)
//	GET    /webhook-endpoints/{id}               one endpoint
//	PATCH  /webhook-endpoints/{id}               change name, url, events, status (active|disabled)
//	DELETE /webhook-endpoints/{id}               delete (status deleted); then 404 everywhere
//	POST   /webhook-endpoints/{id}/rotate-secret a new signing_secret, once; the old one keeps
//	                                             signing for delivery.RotationGrace
//
// Each answer is the specification's endpoint object itself (camelCase, nothing else), and
// lists are the usual envelope of them. Another workspace's endpoint is 404, exactly like
// one that does not exist.

// Error codes of the webhook endpoint routes.
const (
	// CodeNotConfigured (503) answers a route whose feature the operator has not set up.
	CodeNotConfigured = "not_configured"
	// CodeAsyncAccessRequired (403) refuses rotating a secret in a workspace without
	// access to async APIs, which the specification makes a precondition.
	CodeAsyncAccessRequired = "async_access_required"
)

// WebhooksOffMessage is why the webhook endpoint routes answer 503 without a secret key;
// the module logs it at start too.
const WebhooksOffMessage = "webhook endpoints are off: the operator has not set secret_key, the key that encrypts webhook signing secrets at rest; " +
	"set secret_key in the model_gateway global block (e.g. secret_key {env.GATEWAY_SECRET_KEY}) to 32 random bytes in base64, made with: openssl rand -base64 32"

// Event kinds and phases a webhook endpoint subscribes to as "<kind>.<phase>", or all of
// them as "*".
var (
	webhookEventKinds  = []string{"video", "music", "batch"}
	webhookEventPhases = []string{"created", "status_changed", "progress", "completed", "failed", "cancelled", "expired"}
)

// webhooksOn answers 503 not_configured in place of serve while the gateway has no key
// to seal signing secrets with: an endpoint created then could never be signed for.
func webhooksOn(serve handler) handler {
	return func(g *Gateway, w http.ResponseWriter, r *http.Request, c *Caller) error {
		if g.WebhookSealer == nil {
			return newError(http.StatusServiceUnavailable, CodeNotConfigured, WebhooksOffMessage)
		}
		return serve(g, w, r, c)
	}
}

// webhookEndpointView is the specification's webhook endpoint object, without
// signing_secret.
func webhookEndpointView(e store.WebhookEndpoint) map[string]any {
	return map[string]any{
		"id": e.ID, "workspaceId": e.WorkspaceID, "name": e.Name, "url": e.URL, "status": e.Status,
		"events": e.Events, "hasSecret": e.HasSecret(), "createdBy": orNull(e.CreatedBy),
		"createdAt": timeOrNull(e.CreatedAt), "updatedAt": timeOrNull(e.UpdatedAt), "deletedAt": timeOrNull(e.DeletedAt),
	}
}

func timeOrNull(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return rfc3339(t)
}

// webhookURLs checks receivers' URLs: the operator's client when set, else one that
// admits public https receivers only.
func (g *Gateway) webhookURLs() *delivery.Client {
	if g.WebhookClient != nil {
		return g.WebhookClient
	}
	return defaultWebhookClient
}

var defaultWebhookClient = delivery.NewClient(delivery.ClientOptions{})

// newSealedSecret makes a signing secret for endpoint id and seals it, the endpoint's id
// as context so that the sealed bytes open for that row alone.
func (g *Gateway) newSealedSecret(id string) (plain string, sealed []byte, err error) {
	plain, err = delivery.NewSecret()
	if err != nil {
		return "", nil, err
	}
	sealed, err = g.WebhookSealer.Seal([]byte(plain), []byte(id))
	return plain, sealed, err
}

// readWebhookFields reads name, url and events (and status when updating), each checked
// so that the 400 names the field and what is wrong with it.
func (g *Gateway) readWebhookFields(w http.ResponseWriter, r *http.Request, creating bool) (store.WebhookEndpointUpdate, *APIError) {
	allowed := []string{"name", "url", "events"}
	if !creating {
		allowed = append(allowed, "status")
	}
	f, apiErr := g.readObject(w, r, allowed...)
	if apiErr != nil {
		return store.WebhookEndpointUpdate{}, apiErr
	}
	var u store.WebhookEndpointUpdate
	if name, present, apiErr := f.name("name", creating); apiErr != nil {
		return u, apiErr
	} else if present {
		if name == "" {
			return u, paramError("name", "name must not be empty")
		}
		if len(name) > store.MaxWebhookNameLen {
			return u, paramError("name", fmt.Sprintf("name is longer than %d bytes", store.MaxWebhookNameLen))
		}
		u.Name = &name
	}
	if raw, present, apiErr := f.str("url"); apiErr != nil {
		return u, apiErr
	} else if present {
		if apiErr := g.checkWebhookURL(raw); apiErr != nil {
			return u, apiErr
		}
		u.URL = &raw
	} else if creating {
		return u, paramError("url", "url is required: the https address of the receiver")
	}
	if raw, ok := f["events"]; ok && !isJSONNull(raw) {
		events, apiErr := parseWebhookEvents(raw)
		if apiErr != nil {
			return u, apiErr
		}
		u.Events = events
	} else if creating {
		return u, paramError("events", `events is required: a list of event types such as "video.completed", or ["*"] for every event`)
	}
	if raw, ok := f["status"]; ok {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil || (s != store.WebhookActive && s != store.WebhookDisabled) {
			return u, paramError("status", "status must be active or disabled (DELETE /webhook-endpoints/{id} deletes an endpoint)")
		}
		u.Status = &s
	}
	return u, nil
}

// checkWebhookURL refuses a receiver URL the gateway would not call: not https, carrying
// credentials, or an address literal of a forbidden class (loopback, private...).
func (g *Gateway) checkWebhookURL(raw string) *APIError {
	if raw == "" || len(raw) > store.MaxWebhookURLLen {
		return paramError("url", fmt.Sprintf("url must be 1 to %d bytes", store.MaxWebhookURLLen))
	}
	if _, err := g.webhookURLs().CheckURL(raw); err != nil {
		return paramError("url", fmt.Sprintf("url %q is refused: %v", raw, err))
	}
	return nil
}

// parseWebhookEvents reads a list of event types: each "<kind>.<phase>" or "*", at least
// one, duplicates dropped.
func parseWebhookEvents(raw json.RawMessage) ([]string, *APIError) {
	var events []string
	if err := json.Unmarshal(raw, &events); err != nil {
		return nil, paramError("events", `events must be a list of strings such as ["video.completed"]`)
	}
	if len(events) == 0 {
		return nil, paramError("events", `events must name at least one event type, or ["*"] for every event`)
	}
	var out []string
	for _, e := range events {
		if !validWebhookEvent(e) {
			return nil, paramError("events", fmt.Sprintf("event type %q is not one of \"*\" or <kind>.<phase> with kind %s and phase %s",
				e, strings.Join(webhookEventKinds, ", "), strings.Join(webhookEventPhases, ", ")))
		}
		if !slices.Contains(out, e) {
			out = append(out, e)
		}
	}
	if len(out) > store.MaxWebhookEvents {
		return nil, paramError("events", fmt.Sprintf("events names %d event types, at most %d", len(out), store.MaxWebhookEvents))
	}
	return out, nil
}

func validWebhookEvent(e string) bool {
	if e == "*" {
		return true
	}
	kind, phase, ok := strings.Cut(e, ".")
	return ok && slices.Contains(webhookEventKinds, kind) && slices.Contains(webhookEventPhases, phase)
}

// ownWebhookEndpoint returns the workspace's endpoint named by the path, or 404: for an id
// that is not a UUID, another workspace's, a deleted or a missing endpoint alike.
func (g *Gateway) ownWebhookEndpoint(r *http.Request, c *Caller) (store.WebhookEndpoint, error) {
	id := r.PathValue("id")
	if _, err := uuid.Parse(id); err == nil {
		e, err := g.Store.GetWebhookEndpoint(r.Context(), c.Key.WorkspaceID, id)
		if !errors.Is(err, store.ErrNotFound) {
			return e, err
		}
	}
	return store.WebhookEndpoint{}, webhookNotFound(id)
}

func webhookNotFound(id string) *APIError {
	e := newError(http.StatusNotFound, CodeNotFound, fmt.Sprintf("no webhook endpoint %q in this workspace", id))
	e.Param = "id"
	return e
}

// webhookWriteError turns a store write's ErrNotFound (the endpoint deleted meanwhile)
// into the route's 404.
func webhookWriteError(id string, err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return webhookNotFound(id)
	}
	return err
}

// createWebhookEndpoint serves POST /webhook-endpoints:
//
//	{"name": "prod", "url": "https://hooks.example.com/gw", "events": ["video.completed"]}
//
// The answer is 201 with the endpoint and its signing_secret: shown this once, never again.
func (g *Gateway) createWebhookEndpoint(w http.ResponseWriter, r *http.Request, c *Caller) error {
	u, apiErr := g.readWebhookFields(w, r, true)
	if apiErr != nil {
		return apiErr
	}
	id := uuid.NewString()
	plain, sealed, err := g.newSealedSecret(id)
	if err != nil {
		return err
	}
	e, err := g.Store.CreateWebhookEndpoint(r.Context(), store.WebhookEndpoint{
		ID: id, WorkspaceID: c.Key.WorkspaceID, Name: *u.Name, URL: *u.URL, Events: u.Events,
		Status: store.WebhookActive, Secret: sealed, CreatedBy: c.Key.ID, CreatedAt: g.Now(),
	})
	if err != nil {
		return err
	}
	v := webhookEndpointView(e)
	v["signing_secret"] = plain
	return writeJSON(w, http.StatusCreated, v)
}

// listWebhookEndpoints serves GET /webhook-endpoints: the workspace's endpoints but the
// deleted ones, oldest first.
func (g *Gateway) listWebhookEndpoints(w http.ResponseWriter, r *http.Request, c *Caller) error {
	p, apiErr := parsePage(r.URL.Query())
	if apiErr != nil {
		return apiErr
	}
	items, err := g.Store.ListWebhookEndpoints(r.Context(), c.Key.WorkspaceID, p.store())
	env, err := storePage(items, err, func(e store.WebhookEndpoint) string { return e.ID }, p)
	if err != nil {
		return err
	}
	pageItems := env["data"].([]store.WebhookEndpoint)
	views := make([]map[string]any, 0, len(pageItems))
	for _, e := range pageItems {
		views = append(views, webhookEndpointView(e))
	}
	env["data"] = views
	return writeJSON(w, http.StatusOK, env)
}

// getWebhookEndpoint serves GET /webhook-endpoints/{id}.
func (g *Gateway) getWebhookEndpoint(w http.ResponseWriter, r *http.Request, c *Caller) error {
	e, err := g.ownWebhookEndpoint(r, c)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, webhookEndpointView(e))
}

// updateWebhookEndpoint serves PATCH /webhook-endpoints/{id}: the fields given change, the
// others stay. Making a disabled endpoint active again clears its failures.
func (g *Gateway) updateWebhookEndpoint(w http.ResponseWriter, r *http.Request, c *Caller) error {
	e, err := g.ownWebhookEndpoint(r, c)
	if err != nil {
		return err
	}
	u, apiErr := g.readWebhookFields(w, r, false)
	if apiErr != nil {
		return apiErr
	}
	updated, err := g.Store.UpdateWebhookEndpoint(r.Context(), c.Key.WorkspaceID, e.ID, u)
	if err != nil {
		return webhookWriteError(e.ID, err)
	}
	return writeJSON(w, http.StatusOK, webhookEndpointView(updated))
}

// deleteWebhookEndpoint serves DELETE /webhook-endpoints/{id}: the answer is the endpoint
// as deleted (status deleted, deletedAt set); it is 404 from then on.
func (g *Gateway) deleteWebhookEndpoint(w http.ResponseWriter, r *http.Request, c *Caller) error {
	e, err := g.ownWebhookEndpoint(r, c)
	if err != nil {
		return err
	}
	deleted, err := g.Store.DeleteWebhookEndpoint(r.Context(), c.Key.WorkspaceID, e.ID)
	if err != nil {
		return webhookWriteError(e.ID, err)
	}
	return writeJSON(w, http.StatusOK, webhookEndpointView(deleted))
}

// rotateWebhookSecret serves POST /webhook-endpoints/{id}/rotate-secret: a new signing
// secret, in the answer once; the one it replaces keeps signing beside it for
// delivery.RotationGrace, so that receivers roll without refusing an event. The
// workspace needs access to async APIs, which only the operator grants.
func (g *Gateway) rotateWebhookSecret(w http.ResponseWriter, r *http.Request, c *Caller) error {
	e, err := g.ownWebhookEndpoint(r, c)
	if err != nil {
		return err
	}
	ws, err := g.Store.GetWorkspace(r.Context(), c.Key.WorkspaceID)
	if err != nil {
		return err
	}
	if !ws.AsyncAccess {
		return newError(http.StatusForbidden, CodeAsyncAccessRequired,
			"rotating a webhook secret needs the workspace's access to async APIs, which is off; the gateway's operator turns it on with: caddy gateway workspace async --workspace "+ws.ID+" --enable")
	}
	plain, sealed, err := g.newSealedSecret(e.ID)
	if err != nil {
		return err
	}
	rotated, err := g.Store.RotateWebhookSecret(r.Context(), c.Key.WorkspaceID, e.ID, sealed, g.Now().Add(delivery.RotationGrace))
	if err != nil {
		return webhookWriteError(e.ID, err)
	}
	v := webhookEndpointView(rotated)
	v["signing_secret"] = plain
	return writeJSON(w, http.StatusOK, v)
}
