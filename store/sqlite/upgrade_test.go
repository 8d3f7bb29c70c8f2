package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"io/fs"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/store"
	"github.com/modelgateway/caddy-modelgateway/store/storetest"
)

// TestUpgradeFromVersion1 builds a database as the first release left it, with money in
// flight, and checks that migrating it keeps every row working: keys have no limit, management keys are owners with every scope,
// reservations and charges made before belong to no key.
func TestUpgradeFromVersion1(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "gateway.db")
	v1, err := fs.ReadFile(migrationFiles, "migrations/0001_init.sql")
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite3", path+"?_foreign_keys=1")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMilli()
	for _, q := range []string{
		`CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL) STRICT`,
		string(v1),
		`INSERT INTO schema_version VALUES (1, 0)`,
		`INSERT INTO workspaces (id, name, created_at) VALUES ('ws_old', 'old', 0)`,
		`INSERT INTO wallets (workspace_id, balance_nanos, reserved_nanos) VALUES ('ws_old', 5000000000, 1000000000)`,
		`INSERT INTO api_keys (id, workspace_id, kind, name, secret_hash, created_at) VALUES ('kold', 'ws_old', 'standard', 'old', x'01', 0)`,
		`INSERT INTO api_keys (id, workspace_id, kind, name, secret_hash, created_at) VALUES ('kmold', 'ws_old', 'management', 'old admin', x'02', 0)`,
		`INSERT INTO ledger (workspace_id, amount_nanos, kind, created_at) VALUES ('ws_old', 5000000000, 'credit', 0)`,
		`INSERT INTO reservations (id, workspace_id, amount_nanos, created_at, expires_at) VALUES ('res_old', 'ws_old', 1000000000, 0, ` + strconv.FormatInt(now+3_600_000, 10) + `)`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	_ = db.Close()

	s := openTemp(t, path)
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
