package blobs_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/modelgateway/caddy-modelgateway/blobs"
	"github.com/modelgateway/caddy-modelgateway/blobs/blobtest"
)

const testBucket = "gateway-blobs"

// fakeS3ChildEnv makes the test binary a fake S3 server (TestMain), for the test that
// must not count the server's memory in its own heap.
const fakeS3ChildEnv = "BLOBS_FAKE_S3_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(fakeS3ChildEnv) != "" {
		serveFakeS3Child()
		return
	}
	os.Exit(m.Run())
}

// newFakeS3 returns a gofakes3 handler holding one empty bucket.
func newFakeS3() (http.Handler, error) {
	backend := s3mem.New()
	if err := backend.CreateBucket(testBucket); err != nil {
		return nil, err
	}
	return gofakes3.New(backend).Server(), nil
}

// serveFakeS3Child serves a fake S3 server, prints its address, and exits when its
// standard input closes (its parent test ended).
func serveFakeS3Child() {
	h, err := newFakeS3()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	go func() { _ = http.Serve(ln, h) }()
	fmt.Println(ln.Addr().String())
	_, _ = bufio.NewReader(os.Stdin).ReadString(0) // until EOF
}

func newS3Store(t *testing.T, endpoint string) blobs.Store {
	s, err := blobs.NewS3(blobs.S3Config{
		Endpoint: endpoint, Bucket: testBucket, Region: "us-east-1",
		AccessKeyID: "test-key", SecretAccessKey: "test-secret", PathStyle: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestS3(t *testing.T) {
	blobtest.Run(t, blobtest.Config{
		New: func(t *testing.T) blobs.Store {
			h, err := newFakeS3()
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(h)
			t.Cleanup(srv.Close)
			return newS3Store(t, strings.TrimPrefix(srv.URL, "http://"))
		},
		NewIsolated: func(t *testing.T) blobs.Store {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), fakeS3ChildEnv+"=1")
			cmd.Stderr = os.Stderr
			stdin, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = stdin.Close()
				_ = cmd.Wait()
			})
			addr, err := bufio.NewReader(stdout).ReadString('\n')
			if err != nil {
				t.Fatalf("starting the fake S3 server: %v", err)
			}
			return newS3Store(t, strings.TrimSpace(addr))
		},
	})
}

func TestNewS3Refuses(t *testing.T) {
	ok := blobs.S3Config{Endpoint: "s3.example.com", Bucket: "b", AccessKeyID: "k", SecretAccessKey: "s"}
	tests := []struct {
		name    string
		edit    func(*blobs.S3Config)
		wantErr string
	}{
		{"no endpoint", func(c *blobs.S3Config) { c.Endpoint = "" }, "an endpoint is required"},
		{"scheme", func(c *blobs.S3Config) { c.Endpoint = "https://s3.example.com" }, "without a scheme"},
		{"no bucket", func(c *blobs.S3Config) { c.Bucket = "" }, "a bucket is required"},
		{"half the credentials", func(c *blobs.S3Config) { c.SecretAccessKey = "" }, "or neither"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ok
			tc.edit(&cfg)
			_, err := blobs.NewS3(cfg)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("NewS3: %v, want %q", err, tc.wantErr)
			}
		})
	}
	if _, err := blobs.NewS3(ok); err != nil {
		t.Errorf("NewS3 of a valid configuration: %v", err)
	}
}
