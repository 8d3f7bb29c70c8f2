package blobs_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestBlobsKnowNoCaddy: the blob store is used by workers outside any request and
// registered as guest modules by module/, so nothing it depends on is Caddy or the
// gateway's HTTP layers.
func TestBlobsKnowNoCaddy(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{join .Deps " "}}`, ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const module = "github.com/modelgateway/caddy-modelgateway/"
	for _, dep := range strings.Fields(string(out)) {
		if strings.Contains(dep, "caddyserver") || dep == module+"handlers" || dep == module+"module" || strings.HasPrefix(dep, module+"providers") {
			t.Errorf("blobs depends on %s", dep)
		}
	}
}
