package storetest

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/store"
)

func testFile(ws, id string) store.File {
	return store.File{ID: id, WorkspaceID: ws, Filename: "rows.jsonl", Purpose: "batch", Bytes: 42,
		SHA256: "ab12", ContentType: "application/jsonl", BlobKey: "files/" + ws + "/" + id}
}

func sameFile(t *testing.T, what string, got, want store.File) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\n got %+v\nwant %+v", what, got, want)
	}
}

func dueIDs(t *testing.T, s store.Files, now time.Time) []string {
	t.Helper()
	due, err := s.DueFiles(context.Background(), now, 10)
	if err != nil {
		t.Fatalf("DueFiles: %v", err)
	}
	out := []string{}
	for _, f := range due {
		out = append(out, f.ID)
	}
	return out
}

// testFiles checks the files role: ownership, expiry and deletion hiding a file from every
// reader at once, and the sweep's view (DueFiles, PurgeFile) of what is to be removed.
func testFiles(t *testing.T, s store.Store, c *Clock) {
	ctx := context.Background()
	ws, other := newWorkspace(t, s, 0), newWorkspace(t, s, 0)
	created := c.Now()

	f := testFile(ws, "file-1")
	got, err := s.CreateFile(ctx, f)
	if err != nil {
		t.Fatalf("CreateFile: %v", err)
	}
	want := f
	want.CreatedAt = created
	sameFile(t, "created", got, want)
	read, err := s.GetFile(ctx, ws, "file-1")
	if err != nil {
		t.Fatalf("GetFile: %v", err)
	}
	sameFile(t, "read back", read, want)
	_, err = s.GetFile(ctx, other, "file-1")
	wantErr(t, "GetFile of another workspace", err, store.ErrNotFound)
	_, err = s.DeleteFile(ctx, other, "file-1")
	wantErr(t, "DeleteFile of another workspace", err, store.ErrNotFound)
	_, err = s.CreateFile(ctx, testFile(other, "file-1"))
	wantErr(t, "CreateFile of a used id", err, store.ErrConflict)
	_, err = s.CreateFile(ctx, testFile("ws_missing", "file-2"))
	wantErr(t, "CreateFile in a missing workspace", err, store.ErrNotFound)
	for name, bad := range map[string]func(f *store.File){
		"no id":        func(f *store.File) { f.ID = "" },
		"no workspace": func(f *store.File) { f.WorkspaceID = "" },
		"no blob key":  func(f *store.File) { f.BlobKey = "" },
		"no purpose":   func(f *store.File) { f.Purpose = "" },
		"negative":     func(f *store.File) { f.Bytes = -1 },
	} {
		f := testFile(ws, "file-bad")
		bad(&f)
		if _, err := s.CreateFile(ctx, f); err == nil {
			t.Errorf("CreateFile with %s: no error", name)
		}
	}

	// A file with an expiry is live until it, then gone and due.
	exp := testFile(ws, "file-exp")
	exp.ExpiresAt = created.Add(time.Hour)
	if _, err := s.CreateFile(ctx, exp); err != nil {
		t.Fatalf("CreateFile with expiry: %v", err)
	}
	if got, err := s.GetFile(ctx, ws, "file-exp"); err != nil || !got.ExpiresAt.Equal(exp.ExpiresAt) {
		t.Fatalf("GetFile before expiry: %+v, %v", got, err)
	}
	if due := dueIDs(t, s, c.Now()); len(due) != 0 {
		t.Fatalf("due before any expiry or deletion: %v", due)
	}
	if err := s.PurgeFile(ctx, ws, "file-exp"); err != nil {
		t.Fatalf("PurgeFile of a live file: %v", err)
	}
	if _, err := s.GetFile(ctx, ws, "file-exp"); err != nil {
		t.Fatalf("PurgeFile removed a live file: %v", err)
	}
	c.Set(created.Add(time.Hour))
	_, err = s.GetFile(ctx, ws, "file-exp")
	wantErr(t, "GetFile at its expiry", err, store.ErrNotFound)
	_, err = s.DeleteFile(ctx, ws, "file-exp")
	wantErr(t, "DeleteFile of an expired file", err, store.ErrNotFound)
	if due := dueIDs(t, s, c.Now()); !reflect.DeepEqual(due, []string{"file-exp"}) {
		t.Fatalf("due after expiry: %v, want [file-exp]", due)
	}

	// Deleting hides the file at once; it stays due until purged.
	deleted, err := s.DeleteFile(ctx, ws, "file-1")
	if err != nil {
		t.Fatalf("DeleteFile: %v", err)
	}
	if !deleted.DeletedAt.Equal(c.Now()) || deleted.ID != "file-1" || deleted.BlobKey != f.BlobKey {
		t.Fatalf("deleted: %+v", deleted)
	}
	_, err = s.GetFile(ctx, ws, "file-1")
	wantErr(t, "GetFile after delete", err, store.ErrNotFound)
	_, err = s.DeleteFile(ctx, ws, "file-1")
	wantErr(t, "DeleteFile again", err, store.ErrNotFound)
	if due := dueIDs(t, s, c.Now()); !reflect.DeepEqual(due, []string{"file-1", "file-exp"}) {
		t.Fatalf("due after delete: %v, want [file-1 file-exp]", due)
	}
	for _, id := range []string{"file-1", "file-exp", "file-missing"} {
		if err := s.PurgeFile(ctx, ws, id); err != nil {
			t.Fatalf("PurgeFile %s: %v", id, err)
		}
	}
	if due := dueIDs(t, s, c.Now()); len(due) != 0 {
		t.Fatalf("due after purge: %v", due)
	}
	// A purged id is free again.
	if _, err := s.CreateFile(ctx, testFile(other, "file-1")); err != nil {
		t.Fatalf("CreateFile of a purged id: %v", err)
	}
}
