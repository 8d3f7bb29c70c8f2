package store

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/modelgateway/caddy-modelgateway/internal/ids"
	"github.com/modelgateway/caddy-modelgateway/internal/meter"
)

// Wallet is the store's role for money: a workspace's append-only ledger and the balance
// kept in step with it, reservations that hold credit for requests in flight (one request
// each, or a lease for many requests of one key), and settlement, which charges a request
// and records its generation in one transaction. Every operation is atomic: no
// interleaving of calls can take a balance below zero or a key past its limit.
//
// The arithmetic is this file's (CheckFunds, ApplyCredit, CheckKeyLimit, Charge,
// LeaseUnreserve); backends read and write the rows.
type Wallet interface {
	// AddCredits appends a ledger credit (negative amounts are debits) and returns the new balance.
	AddCredits(ctx context.Context, workspaceID string, amountNanos int64, note string) (Balance, error)
	GetBalance(ctx context.Context, workspaceID string) (Balance, error)
	// KeySpend returns what a key was charged since the given time and what its open
	// reservations hold.
	KeySpend(ctx context.Context, keyID string, since time.Time) (KeySpend, error)
	Reserve(ctx context.Context, p ReserveParams) (Reservation, error)
	// Settle charges and records; it returns the generation as stored (CostNanos capped,
	// UnbilledNanos set). Settling an unknown or already settled reservation is ErrNotFound.
	//
	// Settlement is idempotent by generation id: settling again a generation already
	// settled against the same reservation (see SettledAlready) changes nothing and returns
	// the stored record, so a caller that cannot tell whether its settlement was applied (a
	// lost answer, a worker killed before it noted it) settles again and is charged once.
	// An id taken by another workspace, or settled against another hold, stays ErrConflict
	// (or ErrNotFound when the reservation is gone): that record is never returned.
	Settle(ctx context.Context, p SettleParams) (Generation, error)
	// SettleLease charges and records like Settle, but instead of deleting the reservation it
	// shrinks it by min(charged, HeldNanos, amount) (or drops it when Release is set), all
	// in one transaction. The charge counts against the generation's KeyID like Settle's.
	// An unknown reservation, or another workspace's, is ErrNotFound and changes nothing.
	// It is idempotent by generation id like Settle: a repeat leaves the reservation as the
	// first settlement left it.
	SettleLease(ctx context.Context, p SettleLeaseParams) (Generation, error)
	// ReleaseReservation drops a reservation and returns what it held to the available
	// balance; it returns the amount released. Unknown is ErrNotFound.
	ReleaseReservation(ctx context.Context, id string) (int64, error)
	// BeginInFlight keeps a trace of a request admitted from a lease, so that a crash before
	// it settles leaves an interrupted record (interrupted.go). It makes no transaction and
	// does not wait for the database; the token it returns is for EndInFlight (0: nothing
	// was kept, on a backend or in a mode that cannot keep it cheaply).
	BeginInFlight(f InFlight) uint64
	// EndInFlight drops the trace of BeginInFlight once the request's settlement returned
	// (or failed): from then on its own record, or none, stands.
	EndInFlight(token uint64)
}

// NanosPerUSD is the number of nanodollars in one US dollar: every amount is int64 nanos.
const NanosPerUSD = meter.NanosPerUSD

// Balance is a wallet's state. Available is what a new reservation may take.
type Balance struct {
	WorkspaceID   string
	BalanceNanos  int64
	ReservedNanos int64
}

// Available is balance minus reservations.
func (b Balance) Available() int64 { return b.BalanceNanos - b.ReservedNanos }

// CreditKind is the ledger kind of an AddCredits entry of amount: a credit, or an
// adjustment when it takes money back.
func CreditKind(amount int64) string {
	if amount < 0 {
		return "adjustment"
	}
	return "credit"
}

// ApplyCredit returns the wallet b with amount added (a debit when negative), refusing a
// debit the balance cannot cover with ErrInsufficientFunds and a sum that would overflow.
func ApplyCredit(b Balance, amount int64) (Balance, error) {
	if amount > 0 && b.BalanceNanos > math.MaxInt64-amount {
		return Balance{}, errors.New("balance would overflow")
	}
	if b.BalanceNanos+amount < 0 {
		return Balance{}, fmt.Errorf("debit of %d nanos exceeds balance of %d: %w", -amount, b.BalanceNanos, ErrInsufficientFunds)
	}
	b.BalanceNanos += amount
	return b, nil
}

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
	// GenerationID, Endpoint and Model name the request a reservation of its own is for
	// (empty for a lease's): released unsettled, it leaves an interrupted record of them.
	GenerationID string
	Endpoint     string
	Model        string
}

// NewReservation checks p and returns the reservation Reserve records: p.ID or a new id,
// created now, expiring at p.ExpiresAt (at the millisecond precision the backends keep).
func NewReservation(p ReserveParams, now func() time.Time) (Reservation, error) {
	switch {
	case p.WorkspaceID == "":
		return Reservation{}, errors.New("reserving: empty workspace id")
	case p.AmountNanos < 0 || p.MinAvailableNanos < 0:
		return Reservation{}, errors.New("reserving: negative amount")
	case p.ExpiresAt.IsZero():
		// Without an expiry a request lost to a crash would hold the credit forever.
		return Reservation{}, errors.New("reserving: expiry is required")
	}
	r := Reservation{
		ID:          p.ID,
		WorkspaceID: p.WorkspaceID,
		Owner:       p.Owner,
		AmountNanos: p.AmountNanos,
		CreatedAt:   Stamp(time.Time{}, now),
		ExpiresAt:   Stamp(p.ExpiresAt, now),
	}
	if r.ID == "" {
		r.ID = ids.New("res")
	}
	return r, nil
}

// CheckFunds refuses with ErrInsufficientFunds the reservation p when the wallet b has
// less available than max(p.AmountNanos, p.MinAvailableNanos).
func CheckFunds(b Balance, p ReserveParams) error {
	if need := max(p.AmountNanos, p.MinAvailableNanos); b.Available() < need {
		return fmt.Errorf("available %d nanos, need %d: %w", b.Available(), need, ErrInsufficientFunds)
	}
	return nil
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

// KeySpend is a key's use of its limit.
type KeySpend struct {
	// SpentNanos is what settled requests made with the key were charged since the time asked for.
	SpentNanos int64
	// ReservedNanos is what the key's requests in flight hold.
	ReservedNanos int64
}

// ValidateKeySpend checks a KeySpend query.
func ValidateKeySpend(keyID string) error {
	if keyID == "" {
		return errors.New("key spend: empty key id")
	}
	return nil
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

// CheckKeyLimit refuses a reservation of amount by key k with a *KeyLimitError when what
// the key spent in its current period, what its open reservations hold and amount
// together exceed its limit. spend reads the key's KeySpend since the period's start
// (inside the reservation's transaction); it is not called for a key without a limit.
func CheckKeyLimit(k Key, amount int64, now time.Time, spend func(since time.Time) (KeySpend, error)) error {
	if k.LimitNanos == 0 {
		return nil
	}
	start, end := LimitPeriod(k.LimitReset, now)
	sp, err := spend(start)
	if err != nil {
		return err
	}
	// Written as a subtraction so that no sum can overflow.
	if amount > k.LimitNanos-sp.SpentNanos-sp.ReservedNanos {
		return &KeyLimitError{
			KeyID: k.ID, LimitNanos: k.LimitNanos, LimitReset: k.LimitReset,
			SpentNanos: sp.SpentNanos, ReservedNanos: sp.ReservedNanos, AmountNanos: amount,
			PeriodStart: start, PeriodEnd: end,
		}
	}
	return nil
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

// PrepareSettle checks a settlement and returns the generation to record: a copy of
// p.Generation with an id (a new one if it had none), CreatedAt (now if zero) at the
// precision the backends keep, and the reservation it is settled against.
func PrepareSettle(p SettleParams, now func() time.Time) (Generation, error) {
	if p.Generation == nil {
		return Generation{}, errors.New("settling: no generation")
	}
	g := *p.Generation
	g.ReservationID = p.ReservationID
	return prepareGeneration(g, 0, now)
}

// PrepareSettleLease is PrepareSettle for SettleLease.
func PrepareSettleLease(p SettleLeaseParams, now func() time.Time) (Generation, error) {
	switch {
	case p.Generation == nil:
		return Generation{}, errors.New("settling: no generation")
	case p.ReservationID == "":
		return Generation{}, errors.New("settling a lease: empty reservation id")
	}
	g := *p.Generation
	g.ReservationID = p.ReservationID
	return prepareGeneration(g, p.HeldNanos, now)
}

// SettledAlready tells whether stored, the record found under the id of a settlement g
// (as PrepareSettle or PrepareSettleLease made it) that failed with ErrNotFound or
// ErrConflict, is an earlier settlement of g: the same workspace's, settled against the
// same reservation. The settlement is then a repeat and stored is its answer. An
// interrupted record is no settlement: the request it stands for was never charged.
//
// Backends look for stored only once a settlement failed, so that a first settlement,
// the common case, reads nothing more than it did.
func SettledAlready(stored, g *Generation) bool {
	return stored.ID == g.ID && stored.WorkspaceID == g.WorkspaceID && stored.ReservationID == g.ReservationID &&
		!IsInterrupted(stored)
}

// IsInterrupted tells whether g is the record Interrupted writes for a request its gateway
// never finished.
func IsInterrupted(g *Generation) bool {
	return g.ErrorCode == InterruptedCode && g.FinishReason == InterruptedCode && g.CostNanos == 0
}

// MaySettleAgain tells whether err, a settlement's failure, may be that of a repeat (see
// SettledAlready): its reservation is gone, or its generation id is taken.
func MaySettleAgain(err error) bool {
	return errors.Is(err, ErrNotFound) || errors.Is(err, ErrConflict)
}

func prepareGeneration(g Generation, held int64, now func() time.Time) (Generation, error) {
	switch {
	case g.WorkspaceID == "":
		return Generation{}, errors.New("settling: empty workspace id")
	case g.CostNanos < 0 || held < 0:
		return Generation{}, errors.New("settling: negative amount")
	}
	if g.ID == "" {
		g.ID = ids.New("gen")
	}
	g.CreatedAt = Stamp(g.CreatedAt, now)
	return g, nil
}

// Charge is what a settlement of g takes from a balance for cost: all of it when the
// balance holds it, the balance otherwise, so that a balance never goes below zero. It
// sets g's CostNanos to the charge and UnbilledNanos to the rest, and returns the charge.
func Charge(g *Generation, cost, balance int64) int64 {
	charge := max(min(cost, balance), 0)
	g.CostNanos = charge
	g.UnbilledNanos = cost - charge
	return charge
}

// LeaseUnreserve is what a lease settlement returns from the lease's reservation, which
// holds amount, to the available balance: all of it when the settlement releases the
// lease, otherwise what was charged, at most what the request held and what is left.
func LeaseUnreserve(charge, held, amount int64, release bool) int64 {
	if release {
		return amount
	}
	return min(charge, held, amount)
}
