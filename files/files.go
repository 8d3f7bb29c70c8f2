// Package files keeps the gateway's files: uploads (POST /files) and the files it writes
// itself (batch output and error files). A file is a record in the store (store.Files),
// owned by one workspace, and a blob (blobs.Store) under BlobKey; Save writes both, Remove
// and Sweep take both away. handlers serves the HTTP API; this package knows no HTTP.
package files

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/modelgateway/caddy-modelgateway/blobs"
	"github.com/modelgateway/caddy-modelgateway/internal/ids"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// Purposes of a file. The first six are those a client may upload (OpenAI's FilePurpose);
// the gateway writes batch output and error files with PurposeBatchOutput.
const (
	PurposeBatch       = "batch"
	PurposeUserData    = "user_data"
	PurposeAssistants  = "assistants"
	PurposeVision      = "vision"
	PurposeFineTune    = "fine-tune"
	PurposeEvals       = "evals"
	PurposeBatchOutput = "batch_output"
)

// UploadPurposes are the purposes POST /files takes, in the order its errors name them.
var UploadPurposes = []string{PurposeBatch, PurposeUserData, PurposeAssistants, PurposeVision, PurposeFineTune, PurposeEvals}

// DefaultMaxSize is the largest file POST /files takes unless configured (OpenAI's 512 MB).
const DefaultMaxSize = 512 << 20

// Bounds of expires_after[seconds] (OpenAI's: an hour to 30 days).
const (
	MinExpiresAfter = time.Hour
	MaxExpiresAfter = 30 * 24 * time.Hour
)

// DefaultBatchExpiry is when a batch file uploaded without expires_after goes, as OpenAI's
// do; other files are kept until deleted.
const DefaultBatchExpiry = MaxExpiresAfter

// NewID returns a new file id in OpenAI's form, file-<random>: a ULID, so that ids sort by
// creation.
func NewID() string { return "file-" + ids.ULID(time.Now()) }

// BlobKey is where the content of file id of workspace ws is kept.
func BlobKey(ws, id string) string { return "files/" + ws + "/" + id }

// Meta is what describes a file to Save: its owner, name, purpose, media type and expiry
// (zero: never).
type Meta struct {
	WorkspaceID string
	Filename    string
	Purpose     string
	ContentType string
	ExpiresAt   time.Time
	// ID is the file's id; Save makes one (NewID) when it is empty.
	ID string
}

// Save streams r into the blob store (never whole in memory, size unknown) and records the
// file as the workspace's: the record is made only once the blob is whole, and a blob
// whose record cannot be made is removed. A batch writing its output file calls it with a
// pipe or the spool of its results.
func Save(ctx context.Context, s store.Files, b blobs.Store, m Meta, r io.Reader) (store.File, error) {
	if m.ID == "" {
		m.ID = NewID()
	}
	key := BlobKey(m.WorkspaceID, m.ID)
	info, err := b.Put(ctx, key, r, -1, m.ContentType)
	if err != nil {
		return store.File{}, fmt.Errorf("storing file %s: %w", m.ID, err)
	}
	return Record(ctx, s, b, m, info)
}

// Record records a blob already stored under BlobKey(m.WorkspaceID, m.ID) as a file of the
// workspace, removing the blob when the record cannot be made.
func Record(ctx context.Context, s store.Files, b blobs.Store, m Meta, info blobs.Info) (store.File, error) {
	f, err := s.CreateFile(ctx, store.File{
		ID: m.ID, WorkspaceID: m.WorkspaceID, Filename: m.Filename, Purpose: m.Purpose,
		Bytes: info.Size, SHA256: info.SHA256, ContentType: info.ContentType, BlobKey: info.Key, ExpiresAt: m.ExpiresAt,
	})
	if err != nil {
		_ = b.Delete(context.WithoutCancel(ctx), info.Key)
		return store.File{}, err
	}
	return f, nil
}

// Remove deletes a file of the workspace: it is gone for every reader at once, then its
// blob and record are removed. A failure past the deletion leaves the rest to Sweep, so
// the file is deleted even then. A file that is not the workspace's is store.ErrNotFound.
func Remove(ctx context.Context, s store.Files, b blobs.Store, workspaceID, id string) (store.File, error) {
	f, err := s.DeleteFile(ctx, workspaceID, id)
	if err != nil {
		return store.File{}, err
	}
	_ = purge(context.WithoutCancel(ctx), s, b, f)
	return f, nil
}

// purge removes the blob of a file that is no longer live, then its record.
func purge(ctx context.Context, s store.Files, b blobs.Store, f store.File) error {
	if err := b.Delete(ctx, f.BlobKey); err != nil && !errors.Is(err, blobs.ErrNotFound) {
		return err
	}
	return s.PurgeFile(ctx, f.WorkspaceID, f.ID)
}

// Sweep removes the blobs and records of the files deleted or expired at now, at most
// store.MaxClaimLimit a call, and returns how many it removed. Its error is the store's
// (the list could not be read); a file that failed is reported through logf and found again
// by the next sweep. Several instances may sweep at once: removing twice is harmless.
func Sweep(ctx context.Context, s store.Files, b blobs.Store, now time.Time, logf func(msg string, err error)) (int, error) {
	due, err := s.DueFiles(ctx, now, store.MaxClaimLimit)
	if err != nil {
		return 0, fmt.Errorf("listing files to remove: %w", err)
	}
	removed := 0
	for _, f := range due {
		if err := purge(ctx, s, b, f); err != nil {
			logf("removing an expired or deleted file failed; retried later", fmt.Errorf("file %s: %w", f.ID, err))
			continue
		}
		removed++
	}
	return removed, nil
}

// Open returns a live file of the workspace and a reader of its content (the caller closes
// it). A file that is not the workspace's, or whose blob is gone, is store.ErrNotFound.
func Open(ctx context.Context, s store.Files, b blobs.Store, workspaceID, id string) (store.File, io.ReadCloser, error) {
	f, err := s.GetFile(ctx, workspaceID, id)
	if err != nil {
		return store.File{}, nil, err
	}
	rc, _, err := b.Open(ctx, f.BlobKey, 0, -1)
	if errors.Is(err, blobs.ErrNotFound) {
		return store.File{}, nil, fmt.Errorf("file %q: its content is gone: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return store.File{}, nil, fmt.Errorf("reading file %q: %w", id, err)
	}
	return f, rc, nil
}
