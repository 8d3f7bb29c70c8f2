package handlers

import (
	"net/http"
	"strings"
	"testing"
)

// TestFilesOffWithoutBlobStore: a gateway with no blob store answers the file routes that
// need one 503 not_configured, naming the setting.
func TestFilesOffWithoutBlobStore(t *testing.T) {
	a := newAdminGateway(t, nil, func(g *Gateway) { g.Blobs = nil })
	_, std, _ := a.workspace(usdNanos)
	for _, rq := range []struct{ method, path string }{
		{http.MethodPost, "/files"},
		{http.MethodGet, "/files/file-1/content"},
		{http.MethodDelete, "/files/file-1"},
	} {
		status, v := a.do(rq.method, rq.path, std, "")
		wantError(t, rq.method+" "+rq.path, status, v, http.StatusServiceUnavailable, CodeNotConfigured, "")
		if msg, _ := v["message"].(string); !strings.Contains(msg, "blob_store") {
			t.Fatalf("%s %s: %q does not name blob_store", rq.method, rq.path, msg)
		}
	}
}
