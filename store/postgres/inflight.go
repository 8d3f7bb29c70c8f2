package postgres

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/modelgateway/caddy-modelgateway/internal/background"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// Requests in flight from a lease.
//
// A request admitted from a lease writes nothing of its own until it settles, and a
// transaction per request to say that it began would double the database's work on the
// hot path. So BeginInFlight only queues the trace in memory; a background flush writes
// what is queued every inflightFlushInterval in one statement, and deletes, in one more,
// the rows of requests that ended since. A request that ends before the next flush (most
// text requests) costs no write at all. A sweep that frees a dead owner's holds
// (ReleaseOrphaned, RetireInstance) turns its rows into interrupted records, unless the
// generation exists: a row whose deletion was still queued when its owner died belongs to
// a request that settled.
//
// What it costs: a crash loses the trace of the requests that began in the last
// inflightFlushInterval before it (their client got at most that much of an answer), and
// of those of an owner with no id (the CLI's).

// inflightFlushInterval is how often the queued traces are written (tests shorten it).
var inflightFlushInterval = 100 * time.Millisecond

// inflightFlushTimeout bounds one flush's statements.
const inflightFlushTimeout = 10 * time.Second

type inflightEntry struct {
	f store.InFlight
	// written is set once a flush took the entry: its row exists, or is being written.
	written bool
}

// inflightTraces are the traces of a Store's requests in flight.
type inflightTraces struct {
	mu      sync.Mutex
	next    uint64
	entries map[uint64]*inflightEntry
	// ended are the generation ids of written rows whose request ended.
	ended []string
	// failing is set while flushes fail: the first failure of an outage is reported, not
	// every flush's.
	failing bool
	running bool
	stop    context.CancelFunc
	done    chan struct{}
}

// BeginInFlight queues the trace of a request admitted from a lease (see above).
func (s *Store) BeginInFlight(f store.InFlight) uint64 {
	if f.Owner == "" || f.GenerationID == "" || s.closed.Load() {
		return 0
	}
	t := &s.inflight
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.entries == nil {
		t.entries = map[uint64]*inflightEntry{}
	}
	if !t.running {
		t.running = true
		var ctx context.Context
		ctx, t.stop = context.WithCancel(context.Background())
		t.done = make(chan struct{})
		// After a panic the loop runs again: the traces that flush took may not have been
		// written, which costs what a crash costs (see above); the later ones are.
		background.Loop{Name: "postgres in-flight flush", Report: s.backgroundErr, Stop: ctx.Done(), Done: t.done}.Go(func() { s.flushInFlightLoop(ctx) })
	}
	t.next++
	t.entries[t.next] = &inflightEntry{f: f}
	return t.next
}

// EndInFlight forgets the trace, or queues its row's deletion once it was written.
func (s *Store) EndInFlight(token uint64) {
	if token == 0 {
		return
	}
	t := &s.inflight
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.entries[token]
	if !ok {
		return
	}
	delete(t.entries, token)
	if e.written {
		t.ended = append(t.ended, e.f.GenerationID)
	}
}

func (s *Store) flushInFlightLoop(ctx context.Context) {
	tick := time.NewTicker(inflightFlushInterval)
	defer tick.Stop()
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-tick.C:
			s.flushInFlightBounded()
		}
	}
}

// flushInFlightBounded flushes within inflightFlushTimeout; a failure is tried again by
// the next flush, and reported when the previous flush succeeded.
func (s *Store) flushInFlightBounded() {
	ctx, cancel := context.WithTimeout(context.Background(), inflightFlushTimeout)
	defer cancel()
	err := s.flushInFlight(ctx)
	t := &s.inflight
	t.mu.Lock()
	report := err != nil && !t.failing
	t.failing = err != nil
	t.mu.Unlock()
	if report {
		s.reportBackground(fmt.Errorf("writing the traces of requests in flight (tried again every %v): %w", inflightFlushInterval, err))
	}
}

// flushInFlight writes the queued traces and deletes the rows of requests that ended. A
// failure leaves them queued for the next flush.
func (s *Store) flushInFlight(ctx context.Context) error {
	t := &s.inflight
	t.mu.Lock()
	ended := t.ended
	t.ended = nil
	var tokens []uint64
	var ids, workspaces, keys, endpoints, models, reservations, owners []string
	var started []time.Time
	for tok, e := range t.entries {
		if e.written {
			continue
		}
		e.written = true
		f := e.f
		tokens = append(tokens, tok)
		ids, workspaces, keys = append(ids, f.GenerationID), append(workspaces, f.WorkspaceID), append(keys, f.KeyID)
		endpoints, models = append(endpoints, f.Endpoint), append(models, f.Model)
		reservations, owners = append(reservations, f.ReservationID), append(owners, f.Owner)
		started = append(started, f.StartedAt.UTC())
	}
	t.mu.Unlock()
	if len(ids) == 0 && len(ended) == 0 {
		return nil
	}
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		if len(ids) > 0 {
			if _, err := conn.Exec(ctx, `INSERT INTO inflight (generation_id, workspace_id, key_id, endpoint, model, reservation_id, owner, started_at)
				SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::timestamptz[])
				ON CONFLICT (generation_id) DO NOTHING`,
				ids, workspaces, keys, endpoints, models, reservations, owners, started); err != nil {
				return err
			}
		}
		if len(ended) > 0 {
			if _, err := conn.Exec(ctx, `DELETE FROM inflight WHERE generation_id = ANY($1)`, ended); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.mu.Lock()
		for _, tok := range tokens {
			if e := t.entries[tok]; e != nil {
				e.written = false
			}
		}
		t.ended = append(t.ended, ended...)
		t.mu.Unlock()
	}
	return err
}

// stopInFlight ends the background flush, deleting the rows of the requests that ended.
func (s *Store) stopInFlight() {
	t := &s.inflight
	t.mu.Lock()
	running := t.running
	t.running = false
	t.mu.Unlock()
	if !running {
		return
	}
	t.stop()
	<-t.done
	t.mu.Lock()
	clear(t.entries)
	t.mu.Unlock()
	s.flushInFlightBounded()
}

// interruptInFlight records as interrupted the requests in flight of the rows cond
// selects (a WHERE clause of args over inflight), unless their generation exists, and
// deletes the rows, in tx.
func interruptInFlight(ctx context.Context, tx pgx.Tx, cond string, args ...any) error {
	rows, err := tx.Query(ctx, `DELETE FROM inflight WHERE `+cond+`
		RETURNING generation_id, workspace_id, key_id, endpoint, model, reservation_id, owner, started_at`, args...)
	if err != nil {
		return err
	}
	f, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.InFlight, error) {
		var f store.InFlight
		err := row.Scan(&f.GenerationID, &f.WorkspaceID, &f.KeyID, &f.Endpoint, &f.Model, &f.ReservationID, &f.Owner, &f.StartedAt)
		return f, err
	})
	if err != nil {
		return err
	}
	for _, f := range f {
		if err := recordInterrupted(ctx, tx, f); err != nil {
			return err
		}
	}
	return nil
}
