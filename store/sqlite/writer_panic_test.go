package sqlite

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/internal/background"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// A panic of the writer outside any one write's code fails the store's writes closed:
// the panic is reported with its stack, the write in flight and every later one answer
// ErrUnavailable at once instead of waiting for a writer that is gone, nothing of them is
// committed, reads go on, the store closes, and opened again it writes.
func TestWriterPanicFailsWritesClosed(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "gateway.db")
	reported := make(chan error, 4)
	s, err := Open(ctx, path, WithBackgroundErrors(func(err error) { reported <- err }))
	if err != nil {
		t.Fatal(err)
	}
	var armed atomic.Bool
	pause := s.wr.raw.pause
	s.wr.raw.pause = func() {
		if armed.CompareAndSwap(true, false) {
			panic("writer bug")
		}
		pause()
	}
	if err := s.CreateWorkspace(ctx, store.Workspace{ID: "ws_before"}); err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	if err := s.CreateWorkspace(ctx, store.Workspace{ID: "ws_lost"}); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("the write in flight when the writer panicked answered %v, want ErrUnavailable", err)
	}
	select {
	case err := <-reported:
		if p := background.AsPanic(err); p == nil || p.Value != "writer bug" || !strings.Contains(fmt.Sprintf("%+v", err), "commitBatch") {
			t.Fatalf("reported %+v, want the writer's panic with its stack", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the writer's panic was not reported")
	}
	began := time.Now()
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := s.CreateWorkspace(wctx, store.Workspace{ID: "ws_after"}); !errors.Is(err, store.ErrUnavailable) || time.Since(began) > time.Second {
		t.Fatalf("a write after the panic answered %v after %v, want ErrUnavailable at once", err, time.Since(began))
	}
	if _, err := s.GetWorkspace(ctx, "ws_before"); err != nil {
		t.Fatalf("a read after the writer's panic: %v", err)
	}
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the store does not close after its writer's panic")
	}
	s, err = Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.GetWorkspace(ctx, "ws_lost"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the write the panic cut was committed: %v", err)
	}
	if err := s.CreateWorkspace(ctx, store.Workspace{ID: "ws_reopened"}); err != nil {
		t.Fatalf("a write once the store was opened again: %v", err)
	}
}
