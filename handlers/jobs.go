package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/google/uuid"

	"github.com/modelgateway/caddy-modelgateway/delivery"
	"github.com/modelgateway/caddy-modelgateway/jobs"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// A job family (video, music, batch) serves its routes from its own file and renders its
// stored jobs as its public object through a jobRenderer it registers here, by store job
// kind: the one way any route (its own, the live updates' websocket) shows a job.
type jobRenderer func(g *Gateway, r *http.Request, j store.Job) (any, error)

var (
	jobRenderersMu sync.RWMutex
	jobRenderers   = map[string]jobRenderer{}
)

// registerJobRenderer makes render the public object of the jobs of kind. Families call it
// from an init function; a kind registered twice panics.
func registerJobRenderer(kind string, render jobRenderer) {
	jobRenderersMu.Lock()
	defer jobRenderersMu.Unlock()
	if _, dup := jobRenderers[kind]; dup {
		panic("handlers: job renderer of kind " + kind + " registered twice")
	}
	jobRenderers[kind] = render
}

// renderJob renders j as its family's public object; false when its kind has no renderer,
// and then it is the job's public fields (genericJob), which every kind has.
func (g *Gateway) renderJob(r *http.Request, j store.Job) (any, bool, error) {
	jobRenderersMu.RLock()
	render, ok := jobRenderers[j.Kind]
	jobRenderersMu.RUnlock()
	if !ok {
		return genericJob{EventData: jobs.PublicData(j), LifecycleStatus: jobs.LifecycleStatus(j.Status)}, false, nil
	}
	v, err := render(g, r, j)
	return v, true, err
}

// genericJob is the object of a job whose family registered no renderer: the public
// fields its events carry (id, object (its kind), status, progress, model, created_at,
// completed_at, error), and its lifecycle_status.
type genericJob struct {
	jobs.EventData
	LifecycleStatus string `json:"lifecycle_status"`
}

// jobURLs are the public URLs of job id of kind, as its object names them: where to poll
// it (pollPath, relative to the API's base path, such as "/videos/{id}") and the websocket
// that pushes its changes (GET /async/{kind}/{id}/ws). They are absolute, built from the
// request's scheme and host, so that a client behind the gateway's own address gets
// addresses it can call.
func (g *Gateway) jobURLs(r *http.Request, pollPath, kind, id string) (pollingURL, websocketURL string) {
	scheme, wsScheme := "http", "ws"
	if r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https") {
		scheme, wsScheme = "https", "wss"
	}
	base := r.Host + g.BasePath
	return scheme + "://" + base + pollPath, wsScheme + "://" + base + "/async/" + kind + "/" + id + "/ws"
}

// jobWebhookAttempts is how many of a job's newest delivery attempts its webhook object
// lists: the counters sum up every attempt, the list stays bounded.
const jobWebhookAttempts = 20

// jobWebhookView is the webhook object of a job's public object, with the specification's
// field names. The secret is never in it: has_secret says whether one signs.
type jobWebhookView struct {
	// EndpointID or URL is where the job's events go: a webhook endpoint of the workspace
	// (URL is then the endpoint's, while it exists), or a URL of the job's own.
	EndpointID string            `json:"endpoint_id,omitempty"`
	URL        string            `json:"url,omitempty"`
	Events     []string          `json:"events"`
	HasSecret  bool              `json:"has_secret"`
	Delivery   jobWebhookState   `json:"delivery"`
	Attempts   []jobWebhookTried `json:"attempts"`
}

// jobWebhookState sums up the job's deliveries. Times are RFC 3339, null when none.
type jobWebhookState struct {
	TotalAttempts       int      `json:"total_attempts"`
	DeliveredEvents     int      `json:"delivered_events"`
	DeliveredEventTypes []string `json:"delivered_event_types"`
	PendingRetries      int      `json:"pending_retries"`
	NextRetryAt         any      `json:"next_retry_at"`
	LastAttemptAt       any      `json:"last_attempt_at"`
	LastResponseStatus  any      `json:"last_response_status"`
	LastDeliveredAt     any      `json:"last_delivered_at"`
	LastFailureAt       any      `json:"last_failure_at"`
	LastErrorMessage    any      `json:"last_error_message"`
	MaxAttempts         int      `json:"max_attempts"`
}

// jobWebhookTried is one attempt at one of the job's events.
type jobWebhookTried struct {
	ID string `json:"id"`
	// DeliveryKey is the event's id: the webhook-id header, the same on every attempt.
	DeliveryKey         string `json:"delivery_key"`
	EventType           string `json:"event_type"`
	AttemptNumber       int    `json:"attempt_number"`
	MaxAttempts         int    `json:"max_attempts"`
	TriedAt             string `json:"tried_at"`
	DeliveredAt         any    `json:"delivered_at"`
	NextRetryAt         any    `json:"next_retry_at"`
	ResponseStatus      any    `json:"response_status"`
	ErrorMessage        any    `json:"error_message"`
	ResponseBodyPreview any    `json:"response_body_preview"`
}

// jobWebhook is the webhook object of job j as the job's public object shows it: its
// target, subscribed events, whether it is signed, the state of its deliveries and its
// newest attempts (jobWebhookAttempts of them, oldest first), read from the store's
// deliveries; nil when the job has no webhook. Every job family calls it when rendering.
func (g *Gateway) jobWebhook(ctx context.Context, j store.Job) (any, error) {
	w, ok, err := delivery.ReadJobWebhook(j.Webhook)
	if err != nil || !ok {
		return nil, err
	}
	v := &jobWebhookView{EndpointID: w.EndpointID, URL: w.URL, Events: w.Events, HasSecret: len(w.Secret) > 0}
	if len(v.Events) == 0 {
		v.Events = []string{"*"}
	}
	if w.EndpointID != "" {
		// An endpoint always has a secret; its URL is shown while it exists.
		v.HasSecret = true
		ep, err := g.Store.GetWebhookEndpoint(ctx, j.WorkspaceID, w.EndpointID)
		switch {
		case err == nil:
			v.URL = ep.URL
		case !errors.Is(err, store.ErrNotFound):
			return nil, err
		}
	}
	st, err := g.Store.JobDeliveryStats(ctx, j.WorkspaceID, j.ID)
	if err != nil {
		return nil, err
	}
	attempts, err := g.Store.ListAttempts(ctx, store.AttemptQuery{WorkspaceID: j.WorkspaceID, JobID: j.ID, Newest: true,
		Page: store.Page{Limit: jobWebhookAttempts}})
	if err != nil {
		return nil, err
	}
	attempts, _ = store.Cut(attempts, jobWebhookAttempts)
	slices.Reverse(attempts)
	most := delivery.DefaultMaxAttempts()
	v.Delivery = jobWebhookState{
		TotalAttempts: st.TotalAttempts, DeliveredEvents: st.DeliveredEvents, DeliveredEventTypes: st.DeliveredEventTypes,
		PendingRetries: st.PendingRetries, NextRetryAt: timeOrNull(st.NextRetryAt), LastAttemptAt: timeOrNull(st.LastAttemptAt),
		LastDeliveredAt: timeOrNull(st.LastDeliveredAt), LastFailureAt: timeOrNull(st.LastFailureAt),
		LastErrorMessage: orNull(st.LastError), MaxAttempts: most,
	}
	if v.Delivery.DeliveredEventTypes == nil {
		v.Delivery.DeliveredEventTypes = []string{}
	}
	if st.TotalAttempts > 0 {
		v.Delivery.LastResponseStatus = intOrNull(st.LastStatusCode)
	}
	v.Attempts = make([]jobWebhookTried, 0, len(attempts))
	for _, a := range attempts {
		t := jobWebhookTried{
			ID: a.ID, DeliveryKey: a.DeliveryID, EventType: a.EventType, AttemptNumber: a.Number, MaxAttempts: most,
			TriedAt: rfc3339(a.At), NextRetryAt: timeOrNull(a.NextAt), ResponseStatus: intOrNull(a.StatusCode),
			ErrorMessage: orNull(a.Error), ResponseBodyPreview: orNull(a.ResponsePreview),
		}
		if a.Delivered {
			t.DeliveredAt = rfc3339(a.At)
		}
		v.Attempts = append(v.Attempts, t)
	}
	return v, nil
}

// JobWebhook is jobWebhook for code outside the package that renders a job kind of its own
// (tests).
func (g *Gateway) JobWebhook(ctx context.Context, j store.Job) (any, error) {
	return g.jobWebhook(ctx, j)
}

func intOrNull(n int) any {
	if n == 0 {
		return nil
	}
	return n
}

// parseJobWebhook reads the "webhook" field of a request that creates a job (raw; empty
// or null: none) and returns what the job stores as its Webhook (store.Job.Webhook), or
// the error that refuses it: an *APIError (400 naming the field, 503 without a secret key),
// or the store's, which the handler returns as it is. It takes either form:
//
//	{"endpoint_id": "<id>", "events": ["video.completed"]}
//	{"url": "https://hooks.example.com/x", "secret": "whsec_...", "events": ["*"]}
//
// endpoint_id must be an active webhook endpoint of the caller's workspace (its secret
// signs, its own subscription applies too). url is checked as endpoints' URLs are (https,
// no credentials, no forbidden address literal; the address dialled is checked at each
// delivery) and needs secret, the caller's own whsec_ secret (base64 of 24 to 64 bytes):
// the gateway keeps it sealed, signs the job's events with it and never shows it. events
// (optional; absent means every event) lists "*" or types of the job's kind,
// "<kind>.<phase>": another kind's event would never come. Job families (video, music,
// batch) call it when creating a job of kind.
func (g *Gateway) parseJobWebhook(ctx context.Context, c *Caller, kind string, raw json.RawMessage) (json.RawMessage, error) {
	if len(bytes.TrimSpace(raw)) == 0 || isJSONNull(raw) {
		return nil, nil
	}
	if g.WebhookSealer == nil {
		return nil, newError(http.StatusServiceUnavailable, CodeNotConfigured, WebhooksOffMessage)
	}
	var in struct {
		EndpointID *string         `json:"endpoint_id"`
		URL        *string         `json:"url"`
		Secret     *string         `json:"secret"`
		Events     json.RawMessage `json:"events"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return nil, paramError("webhook", `webhook must be {"endpoint_id", "events"} or {"url", "secret", "events"}: `+err.Error())
	}
	var w delivery.JobWebhook
	if len(in.Events) > 0 && !isJSONNull(in.Events) {
		events, apiErr := parseWebhookEvents(in.Events)
		if apiErr != nil {
			apiErr.Param = "webhook.events"
			return nil, apiErr
		}
		for _, e := range events {
			if e != "*" && !strings.HasPrefix(e, kind+".") {
				return nil, paramError("webhook.events", fmt.Sprintf("event type %q is not one of a %s job's (%s.<phase>)", e, kind, kind))
			}
		}
		w.Events = events
	}
	switch {
	case in.EndpointID != nil && in.URL != nil:
		return nil, paramError("webhook", "webhook takes endpoint_id or url, not both")
	case in.EndpointID != nil:
		if in.Secret != nil {
			return nil, paramError("webhook.secret", "webhook.secret goes with url only: an endpoint's own secret signs its events")
		}
		id := *in.EndpointID
		notFound := paramError("webhook.endpoint_id", fmt.Sprintf("no webhook endpoint %q in this workspace", id))
		if _, err := uuid.Parse(id); err != nil {
			return nil, notFound
		}
		ep, err := g.Store.GetWebhookEndpoint(ctx, c.Key.WorkspaceID, id)
		if errors.Is(err, store.ErrNotFound) {
			return nil, notFound
		}
		if err != nil {
			return nil, fmt.Errorf("reading webhook endpoint %q: %w", id, err)
		}
		if ep.Status != store.WebhookActive {
			return nil, paramError("webhook.endpoint_id", fmt.Sprintf("webhook endpoint %q is %s; make it active first (PATCH /webhook-endpoints/{id})", id, ep.Status))
		}
		w.EndpointID = id
	case in.URL != nil:
		if apiErr := g.checkWebhookURL(*in.URL); apiErr != nil {
			apiErr.Param = "webhook.url"
			return nil, apiErr
		}
		if in.Secret == nil {
			return nil, paramError("webhook.secret", `webhook.secret is required with url: your own signing secret, "whsec_" followed by the base64 of 32 random bytes (echo "whsec_$(openssl rand -base64 32)")`)
		}
		if err := delivery.CheckSecret(*in.Secret); err != nil {
			return nil, paramError("webhook.secret", "webhook.secret is refused: "+err.Error())
		}
		w.URL, w.Target = *in.URL, delivery.NewInlineTarget()
		sealed, err := g.WebhookSealer.Seal([]byte(*in.Secret), []byte(w.Target))
		if err != nil {
			return nil, fmt.Errorf("sealing a job's webhook secret: %w", err)
		}
		w.Secret = sealed
	default:
		return nil, paramError("webhook", "webhook needs endpoint_id (a webhook endpoint of this workspace) or url")
	}
	return json.Marshal(w)
}
