package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Claims is the store's role for background work (video and music jobs to poll, batches
// to run, webhook deliveries to send): named queues of items that any gateway instance may
// take, each held by one claimer at a time under a lease.
//
// The guarantees, on every backend:
//   - While a claim's lease runs, no other Claim returns its item: two claimers never hold
//     the same item, whether they are goroutines of one process or instances on several
//     hosts (PostgreSQL locks the due rows with FOR UPDATE SKIP LOCKED, so claimers skip
//     each other's instead of waiting; SQLite has one writer at a time).
//   - An item whose lease expired (its claimer died, or was too slow to Extend) is due
//     again and the next Claim takes it: work is done at least once, never lost.
//   - A claim is named by its owner and its attempt number (Claim), which every Claim of
//     the item increments: Extend, Complete and Retry of a claim that is no longer held
//     fail with ErrClaimLost and change nothing, so a claimer that lost its item cannot
//     complete or reschedule the work of the one that took it over.
//
// Times (due, lease expiry) are the store's clock: on PostgreSQL the server's, so that
// instances whose clocks disagree agree on when a lease expires.
type Claims interface {
	// Enqueue adds item id to queue with payload, due at runAt (now when zero). An id
	// already in the queue is ErrConflict: ids name the work (a job, a delivery), so the
	// same work cannot be queued twice.
	Enqueue(ctx context.Context, queue, id string, payload []byte, runAt time.Time) error
	// Claim takes up to limit (at most MaxClaimLimit) due items of queue, longest due
	// first, and leases them to owner for lease. An item is due when its time came: the
	// time it was enqueued or retried for, or the expiry of the lease of its last claim.
	// No item due: no items and no error.
	Claim(ctx context.Context, queue, owner string, lease time.Duration, limit int) ([]ClaimedItem, error)
	// Extend renews a claim's lease for lease from now and returns its new expiry; a claim
	// whose lease expired may still be extended until another Claim takes the item.
	Extend(ctx context.Context, c Claim, lease time.Duration) (time.Time, error)
	// Complete removes a claimed item from its queue: the work is done, or given up.
	Complete(ctx context.Context, c Claim) error
	// Retry ends a claim and makes the item due again at runAt (now when zero), recording
	// why the attempt failed (ClaimedItem.LastError).
	Retry(ctx context.Context, c Claim, runAt time.Time, reason string) error
}

// MaxClaimLimit is the most items one Claim returns.
const MaxClaimLimit = 100

// Claim names one claim of a queued item: the item, who holds it and which claim of the
// item it is.
type Claim struct {
	Queue string
	ID    string
	Owner string
	// Attempt counts the claims of the item, this one included: 1 the first time.
	Attempt int
}

// ClaimedItem is an item as Claim hands it out.
type ClaimedItem struct {
	Claim
	Payload []byte
	// LeaseExpires is when the claim's lease ends, unless extended: the item is due again then.
	LeaseExpires time.Time
	// EnqueuedAt is when the item was enqueued.
	EnqueuedAt time.Time
	// LastError is the reason given by the last Retry; empty before any.
	LastError string
}

// ValidateEnqueue checks the arguments of Enqueue.
func ValidateEnqueue(queue, id string) error {
	switch {
	case queue == "":
		return errors.New("enqueuing: empty queue")
	case id == "":
		return errors.New("enqueuing: empty id")
	}
	return nil
}

// ValidateClaim checks the arguments of Claim and returns the number of items to take.
func ValidateClaim(queue, owner string, lease time.Duration, limit int) (int, error) {
	switch {
	case queue == "":
		return 0, errors.New("claiming: empty queue")
	case owner == "":
		return 0, errors.New("claiming: empty owner")
	case limit < 1:
		return 0, fmt.Errorf("claiming: limit %d is below 1", limit)
	}
	if err := ValidateLease(lease); err != nil {
		return 0, fmt.Errorf("claiming: %w", err)
	}
	return min(limit, MaxClaimLimit), nil
}

// ValidateLease checks the lease asked of Claim or Extend: the backends keep times to
// the millisecond.
func ValidateLease(lease time.Duration) error {
	if lease < time.Millisecond {
		return fmt.Errorf("lease %v is shorter than a millisecond", lease)
	}
	return nil
}

// Validate checks a claim handed back to Extend, Complete or Retry.
func (c Claim) Validate() error {
	if c.Queue == "" || c.ID == "" || c.Owner == "" || c.Attempt < 1 {
		return fmt.Errorf("claim %q of queue %q: not a claim Claim returned", c.ID, c.Queue)
	}
	return nil
}

// Lost is the error of an operation on claim c that no longer holds its item.
func (c Claim) Lost() error {
	return fmt.Errorf("claim %d of %q in queue %q by %q: %w", c.Attempt, c.ID, c.Queue, c.Owner, ErrClaimLost)
}
