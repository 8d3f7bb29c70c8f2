package module

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// TestValidateOpensNoStore: `caddy validate` provisions every module; the store, whose
// opening migrates a schema and replays a settlement journal, opens only when the app starts.
func TestValidateOpensNoStore(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_DATA_HOME", filepath.Join(dir, "data"))
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(dir, "config"))
	db := filepath.Join(dir, "gateway.db")
	cf := gatewayCaddyfile(freePort(t), db, `
		provider mk {
			type mock
		}
		model m:free {
			route mk m
		}`, "")
	cfgJSON, _, err := caddyconfig.GetAdapter("caddyfile").Adapt(caddyfile.Format([]byte(cf)), nil)
	if err != nil {
		t.Fatal(err)
	}
	var cfg caddy.Config
	if err := json.Unmarshal(cfgJSON, &cfg); err != nil {
		t.Fatal(err)
	}
	if err := caddy.Validate(&cfg); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.Name() != "data" && e.Name() != "config" {
			t.Errorf("validating the configuration left %s in the store's directory", e.Name())
		}
	}
	if _, err := os.Stat(db); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("validating the configuration opened the store: %v", err)
	}
}
