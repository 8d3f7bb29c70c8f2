package postgres

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/modelgateway/caddy-modelgateway/internal/ids"
	"github.com/modelgateway/caddy-modelgateway/store"
	"github.com/modelgateway/caddy-modelgateway/store/storetest"
)

// TestAdvanceAcrossInstances advances jobs from two stores over one schema, as two
// gateway instances would: one wins, the other's claim is lost.
func TestAdvanceAcrossInstances(t *testing.T) {
	dsn := freshSchema(t)
	storetest.AdvanceRace(t, openStore(t, dsn), openStore(t, dsn))
}

// TestWatchAcrossInstances follows, from one store, the jobs another store on the schema
// changes.
func TestWatchAcrossInstances(t *testing.T) {
	dsn := freshSchema(t)
	storetest.WatchAcross(t, openStore(t, dsn), openStore(t, dsn))
}

// TestWatchReconnects kills the listening connection: the failure is reported, the
// listener connects again, and later changes are heard.
func TestWatchReconnects(t *testing.T) {
	dsn := freshSchema(t)
	var mu sync.Mutex
	var reported []error
	watched := openStore(t, dsn, WithBackgroundErrors(func(err error) {
		mu.Lock()
		reported = append(reported, err)
		mu.Unlock()
	}))
	writer := openStore(t, dsn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	changes, err := watched.Watch(ctx)
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	ws := ids.New("ws")
	if err := writer.CreateWorkspace(ctx, store.Workspace{ID: ws, Name: "w"}); err != nil {
		t.Fatalf("CreateWorkspace: %v", err)
	}
	// heard creates jobs until the watcher hears one.
	heard := func() {
		t.Helper()
		for {
			id := ids.New("job")
			err := writer.CreateJob(ctx, store.Job{ID: id, WorkspaceID: ws, Kind: "test", Status: "queued"}, time.Now().Add(time.Hour), nil)
			if err != nil {
				t.Fatalf("CreateJob: %v", err)
			}
			select {
			case c := <-changes:
				if c.WorkspaceID != ws {
					t.Fatalf("heard %+v", c)
				}
				return
			case <-time.After(200 * time.Millisecond):
			case <-ctx.Done():
				t.Fatal("no change heard")
			}
		}
	}
	heard()

	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connecting: %v", err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	var killed int
	err = conn.QueryRow(ctx, `SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE query = 'LISTEN "' || `+changeChannel+` || '"'`).Scan(&killed)
	if err != nil || killed != 1 {
		t.Fatalf("terminating the listener: %d, %v", killed, err)
	}
	for {
		// Drain what was heard before the kill, then hear a change made after it.
		select {
		case <-changes:
			continue
		default:
		}
		break
	}
	heard()
	mu.Lock()
	defer mu.Unlock()
	if len(reported) == 0 {
		t.Fatal("the lost connection was not reported")
	}
}

// TestWatchAfterClose: the watchers' channels close with the store, and Watch fails after.
func TestWatchAfterClose(t *testing.T) {
	s, err := Open(context.Background(), freshSchema(t))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	changes, err := s.Watch(context.Background())
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Close() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close waited for the listener")
	}
	if _, open := <-changes; open {
		t.Fatal("a change heard from a closed store")
	}
	if _, err := s.Watch(context.Background()); err == nil {
		t.Fatal("Watch of a closed store succeeded")
	}
}
