package postgres

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// errClosed is returned by a store used after Close.
var errClosed = errors.New("store is closed")

// pool is a small bounded connection pool over pgx.Conn.
//
// It stands in for pgxpool, which needs github.com/jackc/puddle/v2, a module this
// project does not require yet. It offers only what the store uses: acquire, release,
// close, a cap on open connections, and a ping before reusing a connection that sat
// idle, as pgxpool does by default.
type pool struct {
	cfg *pgx.ConnConfig
	// pingAfter is how long a connection may sit idle before it is checked on reuse.
	pingAfter time.Duration
	// slots holds one token per connection in use or being dialled; its capacity is the cap.
	slots chan struct{}

	mu     sync.Mutex
	idle   []idleConn
	closed bool
}

type idleConn struct {
	conn  *pgx.Conn
	since time.Time
}

func newPool(cfg *pgx.ConnConfig, maxConns int) *pool {
	return &pool{cfg: cfg, pingAfter: time.Second, slots: make(chan struct{}, maxConns)}
}

// acquire returns a connection the caller owns until release.
func (p *pool) acquire(ctx context.Context) (*pgx.Conn, error) {
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			<-p.slots
			return nil, errClosed
		}
		n := len(p.idle)
		if n == 0 {
			p.mu.Unlock()
			break
		}
		// Most recently used first: it is the one most likely to still be alive.
		ic := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()

		if time.Since(ic.since) < p.pingAfter {
			return ic.conn, nil
		}
		// The server, a proxy or a failover may have dropped a connection that sat idle.
		if err := ic.conn.Ping(ctx); err == nil {
			return ic.conn, nil
		}
		closeConn(ic.conn)
		if err := ctx.Err(); err != nil {
			<-p.slots
			return nil, err
		}
	}
	conn, err := pgx.ConnectConfig(ctx, p.cfg)
	if err != nil {
		<-p.slots
		return nil, err
	}
	return conn, nil
}

// release gives a connection back; one left mid-query or mid-transaction is closed,
// never reused, so no caller inherits another's half-finished transaction.
func (p *pool) release(conn *pgx.Conn) {
	reusable := !conn.IsClosed() && !conn.PgConn().IsBusy() && conn.PgConn().TxStatus() == 'I'
	p.mu.Lock()
	if reusable && !p.closed {
		p.idle = append(p.idle, idleConn{conn: conn, since: time.Now()})
		conn = nil
	}
	p.mu.Unlock()
	if conn != nil {
		closeConn(conn)
	}
	<-p.slots
}

// close closes idle connections now and the others as they are released.
func (p *pool) close() {
	p.mu.Lock()
	p.closed = true
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, ic := range idle {
		closeConn(ic.conn)
	}
}

func closeConn(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}
