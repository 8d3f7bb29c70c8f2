package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/modelgateway/caddy-modelgateway/store"
)

// CreateWorkspace creates a workspace and its empty wallet.
func (s *Store) CreateWorkspace(ctx context.Context, ws store.Workspace) error {
	if err := store.ValidateWorkspace(ws); err != nil {
		return err
	}
	created := s.stamp(ws.CreatedAt)
	var parent any
	if ws.ParentID != "" {
		parent = ws.ParentID
	}
	return s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if ws.ParentID != "" {
			if err := workspaceExists(ctx, tx, ws.ParentID); err != nil {
				return fmt.Errorf("creating workspace %q: parent: %w", ws.ID, err)
			}
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO workspaces (id, name, parent_id, created_at) VALUES (?, ?, ?, ?)`,
			ws.ID, ws.Name, parent, millis(created))
		if isConflict(err) {
			return fmt.Errorf("creating workspace %q: %w", ws.ID, store.ErrConflict)
		}
		if err != nil {
			return fmt.Errorf("creating workspace %q: %w", ws.ID, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO wallets (workspace_id) VALUES (?)`, ws.ID); err != nil {
			return fmt.Errorf("creating wallet of workspace %q: %w", ws.ID, err)
		}
		return nil
	})
}

// GetWorkspace returns one workspace.
func (s *Store) GetWorkspace(ctx context.Context, id string) (store.Workspace, error) {
	ws, err := scanWorkspace(s.r.QueryRowContext(ctx, `SELECT `+workspaceColumns+` FROM workspaces WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
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
	err := s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		ws, err = scanWorkspace(tx.QueryRowContext(ctx, `UPDATE workspaces SET async_access = ? WHERE id = ? RETURNING `+workspaceColumns, enabled, id))
		return err
	})
	if errors.Is(err, sql.ErrNoRows) {
		return store.Workspace{}, fmt.Errorf("workspace %q: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return store.Workspace{}, fmt.Errorf("setting the async access of workspace %q: %w", id, markUnavailable(err))
	}
	return ws, nil
}

// ListWorkspaces returns a page of every workspace, oldest first.
func (s *Store) ListWorkspaces(ctx context.Context, p store.Page) ([]store.Workspace, error) {
	return s.listWorkspaces(ctx, `TRUE`, nil, p)
}

// ListChildWorkspaces returns a page of the workspaces created by parentID, oldest first.
func (s *Store) ListChildWorkspaces(ctx context.Context, parentID string, p store.Page) ([]store.Workspace, error) {
	return s.listWorkspaces(ctx, `parent_id = ?`, []any{parentID}, p)
}

func (s *Store) listWorkspaces(ctx context.Context, where string, args []any, p store.Page) ([]store.Workspace, error) {
	out, err := readPage(ctx, s.r, "workspaces", workspaceColumns, where, args, p, scanWorkspace)
	if err != nil {
		return nil, fmt.Errorf("listing workspaces: %w", err)
	}
	return out, nil
}

func scanWorkspace(row scanner) (store.Workspace, error) {
	var ws store.Workspace
	var created int64
	if err := row.Scan(&ws.ID, &ws.Name, &ws.ParentID, &created, &ws.AsyncAccess); err != nil {
		return store.Workspace{}, err
	}
	ws.CreatedAt = fromMillis(created)
	return ws, nil
}

// CreateKey stores a key of an existing workspace.
func (s *Store) CreateKey(ctx context.Context, k store.Key) error {
	if err := store.ValidateNewKey(k); err != nil {
		return err
	}
	created := s.stamp(k.CreatedAt)
	var revoked any
	if k.RevokedAt != nil {
		revoked = millis(*k.RevokedAt)
	}
	return s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if err := workspaceExists(ctx, tx, k.WorkspaceID); err != nil {
			return fmt.Errorf("creating key %q: %w", k.ID, err)
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO api_keys
			(id, workspace_id, kind, name, secret_hash, disabled, created_at, revoked_at, limit_nanos, limit_reset, role, scopes)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			k.ID, k.WorkspaceID, string(k.Kind), k.Name, k.SecretHash, k.Disabled, millis(created), revoked, k.LimitNanos, k.LimitReset, string(k.Role), store.JoinScopes(k.Scopes))
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
	k, err := scanKey(s.r.QueryRowContext(ctx, `SELECT `+keyColumns+` FROM api_keys WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
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
	// One read transaction, so the existence check and the page see the same snapshot.
	tx, err := s.r.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("listing keys: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	if err := workspaceExists(ctx, tx, workspaceID); err != nil {
		return nil, fmt.Errorf("listing keys: %w", err)
	}
	out, err := readPage(ctx, tx, "api_keys", keyColumns, `workspace_id = ?`, []any{workspaceID}, p, scanKey)
	if err != nil {
		return nil, fmt.Errorf("listing keys: %w", err)
	}
	return out, nil
}

func scanKey(row scanner) (store.Key, error) {
	var k store.Key
	var kind string
	var created int64
	var revoked sql.NullInt64
	var role, scopes string
	if err := row.Scan(&k.ID, &k.WorkspaceID, &kind, &k.Name, &k.SecretHash, &k.Disabled, &created, &revoked, &k.LimitNanos, &k.LimitReset, &role, &scopes); err != nil {
		return store.Key{}, err
	}
	k.Role, k.Scopes = store.Role(role), store.SplitScopes(scopes)
	k.Kind = store.KeyKind(kind)
	k.CreatedAt = fromMillis(created)
	if revoked.Valid {
		t := fromMillis(revoked.Int64)
		k.RevokedAt = &t
	}
	return k, nil
}

// RevokeKey marks a key revoked. Revoking twice keeps the first revocation time.
func (s *Store) RevokeKey(ctx context.Context, id string, at time.Time) error {
	at = s.stamp(at)
	return s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE api_keys SET revoked_at = COALESCE(revoked_at, ?) WHERE id = ?`, millis(at), id)
		if err != nil {
			return fmt.Errorf("revoking key %q: %w", id, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("revoking key %q: %w", id, err)
		}
		if n == 0 {
			return fmt.Errorf("revoking key %q: %w", id, store.ErrNotFound)
		}
		return nil
	})
}

// UpdateKey changes the fields u sets on a key of the workspace and returns the key as stored.
func (s *Store) UpdateKey(ctx context.Context, workspaceID, id string, u store.KeyUpdate) (store.Key, error) {
	var out store.Key
	err := s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		k, err := scanKey(tx.QueryRowContext(ctx, `SELECT `+keyColumns+` FROM api_keys WHERE id = ? AND workspace_id = ?`, id, workspaceID))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("key %q: %w", id, store.ErrNotFound)
		}
		if err != nil {
			return err
		}
		if k, err = u.Apply(k); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `UPDATE api_keys SET name = ?, disabled = ?, limit_nanos = ?, limit_reset = ?, role = ?, scopes = ? WHERE id = ?`,
			k.Name, k.Disabled, k.LimitNanos, k.LimitReset, string(k.Role), store.JoinScopes(k.Scopes), id)
		if err != nil {
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

func workspaceExists(ctx context.Context, q rowQuerier, id string) error {
	var one int
	err := q.QueryRowContext(ctx, `SELECT 1 FROM workspaces WHERE id = ?`, id).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("workspace %q: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("looking up workspace %q: %w", id, err)
	}
	return nil
}
