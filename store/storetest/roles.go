package storetest

import (
	"context"
	"reflect"
	"testing"

	"github.com/modelgateway/caddy-modelgateway/store"
)

// UpgradedOwnerScopes is what migrations 0012 and 0013 grant the management keys made
// before keys had roles: every scope of the areas the API has (handlers' managementScopes
// checks the migrations against the route table, so a new area cannot be forgotten).
var UpgradedOwnerScopes = []string{
	"activity:read", "activity:write", "activity:delete",
	"credits:read", "credits:write", "credits:delete",
	"keys:read", "keys:write", "keys:delete",
	"notifications:read", "notifications:write", "notifications:delete",
	"settings:read", "settings:write", "settings:delete",
	"webhooks:read", "webhooks:write", "webhooks:delete",
	"workspaces:read", "workspaces:write", "workspaces:delete",
}

// CheckUpgradedManagementKey checks that the management key id, made before migration 0012,
// is an owner with every scope, and stays one through an unrelated update.
func CheckUpgradedManagementKey(t *testing.T, s store.Store, id string) {
	t.Helper()
	ctx := context.Background()
	k, err := s.GetKey(ctx, id)
	if err != nil || k.Kind != store.KeyManagement || k.Role != store.RoleOwner || !reflect.DeepEqual(k.Scopes, UpgradedOwnerScopes) {
		t.Fatalf("management key after the upgrade = %+v, %v; want an owner with every scope", k, err)
	}
	name := "renamed"
	u, err := s.UpdateKey(ctx, k.WorkspaceID, id, store.KeyUpdate{Name: &name})
	if err != nil || u.Role != store.RoleOwner || !reflect.DeepEqual(u.Scopes, UpgradedOwnerScopes) {
		t.Fatalf("UpdateKey of the upgraded management key = %+v, %v; want its role and scopes kept", u, err)
	}
}
