package module

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/modelgateway/caddy-modelgateway/handlers"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// gatewayCommand builds the `caddy gateway` command tree as RegisterCommand does.
func gatewayCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "gateway"}
	cmd.PersistentFlags().StringP("config", "c", "", "")
	cmd.PersistentFlags().StringP("adapter", "a", "", "")
	cmd.AddCommand(bootstrapCommand(), workspaceCommand(), keyCommand(), creditsCommand())
	return cmd
}

func runGateway(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := gatewayCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	cmd.SetContext(context.Background())
	err := cmd.Execute()
	return out.String(), err
}

// The operator commands find the store from the configuration file and do what the README
// says: bootstrap prints a working key once, keys are listed and revoked, credits added.
func TestGatewayCommands(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_DATA_HOME", filepath.Join(dir, "data"))
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(dir, "config"))
	db := filepath.Join(dir, "gw.db")
	cfg := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("{\n\tmodel_gateway {\n\t\tstore sqlite %s\n\t}\n}\n\n:0 {\n\trespond ok\n}\n", db)), 0o600); err != nil {
		t.Fatal(err)
	}

	out, err := runGateway(t, "bootstrap", "--config", cfg, "--name", "demo", "--credits", "12.5")
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	ws := regexp.MustCompile(`workspace\s+(ws_\S+)`).FindStringSubmatch(out)
	key := regexp.MustCompile(`key\s+(gateway_v1_sk_\S+)`).FindStringSubmatch(out)
	if ws == nil || key == nil || !strings.Contains(out, "12.5 USD") {
		t.Fatalf("bootstrap output: %s", out)
	}
	pk, err := handlers.ParseKey(key[1])
	if err != nil {
		t.Fatal(err)
	}

	s, err := OpenConfiguredStore(context.Background(), cfg, "")
	if err != nil {
		t.Fatal(err)
	}
	stored, err := s.GetKey(context.Background(), pk.ID)
	_ = s.Close()
	if err != nil || stored.WorkspaceID != ws[1] || string(stored.SecretHash) != string(handlers.HashSecret(pk.Secret)) {
		t.Fatalf("stored key %+v, %v", stored, err)
	}

	if out, err = runGateway(t, "key", "create", "--config", cfg, "--workspace", ws[1], "--management", "--name", "ops"); err != nil || !strings.HasPrefix(out, "gateway_v1_mk_") {
		t.Fatalf("key create: %v %s", err, out)
	}
	// Roles and scopes: the operator's default is an owner with every scope; --scopes takes
	// a template or explicit scopes, cut to or checked against the role.
	for _, tc := range []struct {
		args []string
		role store.Role
		want []string
	}{
		{nil, store.RoleOwner, handlers.RoleScopes(store.RoleOwner)},
		{[]string{"--role", "admin"}, store.RoleAdmin, handlers.RoleScopes(store.RoleAdmin)},
		{[]string{"--role", "member", "--scopes", "all"}, store.RoleMember, handlers.RoleScopes(store.RoleMember)},
		{[]string{"--scopes", "credits:write,keys:read"}, store.RoleOwner, []string{"credits:write", "keys:read"}},
	} {
		args := append([]string{"key", "create", "--config", cfg, "--workspace", ws[1], "--management"}, tc.args...)
		out, err := runGateway(t, args...)
		if err != nil {
			t.Fatalf("%v: %v %s", tc.args, err, out)
		}
		mk, err := handlers.ParseKey(strings.TrimSpace(out))
		if err != nil {
			t.Fatal(err)
		}
		s, err := OpenConfiguredStore(context.Background(), cfg, "")
		if err != nil {
			t.Fatal(err)
		}
		k, err := s.GetKey(context.Background(), mk.ID)
		_ = s.Close()
		if err != nil || k.Role != tc.role || !slices.Equal(k.Scopes, tc.want) {
			t.Fatalf("key create %v stored %+v, %v; want %s %v", tc.args, k, err, tc.role, tc.want)
		}
		if _, err := runGateway(t, "key", "revoke", mk.ID, "--config", cfg); err != nil {
			t.Fatal(err)
		}
	}
	if out, err = runGateway(t, "key", "list", "--config", cfg, "--workspace", ws[1]); err != nil || strings.Count(out, "active") != 2 || strings.Contains(out, pk.Secret) || !strings.Contains(out, "owner") {
		t.Fatalf("key list: %v %s", err, out)
	}
	if out, err = runGateway(t, "key", "revoke", pk.ID, "--config", cfg); err != nil {
		t.Fatalf("revoke: %v %s", err, out)
	}
	if out, _ = runGateway(t, "key", "list", "--config", cfg, "--workspace", ws[1]); !strings.Contains(out, "revoked") {
		t.Fatalf("after revoke: %s", out)
	}
	if out, err = runGateway(t, "credits", "add", "--config", cfg, "--workspace", ws[1], "--amount", "2.50"); err != nil || !strings.Contains(out, "balance    15 USD") {
		t.Fatalf("credits add: %v %s", err, out)
	}
	if out, err = runGateway(t, "credits", "show", "--config", cfg, "--workspace", ws[1]); err != nil || !strings.Contains(out, "available  15 USD") {
		t.Fatalf("credits show: %v %s", err, out)
	}
	if out, err = runGateway(t, "workspace", "list", "--config", cfg); err != nil || !strings.Contains(out, ws[1]) || !strings.Contains(out, "demo") {
		t.Fatalf("workspace list: %v %s", err, out)
	}

	// Clear errors for bad input.
	for _, tc := range [][]string{
		{"credits", "add", "--config", cfg, "--workspace", ws[1], "--amount", "-1"},
		{"credits", "show", "--config", cfg, "--workspace", "ws_nope"},
		{"key", "create", "--config", cfg, "--workspace", "ws_nope"},
		{"key", "create", "--config", cfg, "--workspace", ws[1], "--role", "admin"},
		{"key", "create", "--config", cfg, "--workspace", ws[1], "--management", "--role", "boss"},
		{"key", "create", "--config", cfg, "--workspace", ws[1], "--management", "--role", "member", "--scopes", "keys:write"},
		{"key", "revoke", "nope", "--config", cfg},
		{"workspace", "create", "--config", cfg},
	} {
		if out, err := runGateway(t, tc...); err == nil {
			t.Fatalf("%v succeeded: %s", tc, out)
		}
	}
}

// Without --config, every command needs ./Caddyfile and names the file it looked for when
// there is none, rather than opening the default store: that is another database than the
// server's whenever the server's store has another path.
func TestGatewayCommandsWithoutAConfiguration(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	t.Setenv("XDG_DATA_HOME", data)
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(dir, "config"))
	t.Chdir(dir)
	for _, args := range [][]string{
		{"bootstrap"},
		{"workspace", "create", "--name", "demo"},
		{"workspace", "list"},
		{"key", "create", "--workspace", "ws_1"},
		{"key", "list", "--workspace", "ws_1"},
		{"key", "revoke", "key_1"},
		{"credits", "add", "--workspace", "ws_1", "--amount", "1"},
		{"credits", "show", "--workspace", "ws_1"},
	} {
		t.Run(strings.Join(args[:min(2, len(args))], " "), func(t *testing.T) {
			out, err := runGateway(t, args...)
			if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "Caddyfile")) || !strings.Contains(err.Error(), "--config") {
				t.Fatalf("got %v (%s), want an error naming %s and --config", err, out, filepath.Join(dir, "Caddyfile"))
			}
		})
	}
	if _, err := os.Stat(data); !os.IsNotExist(err) {
		t.Fatalf("a store was created under the data directory: %v", err)
	}

	// With ./Caddyfile, no --config is needed.
	db := filepath.Join(dir, "gw.db")
	if err := os.WriteFile("Caddyfile", []byte(fmt.Sprintf("{\n\tmodel_gateway {\n\t\tstore sqlite %s\n\t}\n}\n\n:0 {\n\trespond ok\n}\n", db)), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := runGateway(t, "workspace", "create", "--name", "demo"); err != nil || !strings.HasPrefix(out, "ws_") {
		t.Fatalf("with ./Caddyfile: %v %s", err, out)
	}
	if _, err := os.Stat(db); err != nil {
		t.Fatalf("the configured store: %v", err)
	}
}
