// Package store defines the gateway's persistence: workspaces, API keys with their spending
// limits, the wallet (an append-only ledger, a kept-in-step balance and credit
// reservations) and generation records with their daily activity. Backends live in
// sub-packages (store/sqlite, store/postgres); each passes the same conformance suite
// (store/storetest). Nothing here knows Caddy.
package store

import (
	"context"
	"errors"
	"fmt"
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
)

// NanosPerUSD is the number of nanodollars in one US dollar: every amount is int64 nanos.
const NanosPerUSD int64 = 1_000_000_000

// Workspace is a team: it owns keys and one wallet.
type Workspace struct {
	ID   string
	Name string
	// ParentID is the workspace whose management key created this one through the API;
	// empty for workspaces the operator created.
	ParentID  string
	CreatedAt time.Time
}

// KeyKind separates inference keys from management keys.
type KeyKind string

// Key kinds and their markers in the key text.
const (
	KeyStandard   KeyKind = "standard"
	KeyManagement KeyKind = "management"
)

// Key is an API key. Only a hash of its secret is stored.
type Key struct {
	// ID is the key id (kid) that appears in the plaintext key.
	ID          string
	WorkspaceID string
	Kind        KeyKind
	Name        string
	// SecretHash is SHA-256 of the secret part.
	SecretHash []byte
	Disabled   bool
	CreatedAt  time.Time
	// RevokedAt is set once the key is revoked; a revoked key never works again.
	RevokedAt *time.Time
	// LimitNanos caps what requests made with the key may spend per LimitReset period;
	// 0 means no limit.
	LimitNanos int64
	// LimitReset is the limit's period: ResetNever (the limit is for the key's lifetime),
	// ResetDaily, ResetWeekly or ResetMonthly.
	LimitReset string
}

// Periods of a key's spending limit. Periods are calendar periods in UTC; weeks start on
// Monday.
const (
	ResetNever   = ""
	ResetDaily   = "daily"
	ResetWeekly  = "weekly"
	ResetMonthly = "monthly"
)

// ValidLimitReset tells whether s names a limit period.
func ValidLimitReset(s string) bool {
	switch s {
	case ResetNever, ResetDaily, ResetWeekly, ResetMonthly:
		return true
	}
	return false
}

// LimitPeriod returns the limit period that contains now: its start, and its end (the next
// reset). For ResetNever the period is the key's whole life: start and end are zero.
func LimitPeriod(reset string, now time.Time) (start, end time.Time) {
	now = now.UTC()
	day := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC)
	switch reset {
	case ResetDaily:
		return day, day.AddDate(0, 0, 1)
	case ResetWeekly:
		// Weekday counts from Sunday = 0; Monday starts the week.
		start = day.AddDate(0, 0, -((int(day.Weekday()) + 6) % 7))
		return start, start.AddDate(0, 0, 7)
	case ResetMonthly:
		start = time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
		return start, start.AddDate(0, 1, 0)
	}
	return time.Time{}, time.Time{}
}

// KeyLimitError is the refusal of a reservation by a key's spending limit. It matches
// ErrKeyLimitExceeded with errors.Is.
type KeyLimitError struct {
	KeyID      string
	LimitNanos int64
	LimitReset string
	// SpentNanos is what settled requests of the key were charged in the current period,
	// ReservedNanos what its requests in flight hold, AmountNanos what was asked for.
	SpentNanos    int64
	ReservedNanos int64
	AmountNanos   int64
	// PeriodStart and PeriodEnd bound the current period; zero for ResetNever.
	PeriodStart time.Time
	PeriodEnd   time.Time
}

func (e *KeyLimitError) Error() string {
	return fmt.Sprintf("key %q: spent %d and reserved %d of a limit of %d nanos, cannot reserve %d more: %v",
		e.KeyID, e.SpentNanos, e.ReservedNanos, e.LimitNanos, e.AmountNanos, ErrKeyLimitExceeded)
}

// Is makes errors.Is(err, ErrKeyLimitExceeded) true.
func (e *KeyLimitError) Is(target error) bool { return target == ErrKeyLimitExceeded }

// KeyUpdate changes the fields of a key that are set (non-nil).
type KeyUpdate struct {
	Name       *string
	Disabled   *bool
	LimitNanos *int64
	LimitReset *string
}

func validateLimit(limit int64, reset string) error {
	if limit < 0 {
		return errors.New("negative spending limit")
	}
	if !ValidLimitReset(reset) {
		return fmt.Errorf("unknown limit reset %q (want daily, weekly, monthly or none)", reset)
	}
	return nil
}

// ValidateKeyLimit checks a key's limit fields; backends refuse keys that fail it.
func ValidateKeyLimit(k Key) error { return validateLimit(k.LimitNanos, k.LimitReset) }

// KeySpend is a key's use of its limit.
type KeySpend struct {
	// SpentNanos is what settled requests made with the key were charged since the time asked for.
	SpentNanos int64
	// ReservedNanos is what the key's requests in flight hold.
	ReservedNanos int64
}

// Balance is a wallet's state. Available is what a new reservation may take.
type Balance struct {
	WorkspaceID   string
	BalanceNanos  int64
	ReservedNanos int64
}

// Available is balance minus reservations.
func (b Balance) Available() int64 { return b.BalanceNanos - b.ReservedNanos }

// Reservation holds credit for one request in flight.
type Reservation struct {
	ID          string
	WorkspaceID string
	// Owner is the gateway instance holding the reservation (ReserveParams.Owner).
	Owner       string
	AmountNanos int64
	CreatedAt   time.Time
	ExpiresAt   time.Time
}

// ReserveParams asks for a reservation of AmountNanos, refused with ErrInsufficientFunds
// unless the available balance is at least max(AmountNanos, MinAvailableNanos).
//
// When KeyID is set the reservation is the key's: it is also refused, with a
// *KeyLimitError, if the key has a spending limit and what the key spent in the current
// period plus what its open reservations hold plus AmountNanos would exceed it. Both checks
// run in one transaction with the reservation, so concurrent requests can never pass the
// wallet or the limit.
type ReserveParams struct {
	ID          string
	WorkspaceID string
	// KeyID is the key making the request; empty for reservations no key is charged for.
	KeyID             string
	AmountNanos       int64
	MinAvailableNanos int64
	ExpiresAt         time.Time
	// Owner is the gateway instance that will settle the reservation (see Instance): when
	// the instance dies, ReleaseOrphaned frees it long before ExpiresAt. Empty for a
	// reservation no instance owns, which only its expiry frees.
	Owner string
}

// CostLine is one priced dimension of a request's cost.
type CostLine struct {
	// Dimension is input, cached_input, cache_write, output, reasoning or request.
	Dimension string `json:"dimension"`
	Quantity  int64  `json:"quantity"`
	// UnitPriceNanos is the price of one million units (tokens), or of one request.
	UnitPriceNanos int64 `json:"unit_price_nanos"`
	Nanos          int64 `json:"nanos"`
}

// Attempt is one upstream call made for a generation.
type Attempt struct {
	Provider      string `json:"provider"`
	UpstreamModel string `json:"upstream_model"`
	Status        int    `json:"status"`
	DurationMs    int64  `json:"duration_ms"`
	Error         string `json:"error,omitempty"`
	Category      string `json:"category,omitempty"`
}

// Generation is the stored record of one request.
type Generation struct {
	ID            string
	WorkspaceID   string
	KeyID         string
	Endpoint      string
	Model         string
	Provider      string
	UpstreamModel string
	UpstreamID    string
	Streamed      bool
	Cancelled     bool
	// Status is the HTTP status the client received.
	Status       int
	FinishReason string
	ErrorCode    string
	ErrorMessage string

	InputTokens      int64
	CacheReadTokens  int64
	CacheWriteTokens int64
	OutputTokens     int64
	ReasoningTokens  int64

	// CostNanos is what the wallet was charged.
	CostNanos int64
	// UnbilledNanos is priced usage the wallet could not cover (it never goes negative).
	UnbilledNanos int64
	CostLines     []CostLine
	Attempts      []Attempt

	LatencyMs    int64
	GenerationMs int64
	EndToEndMs   int64
	CreatedAt    time.Time
}

// SettleParams ends a reservation: the wallet is charged CostNanos (capped at what the
// balance holds) and the generation is recorded, in one transaction. The charge counts
// against the spending limit of the generation's KeyID.
type SettleParams struct {
	// ReservationID may be empty for requests that reserved nothing (free models).
	ReservationID string
	Generation    *Generation
}

// SettleLeaseParams settles one request admitted from a lease: a reservation that holds
// credit for many requests of one key (see SettleLease).
type SettleLeaseParams struct {
	// ReservationID is the lease's reservation; it must exist and be the generation's
	// workspace's.
	ReservationID string
	// HeldNanos is the part of the reservation the request held (its worst case). The
	// reservation shrinks by what was charged, at most HeldNanos and at most what it holds:
	// a charge above HeldNanos is taken from the balance, as Settle takes a charge above its
	// reservation, and never from the credit the lease holds for other requests.
	HeldNanos int64
	// Generation is the store's from the call on: the caller must neither change nor read
	// it afterwards (a store may fill in its charge after SettleLease returned, when it
	// applies a settlement it journaled); what was recorded is in what SettleLease returns.
	Generation *Generation
	// Release drops the reservation in the same transaction, returning what it still
	// holds to the available balance (the lease's last request in flight).
	Release bool
}

// ActivityQuery selects generations of a workspace created in [From, To); KeyID, when
// set, keeps only that key's.
type ActivityQuery struct {
	WorkspaceID string
	From, To    time.Time
	KeyID       string
}

// ActivityRow sums the generations of one UTC day, model and provider.
type ActivityRow struct {
	// Day is midnight UTC of the day.
	Day              time.Time
	Model            string
	Provider         string
	Requests         int64
	InputTokens      int64
	CacheReadTokens  int64
	CacheWriteTokens int64
	OutputTokens     int64
	ReasoningTokens  int64
	CostNanos        int64
}

// Store is the gateway's persistence. Every method is safe for concurrent use, and every
// wallet operation is atomic: no interleaving of calls can take the balance below zero.
type Store interface {
	CreateWorkspace(ctx context.Context, ws Workspace) error
	GetWorkspace(ctx context.Context, id string) (Workspace, error)
	ListWorkspaces(ctx context.Context) ([]Workspace, error)
	// ListChildWorkspaces returns the workspaces created by parentID, oldest first.
	ListChildWorkspaces(ctx context.Context, parentID string) ([]Workspace, error)

	CreateKey(ctx context.Context, k Key) error
	GetKey(ctx context.Context, id string) (Key, error)
	ListKeys(ctx context.Context, workspaceID string) ([]Key, error)
	// RevokeKey marks a key revoked; ErrNotFound if it does not exist.
	RevokeKey(ctx context.Context, id string, at time.Time) error
	// UpdateKey changes a key of the workspace and returns it as stored; ErrNotFound if the
	// workspace has no such key.
	UpdateKey(ctx context.Context, workspaceID, id string, u KeyUpdate) (Key, error)
	// KeySpend returns what a key was charged since the given time and what its open
	// reservations hold.
	KeySpend(ctx context.Context, keyID string, since time.Time) (KeySpend, error)

	// AddCredits appends a ledger credit (negative amounts are debits) and returns the new balance.
	AddCredits(ctx context.Context, workspaceID string, amountNanos int64, note string) (Balance, error)
	GetBalance(ctx context.Context, workspaceID string) (Balance, error)
	Reserve(ctx context.Context, p ReserveParams) (Reservation, error)
	// Settle charges and records; it returns the generation as stored (CostNanos capped,
	// UnbilledNanos set). Settling an unknown or already settled reservation is ErrNotFound.
	Settle(ctx context.Context, p SettleParams) (Generation, error)
	// SettleLease charges and records like Settle, but instead of deleting the reservation it
	// shrinks it by min(charged, HeldNanos, amount) (or drops it when Release is set), all
	// in one transaction. The charge counts against the generation's KeyID like Settle's.
	// An unknown reservation, or another workspace's, is ErrNotFound and changes nothing.
	SettleLease(ctx context.Context, p SettleLeaseParams) (Generation, error)
	// ReleaseReservation drops a reservation and returns what it held to the available
	// balance; it returns the amount released. Unknown is ErrNotFound.
	ReleaseReservation(ctx context.Context, id string) (int64, error)
	// ReleaseExpired drops reservations whose ExpiresAt is before now (requests lost to a crash).
	ReleaseExpired(ctx context.Context, now time.Time) (int, error)

	// Ping checks that the database can be reached and read, within ctx.
	Ping(ctx context.Context) error
	// RegisterInstance records the gateway instance id as alive, heartbeat now; registering
	// an instance again refreshes its heartbeat. Register before reserving with it as Owner.
	RegisterInstance(ctx context.Context, id string) error
	// Heartbeat records that instance id is still alive. ErrNotFound means the instance is
	// no longer registered: another instance found it dead and released its reservations,
	// and it must register again.
	Heartbeat(ctx context.Context, id string) error
	// ReleaseOrphaned releases the reservations of dead instances and unregisters them: of
	// every registered instance but self whose last heartbeat is older than timeout (or, on
	// a backend that can tell, whose process is gone), and of owners that are not
	// registered, for reservations older than timeout. It returns the number released.
	ReleaseOrphaned(ctx context.Context, self string, timeout time.Duration) (int, error)
	// RetireInstance releases the reservations instance id still holds and unregisters it:
	// what a clean stop leaves. It returns the number released.
	RetireInstance(ctx context.Context, id string) (int, error)

	GetGeneration(ctx context.Context, workspaceID, id string) (Generation, error)
	// Activity sums a workspace's generations per UTC day, model and provider, ordered by
	// day, model and provider.
	Activity(ctx context.Context, q ActivityQuery) ([]ActivityRow, error)

	Close() error
}
