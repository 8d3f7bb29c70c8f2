package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/modelgateway/caddy-modelgateway/delivery"
	"github.com/modelgateway/caddy-modelgateway/internal/ids"
	"github.com/modelgateway/caddy-modelgateway/internal/pricing"
	"github.com/modelgateway/caddy-modelgateway/notify"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// Notifications, with a management key, always of the key's own workspace:
//
//	POST   /notifications/destinations            create {"kind", "name", "target": {...}}
//	GET    /notifications/destinations            the workspace's destinations (oldest first)
//	GET    /notifications/destinations/{id}       one destination
//	PATCH  /notifications/destinations/{id}       change name, target, status (active|disabled)
//	DELETE /notifications/destinations/{id}       soft delete, out of every route: {"deleted": true}
//	POST   /notifications/destinations/{id}/test  deliver a test now: {"data": {"delivered", "status"}}
//	GET    /notifications/routes                  each event with its destinations
//	PUT    /notifications/routes/{event}          {"destination_ids": [...]}: the event's destinations
//	GET    /notifications/settings                the low-balance threshold
//	PATCH  /notifications/settings                {"low_balance_threshold_usd": "5.00"}, null: off
//
// A destination's target is checked by its kind, sealed under the operator's key and never
// answered: a destination shows its kind's masked preview. Destinations and routes are the
// notifications area's (notifications:read|write|delete); deleting and testing a
// destination also need an owner or admin (the specification's notification
// administration). The threshold is a workspace setting (settings:read|write). Another
// workspace's destination is 404, exactly like one that does not exist.

// Error codes of the notification routes.
const (
	// CodeDestinationFailed (502) answers a test the destination's service refused or
	// that could not reach it; destination_status is what the service answered.
	CodeDestinationFailed = "destination_delivery_failed"
)

// NotificationsOffMessage is why the routes that seal or open a destination's target
// answer 503 without a secret key.
const NotificationsOffMessage = "notification destinations are off: the operator has not set secret_key, the key that encrypts destination targets at rest; " +
	"set secret_key in the model_gateway global block (e.g. secret_key {env.GATEWAY_SECRET_KEY}) to 32 random bytes in base64, made with: openssl rand -base64 32"

// DefaultDestinationTestTimeout bounds the delivery of a test notification.
const DefaultDestinationTestTimeout = 30 * time.Second

// destinationsOn answers 503 not_configured in place of serve while the gateway has no key
// to seal targets with (WebhookSealer: the one secret key seals both).
func destinationsOn(serve handler) handler {
	return func(g *Gateway, w http.ResponseWriter, r *http.Request, c *Caller) error {
		if g.WebhookSealer == nil {
			return newError(http.StatusServiceUnavailable, CodeNotConfigured, NotificationsOffMessage)
		}
		return serve(g, w, r, c)
	}
}

// destinationView is a destination as the API shows it: never its target.
func destinationView(d store.NotificationDestination) map[string]any {
	var lastStatus any
	if d.LastStatus != 0 {
		lastStatus = d.LastStatus
	}
	return map[string]any{
		"id": d.ID, "object": "notification.destination", "kind": d.Kind, "name": d.Name, "status": d.Status,
		"preview": d.Preview, "created_at": rfc3339(d.CreatedAt), "updated_at": rfc3339(d.UpdatedAt),
		"last_delivered_at": timeOrNull(d.LastDeliveredAt), "last_failure_at": timeOrNull(d.LastFailureAt),
		"last_status": lastStatus,
	}
}

// destinationKinds lists the configured kinds' names, sorted, for errors.
func (g *Gateway) destinationKinds() []string {
	names := make([]string, 0, len(g.DestinationKinds))
	for k := range g.DestinationKinds {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// checkTarget checks a target of kind and seals it for destination id of the workspace.
func (g *Gateway) checkTarget(kind notify.Kind, workspaceID, id string, raw json.RawMessage) (sealed []byte, preview string, apiErr *APIError) {
	if trimmed := strings.TrimSpace(string(raw)); trimmed == "" || trimmed[0] != '{' {
		return nil, "", paramError("target", "target must be an object of the kind's fields")
	}
	normalized, preview, err := kind.Check(raw)
	if err != nil {
		var te *notify.TargetError
		switch {
		case errors.Is(err, notify.ErrKindNotConfigured):
			return nil, "", paramError("kind", err.Error())
		case errors.As(err, &te) && te.Field == "":
			return nil, "", paramError("target", te.Error())
		case errors.As(err, &te):
			return nil, "", paramError("target."+te.Field, te.Error())
		}
		return nil, "", paramError("target", "the target is refused: "+notify.SafeError(err))
	}
	if len(preview) > store.MaxDestinationPreviewLen {
		preview = strings.ToValidUTF8(preview[:store.MaxDestinationPreviewLen], "")
	}
	sealed, err = g.WebhookSealer.Seal(normalized, notify.SealContext(workspaceID, id))
	clear(normalized)
	if err != nil {
		return nil, "", newError(http.StatusInternalServerError, CodeGateway, "the target could not be sealed")
	}
	return sealed, preview, nil
}

// readDestinationFields reads a destination's fields: kind (creating only), name, target
// and status (updating only), each checked so that the 400 names the field.
func (g *Gateway) readDestinationFields(w http.ResponseWriter, r *http.Request, workspaceID, id, kindName string) (store.NotificationDestinationUpdate, string, *APIError) {
	creating := kindName == ""
	allowed := []string{"name", "target", "status"}
	if creating {
		allowed = []string{"kind", "name", "target"}
	}
	var u store.NotificationDestinationUpdate
	f, apiErr := g.readObject(w, r, allowed...)
	if apiErr != nil {
		return u, "", apiErr
	}
	if creating {
		k, _, apiErr := f.str("kind")
		if apiErr != nil {
			return u, "", apiErr
		}
		if k == "" {
			return u, "", paramError("kind", "kind is required: one of "+strings.Join(g.destinationKinds(), ", "))
		}
		kindName = k
	}
	kind, ok := g.DestinationKinds[kindName]
	if !ok {
		return u, "", paramError("kind", fmt.Sprintf("destination kind %q is not configured on this gateway; the kinds are: %s", kindName, strings.Join(g.destinationKinds(), ", ")))
	}
	if name, present, apiErr := f.name("name", creating); apiErr != nil {
		return u, "", apiErr
	} else if present {
		if name == "" {
			return u, "", paramError("name", "name must not be empty")
		}
		if len(name) > store.MaxDestinationNameLen {
			return u, "", paramError("name", fmt.Sprintf("name is longer than %d bytes", store.MaxDestinationNameLen))
		}
		u.Name = &name
	}
	if raw, ok := f["target"]; ok {
		sealed, preview, apiErr := g.checkTarget(kind, workspaceID, id, raw)
		if apiErr != nil {
			return u, "", apiErr
		}
		u.Target, u.Preview = sealed, &preview
	} else if creating {
		return u, "", paramError("target", "target is required: an object of the "+kindName+" kind's fields")
	}
	if raw, ok := f["status"]; ok {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil || (s != store.DestinationActive && s != store.DestinationDisabled) {
			return u, "", paramError("status", "status must be active or disabled (DELETE /notifications/destinations/{id} deletes a destination)")
		}
		u.Status = &s
	}
	return u, kindName, nil
}

func destinationNotFound(id string) *APIError {
	e := newError(http.StatusNotFound, CodeNotFound, fmt.Sprintf("no notification destination %q in this workspace", id))
	e.Param = "id"
	return e
}

// ownDestination returns the workspace's live destination named by the path, or 404.
func (g *Gateway) ownDestination(ctx context.Context, r *http.Request, c *Caller) (store.NotificationDestination, error) {
	id := r.PathValue("id")
	d, err := g.Store.GetNotificationDestination(ctx, c.Key.WorkspaceID, id)
	if errors.Is(err, store.ErrNotFound) {
		return d, destinationNotFound(id)
	}
	return d, err
}

// destinationWriteError turns a store write's ErrNotFound (deleted meanwhile) into 404.
func destinationWriteError(id string, err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return destinationNotFound(id)
	}
	return err
}

// createDestination serves POST /notifications/destinations:
//
//	{"kind": "slack", "name": "ops", "target": {"url": "https://hooks.slack.com/services/..."}}
//
// The answer is 201 with the destination: its preview, never its target.
func (g *Gateway) createDestination(w http.ResponseWriter, r *http.Request, c *Caller) error {
	id := ids.New("ntd")
	u, kind, apiErr := g.readDestinationFields(w, r, c.Key.WorkspaceID, id, "")
	if apiErr != nil {
		return apiErr
	}
	d, err := g.Store.CreateNotificationDestination(r.Context(), store.NotificationDestination{
		ID: id, WorkspaceID: c.Key.WorkspaceID, Kind: kind, Name: *u.Name, Target: u.Target, Preview: *u.Preview,
		Status: store.DestinationActive, CreatedBy: c.Key.ID, CreatedAt: g.Now(),
	})
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, map[string]any{"data": destinationView(d)})
}

// listDestinations serves GET /notifications/destinations: the workspace's destinations
// but the deleted ones, oldest first.
func (g *Gateway) listDestinations(w http.ResponseWriter, r *http.Request, c *Caller) error {
	p, apiErr := parsePage(r.URL.Query())
	if apiErr != nil {
		return apiErr
	}
	items, err := g.Store.ListNotificationDestinations(r.Context(), c.Key.WorkspaceID, p.store())
	env, err := storePage(items, err, func(d store.NotificationDestination) string { return d.ID }, p)
	if err != nil {
		return err
	}
	pageItems := env["data"].([]store.NotificationDestination)
	views := make([]map[string]any, 0, len(pageItems))
	for _, d := range pageItems {
		views = append(views, destinationView(d))
	}
	env["data"] = views
	return writeJSON(w, http.StatusOK, env)
}

// getDestination serves GET /notifications/destinations/{id}.
func (g *Gateway) getDestination(w http.ResponseWriter, r *http.Request, c *Caller) error {
	d, err := g.ownDestination(r.Context(), r, c)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"data": destinationView(d)})
}

// updateDestination serves PATCH /notifications/destinations/{id}: the fields given change,
// the others stay; a new target is checked by the destination's kind.
func (g *Gateway) updateDestination(w http.ResponseWriter, r *http.Request, c *Caller) error {
	d, err := g.ownDestination(r.Context(), r, c)
	if err != nil {
		return err
	}
	u, _, apiErr := g.readDestinationFields(w, r, d.WorkspaceID, d.ID, d.Kind)
	if apiErr != nil {
		return apiErr
	}
	updated, err := g.Store.UpdateNotificationDestination(r.Context(), c.Key.WorkspaceID, d.ID, u)
	if err != nil {
		return destinationWriteError(d.ID, err)
	}
	return writeJSON(w, http.StatusOK, map[string]any{"data": destinationView(updated)})
}

// deleteDestination serves DELETE /notifications/destinations/{id}: soft delete, out of
// every route, and the notifications queued for it are not sent. The answer is the
// specification's {"deleted": true}; the destination is 404 from then on.
func (g *Gateway) deleteDestination(w http.ResponseWriter, r *http.Request, c *Caller) error {
	id := r.PathValue("id")
	if _, err := g.Store.DeleteNotificationDestination(r.Context(), c.Key.WorkspaceID, id); err != nil {
		return destinationWriteError(id, err)
	}
	return writeJSON(w, http.StatusOK, map[string]any{"deleted": true})
}

// testDestination serves POST /notifications/destinations/{id}/test: a test notification
// delivered through the destination's kind now, not queued, so that the answer tells
// whether it arrived: {"data": {"delivered": true, "status": 200}}, status being the
// service's (an HTTP status, an SMTP reply code). A delivery that failed is 502
// destination_delivery_failed, naming what failed, with the service's status as
// destination_status (null when none answered).
func (g *Gateway) testDestination(w http.ResponseWriter, r *http.Request, c *Caller) error {
	sctx, cancel := g.storeContext(r.Context())
	d, err := g.ownDestination(sctx, r, c)
	cancel()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Context(), DefaultDestinationTestTimeout)
	defer cancel()
	status, err := notify.Deliver(ctx, g.DestinationKinds, g.WebhookSealer, g.destinationClient(), d, notify.Test(d, g.Now()))
	outcome := store.NotificationOutcome{Delivered: err == nil, Status: status, At: g.Now()}
	sctx, cancel = g.storeContext(context.WithoutCancel(r.Context()))
	if rerr := g.Store.RecordNotificationOutcome(sctx, d.WorkspaceID, d.ID, outcome); rerr != nil && !errors.Is(rerr, store.ErrNotFound) {
		g.Logger.Warn("recording a destination test's outcome failed", zapErr(rerr))
	}
	cancel()
	if err != nil {
		// The operator sees why a user's test failed; the error's text never holds a target.
		g.Logger.Info("a notification destination's test failed", zap.String("destination_id", d.ID),
			zap.String("kind", d.Kind), zap.Int("status", status), zap.String("error", notify.SafeError(err)))
		return destinationFailed(d, status, err)
	}
	return writeJSON(w, http.StatusOK, map[string]any{"data": map[string]any{"delivered": true, "status": status}})
}

// destinationFailed is the 502 of a test that did not deliver.
func destinationFailed(d store.NotificationDestination, status int, err error) *APIError {
	var se *notify.SendError
	var msg string
	switch {
	case errors.As(err, &se):
		status = se.Status
		msg = fmt.Sprintf("the %s destination %s refused the test notification: it answered %d", d.Kind, d.ID, se.Status)
		if se.Message != "" {
			msg += ": " + notify.SafeError(errors.New(se.Message))
		}
	case errors.Is(err, delivery.ErrForbiddenAddress), errors.Is(err, delivery.ErrSchemeNotAllowed):
		msg = fmt.Sprintf("the %s destination %s was not called: its address is not allowed (%s)", d.Kind, d.ID, notify.SafeError(err))
	case errors.Is(err, context.DeadlineExceeded):
		msg = fmt.Sprintf("the %s destination %s did not answer within %v", d.Kind, d.ID, DefaultDestinationTestTimeout)
	default:
		msg = fmt.Sprintf("the test notification could not be delivered to the %s destination %s: %s", d.Kind, d.ID, notify.SafeError(err))
	}
	e := newError(http.StatusBadGateway, CodeDestinationFailed, msg)
	e.Origin = "upstream"
	var statusField any
	if status != 0 {
		statusField = status
	}
	e.Extra = map[string]any{"destination_id": d.ID, "destination_kind": d.Kind, "destination_status": statusField, "delivered": false}
	return e
}

// destinationClient is the guarded client destinations are delivered through: the
// operator's webhook client when set (its allowed networks), else public https only.
func (g *Gateway) destinationClient() *delivery.Client { return g.webhookURLs() }

// routeView is an event's route as the API shows it.
func routeView(event string, ids []string) map[string]any {
	if ids == nil {
		ids = []string{}
	}
	return map[string]any{"event": event, "destination_ids": ids}
}

// listRoutes serves GET /notifications/routes: every event, in notify.Events order, with
// the destinations it is routed to (none: an empty list).
func (g *Gateway) listRoutes(w http.ResponseWriter, r *http.Request, c *Caller) error {
	routes, err := g.Store.NotificationRoutes(r.Context(), c.Key.WorkspaceID)
	if err != nil {
		return err
	}
	out := make([]map[string]any, 0, len(notify.Events))
	for _, e := range notify.Events {
		out = append(out, routeView(e, routes[e]))
	}
	return writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": out})
}

// setRoute serves PUT /notifications/routes/{event} {"destination_ids": ["ntd_...", ...]}:
// the event's destinations from now on, replacing those it had ([] routes it nowhere).
func (g *Gateway) setRoute(w http.ResponseWriter, r *http.Request, c *Caller) error {
	event := r.PathValue("event")
	if !slices.Contains(notify.Events, event) {
		e := paramError("event", fmt.Sprintf("unknown event %q; the events are: %s", event, strings.Join(notify.Events, ", ")))
		return e
	}
	f, apiErr := g.readObject(w, r, "destination_ids")
	if apiErr != nil {
		return apiErr
	}
	raw, ok := f["destination_ids"]
	var destIDs []string
	if !ok || json.Unmarshal(raw, &destIDs) != nil || destIDs == nil {
		return paramError("destination_ids", `destination_ids is required: a list of destination ids such as ["ntd_01..."], [] for none`)
	}
	if len(destIDs) > store.MaxRouteDestinations {
		return paramError("destination_ids", fmt.Sprintf("an event is routed to at most %d destinations", store.MaxRouteDestinations))
	}
	if slices.Contains(destIDs, "") {
		return paramError("destination_ids", "destination_ids has an empty id")
	}
	err := g.Store.SetNotificationRoute(r.Context(), c.Key.WorkspaceID, event, destIDs)
	var missing *store.MissingDestinationError
	if errors.As(err, &missing) {
		e := destinationNotFound(missing.ID)
		e.Param = "destination_ids"
		return e
	}
	if err != nil {
		return err
	}
	routes, err := g.Store.NotificationRoutes(r.Context(), c.Key.WorkspaceID)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"data": routeView(event, routes[event])})
}

// settingsView is a workspace's notification settings as the API shows them.
func settingsView(st store.NotificationSettings) map[string]any {
	var usd, nanos any
	if st.LowBalanceThresholdNanos != nil {
		usd, nanos = pricing.FormatUSD(*st.LowBalanceThresholdNanos), *st.LowBalanceThresholdNanos
	}
	return map[string]any{
		"object": "notification.settings", "low_balance_threshold_usd": usd, "low_balance_threshold_nanos": nanos,
		"low_balance_armed":            st.LowBalanceThresholdNanos != nil && st.LowBalanceArmed,
		"low_balance_last_notified_at": timeOrNull(st.LowBalanceFiredAt),
	}
}

// getNotificationSettings serves GET /notifications/settings.
func (g *Gateway) getNotificationSettings(w http.ResponseWriter, r *http.Request, c *Caller) error {
	st, err := g.Store.NotificationSettings(r.Context(), c.Key.WorkspaceID)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"data": settingsView(st)})
}

// patchNotificationSettings serves PATCH /notifications/settings
// {"low_balance_threshold_usd": "5.00"} (or low_balance_threshold_nanos): the balance
// below which balance.low is sent; null turns it off. A new threshold is judged afresh.
func (g *Gateway) patchNotificationSettings(w http.ResponseWriter, r *http.Request, c *Caller) error {
	f, apiErr := g.readObject(w, r, "low_balance_threshold_usd", "low_balance_threshold_nanos")
	if apiErr != nil {
		return apiErr
	}
	const usdKey, nanosKey = "low_balance_threshold_usd", "low_balance_threshold_nanos"
	amount, present, apiErr := f.amount(usdKey, nanosKey, true)
	if apiErr != nil {
		return apiErr
	}
	if !present {
		st, err := g.Store.NotificationSettings(r.Context(), c.Key.WorkspaceID)
		if err != nil {
			return err
		}
		return writeJSON(w, http.StatusOK, map[string]any{"data": settingsView(st)})
	}
	var threshold *int64
	if !isJSONNull(f[f.amountParam(usdKey, nanosKey)]) {
		if amount <= 0 || amount > maxTopUpNanos {
			return paramError(f.amountParam(usdKey, nanosKey), fmt.Sprintf("the threshold must be more than 0 and at most %s USD (null turns the alert off)", pricing.FormatUSD(maxTopUpNanos)))
		}
		threshold = &amount
	}
	st, err := g.Store.SetLowBalanceThreshold(r.Context(), c.Key.WorkspaceID, threshold)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"data": settingsView(st)})
}

// keyLimitNotes keeps a request refused by its key's limit from telling the workspace
// again and again: a client that retries in a loop is told once per key and limit period
// in keyLimitQuiet, per process (the outbox's key then holds across processes while the
// first notification is queued).
type keyLimitNotes struct {
	mu   sync.Mutex
	seen map[string]time.Time
}

// keyLimitQuiet is how long one key and period is told once.
const keyLimitQuiet = 6 * time.Hour

// maxKeyLimitNotes bounds keyLimitNotes; past it, the notes older than keyLimitQuiet go.
const maxKeyLimitNotes = 4096

// first tells whether key is new, or older than keyLimitQuiet at now, and notes it.
func (k *keyLimitNotes) first(key string, now time.Time) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if t, ok := k.seen[key]; ok && now.Sub(t) < keyLimitQuiet {
		return false
	}
	if k.seen == nil {
		k.seen = map[string]time.Time{}
	}
	if len(k.seen) >= maxKeyLimitNotes {
		for s, t := range k.seen {
			if now.Sub(t) >= keyLimitQuiet {
				delete(k.seen, s)
			}
		}
	}
	if len(k.seen) < maxKeyLimitNotes {
		k.seen[key] = now
	}
	return true
}

// noteKeyLimit emits key.limit_reached for a request of key k refused with err when err
// is its spending limit's refusal, in the background: the refusal is answered at once.
func (g *Gateway) noteKeyLimit(k *store.Key, err error) {
	if g.Notifications == nil {
		return
	}
	var le *store.KeyLimitError
	if !errors.As(err, &le) {
		return
	}
	now := g.Now()
	n, key := notify.KeyLimitReached(*k, le, now)
	if g.keyLimitNotes.first(key, now) {
		g.Notifications.Go(n, key)
	}
}
