package module

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
)

// loggedGlobals are the global options of a test configuration whose process log goes to
// path, with the log's further options.
func loggedGlobals(path, options string) string {
	return fmt.Sprintf("\tadmin off\n\tpersist_config off\n\tgrace_period 1ns\n\tlog {\n\t\toutput file %s\n\t\t%s\n\t}", path, options)
}

// At start the gateway says in one line which store it works on, how many models and
// providers it has, and which providers will refuse every call for want of a credential
// (then as a warning).
func TestStartLogNamesStoreAndMissingCredentials(t *testing.T) {
	dir := t.TempDir()
	setDataDirs(t, dir)
	t.Setenv("GATEWAY_TEST_KEY_SET", "sk-set")
	processLog, db := filepath.Join(dir, "process.log"), filepath.Join(dir, "gateway.db")
	loadCaddyfile(t, fmt.Sprintf(`{
%s
	model_gateway {
		store sqlite %s
		provider keyed {
			type openai
			api_key {env.GATEWAY_TEST_KEY_SET}
		}
		provider unset {
			type anthropic
			api_key {env.GATEWAY_TEST_KEY_UNSET}
		}
		provider bare {
			type openai
		}
		provider local {
			type openai
			base_url http://127.0.0.1:1/v1
		}
		provider mk {
			type mock
		}
		model a {
			route keyed x
		}
		model b {
			route mk x
		}
	}
}

http://127.0.0.1:%d {
	route /v1/* {
		model_gateway
	}
}
`, loggedGlobals(processLog, "format json"), db, freePort(t)))
	t.Cleanup(func() { _ = caddy.Stop() })
	var ready []map[string]any
	decoded, text := stoppedLogLines(t, processLog)
	for _, line := range decoded {
		if line["msg"] == "gateway ready" {
			ready = append(ready, line)
		}
	}
	for _, line := range text {
		if strings.Contains(line, "sk-set") {
			t.Errorf("a credential in the log: %s", line)
		}
	}
	if len(ready) != 1 {
		t.Fatalf("%d lines say the gateway is ready, want 1", len(ready))
	}
	got := ready[0]
	var missing []string
	for _, v := range got["providers_without_credentials"].([]any) {
		missing = append(missing, v.(string))
	}
	if got["level"] != "warn" || got["store"] != "sqlite" || got["store_location"] != db || got["models"] != 2.0 || got["providers"] != 5.0 ||
		!slices.Equal(missing, []string{"bare", "unset"}) {
		t.Fatalf("start line %v", got)
	}
}

// stoppedLogLines stops Caddy and returns the lines of its process log at path, as text
// and, for those that are JSON objects, decoded.
func stoppedLogLines(t *testing.T, path string) (decoded []map[string]any, text []string) {
	t.Helper()
	if err := caddy.Stop(); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for sc := bufio.NewScanner(f); sc.Scan(); {
		text = append(text, sc.Text())
		var line map[string]any
		if err := json.Unmarshal(sc.Bytes(), &line); err == nil {
			decoded = append(decoded, line)
		}
	}
	return decoded, text
}

// The store's location in the log is SQLite's file, or PostgreSQL's host, port and
// database: never the DSN, whose password stays out of the log.
func TestStoreLocationHasNoPassword(t *testing.T) {
	for _, tc := range []struct{ name, driver, target, want string }{
		{"sqlite", "sqlite", "/var/lib/gw/gateway.db", "/var/lib/gw/gateway.db"},
		{"postgres url", "postgres", "postgres://gw:hunter2@db.internal:5433/gateway?sslmode=disable", "db.internal:5433/gateway"},
		{"postgres keywords", "postgres", "host=db.internal user=gw password=hunter2 dbname=gateway sslmode=disable", "db.internal:5432/gateway"},
		{"postgres unparsable", "postgres", "postgres://gw:hunter2@db.internal:notaport/gateway", "(a dsn that does not parse)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := storeLocation(tc.driver, tc.target); got != tc.want || strings.Contains(got, "hunter2") {
				t.Fatalf("%q, want %q", got, tc.want)
			}
		})
	}
}
