// Package store defines the gateway's persistence: workspaces, API keys, the wallet
// (an append-only ledger, a kept-in-step balance and credit reservations) and generation
// records. Backends live in sub-packages (store/sqlite); each passes the same tests.
// Nothing here knows Caddy.
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
	// ErrSchemaTooNew means the database was migrated by a newer gateway than this one.
	ErrSchemaTooNew = errors.New("database schema is newer than this gateway")
)

// NanosPerUSD is the number of nanodollars in one US dollar: every amount is int64 nanos.
const NanosPerUSD int64 = 1_000_000_000

// Workspace is a team: it owns keys and one wallet.
type Workspace struct {
	ID        string
	Name      string
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
	AmountNanos int64
	CreatedAt   time.Time
	ExpiresAt   time.Time
}

// ReserveParams asks for a reservation of AmountNanos, refused with ErrInsufficientFunds
// unless the available balance is at least max(AmountNanos, MinAvailableNanos).
type ReserveParams struct {
	ID                string
	WorkspaceID       string
	AmountNanos       int64
	MinAvailableNanos int64
	ExpiresAt         time.Time
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
// balance holds) and the generation is recorded, in one transaction.
type SettleParams struct {
	// ReservationID may be empty for requests that reserved nothing (free models).
	ReservationID string
	Generation    *Generation
}

// Store is the gateway's persistence. Every method is safe for concurrent use, and every
// wallet operation is atomic: no interleaving of calls can take the balance below zero.
type Store interface {
	CreateWorkspace(ctx context.Context, ws Workspace) error
	GetWorkspace(ctx context.Context, id string) (Workspace, error)
	ListWorkspaces(ctx context.Context) ([]Workspace, error)

	CreateKey(ctx context.Context, k Key) error
	GetKey(ctx context.Context, id string) (Key, error)
	ListKeys(ctx context.Context, workspaceID string) ([]Key, error)
	// RevokeKey marks a key revoked; ErrNotFound if it does not exist.
	RevokeKey(ctx context.Context, id string, at time.Time) error

	// AddCredits appends a ledger credit (negative amounts are debits) and returns the new balance.
	AddCredits(ctx context.Context, workspaceID string, amountNanos int64, note string) (Balance, error)
	GetBalance(ctx context.Context, workspaceID string) (Balance, error)
	Reserve(ctx context.Context, p ReserveParams) (Reservation, error)
	// Settle charges and records; it returns the generation as stored (CostNanos capped,
	// UnbilledNanos set). Settling an unknown or already settled reservation is ErrNotFound.
	Settle(ctx context.Context, p SettleParams) (Generation, error)
	// ReleaseExpired drops reservations whose ExpiresAt is before now (requests lost to a crash).
	ReleaseExpired(ctx context.Context, now time.Time) (int, error)

	GetGeneration(ctx context.Context, workspaceID, id string) (Generation, error)

	Close() error
}
