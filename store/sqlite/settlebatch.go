package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelgateway/caddy-modelgateway/store"
)

// Settlements applied together.
//
// Settle and SettleLease are what every answered request writes, so they are also handed to
// the writer as data (a settleReq), not only as a closure. When several of them follow one
// another in a batch, the writer applies that run in one go: it reads each reservation and
// wallet the run touches once, works out every settlement in queue order in memory (the
// same arithmetic as the closures, each settlement seeing the ones before it), and then
// writes the run with a handful of statements: the generation rows and ledger rows as
// multi-row INSERTs, one UPDATE or DELETE per reservation and one UPDATE per wallet. A run
// of n settlements costs O(distinct reservations + wallets) statements instead of 8n.
//
// Results are the ones separate transactions in that order would give: a settlement whose
// reservation is missing or another workspace's fails with ErrNotFound and changes nothing.
// If any statement of the run fails (a duplicate generation id, a CHECK...), the run is
// rolled back to its savepoint and its settlements are applied one by one through their
// closures, each inside its own savepoint as any other write, so each gets its own result.

// settleReq is a settlement in data form. g is the caller's copy of the generation: the
// run fills in CostNanos and UnbilledNanos, as the closure does.
type settleReq struct {
	g             *store.Generation
	cost          int64 // what the generation costs, before the cap at the balance
	reservationID string
	lease         bool  // SettleLease: shrink the reservation instead of deleting it
	held          int64 // SettleLease: the part of the reservation the request held
	release       bool  // SettleLease: drop the reservation
	now           time.Time
	// deferred: acknowledged from the journal; a reservation gone by the time it is
	// applied is no error, the charge is taken from the balance.
	deferred bool
}

// applySettleRun applies a run of consecutive settlements (see above), leaving each op's
// result in it, and returns how many succeeded. An error is the transaction's, as for
// applyOp: the batch must be abandoned.
func (w *writer) applySettleRun(tx *sql.Tx, conn *sql.Conn, run []*writeOp) (int, error) {
	if len(run) > 1 {
		bg := context.Background()
		if _, err := tx.ExecContext(bg, `SAVEPOINT run`); err != nil {
			return 0, fmt.Errorf("opening savepoint: %w", err)
		}
		if err := settleTogether(bg, tx, conn, &w.raw, run); err == nil {
			if _, err := tx.ExecContext(bg, `RELEASE run`); err != nil {
				return 0, fmt.Errorf("releasing savepoint: %w", err)
			}
			w.together.Add(1)
			applied := 0
			for _, o := range run {
				if o.err == nil {
					applied++
				}
			}
			return applied, nil
		}
		if _, err := tx.ExecContext(bg, `ROLLBACK TO run`); err != nil {
			return 0, fmt.Errorf("rolling back settlements: %w", err)
		}
		if _, err := tx.ExecContext(bg, `RELEASE run`); err != nil {
			return 0, fmt.Errorf("rolling back settlements: %w", err)
		}
		w.oneByOne.Add(1)
	}
	applied := 0
	for _, o := range run {
		o.err = nil
		if err := applyOp(tx, o); err != nil {
			return applied, err
		}
		if o.err == nil && o.panicked == nil {
			applied++
		}
	}
	return applied, nil
}

// reservationState and walletState are the rows a run works on in memory.
type reservationState struct {
	id, workspaceID string
	amount, was     int64
	gone            bool
}

type walletState struct {
	workspaceID         string
	balance, reserved   int64
	balance0, reserved0 int64
}

// settleTogether works out and writes a run of settlements. It sets each op's err for a
// settlement that fails on its own (nothing of it is written); a returned error means the
// run as a whole could not be written and the caller must roll it back.
func settleTogether(ctx context.Context, tx *sql.Tx, conn *sql.Conn, raw *rawExec, run []*writeOp) (err error) {
	defer func() {
		// A bug here must not take the writer goroutine down: the caller falls back to the
		// closures, whose own recover hands a panic to its caller.
		if p := recover(); p != nil {
			err = fmt.Errorf("settling together: panic: %v", p)
		}
	}()

	var resIDs, wsIDs []string
	seenRes := make(map[string]bool, len(run))
	seenWS := make(map[string]bool, 1)
	for _, o := range run {
		r := o.settle
		if id := r.reservationID; id != "" && !seenRes[id] {
			seenRes[id] = true
			resIDs = append(resIDs, id)
		}
		if ws := r.g.WorkspaceID; !seenWS[ws] {
			seenWS[ws] = true
			wsIDs = append(wsIDs, ws)
		}
	}
	reservations, err := loadReservations(ctx, tx, resIDs)
	if err != nil {
		return err
	}
	wallets, err := loadWallets(ctx, tx, wsIDs)
	if err != nil {
		return err
	}

	settled := make([]*writeOp, 0, len(run))
	charges := 0
	for _, o := range run {
		r := o.settle
		g := r.g
		var rs *reservationState
		if r.reservationID != "" {
			rs = reservations[r.reservationID]
			if r.deferred && (rs == nil || rs.gone || rs.workspaceID != g.WorkspaceID) {
				rs = nil
			}
			switch {
			case r.deferred:
			case rs == nil || rs.gone || (r.lease && rs.workspaceID != g.WorkspaceID):
				o.err = fmt.Errorf("reservation %q: %w", r.reservationID, store.ErrNotFound)
				continue
			case rs.workspaceID != g.WorkspaceID:
				o.err = fmt.Errorf("reservation %q of workspace %q: %w", r.reservationID, g.WorkspaceID, store.ErrNotFound)
				continue
			}
		}
		w := wallets[g.WorkspaceID]
		if w == nil {
			o.err = fmt.Errorf("wallet of workspace %q: %w", g.WorkspaceID, store.ErrNotFound)
			continue
		}
		charge := store.Charge(g, r.cost, w.balance)
		var unreserve int64
		if rs != nil {
			// Settle drops its reservation, as the last settlement of a lease does.
			drop := !r.lease || r.release
			unreserve = store.LeaseUnreserve(charge, r.held, rs.amount, drop)
			rs.amount -= unreserve
			rs.gone = drop
		}
		w.balance -= charge
		w.reserved -= unreserve
		if charge > 0 {
			charges++
		}
		settled = append(settled, o)
	}

	if err := insertGenerations(raw, conn, settled); err != nil {
		return err
	}
	if charges > 0 {
		if err := insertCharges(raw, conn, settled, charges); err != nil {
			return err
		}
	}
	var drop []string
	for _, id := range resIDs {
		rs := reservations[id]
		switch {
		case rs == nil:
		case rs.gone:
			drop = append(drop, id)
		case rs.amount != rs.was:
			if _, err := tx.ExecContext(ctx, `UPDATE reservations SET amount_nanos = amount_nanos - ? WHERE id = ?`,
				rs.was-rs.amount, id); err != nil {
				return fmt.Errorf("shrinking reservation %q: %w", id, err)
			}
		}
	}
	if len(drop) > 0 {
		for chunk := range chunks(drop) {
			if _, err := tx.ExecContext(ctx, inList(`DELETE FROM reservations WHERE id IN `, len(chunk)), stringArgs(chunk)...); err != nil {
				return fmt.Errorf("releasing reservations: %w", err)
			}
		}
	}
	for _, ws := range wsIDs {
		w := wallets[ws]
		if w == nil || (w.balance == w.balance0 && w.reserved == w.reserved0) {
			continue
		}
		if _, err := tx.ExecContext(ctx, `UPDATE wallets SET balance_nanos = balance_nanos - ?, reserved_nanos = reserved_nanos - ? WHERE workspace_id = ?`,
			w.balance0-w.balance, w.reserved0-w.reserved, ws); err != nil {
			return fmt.Errorf("updating wallet: %w", err)
		}
	}
	return nil
}

func loadReservations(ctx context.Context, tx *sql.Tx, ids []string) (map[string]*reservationState, error) {
	out := make(map[string]*reservationState, len(ids))
	err := queryIn(ctx, tx, `SELECT id, workspace_id, amount_nanos FROM reservations WHERE id IN `, ids, func(rows *sql.Rows) error {
		rs := &reservationState{}
		if err := rows.Scan(&rs.id, &rs.workspaceID, &rs.amount); err != nil {
			return err
		}
		rs.was = rs.amount
		out[rs.id] = rs
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading reservations: %w", err)
	}
	return out, nil
}

func loadWallets(ctx context.Context, tx *sql.Tx, workspaceIDs []string) (map[string]*walletState, error) {
	out := make(map[string]*walletState, len(workspaceIDs))
	err := queryIn(ctx, tx, `SELECT workspace_id, balance_nanos, reserved_nanos FROM wallets WHERE workspace_id IN `, workspaceIDs, func(rows *sql.Rows) error {
		w := &walletState{}
		if err := rows.Scan(&w.workspaceID, &w.balance, &w.reserved); err != nil {
			return err
		}
		w.balance0, w.reserved0 = w.balance, w.reserved
		out[w.workspaceID] = w
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading wallets: %w", err)
	}
	return out, nil
}

// queryIn runs prefix with an IN list of ids, in chunks, and calls scan for every row.
func queryIn(ctx context.Context, tx *sql.Tx, prefix string, ids []string, scan func(*sql.Rows) error) error {
	for chunk := range chunks(ids) {
		rows, err := tx.QueryContext(ctx, inList(prefix, len(chunk)), stringArgs(chunk)...)
		if err != nil {
			return err
		}
		for rows.Next() {
			if err := scan(rows); err != nil {
				_ = rows.Close()
				return err
			}
		}
		if err := rows.Close(); err != nil {
			return err
		}
		if err := rows.Err(); err != nil {
			return err
		}
	}
	return nil
}

// Inserts of generations: every column, or, for a chunk of text calls (no usage in a
// dimension other than tokens), all but those dimensions', which default to 0.
var (
	insertGenerationsPrefix          = `INSERT INTO generations (` + store.GenerationColumns + `) VALUES `
	insertTokenOnlyGenerationsPrefix = `INSERT INTO generations (` + store.TokenOnlyColumns + `) VALUES `
)

func insertGenerations(raw *rawExec, conn *sql.Conn, ops []*writeOp) error {
	var scratch []byte
	for chunk := range chunksOf(ops, raw.rows()) {
		fields, prefix := store.GenerationFields[:], insertGenerationsPrefix
		if !slices.ContainsFunc(chunk, func(o *writeOp) bool { return o.settle.g.HasDimensions() }) {
			fields, prefix = store.TokenOnlyFields, insertTokenOnlyGenerationsPrefix
		}
		args := raw.start()
		for _, o := range chunk {
			for _, f := range fields {
				var v driver.Value
				v, scratch = generationValue(f.Addr(o.settle.g), scratch)
				args = arg(args, v)
			}
		}
		if err := raw.exec(conn, insertStatement(prefix, len(fields), len(chunk)), args); err != nil {
			return fmt.Errorf("inserting generations: %w", err)
		}
	}
	return nil
}

func insertCharges(raw *rawExec, conn *sql.Conn, ops []*writeOp, n int) error {
	charged := make([]*writeOp, 0, n)
	for _, o := range ops {
		if o.settle.g.CostNanos > 0 {
			charged = append(charged, o)
		}
	}
	for chunk := range chunksOf(charged, raw.rows()) {
		args := raw.start()
		for _, o := range chunk {
			g := o.settle.g
			for _, v := range [...]driver.Value{g.WorkspaceID, -g.CostNanos, "charge", g.ID, g.KeyID, millis(o.settle.now)} {
				args = arg(args, v)
			}
		}
		if err := raw.exec(conn, insertStatement(`INSERT INTO ledger (workspace_id, amount_nanos, kind, generation_id, key_id, created_at) VALUES `, 6, len(chunk)), args); err != nil {
			return fmt.Errorf("appending to ledger: %w", err)
		}
	}
	return nil
}

// Statements of a run are built for sizes that are powers of two (a run is cut into such
// chunks), so that few distinct texts reach the connection's statement cache.
const maxChunk = 64

// chunks cuts s into pieces whose lengths are powers of two, largest first.
func chunks[T any](s []T) func(yield func([]T) bool) { return chunksOf(s, maxChunk) }

// chunksOf cuts s into pieces whose lengths are powers of two up to most (a power of two),
// largest first.
func chunksOf[T any](s []T, most int) func(yield func([]T) bool) {
	return func(yield func([]T) bool) {
		for len(s) > 0 {
			n := most
			for n > len(s) {
				n /= 2
			}
			if !yield(s[:n]) {
				return
			}
			s = s[n:]
		}
	}
}

// stringArgs returns ids as statement arguments.
func stringArgs(ids []string) []any {
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	return args
}

var statements sync.Map // string (prefix + size) → string

// inList returns prefix followed by an IN list of n placeholders.
func inList(prefix string, n int) string {
	return cachedStatement(prefix, n, func(b *strings.Builder) {
		b.WriteByte('(')
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteByte('?')
		}
		b.WriteByte(')')
	})
}

// insertStatement returns prefix followed by n rows of cols placeholders each.
func insertStatement(prefix string, cols, n int) string {
	return cachedStatement(prefix, n, func(b *strings.Builder) {
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteByte('(')
			for j := range cols {
				if j > 0 {
					b.WriteByte(',')
				}
				b.WriteByte('?')
			}
			b.WriteByte(')')
		}
	})
}

type statementKey struct {
	prefix string
	n      int
}

func cachedStatement(prefix string, n int, tail func(*strings.Builder)) string {
	k := statementKey{prefix, n}
	if s, ok := statements.Load(k); ok {
		return s.(string)
	}
	var b strings.Builder
	b.WriteString(prefix)
	tail(&b)
	s := b.String()
	statements.Store(k, s)
	return s
}
