//go:build unix

package sqlite

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/store"
)

// An instance whose store is gone without retiring it (its process killed) loses its
// holds at the next sweep of any other store on the file, however fresh its heartbeat; one
// whose store is open keeps them, whatever another sweeps.
func TestDeadProcessHoldsReleasedAtOnce(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "gateway.db")
	a, b := openTemp(t, path), openTemp(t, path)
	if err := a.CreateWorkspace(ctx, store.Workspace{ID: "ws_1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.AddCredits(ctx, "ws_1", 20*usd, "test"); err != nil {
		t.Fatal(err)
	}
	for _, reg := range []struct {
		s  *Store
		id string
	}{{a, "inst_a"}, {b, "inst_b"}} {
		if err := reg.s.RegisterInstance(ctx, reg.id); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.Reserve(ctx, store.ReserveParams{WorkspaceID: "ws_1", Owner: "inst_a", AmountNanos: 10 * usd, ExpiresAt: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	lockFile := filepath.Join(path+"-instances", "inst_a.lock")
	if _, err := os.Stat(lockFile); err != nil {
		t.Fatalf("the instance's lock file: %v", err)
	}
	if n, err := b.ReleaseOrphaned(ctx, "inst_b", time.Hour); err != nil || n != 0 {
		t.Fatalf("sweep beside a live instance released %d, %v", n, err)
	}
	wantBalance(t, b, "ws_1", 20*usd, 10*usd)

	_ = a.Close() // no RetireInstance: as if its process were killed
	if n, err := b.ReleaseOrphaned(ctx, "inst_b", time.Hour); err != nil || n != 1 {
		t.Fatalf("sweep after the instance's process ended released %d, %v; want 1", n, err)
	}
	wantBalance(t, b, "ws_1", 20*usd, 0)
	if _, err := os.Stat(lockFile); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the dead instance's lock file is left: %v", err)
	}
	if err := b.Heartbeat(ctx, "inst_a"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the dead instance is still registered: %v", err)
	}

	// Retiring removes the instance's own file.
	if _, err := b.RetireInstance(ctx, "inst_b"); err != nil {
		t.Fatal(err)
	}
	if entries, err := os.ReadDir(path + "-instances"); err != nil || len(entries) != 0 {
		t.Fatalf("instance locks left after retiring: %v, %v", entries, err)
	}
}

func TestRegisterInstanceRefusesBadIDs(t *testing.T) {
	s := openTemp(t, filepath.Join(t.TempDir(), "gateway.db"))
	for _, id := range []string{"", "../x", "a/b", "a.lock"} {
		if err := s.RegisterInstance(context.Background(), id); err == nil {
			t.Errorf("RegisterInstance(%q) succeeded", id)
		}
	}
}

// Ping fails, as ErrUnavailable, while the database file is not the one the store opened
// (moved away, something else in its place), and answers again once it is back; after
// Close it is ErrClosed.
func TestPingSeesTheFile(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "gateway.db")
	s := openTemp(t, path)
	if err := s.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path, path+".away"); err != nil {
		t.Fatal(err)
	}
	if err := s.Ping(ctx); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Ping without the file: %v", err)
	}
	// A directory, so that no connection can create an empty database there meanwhile.
	if err := os.Mkdir(path, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := s.Ping(ctx); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Ping with another file in its place: %v", err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".away", path); err != nil {
		t.Fatal(err)
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping with the file back: %v", err)
	}
	_ = s.Close()
	if err := s.Ping(ctx); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Ping after Close: %v", err)
	}
}
