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
//   - A claim is named by its owner and its token (Claim.Token), which every Claim of the
//     item raises: Extend, Complete, Retry, Requeue (and the roles' operations that take a
//     claim, such as Jobs.AdvanceJob) of a claim that is no longer held fail with
//     ErrClaimLost and change nothing, so a claimer that lost its item cannot complete or
//     reschedule the work of the one that took it over.
//   - An item's attempt (ClaimedItem.Attempt) counts failures, not claims: a Retry, or a
//     lease that ran out, raises it; a claim that ends as planned (Requeue, a job advanced
//     to its next poll) does not, so a job polled a hundred times is still on its first
//     attempt.
//   - Items may belong to a group (a batch, a provider); a Claim may cap how many items of
//     one group are leased at once (ClaimParams.GroupCap), so one group never takes every
//     worker. On PostgreSQL, claimers racing for one group contend for its longest-due
//     items, so the cap holds across instances too.
//
// Times (due, lease expiry) are the store's clock: on PostgreSQL the server's, so that
// instances whose clocks disagree agree on when a lease expires.
//
// This primitive, rather than a queue engine such as River: the work it queues must change
// in the same transaction as the rows of the roles (a job advanced with its events and its
// claim, a delivery's attempt with its retry), on SQLite as on PostgreSQL, and River's
// SQLite driver is early while its transactions are its own driver's.
type Claims interface {
	// Enqueue adds an item to a queue, due at p.RunAt (now when zero). An id already in the
	// queue is ErrConflict: ids name the work (a job, a delivery), so the same work cannot
	// be queued twice.
	Enqueue(ctx context.Context, p EnqueueParams) error
	// Claim takes up to p.Limit (at most MaxClaimLimit) due items of p.Queue, longest due
	// first, and leases them to p.Owner for p.Lease. An item is due when its time came: the
	// time it was enqueued or rescheduled for, or the expiry of the lease of its last claim.
	// With p.GroupCap, items of a group already leased count against the cap, and the
	// group's items beyond it stay for later claims (items of no group are not capped).
	// No item due: no items and no error.
	Claim(ctx context.Context, p ClaimParams) ([]ClaimedItem, error)
	// Extend renews a claim's lease for lease from now and returns its new expiry; a claim
	// whose lease expired may still be extended until another Claim takes the item.
	Extend(ctx context.Context, c Claim, lease time.Duration) (time.Time, error)
	// Complete removes a claimed item from its queue: the work is done, or given up.
	Complete(ctx context.Context, c Claim) error
	// Retry ends a claim that failed and makes the item due again at runAt (now when zero),
	// recording why (ClaimedItem.LastError): the item's next claim is its next attempt.
	Retry(ctx context.Context, c Claim, runAt time.Time, reason string) error
	// Requeue ends a claim as planned and makes the item due again at runAt (now when zero):
	// the work goes on later (the next poll of a job), and the attempt does not rise.
	Requeue(ctx context.Context, c Claim, runAt time.Time) error
	// Remove takes item id out of queue whether or not it is claimed (the job was
	// cancelled or deleted): a claim that held it is lost. A missing item is ErrNotFound.
	Remove(ctx context.Context, queue, id string) error
	// Reschedule makes item id of queue due at runAt (now when zero) whether or not it is
	// claimed ("poll now"): a claim that held it is lost, and the attempt does not rise. A
	// missing item is ErrNotFound.
	Reschedule(ctx context.Context, queue, id string, runAt time.Time) error
}

// MaxClaimLimit is the most items one Claim returns.
const MaxClaimLimit = 100

// EnqueueParams describes an item to Enqueue.
type EnqueueParams struct {
	Queue string
	ID    string
	// Group is the item's group for ClaimParams.GroupCap (a batch, a provider); empty for none.
	Group   string
	Payload []byte
	// RunAt is when the item is first due: now when zero.
	RunAt time.Time
}

// ClaimParams asks Claim for items.
type ClaimParams struct {
	Queue string
	// Owner names the claimer (a gateway instance, a worker).
	Owner string
	Lease time.Duration
	// Limit is the most items to take, at most MaxClaimLimit.
	Limit int
	// GroupCap, when above 0, is the most items of one group leased at once, counting those
	// other claims hold. A capped claim ranks every due item of the queue by group, so it
	// costs what the queue has due, not what it takes.
	GroupCap int
}

// Claim names one claim of a queued item: the item, who holds it and which claim of the
// item it is.
type Claim struct {
	Queue string
	ID    string
	Owner string
	// Token is the fence of the claim: every Claim of the item raises it, so no two claims
	// of an item share one, whatever their attempt.
	Token int64
}

// ClaimedItem is an item as Claim hands it out.
type ClaimedItem struct {
	Claim
	Group   string
	Payload []byte
	// Attempt is 1 plus the failures before this claim: the Retries, and the leases that ran
	// out. A Requeue or Reschedule leaves it as it is.
	Attempt int
	// LeaseExpires is when the claim's lease ends, unless extended: the item is due again then.
	LeaseExpires time.Time
	// EnqueuedAt is when the item was enqueued.
	EnqueuedAt time.Time
	// LastError is the reason given by the last Retry; empty before any.
	LastError string
}

// Validate checks the arguments of Enqueue.
func (p EnqueueParams) Validate() error {
	return ValidateQueueItem("enqueuing", p.Queue, p.ID)
}

// ValidateQueueItem checks the queue and id an operation of Claims names; op says which.
func ValidateQueueItem(op, queue, id string) error {
	switch {
	case queue == "":
		return fmt.Errorf("%s: empty queue", op)
	case id == "":
		return fmt.Errorf("%s: empty id", op)
	}
	return nil
}

// Validate checks the arguments of Claim and returns the number of items to take.
func (p ClaimParams) Validate() (int, error) {
	switch {
	case p.Queue == "":
		return 0, errors.New("claiming: empty queue")
	case p.Owner == "":
		return 0, errors.New("claiming: empty owner")
	case p.Limit < 1:
		return 0, fmt.Errorf("claiming: limit %d is below 1", p.Limit)
	case p.GroupCap < 0:
		return 0, fmt.Errorf("claiming: group cap %d is below 0", p.GroupCap)
	}
	if err := ValidateLease(p.Lease); err != nil {
		return 0, fmt.Errorf("claiming: %w", err)
	}
	return min(p.Limit, MaxClaimLimit), nil
}

// ValidateLease checks the lease asked of Claim or Extend: the backends keep times to
// the millisecond.
func ValidateLease(lease time.Duration) error {
	if lease < time.Millisecond {
		return fmt.Errorf("lease %v is shorter than a millisecond", lease)
	}
	return nil
}

// Validate checks a claim handed back to Extend, Complete, Retry or Requeue.
func (c Claim) Validate() error {
	if c.Queue == "" || c.ID == "" || c.Owner == "" || c.Token < 1 {
		return fmt.Errorf("claim %q of queue %q: not a claim Claim returned", c.ID, c.Queue)
	}
	return nil
}

// Lost is the error of an operation on claim c that no longer holds its item.
func (c Claim) Lost() error {
	return fmt.Errorf("claim %d of %q in queue %q by %q: %w", c.Token, c.ID, c.Queue, c.Owner, ErrClaimLost)
}
