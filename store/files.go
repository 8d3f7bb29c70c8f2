package store

import (
	"context"
	"fmt"
	"time"
)

// Files is the store's role for uploaded files and the files the gateway writes (batch
// output and error files): a record per file, owned by one workspace, whose content is a
// blob (blobs.Store) under BlobKey. A file that is deleted or whose ExpiresAt has passed is
// gone for every reader at once; its row stays until the blob is removed (DueFiles,
// PurgeFile), so that no blob is left without a row that names it.
type Files interface {
	// CreateFile stores f and returns it as stored. An id already used is ErrConflict, an
	// unknown workspace ErrNotFound.
	CreateFile(ctx context.Context, f File) (File, error)
	// GetFile returns a live file of the workspace; another workspace's, a deleted or an
	// expired one is ErrNotFound, exactly like a missing one.
	GetFile(ctx context.Context, workspaceID, id string) (File, error)
	// DeleteFile marks a live file of the workspace deleted and returns it as deleted
	// (DeletedAt stamped); a file that is not live is ErrNotFound.
	DeleteFile(ctx context.Context, workspaceID, id string) (File, error)
	// DueFiles returns, of every workspace, at most limit files deleted or expired at now,
	// whose blobs are to be removed, oldest first.
	DueFiles(ctx context.Context, now time.Time, limit int) ([]File, error)
	// PurgeFile removes the row of a file that is deleted or expired, once its blob is
	// gone. A live file is left as it is; a missing one is not an error.
	PurgeFile(ctx context.Context, workspaceID, id string) error
}

// File is a file record.
type File struct {
	ID          string
	WorkspaceID string
	// Filename is the name the client gave (or the gateway's, for a file it wrote).
	Filename string
	// Purpose is what the file is for (batch, user_data...).
	Purpose     string
	Bytes       int64
	SHA256      string
	ContentType string
	// BlobKey is where its content is in the blob store.
	BlobKey   string
	CreatedAt time.Time
	// ExpiresAt is when the file goes; zero for never.
	ExpiresAt time.Time
	// DeletedAt is when it was deleted; zero while it is not.
	DeletedAt time.Time
}

// Live tells whether the file can still be read at now: not deleted, not expired.
func (f File) Live(now time.Time) bool {
	return f.DeletedAt.IsZero() && (f.ExpiresAt.IsZero() || now.Before(f.ExpiresAt))
}

// Limits of a file record's fields.
const (
	MaxFileIDLen       = 128
	MaxFilenameLen     = 1024
	MaxFilePurposeLen  = 64
	MaxFileContentType = 255
)

// PrepareFile validates f and stamps its creation time (now when zero) at the store's
// precision.
func PrepareFile(f File, now func() time.Time) (File, error) {
	switch {
	case f.ID == "" || len(f.ID) > MaxFileIDLen:
		return File{}, fmt.Errorf("file: id must be 1 to %d bytes", MaxFileIDLen)
	case f.WorkspaceID == "":
		return File{}, fmt.Errorf("file %q: no workspace", f.ID)
	case f.BlobKey == "":
		return File{}, fmt.Errorf("file %q: no blob key", f.ID)
	case f.Purpose == "" || len(f.Purpose) > MaxFilePurposeLen:
		return File{}, fmt.Errorf("file %q: purpose must be 1 to %d bytes", f.ID, MaxFilePurposeLen)
	case len(f.Filename) > MaxFilenameLen:
		return File{}, fmt.Errorf("file %q: filename longer than %d bytes", f.ID, MaxFilenameLen)
	case len(f.ContentType) > MaxFileContentType:
		return File{}, fmt.Errorf("file %q: content type longer than %d bytes", f.ID, MaxFileContentType)
	case f.Bytes < 0:
		return File{}, fmt.Errorf("file %q: negative size", f.ID)
	}
	f.CreatedAt = Stamp(f.CreatedAt, now)
	if !f.ExpiresAt.IsZero() {
		f.ExpiresAt = f.ExpiresAt.UTC().Truncate(time.Millisecond)
	}
	f.DeletedAt = time.Time{}
	return f, nil
}

// ClampFileLimit bounds a DueFiles limit to 1..MaxClaimLimit.
func ClampFileLimit(limit int) int {
	return min(max(limit, 1), MaxClaimLimit)
}
