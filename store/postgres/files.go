package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/modelgateway/caddy-modelgateway/store"
)

// Files (store.Files): NULL times for no expiry and not deleted.

const fileColumns = `id, workspace_id, filename, purpose, bytes, sha256, content_type, blob_key, created_at, expires_at, deleted_at`

func scanFile(row pgx.Row) (store.File, error) {
	var f store.File
	var expires, deleted *time.Time
	if err := row.Scan(&f.ID, &f.WorkspaceID, &f.Filename, &f.Purpose, &f.Bytes, &f.SHA256, &f.ContentType, &f.BlobKey,
		&f.CreatedAt, &expires, &deleted); err != nil {
		return store.File{}, err
	}
	f.CreatedAt = utc(f.CreatedAt)
	if expires != nil {
		f.ExpiresAt = utc(*expires)
	}
	if deleted != nil {
		f.DeletedAt = utc(*deleted)
	}
	return f, nil
}

// nullTime is t, or NULL for the zero time.
func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// CreateFile stores f.
func (s *Store) CreateFile(ctx context.Context, f store.File) (store.File, error) {
	f, err := store.PrepareFile(f, s.now)
	if err != nil {
		return store.File{}, err
	}
	err = s.tx(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO files (`+fileColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, NULL)`,
			f.ID, f.WorkspaceID, f.Filename, f.Purpose, f.Bytes, f.SHA256, f.ContentType, f.BlobKey, f.CreatedAt, nullTime(f.ExpiresAt))
		return jobWriteError(err)
	})
	if err != nil {
		return store.File{}, fmt.Errorf("creating file %q: %w", f.ID, err)
	}
	return f, nil
}

// GetFile returns a live file of the workspace.
func (s *Store) GetFile(ctx context.Context, workspaceID, id string) (store.File, error) {
	var f store.File
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		var err error
		f, err = scanFile(conn.QueryRow(ctx, `SELECT `+fileColumns+` FROM files
			WHERE workspace_id = $1 AND id = $2 AND deleted_at IS NULL AND (expires_at IS NULL OR expires_at > $3)`,
			workspaceID, id, s.now()))
		return err
	})
	return f, recordError("file", id, "getting", err)
}

// DeleteFile marks a live file of the workspace deleted.
func (s *Store) DeleteFile(ctx context.Context, workspaceID, id string) (store.File, error) {
	now := s.stamp(time.Time{})
	var f store.File
	err := s.tx(ctx, func(tx pgx.Tx) error {
		got, err := scanFile(tx.QueryRow(ctx, `UPDATE files SET deleted_at = $1
			WHERE workspace_id = $2 AND id = $3 AND deleted_at IS NULL AND (expires_at IS NULL OR expires_at > $1)
			RETURNING `+fileColumns, now, workspaceID, id))
		if err == nil {
			f = got
		}
		return err
	})
	return f, recordError("file", id, "deleting", err)
}

// DueFiles returns files deleted or expired at now, oldest first.
func (s *Store) DueFiles(ctx context.Context, now time.Time, limit int) ([]store.File, error) {
	var out []store.File
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		out = nil
		rows, err := conn.Query(ctx, `SELECT `+fileColumns+` FROM files
			WHERE deleted_at IS NOT NULL OR expires_at <= $1 ORDER BY created_at, id LIMIT $2`, now, store.ClampFileLimit(limit))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			f, err := scanFile(rows)
			if err != nil {
				return err
			}
			out = append(out, f)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("listing due files: %w", err)
	}
	return out, nil
}

// PurgeFile removes the row of a file that is not live.
func (s *Store) PurgeFile(ctx context.Context, workspaceID, id string) error {
	err := s.tx(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `DELETE FROM files WHERE workspace_id = $1 AND id = $2
			AND (deleted_at IS NOT NULL OR expires_at <= $3)`, workspaceID, id, s.now())
		return err
	})
	if err != nil {
		return fmt.Errorf("purging file %q: %w", id, err)
	}
	return nil
}
