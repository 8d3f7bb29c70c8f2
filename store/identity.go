package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Identity is the store's role for who calls: workspaces (the teams that own wallets) and
// their API keys.
type Identity interface {
	// CreateWorkspace creates a workspace and its empty wallet; ErrConflict if the id is
	// taken, ErrNotFound if ParentID names no workspace.
	CreateWorkspace(ctx context.Context, ws Workspace) error
	GetWorkspace(ctx context.Context, id string) (Workspace, error)
	// ListWorkspaces returns a page of every workspace, oldest first (page.go).
	ListWorkspaces(ctx context.Context, p Page) ([]Workspace, error)
	// ListChildWorkspaces returns a page of the workspaces created by parentID, oldest
	// first (page.go).
	ListChildWorkspaces(ctx context.Context, parentID string, p Page) ([]Workspace, error)
	// SetWorkspaceAsyncAccess turns the workspace's access to async APIs on or off and
	// returns it as stored; ErrNotFound if it does not exist. Only the operator calls it
	// (the caddy gateway CLI): no API key can change its own workspace's access.
	SetWorkspaceAsyncAccess(ctx context.Context, id string, enabled bool) (Workspace, error)

	// CreateKey stores a key of an existing workspace (ErrNotFound otherwise); ErrConflict
	// if the id is taken.
	CreateKey(ctx context.Context, k Key) error
	GetKey(ctx context.Context, id string) (Key, error)
	// ListKeys returns a page of a workspace's keys, revoked ones included, oldest first
	// (page.go); ErrNotFound if the workspace does not exist.
	ListKeys(ctx context.Context, workspaceID string, p Page) ([]Key, error)
	// RevokeKey marks a key revoked; ErrNotFound if it does not exist.
	RevokeKey(ctx context.Context, id string, at time.Time) error
	// UpdateKey changes a key of the workspace and returns it as stored; ErrNotFound if the
	// workspace has no such key.
	UpdateKey(ctx context.Context, workspaceID, id string, u KeyUpdate) (Key, error)
}

// Workspace is a team: it owns keys and one wallet.
type Workspace struct {
	ID   string
	Name string
	// ParentID is the workspace whose management key created this one through the API;
	// empty for workspaces the operator created.
	ParentID  string
	CreatedAt time.Time
	// AsyncAccess is the workspace's access to async APIs, which rotating a webhook
	// secret requires; off until the operator turns it on.
	AsyncAccess bool
}

// ValidateWorkspace checks a workspace to create; backends refuse one that fails it.
func ValidateWorkspace(ws Workspace) error {
	if ws.ID == "" {
		return errors.New("creating workspace: empty id")
	}
	return nil
}

// KeyKind separates inference keys from management keys.
type KeyKind string

// Key kinds and their markers in the key text.
const (
	KeyStandard   KeyKind = "standard"
	KeyManagement KeyKind = "management"
)

// Key is an API key. Only a hash of its secret is stored.
type Key struct {
	// ID is the key id (kid) that appears in the plaintext key.
	ID          string
	WorkspaceID string
	Kind        KeyKind
	Name        string
	// SecretHash is SHA-256 of the secret part.
	SecretHash []byte
	Disabled   bool
	CreatedAt  time.Time
	// RevokedAt is set once the key is revoked; a revoked key never works again.
	RevokedAt *time.Time
	// LimitNanos caps what requests made with the key may spend per LimitReset period;
	// 0 means no limit.
	LimitNanos int64
	// LimitReset is the limit's period: ResetNever (the limit is for the key's lifetime),
	// ResetDaily, ResetWeekly or ResetMonthly.
	LimitReset string
	// Role and Scopes are what a management key may administer (handlers/scopes.go names
	// the scopes, <area>:<read|write|delete>); a standard key has neither.
	Role   Role
	Scopes []string
}

// Role is a management key's standing in its workspace.
type Role string

// Roles, from the most to the least trusted.
const (
	RoleOwner  Role = "owner"
	RoleAdmin  Role = "admin"
	RoleMember Role = "member"
)

// ValidRole tells whether r names a role.
func ValidRole(r Role) bool {
	return r == RoleOwner || r == RoleAdmin || r == RoleMember
}

// ValidateKeyGrant checks a key's role and scopes: a management key has a role, a standard
// key has no role and no scope, and a scope is <area>:<read|write|delete>.
func ValidateKeyGrant(k Key) error {
	if k.Kind != KeyManagement {
		if k.Role != "" || len(k.Scopes) > 0 {
			return errors.New("a standard key has no role or scopes")
		}
		return nil
	}
	if !ValidRole(k.Role) {
		return fmt.Errorf("unknown role %q (want owner, admin or member)", k.Role)
	}
	for _, sc := range k.Scopes {
		area, access, ok := strings.Cut(sc, ":")
		if !ok || area == "" || strings.ContainsAny(area, " ,") || (access != "read" && access != "write" && access != "delete") {
			return fmt.Errorf("malformed scope %q (want <area>:<read|write|delete>)", sc)
		}
	}
	return nil
}

// JoinScopes and SplitScopes are how backends keep a key's scopes in one column.
func JoinScopes(scopes []string) string { return strings.Join(scopes, " ") }

// SplitScopes reads a column JoinScopes wrote.
func SplitScopes(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Fields(s)
}

// ValidateNewKey checks a key to create; backends refuse one that fails it.
func ValidateNewKey(k Key) error {
	switch {
	case k.ID == "":
		return errors.New("creating key: empty id")
	case k.WorkspaceID == "":
		return errors.New("creating key: empty workspace id")
	case len(k.SecretHash) == 0:
		// A key without a hash could never authenticate; storing one is a caller bug.
		return errors.New("creating key: empty secret hash")
	}
	if err := ValidateKeyLimit(k); err != nil {
		return fmt.Errorf("creating key: %w", err)
	}
	if err := ValidateKeyGrant(k); err != nil {
		return fmt.Errorf("creating key: %w", err)
	}
	return nil
}

// Periods of a key's spending limit. Periods are calendar periods in UTC; weeks start on
// Monday.
const (
	ResetNever   = ""
	ResetDaily   = "daily"
	ResetWeekly  = "weekly"
	ResetMonthly = "monthly"
)

// ValidLimitReset tells whether s names a limit period.
func ValidLimitReset(s string) bool {
	switch s {
	case ResetNever, ResetDaily, ResetWeekly, ResetMonthly:
		return true
	}
	return false
}

// ValidateKeyLimit checks a key's limit fields; backends refuse keys that fail it.
func ValidateKeyLimit(k Key) error {
	if k.LimitNanos < 0 {
		return errors.New("negative spending limit")
	}
	if !ValidLimitReset(k.LimitReset) {
		return fmt.Errorf("unknown limit reset %q (want daily, weekly, monthly or none)", k.LimitReset)
	}
	return nil
}

// KeyUpdate changes the fields of a key that are set (non-nil).
type KeyUpdate struct {
	Name       *string
	Disabled   *bool
	LimitNanos *int64
	LimitReset *string
	Role       *Role
	Scopes     *[]string
}

// Apply returns k with the update's fields set, checked as ValidateKeyLimit and ValidateKeyGrant check a key:
// what UpdateKey stores.
func (u KeyUpdate) Apply(k Key) (Key, error) {
	if u.Name != nil {
		k.Name = *u.Name
	}
	if u.Disabled != nil {
		k.Disabled = *u.Disabled
	}
	if u.LimitNanos != nil {
		k.LimitNanos = *u.LimitNanos
	}
	if u.LimitReset != nil {
		k.LimitReset = *u.LimitReset
	}
	if u.Role != nil {
		k.Role = *u.Role
	}
	if u.Scopes != nil {
		k.Scopes = slices.Clone(*u.Scopes)
	}
	if err := ValidateKeyLimit(k); err != nil {
		return Key{}, err
	}
	if err := ValidateKeyGrant(k); err != nil {
		return Key{}, err
	}
	return k, nil
}
