// Package store defines the gateway's persistence, one role interface per kind of record,
// each with its types and the policy both backends share:
//
//   - Identity (identity.go): workspaces and API keys with their spending limits.
//   - Wallet (wallet.go): an append-only ledger, a kept-in-step balance, credit
//     reservations and leases, settlement.
//   - Generations (generations.go): generation records and their daily activity.
//   - Instances (instance.go): gateway processes as owners of reservations, with heartbeats.
//   - Claims (claims.go): queues of background work, claimed under a lease, fenced by a
//     token, grouped with a per-group cap, counting failures rather than claims.
//   - Jobs (jobs.go): work that outlives a request (video, music, batches), polled through
//     the claims and advanced together with its claim; the change feed (Watch, changes.go)
//     tells every instance that a job changed.
//   - Deliveries (deliveries.go): the outbox of the events jobs make, written with them,
//     and the attempts at delivering each.
//   - WebhookEndpoints (webhooks.go): where a workspace's events go, with their signing
//     secrets kept sealed.
//   - Files (files.go): uploaded files and the files the gateway writes, owned by a
//     workspace, their content in the blob store.
//   - BatchRows (batchrows.go): the outcome of each row of a gateway-run batch, recorded
//     once, counted, read back in order for the batch's output file.
//
// The roles to come have their place beside these, a file and an interface each:
// notification destinations. Store is the composition of every role; code that needs
// one role takes that role.
//
// What is the same for every backend (validating inputs, the spending-limit and charge
// arithmetic, page sizes, the fields of a generation) is written here, once, as plain
// functions and tables; a backend (store/sqlite, store/postgres) keeps only its SQL. Each
// passes the same conformance suite (store/storetest). Nothing here knows Caddy.
package store

import (
	"context"
	"errors"
	"time"
)

// Errors every backend returns for the same conditions, matched with errors.Is.
var (
	ErrNotFound          = errors.New("not found")
	ErrInsufficientFunds = errors.New("insufficient funds")
	ErrConflict          = errors.New("already exists")
	// ErrKeyLimitExceeded refuses a reservation that would take a key past its spending
	// limit. The error Reserve returns is a *KeyLimitError that matches it with errors.Is.
	ErrKeyLimitExceeded = errors.New("key spending limit exceeded")
	// ErrSchemaTooNew means the database was migrated by a newer gateway than this one.
	ErrSchemaTooNew = errors.New("database schema is newer than this gateway")
	// ErrClosed is returned by a store used after Close.
	ErrClosed = errors.New("store is closed")
	// ErrUnavailable wraps a failure to reach the database or to hear its answer (a
	// connection refused or lost, a lock held elsewhere too long, an I/O error). A write that
	// failed so may or may not have been applied: a caller that tries it again must be able
	// to tell (a settlement's generation id does).
	ErrUnavailable = errors.New("store unavailable")
	// ErrCursorNotFound refuses a page whose After is not an item of the list (page.go).
	ErrCursorNotFound = errors.New("cursor is not an item of the list")
	// ErrClaimLost means a claim is no longer held: its item was claimed again after the
	// lease expired, retried, completed or removed (claims.go).
	ErrClaimLost = errors.New("claim no longer held")
)

// Store is the gateway's persistence: every role. Every method is safe for concurrent
// use, and every wallet operation is atomic: no interleaving of calls can take the balance
// below zero.
type Store interface {
	Identity
	Wallet
	Generations
	Instances
	Claims
	Jobs
	Deliveries
	WebhookEndpoints
	Files
	BatchRows

	// Ping checks that the database can be reached and read, within ctx.
	Ping(ctx context.Context) error
	Close() error
}

// Stamp returns t, or now() if t is zero, in UTC at the millisecond precision both
// backends keep.
func Stamp(t time.Time, now func() time.Time) time.Time {
	if t.IsZero() {
		t = now()
	}
	return t.UTC().Truncate(time.Millisecond)
}
