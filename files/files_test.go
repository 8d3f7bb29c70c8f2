package files

import (
	"bytes"
	"context"
	"errors"
	"io"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/blobs"
	"github.com/modelgateway/caddy-modelgateway/store"
	"github.com/modelgateway/caddy-modelgateway/store/sqlite"
)

// TestSaveRemoveSweep checks the life of a file: Save keeps the blob and its record, an
// expired file is hidden at once and its blob removed by Sweep, Remove takes a file away
// with its blob, and a record that cannot be made leaves no blob behind.
func TestSaveRemoveSweep(t *testing.T) {
	ctx := context.Background()
	var clock atomic.Int64
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock.Store(start.UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()).UTC() }
	s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "gateway.db"), sqlite.WithClock(now))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	b, err := blobs.NewFS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateWorkspace(ctx, store.Workspace{ID: "ws_1", Name: "one"}); err != nil {
		t.Fatal(err)
	}
	exists := func(key string) bool {
		_, err := b.Stat(ctx, key)
		if err != nil && !errors.Is(err, blobs.ErrNotFound) {
			t.Fatal(err)
		}
		return err == nil
	}
	logf := func(msg string, err error) { t.Errorf("%s: %v", msg, err) }

	content := []byte("line one\nline two\n")
	kept, err := Save(ctx, s, b, Meta{WorkspaceID: "ws_1", Filename: "out.jsonl", Purpose: PurposeBatchOutput, ContentType: "application/jsonl"}, bytes.NewReader(content))
	if err != nil {
		t.Fatalf("Save: %v", err)
	}
	expiring, err := Save(ctx, s, b, Meta{WorkspaceID: "ws_1", Filename: "e.jsonl", Purpose: PurposeBatchOutput, ExpiresAt: start.Add(time.Hour)}, bytes.NewReader(content))
	if err != nil {
		t.Fatalf("Save with expiry: %v", err)
	}
	if kept.Bytes != int64(len(content)) || kept.SHA256 == "" || kept.BlobKey != BlobKey("ws_1", kept.ID) || !exists(kept.BlobKey) {
		t.Fatalf("saved %+v", kept)
	}
	if n, err := Sweep(ctx, s, b, now(), logf); err != nil || n != 0 || !exists(expiring.BlobKey) {
		t.Fatalf("Sweep before any expiry: %d, %v", n, err)
	}

	clock.Store(start.Add(time.Hour).UnixNano())
	if _, err := s.GetFile(ctx, "ws_1", expiring.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("an expired file is read: %v", err)
	}
	if n, err := Sweep(ctx, s, b, now(), logf); err != nil || n != 1 || exists(expiring.BlobKey) || !exists(kept.BlobKey) {
		t.Fatalf("Sweep at the expiry: %d, %v", n, err)
	}
	if due, _ := s.DueFiles(ctx, now(), 10); len(due) != 0 {
		t.Fatalf("swept files still due: %+v", due)
	}

	if f, rc, err := Open(ctx, s, b, "ws_1", kept.ID); err != nil {
		t.Fatalf("Open: %v", err)
	} else {
		got, _ := io.ReadAll(rc)
		_ = rc.Close()
		if !bytes.Equal(got, content) || f.ID != kept.ID {
			t.Fatalf("Open read %q of %s", got, f.ID)
		}
	}
	if _, _, err := Open(ctx, s, b, "ws_other", kept.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Open by another workspace: %v", err)
	}
	if _, err := Remove(ctx, s, b, "ws_other", kept.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Remove by another workspace: %v", err)
	}
	if _, err := Remove(ctx, s, b, "ws_1", kept.ID); err != nil || exists(kept.BlobKey) {
		t.Fatalf("Remove: %v (blob left: %v)", err, exists(kept.BlobKey))
	}
	if due, _ := s.DueFiles(ctx, now(), 10); len(due) != 0 {
		t.Fatalf("a removed file is still due: %+v", due)
	}

	// A record that cannot be made (no such workspace) leaves no blob.
	if _, err := Save(ctx, s, b, Meta{WorkspaceID: "ws_missing", ID: "file-x", Purpose: PurposeUserData}, bytes.NewReader(content)); err == nil {
		t.Fatal("Save into a missing workspace succeeded")
	}
	if exists(BlobKey("ws_missing", "file-x")) {
		t.Fatal("a failed Save left its blob")
	}
}
