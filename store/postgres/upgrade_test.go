package postgres

import (
	"context"
	"errors"
	"io/fs"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/store"
	"github.com/modelgateway/caddy-modelgateway/store/storetest"
)

// TestUpgradeFromVersion1 builds a schema as the first release left it, with money in
// flight, and checks that migrating it keeps every row working: keys have no limit, management keys are owners with every scope,
// reservations and charges made before belong to no key.
func TestUpgradeFromVersion1(t *testing.T) {
	ctx := context.Background()
	dsn := freshSchema(t)
	v1, err := fs.ReadFile(migrationFiles, "migrations/0001_init.sql")
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())`,
		string(v1),
		`INSERT INTO schema_version (version) VALUES (1)`,
		`INSERT INTO workspaces (id, name, created_at) VALUES ('ws_old', 'old', now())`,
		`INSERT INTO wallets (workspace_id, balance_nanos, reserved_nanos) VALUES ('ws_old', 5000000000, 1000000000)`,
		`INSERT INTO api_keys (id, workspace_id, kind, name, secret_hash, created_at) VALUES ('kold', 'ws_old', 'standard', 'old', '\x01', now())`,
		`INSERT INTO api_keys (id, workspace_id, kind, name, secret_hash, created_at) VALUES ('kmold', 'ws_old', 'management', 'old admin', '\x02', now())`,
		`INSERT INTO ledger (workspace_id, amount_nanos, kind, created_at) VALUES ('ws_old', 5000000000, 'credit', now())`,
		`INSERT INTO reservations (id, workspace_id, amount_nanos, created_at, expires_at) VALUES ('res_old', 'ws_old', 1000000000, now(), now() + interval '1 hour')`,
	} {
		adminExec(t, dsn, q)
	}

	s := openStore(t, dsn)
	k, err := s.GetKey(ctx, "kold")
	if err != nil || k.LimitNanos != 0 || k.LimitReset != "" || k.Role != "" || k.Scopes != nil {
		t.Fatalf("GetKey after the upgrade = %+v, %v", k, err)
	}
	storetest.CheckUpgradedManagementKey(t, s, "kmold")
	ws, err := s.GetWorkspace(ctx, "ws_old")
	if err != nil || ws.ParentID != "" {
		t.Fatalf("GetWorkspace after the upgrade = %+v, %v", ws, err)
	}
	if _, err := s.Settle(ctx, store.SettleParams{ReservationID: "res_old", Generation: &store.Generation{WorkspaceID: "ws_old", KeyID: "kold", CostNanos: 250_000_000}}); err != nil {
		t.Fatalf("settling a reservation made before the upgrade: %v", err)
	}
	limit := store.NanosPerUSD / 2
	if _, err := s.UpdateKey(ctx, "ws_old", "kold", store.KeyUpdate{LimitNanos: &limit}); err != nil {
		t.Fatalf("UpdateKey: %v", err)
	}
	_, err = s.Reserve(ctx, store.ReserveParams{WorkspaceID: "ws_old", KeyID: "kold", AmountNanos: 250_000_001, ExpiresAt: time.Now().Add(time.Hour)})
	if !errors.Is(err, store.ErrKeyLimitExceeded) {
		t.Fatalf("Reserve past the new limit: %v", err)
	}
	b, err := s.GetBalance(ctx, "ws_old")
	if err != nil || b.BalanceNanos != 4_750_000_000 || b.ReservedNanos != 0 {
		t.Fatalf("balance %+v, %v", b, err)
	}
}
