package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Notifications is the store's role for what a workspace is told and where (package
// notify): its destinations (an email, a Slack channel...), which events are routed to
// which of them, its settings (the low-balance threshold), and the state of its low-balance
// alert. Targets are kept only as the caller sealed them (delivery.Sealer): a copy of the
// database alone yields none.
type Notifications interface {
	// CreateNotificationDestination stores d and returns it as stored. An id already used
	// is ErrConflict, an unknown workspace ErrNotFound.
	CreateNotificationDestination(ctx context.Context, d NotificationDestination) (NotificationDestination, error)
	// GetNotificationDestination returns a destination of the workspace; another
	// workspace's, or a deleted one, is ErrNotFound, exactly like a missing one.
	GetNotificationDestination(ctx context.Context, workspaceID, id string) (NotificationDestination, error)
	// ListNotificationDestinations returns a page of the workspace's destinations but the
	// deleted ones (page.go), oldest first.
	ListNotificationDestinations(ctx context.Context, workspaceID string, p Page) ([]NotificationDestination, error)
	// UpdateNotificationDestination applies u to a destination of the workspace and
	// returns it as updated.
	UpdateNotificationDestination(ctx context.Context, workspaceID, id string, u NotificationDestinationUpdate) (NotificationDestination, error)
	// DeleteNotificationDestination, in one transaction, marks a destination of the
	// workspace deleted (DeletedAt stamped; the row is kept for the notifications in flight
	// that name it, which are then not sent) and removes it from every route. It returns
	// the destination as deleted; every other method then treats it as missing.
	DeleteNotificationDestination(ctx context.Context, workspaceID, id string) (NotificationDestination, error)
	// RecordNotificationOutcome stamps the end of a delivery to a destination of the
	// workspace: LastDeliveredAt or LastFailureAt, and LastStatus.
	RecordNotificationOutcome(ctx context.Context, workspaceID, id string, o NotificationOutcome) error
	// NotificationRoutes returns the workspace's routes: for each event routed somewhere,
	// its destinations' ids in the order they were set. Events routed nowhere are absent.
	NotificationRoutes(ctx context.Context, workspaceID string) (map[string][]string, error)
	// SetNotificationRoute makes ids the destinations of event in the workspace, replacing
	// those it had (none: the event is routed nowhere). An id that is not a live destination
	// of the workspace is ErrNotFound (a *MissingDestinationError), and then nothing changes.
	SetNotificationRoute(ctx context.Context, workspaceID, event string, ids []string) error
	// NotificationSettings returns the workspace's settings; a workspace that never set any
	// has the zero settings.
	NotificationSettings(ctx context.Context, workspaceID string) (NotificationSettings, error)
	// SetLowBalanceThreshold sets the workspace's low-balance threshold (nil: no alert) and
	// arms the alert again, so that a new threshold is judged afresh. An unknown workspace
	// is ErrNotFound.
	SetLowBalanceThreshold(ctx context.Context, workspaceID string, thresholdNanos *int64) (NotificationSettings, error)
	// FireLowBalance, in one transaction: arms again the alert of every workspace whose
	// balance is at or above its threshold, then takes every workspace whose balance is
	// below its threshold and whose alert is armed, or last fired at least cooldown ago,
	// and marks its alert fired now (disarmed). It returns those workspaces, each to be told
	// once: across instances, one call takes a crossing.
	FireLowBalance(ctx context.Context, cooldown time.Duration) ([]LowBalance, error)
}

// Statuses of a notification destination.
const (
	DestinationActive   = "active"
	DestinationDisabled = "disabled"
)

// Limits of a destination's fields.
const (
	MaxDestinationNameLen    = 256
	MaxDestinationPreviewLen = 256
	// MaxRouteDestinations is the most destinations one event is routed to.
	MaxRouteDestinations = 32
)

// NotificationDestination is a stored destination.
type NotificationDestination struct {
	// ID is ntd_<ulid>.
	ID          string
	WorkspaceID string
	// Kind names the notify.Kind that checks and delivers to its target.
	Kind string
	Name string
	// Target is the kind's normalized target, sealed by the caller with the workspace and
	// id as context; Preview the masked form that may be shown.
	Target  []byte
	Preview string
	// Status is DestinationActive or DestinationDisabled (DestinationActive when created
	// empty); a disabled destination is routed but not delivered to.
	Status    string
	CreatedBy string
	CreatedAt time.Time
	UpdatedAt time.Time
	// DeletedAt is when DeleteNotificationDestination deleted it, zero before.
	DeletedAt time.Time
	// LastDeliveredAt and LastFailureAt are when a delivery to it last ended delivered or
	// failed for good, zero when none has; LastStatus is the service's status of the last
	// delivery that ended (HTTP status, SMTP reply code), 0 when none answered.
	LastDeliveredAt time.Time
	LastFailureAt   time.Time
	LastStatus      int
}

// NotificationDestinationUpdate is a change to a destination: each field set replaces the
// destination's, the others stay. Target and Preview change together.
type NotificationDestinationUpdate struct {
	Name    *string
	Target  []byte
	Preview *string
	Status  *string
}

// NotificationOutcome is the end of a delivery to a destination.
type NotificationOutcome struct {
	Delivered bool
	// Status is the service's status (HTTP status, SMTP reply code); 0 when none answered.
	Status int
	// At is when it ended (now when zero).
	At time.Time
}

// NotificationSettings are a workspace's notification settings and the state of its
// low-balance alert.
type NotificationSettings struct {
	WorkspaceID string
	// LowBalanceThresholdNanos is the balance below which the workspace is told its
	// balance is low; nil for no alert.
	LowBalanceThresholdNanos *int64
	// LowBalanceArmed is set while a crossing below the threshold fires at once: when the
	// threshold is set, and again once the balance is back at or above it.
	LowBalanceArmed bool
	// LowBalanceFiredAt is when the alert last fired, zero when never.
	LowBalanceFiredAt time.Time
	// UpdatedAt is when the settings last changed, zero when never set.
	UpdatedAt time.Time
}

// LowBalance is a workspace whose balance FireLowBalance found below its threshold.
type LowBalance struct {
	WorkspaceID    string
	BalanceNanos   int64
	ThresholdNanos int64
	FiredAt        time.Time
}

// MissingDestinationError refuses a route naming a destination that is not a live one of
// the workspace; it matches ErrNotFound.
type MissingDestinationError struct{ ID string }

func (e *MissingDestinationError) Error() string {
	return fmt.Sprintf("notification destination %q: %v", e.ID, ErrNotFound)
}

func (e *MissingDestinationError) Unwrap() error { return ErrNotFound }

// PrepareNotificationDestination checks a destination given to
// CreateNotificationDestination and returns it as stored: Status active when empty,
// CreatedAt stamped by now when zero, UpdatedAt the same, delivery fields cleared.
func PrepareNotificationDestination(d NotificationDestination, now func() time.Time) (NotificationDestination, error) {
	if d.Status == "" {
		d.Status = DestinationActive
	}
	switch {
	case d.ID == "":
		return d, errors.New("notification destination: empty id")
	case d.WorkspaceID == "":
		return d, fmt.Errorf("notification destination %q: empty workspace id", d.ID)
	case d.Kind == "":
		return d, fmt.Errorf("notification destination %q: empty kind", d.ID)
	case len(d.Target) == 0:
		return d, fmt.Errorf("notification destination %q: no target", d.ID)
	}
	if err := validateDestinationFields(d.ID, d.Name, d.Preview, d.Status); err != nil {
		return d, err
	}
	d.CreatedAt = Stamp(d.CreatedAt, now)
	d.UpdatedAt = d.CreatedAt
	d.DeletedAt, d.LastDeliveredAt, d.LastFailureAt, d.LastStatus = time.Time{}, time.Time{}, time.Time{}, 0
	return d, nil
}

// ValidateDestinationUpdate checks a change to destination id.
func ValidateDestinationUpdate(id string, u NotificationDestinationUpdate) error {
	name, preview, status := "-", "", DestinationActive
	if u.Name != nil {
		name = *u.Name
	}
	if (u.Target == nil) != (u.Preview == nil) {
		return fmt.Errorf("notification destination %q: a target changes with its preview", id)
	}
	if u.Target != nil && len(u.Target) == 0 {
		return fmt.Errorf("notification destination %q: an empty target", id)
	}
	if u.Preview != nil {
		preview = *u.Preview
	}
	if u.Status != nil {
		status = *u.Status
	}
	return validateDestinationFields(id, name, preview, status)
}

func validateDestinationFields(id, name, preview, status string) error {
	switch {
	case name == "" || len(name) > MaxDestinationNameLen:
		return fmt.Errorf("notification destination %q: name must be 1 to %d bytes", id, MaxDestinationNameLen)
	case len(preview) > MaxDestinationPreviewLen:
		return fmt.Errorf("notification destination %q: preview longer than %d bytes", id, MaxDestinationPreviewLen)
	case status != DestinationActive && status != DestinationDisabled:
		return fmt.Errorf("notification destination %q: status %q is neither %q nor %q", id, status, DestinationActive, DestinationDisabled)
	}
	return nil
}

// ValidateRoute checks the arguments of SetNotificationRoute and returns the ids without
// duplicates, in their first order.
func ValidateRoute(workspaceID, event string, ids []string) ([]string, error) {
	switch {
	case workspaceID == "":
		return nil, errors.New("notification route: empty workspace id")
	case event == "":
		return nil, errors.New("notification route: empty event")
	}
	var out []string
	for _, id := range ids {
		if id == "" {
			return nil, fmt.Errorf("notification route of %q: an empty destination id", event)
		}
		if !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	if len(out) > MaxRouteDestinations {
		return nil, fmt.Errorf("notification route of %q: %d destinations, at most %d", event, len(out), MaxRouteDestinations)
	}
	return out, nil
}

// ValidateThreshold checks a low-balance threshold.
func ValidateThreshold(thresholdNanos *int64) error {
	if thresholdNanos != nil && *thresholdNanos <= 0 {
		return fmt.Errorf("low-balance threshold %d: must be above 0", *thresholdNanos)
	}
	return nil
}

// ValidateCooldown checks the cooldown given to FireLowBalance.
func ValidateCooldown(cooldown time.Duration) error {
	if cooldown < time.Millisecond {
		return fmt.Errorf("low-balance cooldown %v is shorter than a millisecond", cooldown)
	}
	return nil
}
