package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/modelgateway/caddy-modelgateway/store"
)

// Files (store.Files): times as Unix milliseconds, NULL for no expiry and not deleted.

const fileColumns = `id, workspace_id, filename, purpose, bytes, sha256, content_type, blob_key, created_at, expires_at, deleted_at`

// fileLive is the condition of a file that can be read at the time bound to ?.
const fileLive = `deleted_at IS NULL AND (expires_at IS NULL OR expires_at > ?)`

func scanFile(row scanner) (store.File, error) {
	var f store.File
	var created int64
	var expires, deleted sql.NullInt64
	if err := row.Scan(&f.ID, &f.WorkspaceID, &f.Filename, &f.Purpose, &f.Bytes, &f.SHA256, &f.ContentType, &f.BlobKey,
		&created, &expires, &deleted); err != nil {
		return store.File{}, err
	}
	f.CreatedAt = fromMillis(created)
	if expires.Valid {
		f.ExpiresAt = fromMillis(expires.Int64)
	}
	if deleted.Valid {
		f.DeletedAt = fromMillis(deleted.Int64)
	}
	return f, nil
}

// nullMillis is t in Unix milliseconds, or NULL for the zero time.
func nullMillis(t time.Time) sql.NullInt64 {
	if t.IsZero() {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: millis(t), Valid: true}
}

// CreateFile stores f.
func (s *Store) CreateFile(ctx context.Context, f store.File) (store.File, error) {
	f, err := store.PrepareFile(f, s.now)
	if err != nil {
		return store.File{}, err
	}
	err = s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO files (`+fileColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL)`,
			f.ID, f.WorkspaceID, f.Filename, f.Purpose, f.Bytes, f.SHA256, f.ContentType, f.BlobKey, millis(f.CreatedAt), nullMillis(f.ExpiresAt))
		return jobWriteError(err)
	})
	if err != nil {
		return store.File{}, fmt.Errorf("creating file %q: %w", f.ID, markUnavailable(err))
	}
	return f, nil
}

// GetFile returns a live file of the workspace.
func (s *Store) GetFile(ctx context.Context, workspaceID, id string) (store.File, error) {
	f, err := scanFile(s.r.QueryRowContext(ctx, `SELECT `+fileColumns+` FROM files
		WHERE workspace_id = ? AND id = ? AND `+fileLive, workspaceID, id, millis(s.now())))
	return f, recordError("file", id, "getting", err)
}

// DeleteFile marks a live file of the workspace deleted.
func (s *Store) DeleteFile(ctx context.Context, workspaceID, id string) (store.File, error) {
	now := s.stamp(time.Time{})
	var f store.File
	err := s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		f, err = scanFile(tx.QueryRowContext(ctx, `UPDATE files SET deleted_at = ?
			WHERE workspace_id = ? AND id = ? AND `+fileLive+` RETURNING `+fileColumns, millis(now), workspaceID, id, millis(now)))
		return err
	})
	return f, recordError("file", id, "deleting", err)
}

// DueFiles returns files deleted or expired at now, oldest first.
func (s *Store) DueFiles(ctx context.Context, now time.Time, limit int) ([]store.File, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+fileColumns+` FROM files
		WHERE deleted_at IS NOT NULL OR expires_at <= ? ORDER BY created_at, id LIMIT ?`, millis(now), store.ClampFileLimit(limit))
	if err != nil {
		return nil, fmt.Errorf("listing due files: %w", markUnavailable(err))
	}
	defer rows.Close()
	var out []store.File
	for rows.Next() {
		f, err := scanFile(rows)
		if err != nil {
			return nil, fmt.Errorf("listing due files: %w", err)
		}
		out = append(out, f)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing due files: %w", markUnavailable(err))
	}
	return out, nil
}

// PurgeFile removes the row of a file that is not live.
func (s *Store) PurgeFile(ctx context.Context, workspaceID, id string) error {
	err := s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM files WHERE workspace_id = ? AND id = ?
			AND (deleted_at IS NOT NULL OR expires_at <= ?)`, workspaceID, id, millis(s.now()))
		return err
	})
	if err != nil {
		return fmt.Errorf("purging file %q: %w", id, markUnavailable(err))
	}
	return nil
}
