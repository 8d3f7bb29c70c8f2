package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/modelgateway/caddy-modelgateway/internal/background"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// The change feed (store.Jobs.Watch). Job writes notify the schema's channel in their
// transaction (jobs.go); one listener per store, started by the first Watch, holds a
// connection of its own (taken from the pool for good, so that its LISTEN never leaks to
// another user of the pool), waits for notifications on it and fans them out to the
// store's watchers (store.ChangeHub, which never waits for a slow one). When the
// connection drops, the listener reconnects with a capped backoff: what was notified in
// between is lost, and watchers re-read the jobs they follow (GetJob) to catch up. A panic
// in the listener is recovered, reported with its stack, and the listener starts again.

// listenBackoff spaces the listener's reconnections.
var listenBackoff = background.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second}

// changeFeed is a store's listener and its watchers.
type changeFeed struct {
	hub   store.ChangeHub
	start sync.Once
	// stop ends the listener; done is closed once it ended.
	stop context.CancelFunc
	done chan struct{}
}

// Watch returns the change feed of every store on the schema.
func (s *Store) Watch(ctx context.Context) (<-chan store.JobChange, error) {
	if s.closed.Load() {
		return nil, errClosed
	}
	ch, err := s.feed.hub.Watch(ctx)
	if err != nil {
		return nil, err
	}
	s.feed.start.Do(func() {
		lctx, cancel := context.WithCancel(context.Background())
		s.feed.stop, s.feed.done = cancel, make(chan struct{})
		go s.listen(lctx)
	})
	return ch, nil
}

// stopFeed ends the listener, if it runs, and closes the watchers' channels.
func (s *Store) stopFeed() {
	s.feed.start.Do(func() {})
	if s.feed.stop != nil {
		s.feed.stop()
		<-s.feed.done
	}
	s.feed.hub.Close()
}

// listen runs the listener until ctx ends, connecting again whenever it must.
func (s *Store) listen(ctx context.Context) {
	defer close(s.feed.done)
	var failures int
	for ctx.Err() == nil {
		began := time.Now()
		var err error
		// A panic is a failure like a lost connection: reported, with its stack, and the
		// listener connects again.
		if p := background.Call("change feed listener", func() { err = s.listenOnce(ctx) }); p != nil {
			err = p
		}
		if ctx.Err() != nil {
			return
		}
		s.reportBackground(err)
		if time.Since(began) > listenBackoff.Max {
			failures = 0
		}
		if !background.Sleep(listenBackoff.Delay(failures), ctx.Done()) {
			return
		}
		failures++
	}
}

// listenOnce takes a connection, listens on it and fans out what it hears until the
// connection fails or ctx ends.
func (s *Store) listenOnce(ctx context.Context) error {
	pooled, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("change feed: acquiring a connection: %w", err)
	}
	conn := pooled.Hijack()
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = conn.Close(cctx) // the connection only listened: nothing of it to keep
		cancel()
	}()
	var channel string
	if err := conn.QueryRow(ctx, `SELECT `+changeChannel).Scan(&channel); err != nil {
		return fmt.Errorf("change feed: naming the channel: %w", err)
	}
	if _, err := conn.Exec(ctx, `LISTEN `+pgx.Identifier{channel}.Sanitize()); err != nil {
		return fmt.Errorf("change feed: listening: %w", err)
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return fmt.Errorf("change feed: waiting for notifications: %w", err)
		}
		var c store.JobChange
		if err := json.Unmarshal([]byte(n.Payload), &c); err != nil {
			s.reportBackground(fmt.Errorf("change feed: notification %q: %w", n.Payload, err))
			continue
		}
		c.UpdatedAt = utc(c.UpdatedAt)
		s.feed.hub.Publish(c)
	}
}

// reportBackground hands a failure of the store's background work to its hook
// (WithBackgroundErrors).
func (s *Store) reportBackground(err error) { background.Report(s.backgroundErr, err) }
