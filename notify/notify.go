// Package notify tells a workspace's people what happened (its balance ran low, a key
// reached its spending limit, a webhook endpoint was disabled, a batch or a video failed)
// through the destinations the workspace configured: an email, a Slack, Discord or Teams
// channel, or a webhook of its own.
//
// A destination kind is a Kind: how to check a target a user gives, and how to deliver a
// notification to it in the form its service renders well. module registers each kind as
// a Caddy guest module, model_gateway.destinations.<kind>, as providers are; the store keeps
// targets sealed (delivery.Sealer) and the API never returns one, only Check's preview.
//
// The kinds here are Slack (Block Kit), Discord (an embed), Teams (an Adaptive Card in a
// Workflows message), Webhook (JSON signed with Standard Webhooks, as job webhooks are)
// and Email (plain text and HTML through the operator's SMTP server). The webhook kinds
// check their URLs with the client that will call them and post through Env.Client;
// nothing a kind returns or logs quotes a target's token, secret or address.
package notify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/modelgateway/caddy-modelgateway/delivery"
)

// Events a destination can be routed.
const (
	EventBalanceLow              = "balance.low"
	EventKeyLimitReached         = "key.limit_reached"
	EventWebhookEndpointDisabled = "webhook_endpoint.disabled"
	EventBatchFailed             = "batch.failed"
	EventVideoFailed             = "video.failed"
	EventTest                    = "notification.test"
)

// Events lists the events a route may name, in the order the API lists them.
var Events = []string{EventBalanceLow, EventKeyLimitReached, EventWebhookEndpointDisabled,
	EventBatchFailed, EventVideoFailed, EventTest}

// Notification is what happened, as every kind renders it.
type Notification struct {
	// ID is the notification's id (ntf_<ulid>): the same on every attempt, for a receiver
	// to deduplicate.
	ID          string
	Event       string
	WorkspaceID string
	// Title is one line ("Balance below 5.00 USD"); Text the plain-text body.
	Title string
	Text  string
	// Fields are facts to show as a table (label, value), in order.
	Fields []Field
	// URL links to where the matter can be seen, when there is such a place.
	URL        string
	OccurredAt time.Time
}

// Field is one fact of a notification.
type Field struct {
	Label, Value string
}

// Kind is one kind of destination.
type Kind interface {
	// Check validates a target a user gave for a destination of this kind (a JSON object
	// whose fields are the kind's) and returns it normalized, as it is to be sealed, with
	// a masked preview that may be shown ("hooks.slack.com/…/a1b2"). Its error is a
	// *TargetError, or wraps ErrKindNotConfigured for a kind the operator has not set up.
	Check(target json.RawMessage) (normalized []byte, preview string, err error)
	// Send delivers n to a target Check normalized and answers the service's status:
	// the HTTP status of a webhook, the SMTP server's reply code of an email. Its error
	// is a *SendError when the service answered and refused, any other error when it
	// could not be reached.
	Send(ctx context.Context, env Env, target []byte, n Notification) (status int, err error)
}

// Env is what a kind's Send may use.
type Env struct {
	// Client posts to URLs on a user's behalf: https only unless the operator allowed
	// http, its dialer refuses private, loopback and metadata addresses, and it follows no
	// redirect. Every URL a kind calls goes through it.
	Client *delivery.Client
}

// ErrKindNotConfigured is the error, matched with errors.Is, of a kind this gateway knows
// but whose operator has not set it up (email without an SMTP server): Check and Send of
// such a kind return it, wrapped with what to configure.
var ErrKindNotConfigured = errors.New("destination kind not configured")

// TargetError refuses a target: Field names what is wrong with it, or is empty when the
// target as a whole is (not a JSON object).
type TargetError struct {
	Field, Message string
}

func (e *TargetError) Error() string {
	if e.Field == "" {
		return "target: " + e.Message
	}
	return fmt.Sprintf("target.%s: %s", e.Field, e.Message)
}

// SendError is a service's refusal of a delivery: its status (HTTP status or SMTP reply
// code) and what it said, cut short.
type SendError struct {
	Status  int
	Message string
}

func (e *SendError) Error() string {
	return fmt.Sprintf("the destination answered %d: %s", e.Status, e.Message)
}

// Unconfigured is a kind this gateway knows but whose operator has not set it up: Check
// and Send refuse with ErrKindNotConfigured and what to configure, so that a user who
// creates such a destination is told why.
type Unconfigured struct {
	// Kind is the kind's name ("email"); Hint says what the operator configures.
	Kind, Hint string
}

func (u Unconfigured) err() error {
	return fmt.Errorf("%w: %s destinations are off on this gateway (%s)", ErrKindNotConfigured, u.Kind, u.Hint)
}

// Check refuses every target.
func (u Unconfigured) Check(json.RawMessage) ([]byte, string, error) { return nil, "", u.err() }

// Send refuses every notification: a destination made while the kind was configured is
// not delivered to once its configuration is gone.
func (u Unconfigured) Send(context.Context, Env, []byte, Notification) (int, error) {
	return 0, u.err()
}

var _ Kind = Unconfigured{}
