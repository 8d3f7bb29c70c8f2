package blobs_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelgateway/caddy-modelgateway/blobs"
	"github.com/modelgateway/caddy-modelgateway/blobs/blobtest"
)

func TestFS(t *testing.T) {
	blobtest.Run(t, blobtest.Config{New: func(t *testing.T) blobs.Store {
		s, err := blobs.NewFS(filepath.Join(t.TempDir(), "blobs"))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}})
}

// TestFSStaysInItsRoot checks on the disk what the suite checks through the interface:
// refused keys create nothing outside the root, and a Put leaves no temporary file.
func TestFSStaysInItsRoot(t *testing.T) {
	parent := t.TempDir()
	s, err := blobs.NewFS(filepath.Join(parent, "root"))
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"../escaped", "/tmp/escaped", "a/../../escaped"} {
		if _, err := s.Put(context.Background(), key, strings.NewReader("x"), 1, ""); err == nil {
			t.Errorf("Put(%q) succeeded", key)
		}
	}
	if _, err := s.Put(context.Background(), "in/side", strings.NewReader("x"), 1, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(context.Background(), "in/failed", strings.NewReader("x"), 2, ""); err == nil {
		t.Fatal("Put of a short reader succeeded")
	}
	var files []string
	err = filepath.WalkDir(parent, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(parent, path)
			files = append(files, rel)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 1 || files[0] != filepath.Join("root", "in", "side") {
		t.Errorf("files under the parent: %v, want only root/in/side", files)
	}
}

// TestFSRefusesForeignFiles: a file in the root that no Put wrote is not read as a blob.
func TestFSRefusesForeignFiles(t *testing.T) {
	root := t.TempDir()
	s, err := blobs.NewFS(root)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "foreign"), []byte("not a blob"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Stat(context.Background(), "foreign"); err == nil || !strings.Contains(err.Error(), "not a blob file") {
		t.Errorf("Stat of a foreign file: %v, want not a blob file", err)
	}
}
