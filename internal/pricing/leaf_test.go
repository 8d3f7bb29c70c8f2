package pricing

import (
	"os/exec"
	"strings"
	"testing"
)

// TestPricingIsALeaf: pricing depends on no layer of the gateway above it (providers,
// store, handlers...), only on the leaf it shares its usage type with, so that each of
// those layers can price.
func TestPricingIsALeaf(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const module = "github.com/modelgateway/caddy-modelgateway/"
	allowed := map[string]bool{module + "internal/pricing": true, module + "internal/meter": true}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, module) && !allowed[dep] {
			t.Errorf("internal/pricing depends on %s", dep)
		}
	}
}
