package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// WebhookEndpoints is the store's role for the webhook endpoints of a workspace: where
// its events go, and the secret that signs them. The store keeps secrets only as the caller
// sealed them (delivery.Sealer): it never sees one in the clear, so a copy of the database
// alone yields none.
type WebhookEndpoints interface {
	// CreateWebhookEndpoint stores e and returns it as stored. An id already used is
	// ErrConflict, an unknown workspace ErrNotFound.
	CreateWebhookEndpoint(ctx context.Context, e WebhookEndpoint) (WebhookEndpoint, error)
	// GetWebhookEndpoint returns an endpoint of the workspace; another workspace's is
	// ErrNotFound, exactly like a missing one.
	GetWebhookEndpoint(ctx context.Context, workspaceID, id string) (WebhookEndpoint, error)
	// ListWebhookEndpoints returns a page of the workspace's endpoints (page.go), oldest
	// first.
	ListWebhookEndpoints(ctx context.Context, workspaceID string, p Page) ([]WebhookEndpoint, error)
	// UpdateWebhookEndpoint applies u to an endpoint of the workspace and returns it as
	// updated. Making an endpoint active again clears its failures and disabled reason.
	UpdateWebhookEndpoint(ctx context.Context, workspaceID, id string, u WebhookEndpointUpdate) (WebhookEndpoint, error)
	// DeleteWebhookEndpoint deletes an endpoint of the workspace and returns it as deleted:
	// status WebhookDeleted, DeletedAt stamped. The row is kept (deliveries and audits may
	// name it), but every other method then treats it as missing (ErrNotFound), and lists
	// leave it out.
	DeleteWebhookEndpoint(ctx context.Context, workspaceID, id string) (WebhookEndpoint, error)
	// RotateWebhookSecret, in one transaction, makes sealed the endpoint's secret and its
	// secret until now the previous one, kept until previousUntil (a previous one of an
	// earlier rotation is dropped), and returns the endpoint as rotated.
	RotateWebhookSecret(ctx context.Context, workspaceID, id string, sealed []byte, previousUntil time.Time) (WebhookEndpoint, error)
	// RecordWebhookOutcome counts a delivery to an endpoint of the workspace: one that
	// was delivered clears its consecutive failures, one that failed for good adds one, and
	// the failure that brings an active endpoint to o.DisableAfter of them disables it with
	// o.Reason (stamping UpdatedAt). It returns the endpoint as counted.
	RecordWebhookOutcome(ctx context.Context, workspaceID, id string, o WebhookOutcome) (WebhookEndpoint, error)
}

// WebhookOutcome is the end of a delivery to a webhook endpoint, as RecordWebhookOutcome
// counts it.
type WebhookOutcome struct {
	Delivered bool
	// DisableAfter is the number of consecutive failures that disables the endpoint; 0
	// never disables it.
	DisableAfter int
	// Reason is the disabled reason to record when this outcome disables it.
	Reason string
}

// Validate checks an outcome.
func (o WebhookOutcome) Validate() error {
	switch {
	case o.DisableAfter < 0:
		return errors.New("webhook outcome: negative failure threshold")
	case o.DisableAfter > 0 && !o.Delivered && o.Reason == "":
		return errors.New("webhook outcome: a failure that may disable the endpoint gives no reason")
	}
	return nil
}

// Statuses of a webhook endpoint.
const (
	WebhookActive   = "active"
	WebhookDisabled = "disabled"
	// WebhookDeleted is the status DeleteWebhookEndpoint sets; no create or update sets it.
	WebhookDeleted = "deleted"
)

// Limits of a webhook endpoint's fields.
const (
	MaxWebhookNameLen = 256
	MaxWebhookURLLen  = 2048
	MaxWebhookEvents  = 64
)

// WebhookEndpoint is a stored webhook endpoint.
type WebhookEndpoint struct {
	ID          string
	WorkspaceID string
	Name        string
	URL         string
	// Events are the event types it is sent (video.completed...); never nil once stored.
	Events []string
	// Status is WebhookActive or WebhookDisabled (WebhookActive when created empty).
	Status string
	// Secret is the signing secret, sealed by the caller.
	Secret []byte
	// PreviousSecret is the secret a rotation replaced, sealed, which keeps signing until
	// PreviousUntil; both are unset when there is none, or once PreviousUntil has passed.
	PreviousSecret []byte
	PreviousUntil  time.Time
	// CreatedBy is the key that created it, empty when unknown.
	CreatedBy string
	CreatedAt time.Time
	UpdatedAt time.Time
	// DeletedAt is when DeleteWebhookEndpoint deleted it, zero before.
	DeletedAt time.Time
	// ConsecutiveFailures counts the deliveries that failed since the last that did not;
	// DisabledReason tells why the gateway disabled the endpoint, empty when it did not.
	ConsecutiveFailures int
	DisabledReason      string
}

// HasSecret tells whether the endpoint has a signing secret (the spec's hasSecret).
func (e *WebhookEndpoint) HasSecret() bool { return len(e.Secret) > 0 }

// WebhookEndpointUpdate is a change to a webhook endpoint: each field set (not nil)
// replaces the endpoint's, the others stay as they are.
type WebhookEndpointUpdate struct {
	Name   *string
	URL    *string
	Events []string
	Status *string
}

// PrepareWebhookEndpoint checks an endpoint given to CreateWebhookEndpoint and returns it
// as stored: Status active when empty, Events never nil, CreatedAt stamped by now when
// zero, UpdatedAt the same, failures and previous secret cleared.
func PrepareWebhookEndpoint(e WebhookEndpoint, now func() time.Time) (WebhookEndpoint, error) {
	if e.Status == "" {
		e.Status = WebhookActive
	}
	switch {
	case e.ID == "":
		return e, errors.New("webhook endpoint: empty id")
	case e.WorkspaceID == "":
		return e, fmt.Errorf("webhook endpoint %q: empty workspace id", e.ID)
	case len(e.Secret) == 0:
		return e, fmt.Errorf("webhook endpoint %q: no secret", e.ID)
	}
	if err := validateWebhookFields(e.ID, e.Name, e.URL, e.Events, e.Status); err != nil {
		return e, err
	}
	e.Events = slices.Clip(append([]string{}, e.Events...))
	e.CreatedAt = Stamp(e.CreatedAt, now)
	e.UpdatedAt = e.CreatedAt
	e.PreviousSecret, e.PreviousUntil = nil, time.Time{}
	e.ConsecutiveFailures, e.DisabledReason = 0, ""
	return e, nil
}

// ValidateWebhookUpdate checks a change to endpoint id.
func ValidateWebhookUpdate(id string, u WebhookEndpointUpdate) error {
	name, url, status := "-", "-", WebhookActive
	if u.Name != nil {
		name = *u.Name
	}
	if u.URL != nil {
		url = *u.URL
	}
	if u.Status != nil {
		status = *u.Status
	}
	return validateWebhookFields(id, name, url, u.Events, status)
}

func validateWebhookFields(id, name, url string, events []string, status string) error {
	switch {
	case name == "" || len(name) > MaxWebhookNameLen:
		return fmt.Errorf("webhook endpoint %q: name must be 1 to %d bytes", id, MaxWebhookNameLen)
	case url == "" || len(url) > MaxWebhookURLLen:
		return fmt.Errorf("webhook endpoint %q: url must be 1 to %d bytes", id, MaxWebhookURLLen)
	case len(events) > MaxWebhookEvents:
		return fmt.Errorf("webhook endpoint %q: %d events, at most %d", id, len(events), MaxWebhookEvents)
	case status != WebhookActive && status != WebhookDisabled:
		return fmt.Errorf("webhook endpoint %q: status %q is neither %q nor %q", id, status, WebhookActive, WebhookDisabled)
	case slices.Contains(events, ""):
		return fmt.Errorf("webhook endpoint %q: an empty event type", id)
	}
	return nil
}

// ValidateRotation checks the arguments of RotateWebhookSecret.
func ValidateRotation(id string, sealed []byte, previousUntil time.Time) error {
	switch {
	case len(sealed) == 0:
		return fmt.Errorf("rotating webhook endpoint %q: no secret", id)
	case previousUntil.IsZero():
		return fmt.Errorf("rotating webhook endpoint %q: no end to the previous secret", id)
	}
	return nil
}

// ExpirePrevious returns e without its previous secret once that secret's time has passed
// at now: backends apply it to every endpoint they read, so that no caller signs with an
// expired secret by forgetting to check.
func ExpirePrevious(e WebhookEndpoint, now time.Time) WebhookEndpoint {
	if len(e.PreviousSecret) == 0 || !now.Before(e.PreviousUntil) {
		e.PreviousSecret, e.PreviousUntil = nil, time.Time{}
	}
	return e
}
