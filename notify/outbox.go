package notify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"time"

	"go.uber.org/zap"

	"github.com/modelgateway/caddy-modelgateway/delivery"
	"github.com/modelgateway/caddy-modelgateway/internal/background"
	"github.com/modelgateway/caddy-modelgateway/internal/ids"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// Queue is the claims queue of notifications to deliver, one item per notification and
// destination, grouped by destination (so that one slow destination never takes every
// sender). It is not the webhook outbox (store.DeliveryQueue): a notification belongs to
// no job, and its destination is not a webhook endpoint.
const Queue = "notifications"

// Store is what notifications need of the store: the destinations and routes, and the
// claims their queue runs on.
type Store interface {
	store.Notifications
	store.Claims
}

// Item is a notification on its way to one destination: the payload of an item of Queue.
type Item struct {
	WorkspaceID   string       `json:"workspace_id"`
	DestinationID string       `json:"destination_id"`
	Notification  Notification `json:"notification"`
}

// ItemOf reads the item a claimed item of Queue carries.
func ItemOf(it store.ClaimedItem) (Item, error) {
	var x Item
	if err := json.Unmarshal(it.Payload, &x); err != nil || x.WorkspaceID == "" || x.DestinationID == "" {
		return Item{}, fmt.Errorf("item %q of queue %q is not a notification", it.ID, it.Queue)
	}
	return x, nil
}

// SealContext is the context a destination's target is sealed with (delivery.Sealer):
// its workspace and id, so that sealed bytes copied to another row do not open.
func SealContext(workspaceID, destinationID string) []byte {
	return []byte(workspaceID + "/" + destinationID)
}

// NewID is a new notification's id.
func NewID() string { return ids.New("ntf") }

// Outbox routes a workspace's notifications to the destinations their event is routed
// to, queueing one item per destination for the Sender.
type Outbox struct {
	Store  Store
	Logger *zap.Logger
	Now    func() time.Time
	// Timeout bounds an emission started by Go; DefaultEmitTimeout when zero.
	Timeout time.Duration
}

// DefaultEmitTimeout bounds the store calls of one emission made in the background.
const DefaultEmitTimeout = 30 * time.Second

func (o *Outbox) now() time.Time {
	if o.Now != nil {
		return o.Now()
	}
	return time.Now()
}

// Emit queues n for each destination its event is routed to in its workspace, and
// returns how many it queued. key names this occurrence of the event ("" for n.ID): while
// an item of the same key and destination is still queued, another is not (a webhook
// endpoint disabled by two deliveries failing together is told once). An ID and
// OccurredAt are given to n when it has none.
func (o *Outbox) Emit(ctx context.Context, n Notification, key string) (int, error) {
	if n.WorkspaceID == "" || n.Event == "" {
		return 0, errors.New("emitting a notification: no workspace or event")
	}
	if n.ID == "" {
		n.ID = NewID()
	}
	if n.OccurredAt.IsZero() {
		n.OccurredAt = o.now().UTC()
	}
	if key == "" {
		key = n.ID
	}
	routes, err := o.Store.NotificationRoutes(ctx, n.WorkspaceID)
	if err != nil {
		return 0, fmt.Errorf("reading the routes of %s: %w", n.Event, err)
	}
	queued := 0
	for _, dest := range routes[n.Event] {
		payload, err := json.Marshal(Item{WorkspaceID: n.WorkspaceID, DestinationID: dest, Notification: n})
		if err != nil {
			return queued, fmt.Errorf("encoding notification %s: %w", n.ID, err)
		}
		err = o.Store.Enqueue(ctx, store.EnqueueParams{Queue: Queue, ID: dest + "/" + key, Group: dest, Payload: payload})
		switch {
		case errors.Is(err, store.ErrConflict):
			continue
		case err != nil:
			return queued, fmt.Errorf("queueing notification %s for %s: %w", n.ID, dest, err)
		}
		queued++
	}
	return queued, nil
}

// Go emits n in the background (a hook's caller must not wait on the store), bounded by
// Timeout, logging a failure: the event happened whether or not anyone is told.
func (o *Outbox) Go(n Notification, key string) {
	if o == nil {
		return
	}
	go func() {
		if p := background.Call("emitting notification "+n.Event, func() { o.emitLogged(n, key) }); p != nil {
			o.Logger.Error("emitting a notification panicked", zap.String("event", n.Event), zap.Error(p))
		}
	}()
}

func (o *Outbox) emitLogged(n Notification, key string) {
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = DefaultEmitTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if _, err := o.Emit(ctx, n, key); err != nil {
		o.Logger.Error("a notification could not be queued", zap.String("event", n.Event),
			zap.String("workspace_id", n.WorkspaceID), zap.Error(err))
	}
}

// Deliver opens destination d's target and sends n to it through its kind, at once: what a
// test of a destination does, and each attempt of the Sender. A panic in the kind is an
// error like any other. Its errors never carry the target (SafeError).
func Deliver(ctx context.Context, kinds map[string]Kind, sealer *delivery.Sealer, client *delivery.Client,
	d store.NotificationDestination, n Notification) (status int, err error) {
	kind, ok := kinds[d.Kind]
	if !ok {
		return 0, &UnknownKindError{Kind: d.Kind}
	}
	if sealer == nil {
		return 0, errors.New("destination targets cannot be opened: no secret key is configured")
	}
	target, err := sealer.Open(d.Target, SealContext(d.WorkspaceID, d.ID))
	if err != nil {
		return 0, &openError{id: d.ID, err: err}
	}
	if p := background.Call("sending notification to a "+d.Kind+" destination", func() {
		status, err = kind.Send(ctx, Env{Client: client}, target, n)
	}); p != nil {
		return 0, fmt.Errorf("the %s destination kind panicked", d.Kind)
	}
	clear(target)
	return status, err
}

// openError is a target that does not open: the operator's key changed, or the row was
// altered. Trying again cannot help.
type openError struct {
	id  string
	err error
}

func (e *openError) Error() string {
	return fmt.Sprintf("opening the target of destination %s: %v", e.id, e.err)
}

func (e *openError) Unwrap() error { return e.err }

// UnknownKindError is a destination of a kind the configuration does not have (the
// operator removed it).
type UnknownKindError struct{ Kind string }

func (e *UnknownKindError) Error() string {
	return fmt.Sprintf("destination kind %q is not configured on this gateway", e.Kind)
}

// urlPattern finds URLs in an error's text, to be cut out by SafeError.
var urlPattern = regexp.MustCompile(`[a-zA-Z][a-zA-Z0-9+.-]*://[^\s"']+`)

// SafeError is err's text with no target in it, for a log line, a stored reason or an
// answer: a failed request's *url.Error names the URL it posted to (a Slack or Discord
// webhook's URL is its secret), so the URL is left out, and any other URL in the text is
// masked.
func SafeError(err error) string {
	if err == nil {
		return ""
	}
	var ue *url.Error
	msg := err.Error()
	if errors.As(err, &ue) {
		msg = ue.Op + ": " + ue.Err.Error()
	}
	return urlPattern.ReplaceAllString(msg, "<url>")
}
