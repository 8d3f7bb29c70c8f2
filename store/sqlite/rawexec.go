package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
)

// rawExec runs the writer's multi-row INSERTs of settlements on the driver's own connection,
// with statements it prepares once and arguments in a slice it reuses. Through database/sql
// every call converted its arguments into a new []driver.NamedValue (40 bytes an argument,
// 33 arguments a settlement): two-thirds of what the writer allocated per settlement, and so
// of how often the collector ran on its account.
//
// Only the writer goroutine uses it, on the connection of the batch's transaction: database/sql
// lets sql.Conn.Raw reach that connection while the transaction is open, and every statement
// run through it is part of the transaction, as through tx.
type rawExec struct {
	owner any // the driver connection the statements were prepared on
	stmts map[string]driver.Stmt
	args  []driver.NamedValue

	// pause, when set, runs after every statement (newPause); rows then bounds the rows of
	// one INSERT, so that no statement holds the writer's processor long.
	pause func()
}

// pausedRows is how many rows one INSERT takes when the writer pauses between statements:
// well under 100 µs of SQLite, where 64 rows took 300-400 µs. 32 rows left a scheduling wait
// p99 of 260 µs, 16 rows 160-230 µs, 8 rows no less and a third more writer time
// (BenchmarkWriterHoldsAProcessor, BenchmarkWriterSettleRun).
const pausedRows = 16

// rows is the most rows one INSERT takes.
func (r *rawExec) rows() int {
	if r.pause != nil {
		return pausedRows
	}
	return maxChunk
}

// start returns the argument slice to fill for the next statement.
func (r *rawExec) start() []driver.NamedValue {
	clear(r.args)
	return r.args[:0]
}

// arg appends v as the next positional argument.
func arg(args []driver.NamedValue, v driver.Value) []driver.NamedValue {
	return append(args, driver.NamedValue{Ordinal: len(args) + 1, Value: v})
}

// exec runs query with args, which start returned and the caller filled, on conn, the
// connection of the batch's transaction.
func (r *rawExec) exec(conn *sql.Conn, query string, args []driver.NamedValue) error {
	r.args = args // keep what the slice grew to
	err := conn.Raw(func(dc any) error {
		if dc != r.owner {
			// A new connection (the first, or one database/sql reopened): statements are
			// per connection.
			r.closeStmts()
			r.owner = dc
		}
		st, ok := r.stmts[query]
		if !ok {
			c, ok := dc.(driver.ConnPrepareContext)
			if !ok {
				return fmt.Errorf("driver connection %T cannot prepare statements", dc)
			}
			var err error
			if st, err = c.PrepareContext(context.Background(), query); err != nil {
				return err
			}
			if r.stmts == nil {
				r.stmts = map[string]driver.Stmt{}
			}
			r.stmts[query] = st
		}
		// Run through Query, not Exec: mattn's query binds every argument and takes the
		// first step in one cgo call (the INSERT is done when it returns, and a failure
		// comes back from it), where Exec makes a cgo call per argument, 33 a settlement:
		// 12-15 against 15-17 µs of writer time per settlement at 100 a transaction
		// (BenchmarkSettleLeaseGathered, the two builds taking turns, 5 of 5 pairs).
		q, ok := st.(driver.StmtQueryContext)
		if !ok {
			return fmt.Errorf("driver statement %T cannot query with a context", st)
		}
		rows, err := q.QueryContext(context.Background(), args)
		if err != nil {
			return err
		}
		return rows.Close()
	})
	if err == nil && r.pause != nil {
		r.pause()
	}
	return err
}

// closeStmts finalizes the prepared statements; the writer calls it once it is done, before
// the connection closes.
func (r *rawExec) closeStmts() {
	for _, st := range r.stmts {
		_ = st.Close()
	}
	clear(r.stmts)
	r.owner = nil
}
