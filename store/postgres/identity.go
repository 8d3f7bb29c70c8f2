package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/modelgateway/caddy-modelgateway/store"
)

// CreateWorkspace creates a workspace and its empty wallet.
func (s *Store) CreateWorkspace(ctx context.Context, ws store.Workspace) error {
	if err := store.ValidateWorkspace(ws); err != nil {
		return err
	}
	created := s.stamp(ws.CreatedAt)
	var parent *string
	if ws.ParentID != "" {
		parent = &ws.ParentID
	}
	return s.tx(ctx, func(tx pgx.Tx) error {
		if ws.ParentID != "" {
			if err := workspaceExists(ctx, tx, ws.ParentID); err != nil {
				return fmt.Errorf("creating workspace %q: parent: %w", ws.ID, err)
			}
		}
		_, err := tx.Exec(ctx, `INSERT INTO workspaces (id, name, parent_id, created_at) VALUES ($1, $2, $3, $4)`, ws.ID, ws.Name, parent, created)
		if isConflict(err) {
			return fmt.Errorf("creating workspace %q: %w", ws.ID, store.ErrConflict)
		}
		if err != nil {
			return fmt.Errorf("creating workspace %q: %w", ws.ID, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO wallets (workspace_id) VALUES ($1)`, ws.ID); err != nil {
			return fmt.Errorf("creating wallet of workspace %q: %w", ws.ID, err)
		}
		return nil
	})
}

// GetWorkspace returns one workspace.
func (s *Store) GetWorkspace(ctx context.Context, id string) (store.Workspace, error) {
	var ws store.Workspace
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		var err error
		ws, err = scanWorkspace(conn.QueryRow(ctx, `SELECT `+workspaceColumns+` FROM workspaces WHERE id = $1`, id))
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Workspace{}, fmt.Errorf("workspace %q: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return store.Workspace{}, fmt.Errorf("getting workspace %q: %w", id, err)
	}
	return ws, nil
}

const workspaceColumns = `id, name, COALESCE(parent_id, ''), created_at, async_access`

// SetWorkspaceAsyncAccess turns the workspace's access to async APIs on or off.
func (s *Store) SetWorkspaceAsyncAccess(ctx context.Context, id string, enabled bool) (store.Workspace, error) {
	var ws store.Workspace
	err := s.tx(ctx, func(tx pgx.Tx) error {
		got, err := scanWorkspace(tx.QueryRow(ctx, `UPDATE workspaces SET async_access = $1 WHERE id = $2 RETURNING `+workspaceColumns, enabled, id))
		if err == nil {
			ws = got
		}
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Workspace{}, fmt.Errorf("workspace %q: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return store.Workspace{}, fmt.Errorf("setting the async access of workspace %q: %w", id, err)
	}
	return ws, nil
}

// ListWorkspaces returns a page of every workspace, oldest first.
func (s *Store) ListWorkspaces(ctx context.Context, p store.Page) ([]store.Workspace, error) {
	return s.listWorkspaces(ctx, `TRUE`, nil, p)
}

// ListChildWorkspaces returns a page of the workspaces created by parentID, oldest first.
func (s *Store) ListChildWorkspaces(ctx context.Context, parentID string, p store.Page) ([]store.Workspace, error) {
	return s.listWorkspaces(ctx, `parent_id = $1`, []any{parentID}, p)
}

func (s *Store) listWorkspaces(ctx context.Context, where string, args []any, p store.Page) ([]store.Workspace, error) {
	var out []store.Workspace
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		var err error
		out, err = readPage(ctx, conn, "workspaces", workspaceColumns, where, args, p, scanWorkspace)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listing workspaces: %w", err)
	}
	return out, nil
}

func scanWorkspace(row pgx.Row) (store.Workspace, error) {
	var ws store.Workspace
	if err := row.Scan(&ws.ID, &ws.Name, &ws.ParentID, &ws.CreatedAt, &ws.AsyncAccess); err != nil {
		return store.Workspace{}, err
	}
	ws.CreatedAt = utc(ws.CreatedAt)
	return ws, nil
}

// CreateKey stores a key of an existing workspace.
func (s *Store) CreateKey(ctx context.Context, k store.Key) error {
	if err := store.ValidateNewKey(k); err != nil {
		return err
	}
	created := s.stamp(k.CreatedAt)
	var revoked *time.Time
	if k.RevokedAt != nil {
		t := k.RevokedAt.UTC().Truncate(time.Millisecond)
		revoked = &t
	}
	return s.tx(ctx, func(tx pgx.Tx) error {
		if err := workspaceExists(ctx, tx, k.WorkspaceID); err != nil {
			return fmt.Errorf("creating key %q: %w", k.ID, err)
		}
		_, err := tx.Exec(ctx, `INSERT INTO api_keys
			(id, workspace_id, kind, name, secret_hash, disabled, created_at, revoked_at, limit_nanos, limit_reset, role, scopes)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`,
			k.ID, k.WorkspaceID, string(k.Kind), k.Name, k.SecretHash, k.Disabled, created, revoked, k.LimitNanos, k.LimitReset, string(k.Role), store.JoinScopes(k.Scopes))
		if isConflict(err) {
			return fmt.Errorf("creating key %q: %w", k.ID, store.ErrConflict)
		}
		if err != nil {
			return fmt.Errorf("creating key %q: %w", k.ID, err)
		}
		return nil
	})
}

const keyColumns = `id, workspace_id, kind, name, secret_hash, disabled, created_at, revoked_at, limit_nanos, limit_reset, role, scopes`

// GetKey returns one key, revoked or not.
func (s *Store) GetKey(ctx context.Context, id string) (store.Key, error) {
	var k store.Key
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		var err error
		k, err = scanKey(conn.QueryRow(ctx, `SELECT `+keyColumns+` FROM api_keys WHERE id = $1`, id))
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Key{}, fmt.Errorf("key %q: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return store.Key{}, fmt.Errorf("getting key %q: %w", id, err)
	}
	return k, nil
}

// ListKeys returns a page of a workspace's keys, oldest first; ErrNotFound if the
// workspace does not exist.
func (s *Store) ListKeys(ctx context.Context, workspaceID string, p store.Page) ([]store.Key, error) {
	var out []store.Key
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		// Workspaces are never deleted, so checking first and listing second cannot race.
		if err := workspaceExists(ctx, conn, workspaceID); err != nil {
			return err
		}
		var err error
		out, err = readPage(ctx, conn, "api_keys", keyColumns, `workspace_id = $1`, []any{workspaceID}, p, scanKey)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listing keys: %w", err)
	}
	return out, nil
}

func scanKey(row pgx.Row) (store.Key, error) {
	var k store.Key
	var kind, role, scopes string
	if err := row.Scan(&k.ID, &k.WorkspaceID, &kind, &k.Name, &k.SecretHash, &k.Disabled, &k.CreatedAt, &k.RevokedAt, &k.LimitNanos, &k.LimitReset, &role, &scopes); err != nil {
		return store.Key{}, err
	}
	k.Role, k.Scopes = store.Role(role), store.SplitScopes(scopes)
	k.Kind = store.KeyKind(kind)
	k.CreatedAt = utc(k.CreatedAt)
	if k.RevokedAt != nil {
		t := utc(*k.RevokedAt)
		k.RevokedAt = &t
	}
	return k, nil
}

// RevokeKey marks a key revoked. Revoking twice keeps the first revocation time.
func (s *Store) RevokeKey(ctx context.Context, id string, at time.Time) error {
	at = s.stamp(at)
	return s.tx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE api_keys SET revoked_at = COALESCE(revoked_at, $1) WHERE id = $2`, at, id)
		if err != nil {
			return fmt.Errorf("revoking key %q: %w", id, err)
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("revoking key %q: %w", id, store.ErrNotFound)
		}
		return nil
	})
}

// UpdateKey changes the fields u sets on a key of the workspace and returns the key as stored.
func (s *Store) UpdateKey(ctx context.Context, workspaceID, id string, u store.KeyUpdate) (store.Key, error) {
	var out store.Key
	err := s.tx(ctx, func(tx pgx.Tx) error {
		// FOR UPDATE: a concurrent Reserve of this key, which locks the row too, sees the
		// limit either before or after this change, never half of it.
		k, err := scanKey(tx.QueryRow(ctx, `SELECT `+keyColumns+` FROM api_keys WHERE id = $1 AND workspace_id = $2 FOR UPDATE`, id, workspaceID))
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("key %q: %w", id, store.ErrNotFound)
		}
		if err != nil {
			return err
		}
		if k, err = u.Apply(k); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE api_keys SET name = $1, disabled = $2, limit_nanos = $3, limit_reset = $4, role = $5, scopes = $6 WHERE id = $7`,
			k.Name, k.Disabled, k.LimitNanos, k.LimitReset, string(k.Role), store.JoinScopes(k.Scopes), id); err != nil {
			return err
		}
		out = k
		return nil
	})
	if err != nil {
		return store.Key{}, fmt.Errorf("updating key %q: %w", id, err)
	}
	return out, nil
}

// querier is what pgx.Tx and *pgx.Conn have in common.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func workspaceExists(ctx context.Context, q querier, id string) error {
	var one int
	err := q.QueryRow(ctx, `SELECT 1 FROM workspaces WHERE id = $1`, id).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("workspace %q: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("looking up workspace %q: %w", id, err)
	}
	return nil
}
