package sqlite

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/modelgateway/caddy-modelgateway/store/storetest"
)

// TestWebhookSecretsSealedAtRest scans every file of the database (the main file, its
// write-ahead log, the settlement journal) for a webhook secret in the clear.
func TestWebhookSecretsSealedAtRest(t *testing.T) {
	dir := t.TempDir()
	s := openTemp(t, filepath.Join(dir, "gateway.db"))
	storetest.SecretsSealedAtRest(t, s, func(t *testing.T, marker []byte) bool {
		found := false
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || found {
				return err
			}
			b, err := os.ReadFile(path)
			found = bytes.Contains(b, marker)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return found
	})
}
