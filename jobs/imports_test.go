package jobs

import (
	"os/exec"
	"strings"
	"testing"
)

// TestCoreKnowsNoHTTP: the engine and billing run in workers, outside any request, so
// neither imports net/http nor Caddy, nor the layers that do (handlers, module, providers).
func TestCoreKnowsNoHTTP(t *testing.T) {
	for _, pkg := range []string{".", "../billing"} {
		out, err := exec.Command("go", "list", "-f", `{{join .Imports " "}}`, pkg).Output()
		if err != nil {
			t.Fatalf("go list %s: %v", pkg, err)
		}
		const module = "github.com/modelgateway/caddy-modelgateway/"
		for _, imp := range strings.Fields(string(out)) {
			if imp == "net/http" || strings.Contains(imp, "caddyserver") || imp == module+"handlers" || imp == module+"module" || strings.HasPrefix(imp, module+"providers") {
				t.Errorf("%s imports %s", pkg, imp)
			}
		}
	}
}
