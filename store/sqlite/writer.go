package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelgateway/caddy-modelgateway/internal/background"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// Group commit.
//
// Every write of the store (Reserve, Settle, AddCredits, ReleaseExpired and the workspace
// and key writes) is a writeOp handed to one writer goroutine. The writer takes whatever
// has queued up, at most batchLimit ops, runs them one after the other in ONE write
// transaction (BEGIN IMMEDIATE), each inside a savepoint of its own, commits once and only
// then answers every caller. There is no wait for a batch to fill: a batch is what queued
// while the previous commit was in flight, so a lone request pays one commit as before,
// and a loaded store pays one fsync per batch instead of one per call.
//
// What callers see does not change:
//   - Ops apply in queue order, each seeing the effects of the ops before it in the batch,
//     exactly as if they had run as separate transactions in that order: no interleaving
//     can take a balance below zero or a key past its limit.
//   - An op that fails (store.ErrInsufficientFunds, ErrNotFound, ErrConflict...) is rolled
//     back to its savepoint: it changes nothing, its caller gets its own error, and the
//     other ops of the batch are unaffected.
//   - A call returns only after the transaction holding its op committed, so a write that
//     returned nil survives a crash (and, with DurablePower's synchronous=FULL, a power
//     cut). If the transaction itself fails (BEGIN or COMMIT, or an I/O error that aborts
//     it), every op in it fails with that error and none is applied.
//   - The exception is a journaled settlement (journal.go): its caller was answered when
//     the journal took it; the writer applies it with the others in queue order, and a
//     transaction that fails is retried with it rather than losing it.
//
// Context: a caller whose ctx ends while its op still waits in the queue gets ctx.Err()
// and the op is never applied. Once the writer has started the op, it runs to completion
// (statements run without the caller's cancellation, which would otherwise abort the
// whole shared transaction) and is committed with its batch; the caller then waits the
// few milliseconds to the commit and gets the op's real result, whatever its ctx says.

// batchLimit is the default bound on the ops one transaction holds.
const batchLimit = 256

// errClosed is returned by writes made after Close.
var errClosed = fmt.Errorf("sqlite %w", store.ErrClosed)

// States of a writeOp; the writer and the caller race to move it out of opQueued.
const (
	opQueued    int32 = iota
	opClaimed         // the writer took it: its caller waits for the answer
	opAbandoned       // its caller's ctx ended first: the writer skips it
)

// writeOp is one write waiting for, or running in, a batch.
type writeOp struct {
	ctx context.Context
	fn  func(ctx context.Context, tx *sql.Tx) error
	// settle is set, instead of fn, for a settlement: a write the writer can apply together
	// with the settlements next to it (settlebatch.go), or alone (settleReq.apply).
	settle *settleReq
	// async ops (journaled settlements) have no caller waiting, and no done: the writer
	// finishes them (Store.finishAsync); seg is their journal segment. An op with neither fn
	// nor settle is a barrier: it applies nothing and is answered once the ops before it
	// are.
	async bool
	seg   uint64
	// onDisk asks for the commit to be on the disk before the op is answered, even at
	// synchronous=NORMAL (credits: money paid in must survive a power cut).
	onDisk bool
	state  atomic.Int32
	// err and panicked are set by the writer before it closes done.
	err      error
	panicked error
	done     chan struct{}
}

// run applies what the op writes: its settlement, or fn.
func (o *writeOp) run(ctx context.Context, tx *sql.Tx) error {
	if o.settle != nil {
		return o.settle.apply(ctx, tx)
	}
	return o.fn(ctx, tx)
}

// pause yields between the writer's statements, unless the writer was made not to (a
// benchmark's baseline).
func (w *writer) pause() {
	if w.raw.pause != nil {
		w.raw.pause()
	}
}

// claim moves the op from the queue to the writer; false if its caller abandoned it.
func (o *writeOp) claim() bool { return o.state.CompareAndSwap(opQueued, opClaimed) }

// writer is the queue in front of the writer goroutine.
type writer struct {
	limit int

	mu     sync.Mutex
	cond   sync.Cond
	queue  []*writeOp
	closed bool
	// failed is set, with closed, once the writer stopped after a panic: what new ops get.
	failed error
	// conn and tx are the batch transaction's while it runs (the writer goroutine's own),
	// for failWriter to roll back.
	conn *sql.Conn
	tx   *sql.Tx
	// waiting counts the queued ops someone waits for (all but journaled settlements);
	// urgent wakes a writer gathering journaled settlements (see next).
	waiting int
	urgent  chan struct{}
	gather  *time.Timer
	// gatherFor is gatherDelay (tests stretch it to prove what does not wait for it;
	// benchmarks set it to zero).
	gatherFor time.Duration
	// stopped is closed when the writer goroutine has answered every op and returned.
	stopped chan struct{}

	// commits counts committed write transactions, ops the ops they applied. Tests and
	// benchmarks read them to see batches form.
	commits atomic.Int64
	ops     atomic.Int64
	// together and oneByOne count runs of settlements applied together, and runs that
	// fell back to one write at a time (settlebatch.go).
	together, oneByOne atomic.Int64
	// flushes counts checkpoints run for onDisk ops.
	flushes atomic.Int64

	// raw holds the statements settlements' INSERTs run through (writer goroutine only).
	raw rawExec
}

// newPause returns the writer's pause: it lets the goroutines that wait for a processor run,
// between the writer's statements.
//
// The writer's statements are cgo calls, and a goroutine in a cgo call keeps its processor
// (P): the runtime hands it to another thread only once sysmon sees the call outlast a tick,
// and sysmon, idle, sleeps up to 10 ms between looks. A transaction of 100 settlements, 1-2 ms
// of SQLite, so took one of the process's two Ps away from the requests for all of it: the Go
// scheduler's own /sched/latencies p99 went from about 0.06 to 1.0-1.3 ms next to it
// (BenchmarkWriterHoldsAProcessor, whose load keeps both Ps busy, as saturation does).
//
// So the writer cuts its work into statements of well under 100 µs (pausedRows rows an
// INSERT) and, between them, yields if goroutines wait: they wait for one statement, not
// for the transaction. The statements are the same transaction, and nobody else writes
// meanwhile, so nothing else changes. A yield nobody waits for is skipped: it moved the
// writer between threads for nothing, 13% more writer time per settlement
// (BenchmarkWriterSettleRun); the look costs about 85 ns, and the pauses in all about 1 µs
// (7%) of writer time per settlement. With them, the p99 wait was 160-230 µs. What still
// holds the processor whole is the COMMIT (writing the transaction's pages to the WAL) and,
// every thousand pages or so, the checkpoint that runs inside it.
//
// Between statements the writer also yields its core (yieldCPU, sched_yield on Linux):
// Gosched hands the processor to this process's goroutines, but the threads that wait for
// the core are mostly not the writer's process's, or not yet runnable in Go's eyes (the
// load's reads and writes waking up). Without it the kernel let the writer run out its
// time slice, and a request of the gateway's latency test that overlapped a transaction
// (4% of them at 1,000 requests a second) took 650 µs more at its median than one that
// overlapped neither a transaction nor a garbage collection; yielding brought that to
// 200 µs (gatewaybench, same run). Nobody waiting, the call returns at once.
func newPause() func() {
	runnable := []metrics.Sample{{Name: "/sched/goroutines/runnable:goroutines"}}
	return func() {
		metrics.Read(runnable)
		if v := runnable[0].Value; v.Kind() == metrics.KindUint64 && v.Uint64() > 0 {
			runtime.Gosched()
		}
		yieldCPU()
	}
}

// gatherDelay is how long the writer lets journaled settlements gather into one
// transaction when nothing else is queued: nobody waits for them (every read of what they
// change waits for them first, journal.go), and the fewer the transactions, the less each
// settlement costs the writer, a commit's cost being shared by all
// (BenchmarkSettleLeaseGathered, when this was chosen: 37 µs at 27 a transaction, 26 µs at
// 100, 22 µs at 250). At 1,000 requests a second, the writer's work took turns with the
// requests' on the same cores, so its cost was in their latency. Anything a caller waits
// for (a read's barrier included) ends the wait at once, and a full batch (batchLimit) does
// not wait.
const gatherDelay = 100 * time.Millisecond

func newWriter(limit int, gather time.Duration) *writer {
	w := &writer{limit: max(limit, 1), stopped: make(chan struct{}), urgent: make(chan struct{}, 1), gatherFor: gather}
	w.raw.pause = newPause()
	w.cond.L = &w.mu
	return w
}

func (w *writer) enqueue(o *writeOp) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		if w.failed != nil {
			return w.failed
		}
		return errClosed
	}
	w.queue = append(w.queue, o)
	if !o.async {
		w.waiting++
	}
	if !o.async || len(w.queue) >= w.limit {
		w.wakeUrgent()
	}
	w.cond.Signal()
	return nil
}

func (w *writer) wakeUrgent() {
	select {
	case w.urgent <- struct{}{}:
	default:
	}
}

// next waits for work and appends the next batch to buf; false once the writer is closed
// and the queue drained.
func (w *writer) next(buf []*writeOp) ([]*writeOp, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(w.queue) == 0 && !w.closed {
		w.cond.Wait()
	}
	if len(w.queue) == 0 {
		return buf, false
	}
	if w.waiting == 0 && len(w.queue) < w.limit && !w.closed {
		// Only journaled settlements: let more of them join this transaction. A wake-up
		// left from ops already taken is stale.
		select {
		case <-w.urgent:
		default:
		}
		w.mu.Unlock()
		if w.gather == nil {
			w.gather = time.NewTimer(w.gatherFor)
		} else {
			w.gather.Reset(w.gatherFor)
		}
		select {
		case <-w.gather.C:
		case <-w.urgent:
			w.gather.Stop()
		}
		w.mu.Lock()
	}
	n := min(len(w.queue), w.limit)
	for _, o := range w.queue[:n] {
		if !o.async {
			w.waiting--
		}
	}
	buf = append(buf, w.queue[:n]...)
	rest := copy(w.queue, w.queue[n:])
	clear(w.queue[rest:])
	w.queue = w.queue[:rest]
	return buf, true
}

// stop refuses new ops, lets the writer run every op already queued, and waits for it to
// return.
func (w *writer) stop() {
	w.mu.Lock()
	w.closed = true
	w.cond.Broadcast()
	w.wakeUrgent()
	w.mu.Unlock()
	<-w.stopped
}

// isClosed reports whether the writer refuses new ops (the store is closing).
func (w *writer) isClosed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.closed
}

// queued returns how many ops wait in the queue (tests use it to line batches up).
func (w *writer) queued() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.queue)
}

// tx runs fn as one write of the store, in a transaction it may share with other
// concurrent writes (see Group commit above), and returns fn's error. fn must use the
// ctx and tx it is given and must not commit or roll back tx.
func (s *Store) tx(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error {
	return s.write(ctx, &writeOp{fn: fn})
}

// write queues o and waits for its result, as tx does.
func (s *Store) write(ctx context.Context, o *writeOp) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	o.ctx, o.done = ctx, make(chan struct{})
	if err := s.wr.enqueue(o); err != nil {
		return err
	}
	select {
	case <-o.done:
	case <-ctx.Done():
		if o.state.CompareAndSwap(opQueued, opAbandoned) {
			return ctx.Err()
		}
		// The writer already took it: its outcome is decided by the batch's commit.
		<-o.done
	}
	if o.panicked != nil {
		panic(o.panicked)
	}
	return markUnavailable(o.err)
}

// runWriter is the writer goroutine: it commits batches until the store closes.
func (s *Store) runWriter() {
	defer close(s.wr.stopped)
	var batch []*writeOp
	p := background.Call("sqlite writer", func() {
		for {
			var ok bool
			batch, ok = s.wr.next(batch[:0])
			if !ok {
				return
			}
			if !s.commitBatch(batch) {
				// Journaled settlements of a failed transaction are queued again: give
				// whatever failed (a full disk, a locked file) a moment.
				time.Sleep(50 * time.Millisecond)
			}
			clear(batch)
		}
	})
	if p != nil {
		s.failWriter(p, batch)
		return
	}
	s.closeRawStmts()
}

// failWriter ends the writer after a panic outside any one write's code (a write's own
// panic is its caller's, callOp). What the writer was doing is then unknown (a batch half
// answered, journaled settlements half finished), so it does not run again: it fails
// closed, as if the process had crashed for its writes. Its transaction is rolled back and
// its connection closed, which releases SQLite's write lock that other processes on the
// file wait for (the statements it prepared on it are left to the process's end); the
// panic is reported; the ops of its batch and of the queue answer ErrUnavailable (maybe
// applied: the panic may have come just after a commit), and so does every later write
// until the store is opened again, whose Open replays the journaled settlements. Reads go
// on.
func (s *Store) failWriter(p *background.Panic, batch []*writeOp) {
	background.Report(s.backgroundErr, p)
	if w := s.wr; w.tx != nil {
		_ = w.tx.Rollback()
		_ = w.conn.Close()
	}
	err := fmt.Errorf("sqlite store: the writer stopped after a panic (%v), writes fail until the gateway restarts: %w", p.Value, store.ErrUnavailable)
	w := s.wr
	w.mu.Lock()
	w.closed, w.failed = true, err
	queued := w.queue
	w.queue = nil
	w.cond.Broadcast()
	w.mu.Unlock()
	for _, o := range slices.Concat(batch, queued) {
		o.claim()
		if o.async || o.state.Load() != opClaimed {
			continue
		}
		select {
		case <-o.done:
			// Answered before the panic.
		default:
			if o.err == nil && o.panicked == nil {
				o.err = err
			}
			close(o.done)
		}
	}
}

// closeRawStmts finalizes the statements the writer prepared on the driver's connection,
// before the store closes it.
func (s *Store) closeRawStmts() {
	if len(s.wr.raw.stmts) == 0 {
		return
	}
	conn, err := s.w.Conn(context.Background())
	if err != nil {
		return
	}
	defer conn.Close()
	_ = conn.Raw(func(any) error {
		s.wr.raw.closeStmts()
		return nil
	})
}

// commitBatch runs batch in one transaction and answers every op it claims; false when
// the transaction failed.
func (s *Store) commitBatch(batch []*writeOp) bool {
	claimed := make([]*writeOp, 0, len(batch))
	for _, o := range batch {
		if !o.claim() {
			continue
		}
		if err := o.ctx.Err(); err != nil {
			// Its caller is leaving and it has not run: it never will.
			o.err = err
			close(o.done)
			continue
		}
		claimed = append(claimed, o)
	}
	if len(claimed) == 0 {
		return true
	}

	var (
		failure error // set once the transaction cannot go on; no later op runs
		applied int
	)
	// The batch's transaction belongs to no caller: no one's cancellation may end it. It
	// runs on a connection the batch holds, so that settlements can reach the driver's
	// connection inside it (rawexec.go); the connection goes back to the pool (of one) when
	// the transaction ends.
	var tx *sql.Tx
	began := time.Now()
	conn, err := s.w.Conn(context.Background())
	if err == nil {
		if tx, err = conn.BeginTx(context.Background(), nil); err != nil {
			_ = conn.Close()
		}
	}
	if err != nil {
		conn, failure = nil, fmt.Errorf("beginning transaction: %w", err)
	}
	s.wr.conn, s.wr.tx = conn, tx
	for i := 0; i < len(claimed) && failure == nil; {
		if claimed[i].settle != nil {
			j := i + 1
			for j < len(claimed) && claimed[j].settle != nil {
				j++
			}
			var n int
			n, failure = s.wr.applySettleRun(tx, conn, claimed[i:j])
			applied += n
			i = j
			s.wr.pause()
			continue
		}
		o := claimed[i]
		i++
		if o.fn == nil {
			continue
		}
		if failure = applyOp(tx, o); failure == nil && o.err == nil && o.panicked == nil {
			applied++
		}
		s.wr.pause()
	}

	committed := false
	switch {
	case failure != nil:
		if tx != nil {
			_ = tx.Rollback()
		}
		for _, o := range claimed {
			if o.err == nil && o.panicked == nil {
				o.err = fmt.Errorf("write transaction aborted, nothing applied: %w", failure)
			}
		}
	case applied == 0:
		// Every op failed and was rolled back: there is nothing to commit.
		_ = tx.Rollback()
	default:
		if err := tx.Commit(); err != nil {
			failure = err
			for _, o := range claimed {
				if o.err == nil && o.panicked == nil {
					o.err = fmt.Errorf("committing: %w", err)
				}
			}
		} else {
			committed = true
			s.wr.commits.Add(1)
			s.wr.ops.Add(int64(applied))
		}
	}
	if conn != nil {
		_ = conn.Close()
	}
	s.wr.conn, s.wr.tx = nil, nil
	if committed {
		s.flushIfAsked(claimed)
	}
	recordTxSpan(began, time.Now())
	for _, o := range claimed {
		if o.async {
			s.finishAsync(o, failure != nil)
			continue
		}
		close(o.done)
	}
	return failure == nil
}

// flushIfAsked makes a committed batch that holds an onDisk op durable on the disk: at
// synchronous=NORMAL a commit is in the WAL but not yet fsynced, and a checkpoint syncs the
// WAL first. With synchronous=FULL the commit already was.
func (s *Store) flushIfAsked(batch []*writeOp) {
	if s.durability == DurablePower {
		return
	}
	for _, o := range batch {
		if o.onDisk && o.err == nil && o.panicked == nil {
			// The commit stands whatever the checkpoint says: it is at least durable
			// against the process, as every DurableProcess write is.
			if _, err := s.w.ExecContext(context.Background(), `PRAGMA wal_checkpoint(PASSIVE)`); err == nil {
				s.wr.flushes.Add(1)
			}
			return
		}
	}
}

// applyOp runs o inside a savepoint of tx, leaving its result in o, and rolls it back to
// the savepoint if it failed. The error it returns is not o's but the transaction's: tx
// can no longer be used (SQLite aborted it) and the batch must be abandoned.
func applyOp(tx *sql.Tx, o *writeOp) error {
	bg := context.Background()
	if _, err := tx.ExecContext(bg, `SAVEPOINT op`); err != nil {
		return fmt.Errorf("opening savepoint: %w", err)
	}
	o.panicked, o.err = callOp(tx, o)
	if o.err == nil && o.panicked == nil {
		if _, err := tx.ExecContext(bg, `RELEASE op`); err != nil {
			return fmt.Errorf("releasing savepoint: %w", err)
		}
		return nil
	}
	// ROLLBACK TO undoes the op's writes but keeps the savepoint open; RELEASE drops it.
	// Either fails only if SQLite already rolled the whole transaction back.
	if _, err := tx.ExecContext(bg, `ROLLBACK TO op`); err != nil {
		return fmt.Errorf("rolling back a failed write: %w", err)
	}
	if _, err := tx.ExecContext(bg, `RELEASE op`); err != nil {
		return fmt.Errorf("rolling back a failed write: %w", err)
	}
	return nil
}

// callOp runs o, turning a panic into a value the caller re-panics with, so that a bug
// in one write crashes its own request, as it did before writes were batched, rather than
// the writer goroutine and the process.
func callOp(tx *sql.Tx, o *writeOp) (panicked, err error) {
	defer func() {
		if p := recover(); p != nil {
			panicked = fmt.Errorf("sqlite store: panic in a write: %v\n\nwriter goroutine stack:\n%s", p, debug.Stack())
		}
	}()
	return nil, o.run(context.WithoutCancel(o.ctx), tx)
}
