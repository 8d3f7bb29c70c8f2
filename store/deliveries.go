package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Deliveries is the store's role for the outbox of events to deliver (webhooks, later
// notifications): a delivery is one event for one target, written by the transaction that
// made the event (Jobs.CreateJob, Jobs.AdvanceJob), so that no committed change loses its
// event and no event tells of a change that was rolled back. Senders take deliveries from queue
// DeliveryQueue through the claims, grouped by target (so that one slow endpoint never
// takes every sender: ClaimParams.GroupCap); an item's payload is the Delivery as JSON
// (DeliveryOf), and its claim's Attempt is the number of the attempt about to be made (a
// sender that died mid-attempt, its lease run out, counts as one that failed).
type Deliveries interface {
	// GetDelivery returns a delivery of the workspace; another workspace's is ErrNotFound.
	GetDelivery(ctx context.Context, workspaceID, id string) (Delivery, error)
	// RecordAttempt, in one transaction: records attempt a at the delivery claim c holds
	// (its id is the claim's); then, when next is zero, completes the claim and makes the
	// delivery final, DeliveryDelivered if a.Delivered and DeliveryFailed otherwise (the
	// sender gave up); else retries the claim at next (a failure: its attempt rises). A
	// claim no longer held is ErrClaimLost, and then nothing changes.
	RecordAttempt(ctx context.Context, c Claim, a DeliveryAttempt, next time.Time) error
	// SkipDelivery, in one transaction: completes the delivery claim c holds (its id is the
	// claim's) and makes the delivery final as DeliverySkipped, recording no attempt: there
	// was nothing to send (its target does not take events of its type), so nothing failed
	// and the target's count of failures is not the store's to touch. A claim no longer
	// held is ErrClaimLost, and then nothing changes.
	SkipDelivery(ctx context.Context, c Claim) error
	// ListAttempts returns a page of the attempts q selects, oldest first (newest first
	// when q.Newest).
	ListAttempts(ctx context.Context, q AttemptQuery) ([]DeliveryAttempt, error)
	// JobDeliveryStats sums up the deliveries of a job of the workspace and their
	// attempts, in one read: what a job's webhook object shows of them, however many there
	// are. Another workspace's job, or one without deliveries, has the zero stats.
	JobDeliveryStats(ctx context.Context, workspaceID, jobID string) (DeliveryStats, error)
}

// DeliveryStats is where the deliveries of one job stand (Deliveries.JobDeliveryStats).
type DeliveryStats struct {
	// Events counts the job's deliveries, whatever their status.
	Events int
	// TotalAttempts counts the attempts made at them.
	TotalAttempts int
	// DeliveredEvents counts the deliveries that were delivered, and DeliveredEventTypes
	// are their distinct types, sorted.
	DeliveredEvents     int
	DeliveredEventTypes []string
	// PendingRetries counts the deliveries that failed at least once and wait for another
	// attempt; NextRetryAt is the soonest of those attempts (zero when none waits).
	PendingRetries int
	NextRetryAt    time.Time
	// LastAttemptAt, LastDeliveredAt and LastFailureAt are the times of the newest
	// attempt, the newest that delivered and the newest that failed; zero when none.
	LastAttemptAt   time.Time
	LastDeliveredAt time.Time
	LastFailureAt   time.Time
	// LastStatusCode is the newest attempt's HTTP status (0: none answered, or no attempt),
	// LastError the newest failed attempt's error.
	LastStatusCode int
	LastError      string
}

// DeliveryQueue is the queue of deliveries to send.
const DeliveryQueue = "deliveries"

// Statuses of a delivery.
const (
	DeliveryPending   = "pending"
	DeliveryDelivered = "delivered"
	DeliveryFailed    = "failed"
	// DeliverySkipped is a delivery ended without an attempt: its target does not take
	// events of its type.
	DeliverySkipped = "skipped"
)

// Event is an event to deliver to one target, as CreateJob and AdvanceJob enqueue it.
type Event struct {
	// ID names the delivery (the event for that target): the receiver's idempotency key.
	ID string
	// Type is the event's type (video.completed...).
	Type string
	// Target names where to deliver it: a webhook endpoint's id, or a reference to a URL
	// the job's webhook configuration holds.
	Target string
	// Payload is the event's body, as JSON.
	Payload json.RawMessage
}

// Validate checks an event.
func (e Event) Validate() error {
	switch {
	case e.ID == "":
		return errors.New("event: empty id")
	case e.Type == "":
		return fmt.Errorf("event %q: empty type", e.ID)
	case e.Target == "":
		return fmt.Errorf("event %q: empty target", e.ID)
	case !json.Valid(e.Payload):
		return fmt.Errorf("event %q: payload is not JSON", e.ID)
	}
	return nil
}

// Delivery is an event of a job to deliver to a target, and where its delivery stands.
type Delivery struct {
	ID          string          `json:"id"`
	WorkspaceID string          `json:"workspace_id"`
	JobID       string          `json:"job_id"`
	Target      string          `json:"target"`
	EventType   string          `json:"event_type"`
	Payload     json.RawMessage `json:"payload"`
	// Status is DeliveryPending, DeliveryDelivered, DeliveryFailed or DeliverySkipped.
	Status string `json:"status"`
	// Attempts counts the attempts recorded.
	Attempts int `json:"attempts"`
	// NextAt is when the next attempt is due; zero once final.
	NextAt    time.Time `json:"next_at,omitzero"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// NewDelivery is the delivery of event e of job j, created now.
func NewDelivery(j *Job, e Event, now time.Time) Delivery {
	return Delivery{
		ID: e.ID, WorkspaceID: j.WorkspaceID, JobID: j.ID, Target: e.Target, EventType: e.Type,
		Payload: e.Payload, Status: DeliveryPending, NextAt: now, CreatedAt: now, UpdatedAt: now,
	}
}

// Enqueue is the delivery's item in DeliveryQueue, due at once.
func (d Delivery) Enqueue() (EnqueueParams, error) {
	payload, err := json.Marshal(d)
	if err != nil {
		return EnqueueParams{}, fmt.Errorf("delivery %q: %w", d.ID, err)
	}
	return EnqueueParams{Queue: DeliveryQueue, ID: d.ID, Group: d.Target, Payload: payload, RunAt: d.CreatedAt}, nil
}

// DeliveryOf returns the delivery a claimed item of DeliveryQueue carries, as it was
// enqueued (its Status and Attempts are those of then: the claim's Attempt is current).
func DeliveryOf(it ClaimedItem) (Delivery, error) {
	var d Delivery
	if err := json.Unmarshal(it.Payload, &d); err != nil || d.ID != it.ID {
		return Delivery{}, fmt.Errorf("item %q of queue %q is not a delivery", it.ID, it.Queue)
	}
	return d, nil
}

// DeliveryAttempt is one attempt at a delivery.
type DeliveryAttempt struct {
	// ID, DeliveryID, JobID, EventType and Number are set by the store: the attempt's id,
	// the delivery's, its job's, its event's type, and 1 for its first attempt.
	ID         string
	DeliveryID string
	JobID      string
	EventType  string
	Number     int
	// StatusCode is the target's HTTP status; 0 when none answered.
	StatusCode int
	Duration   time.Duration
	// Delivered is set when the target took the event (a 2xx answer).
	Delivered bool
	Error     string
	// ResponsePreview is the start of the target's answer (at most MaxResponsePreview bytes
	// are kept).
	ResponsePreview string
	// At is when the attempt was made (now when zero).
	At time.Time
	// NextAt is when the next attempt is due; zero when this one was the last.
	NextAt time.Time
}

// MaxResponsePreview is the most bytes of a target's answer an attempt keeps.
const MaxResponsePreview = 1024

// ValidateAttempt checks the arguments of RecordAttempt and returns the attempt as the
// store keeps it: its preview cut to MaxResponsePreview, its times at the store's
// precision, At stamped by now when zero.
func ValidateAttempt(c Claim, a DeliveryAttempt, next time.Time, now func() time.Time) (DeliveryAttempt, error) {
	if err := c.Validate(); err != nil {
		return a, err
	}
	if a.Delivered && !next.IsZero() {
		return a, fmt.Errorf("delivery %q: a delivered attempt with a next one", c.ID)
	}
	if a.Duration < 0 {
		return a, fmt.Errorf("delivery %q: negative duration", c.ID)
	}
	if len(a.ResponsePreview) > MaxResponsePreview {
		a.ResponsePreview = cutUTF8(a.ResponsePreview, MaxResponsePreview)
	}
	a.At = Stamp(a.At, now)
	a.NextAt = time.Time{}
	if !next.IsZero() {
		a.NextAt = Stamp(next, now)
	}
	return a, nil
}

// cutUTF8 returns the longest prefix of s of at most n bytes that does not split a
// UTF-8 sequence.
func cutUTF8(s string, n int) string {
	for n > 0 && n < len(s) && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}

// AttemptID is the id of the number-th attempt at delivery id.
func AttemptID(deliveryID string, number int) string {
	return fmt.Sprintf("%s.%04d", deliveryID, number)
}

// FinalStatus is the status of a delivery after attempt a with next as the next one.
func FinalStatus(a DeliveryAttempt) string {
	switch {
	case !a.NextAt.IsZero():
		return DeliveryPending
	case a.Delivered:
		return DeliveryDelivered
	}
	return DeliveryFailed
}

// AttemptQuery selects the attempts of a workspace at the deliveries of job JobID, or at
// delivery DeliveryID, or both (at least one must be set).
type AttemptQuery struct {
	WorkspaceID string
	JobID       string
	DeliveryID  string
	// Newest lists newest first: a page of the latest attempts, whatever came before.
	Newest bool
	Page
}

// Validate checks an attempt query.
func (q AttemptQuery) Validate() error {
	switch {
	case q.WorkspaceID == "":
		return errors.New("listing attempts: empty workspace id")
	case q.JobID == "" && q.DeliveryID == "":
		return errors.New("listing attempts: neither a job nor a delivery")
	}
	return nil
}
