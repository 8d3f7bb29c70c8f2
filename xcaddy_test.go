package modelgateway

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// xcaddyManifest is xcaddy.json: the Caddy version this module is built and tested with and
// the plugins an xcaddy build adds, each replaced by a local checkout where it is not
// published.
type xcaddyManifest struct {
	CaddyVersion string `json:"caddy_version"`
	CgoEnabled   bool   `json:"cgo_enabled"`
	Dependencies []struct {
		Module  string `json:"module"`
		Version string `json:"version"`
		Replace string `json:"replace"`
	} `json:"dependencies"`
}

// command is the xcaddy command line the manifest stands for.
func (m xcaddyManifest) command() string {
	var b strings.Builder
	if m.CgoEnabled {
		b.WriteString("CGO_ENABLED=1 ")
	}
	b.WriteString("xcaddy build " + m.CaddyVersion)
	for _, d := range m.Dependencies {
		b.WriteString(" --with " + d.Module)
		switch {
		case d.Replace != "":
			b.WriteString("=" + d.Replace)
		case d.Version != "" && d.Version != "latest":
			b.WriteString("@" + d.Version)
		}
	}
	return b.String()
}

func readManifest(t *testing.T) xcaddyManifest {
	t.Helper()
	raw, err := os.ReadFile("xcaddy.json")
	if err != nil {
		t.Fatal(err)
	}
	var m xcaddyManifest
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("xcaddy.json: %v", err)
	}
	return m
}

// goModVersion returns the version go.mod requires of module path ("" if none), in either
// form of a require line that go mod tidy writes.
func goModVersion(gomod, path string) string {
	for _, line := range strings.Split(gomod, "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[0] == "require" {
			f = f[1:]
		}
		if len(f) >= 2 && f[0] == path {
			return f[1]
		}
	}
	return ""
}

// The manifest names the Caddy this module is built and tested with (go.mod's) and the
// module itself as a dependency.
func TestXcaddyManifestMatchesGoMod(t *testing.T) {
	m := readManifest(t)
	raw, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	gomod := string(raw)
	caddy := goModVersion(gomod, "github.com/caddyserver/caddy/v2")
	if caddy == "" {
		t.Fatal("go.mod does not require github.com/caddyserver/caddy/v2")
	}
	if m.CaddyVersion != caddy {
		t.Errorf("xcaddy.json caddy_version = %q, go.mod requires %q", m.CaddyVersion, caddy)
	}
	if !m.CgoEnabled {
		t.Error("xcaddy.json: cgo_enabled must be true, the SQLite driver is cgo")
	}
	const self = "github.com/modelgateway/caddy-modelgateway"
	if !strings.Contains(gomod, "module "+self+"\n") {
		t.Fatalf("go.mod does not declare module %s", self)
	}
	found := false
	for _, d := range m.Dependencies {
		found = found || d.Module == self
	}
	if !found {
		t.Errorf("xcaddy.json does not list %s among its dependencies", self)
	}
}

// The README shows the command line the manifest stands for, so an operator who copies it
// builds what the manifest says.
func TestReadmeShowsXcaddyCommand(t *testing.T) {
	want := readManifest(t).command()
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), want) {
		t.Errorf("README.md does not show the build command of xcaddy.json:\n%s", want)
	}
}
