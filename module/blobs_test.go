package module

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/modelgateway/caddy-modelgateway/blobs"
)

func TestBlobStoreCaddyfile(t *testing.T) {
	tests := []caddyfileCase{
		{name: "file default", input: "model_gateway {\n blob_store file\n}", want: `{"blob_store":{"backend":"file"}}`},
		{name: "file directory", input: "model_gateway {\n blob_store file {env.BLOB_DIR}/gw\n}", want: `{"blob_store":{"backend":"file","root":"{env.BLOB_DIR}/gw"}}`},
		{name: "s3", input: "model_gateway {\n blob_store s3 {\n  endpoint minio.internal:9000\n  bucket gateway\n  region eu-west-1\n  access_key_id {env.S3_KEY}\n  secret_access_key {env.S3_SECRET}\n  use_tls off\n  path_style on\n }\n}",
			want: `{"blob_store":{"access_key_id":"{env.S3_KEY}","backend":"s3","bucket":"gateway","endpoint":"minio.internal:9000","path_style":true,"region":"eu-west-1","secret_access_key":"{env.S3_SECRET}","use_tls":false}}`},
		{name: "s3 minimal", input: "model_gateway {\n blob_store s3 {\n  endpoint s3.amazonaws.com\n  bucket b\n }\n}", want: `{"blob_store":{"backend":"s3","bucket":"b","endpoint":"s3.amazonaws.com"}}`},
		{name: "no backend", input: "model_gateway {\n blob_store\n}", wantErr: "blob_store needs a backend (file, s3)"},
		{name: "unknown backend", input: "model_gateway {\n blob_store gcs\n}", wantErr: `unknown blob store backend "gcs": no module model_gateway.blobs.gcs in this build, whose backends are file, s3`},
		{name: "duplicate", input: "model_gateway {\n blob_store file\n blob_store file /x\n}", wantErr: "blob_store already specified"},
		{name: "file two directories", input: "model_gateway {\n blob_store file /a /b\n}", wantErr: "wrong argument count"},
		{name: "file block", input: "model_gateway {\n blob_store file /a {\n  bucket b\n }\n}", wantErr: "takes only a directory"},
		{name: "s3 argument", input: "model_gateway {\n blob_store s3 bucket {\n  endpoint e\n }\n}", wantErr: "wrong argument count"},
		{name: "s3 unknown option", input: "model_gateway {\n blob_store s3 {\n  endpoint e\n  bucket b\n  root /x\n }\n}", wantErr: `unrecognized subdirective "root"`},
		{name: "s3 duplicate option", input: "model_gateway {\n blob_store s3 {\n  endpoint e\n  bucket b\n  bucket c\n }\n}", wantErr: "bucket already specified"},
		{name: "s3 without bucket", input: "model_gateway {\n blob_store s3 {\n  endpoint e\n }\n}", wantErr: "needs an endpoint and a bucket"},
		{name: "s3 without block", input: "model_gateway {\n blob_store s3\n}", wantErr: "needs an endpoint and a bucket"},
		{name: "s3 bad use_tls", input: "model_gateway {\n blob_store s3 {\n  endpoint e\n  bucket b\n  use_tls yes\n }\n}", wantErr: `use_tls: want on or off, got "yes"`},
		{name: "s3 option without value", input: "model_gateway {\n blob_store s3 {\n  endpoint\n  bucket b\n }\n}", wantErr: "wrong argument count"},
	}
	runCaddyfileCases(t, tests, func() caddyfile.Unmarshaler { return new(App) })
}

// provisionBlobs provisions the blob store of the app that the Caddyfile's model_gateway
// block describes.
func provisionBlobs(t *testing.T, block string) (*App, error) {
	t.Helper()
	app := new(App)
	if err := app.UnmarshalCaddyfile(caddyfile.NewTestDispenser(block)); err != nil {
		t.Fatal(err)
	}
	// Through JSON, as Caddy loads it.
	var loaded App
	if err := json.Unmarshal(caddyconfig.JSON(app, nil), &loaded); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	t.Cleanup(cancel)
	return &loaded, loaded.provisionBlobStore(ctx)
}

func roundTrip(t *testing.T, s blobs.Store, key string) {
	t.Helper()
	want := []byte("audio bytes of " + key)
	if _, err := s.Put(context.Background(), key, bytes.NewReader(want), int64(len(want)), "audio/mpeg"); err != nil {
		t.Fatalf("Put: %v", err)
	}
	rc, info, err := s.Open(context.Background(), key, 0, -1)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer func() { _ = rc.Close() }()
	got, err := io.ReadAll(rc)
	if err != nil || !bytes.Equal(got, want) || info.ContentType != "audio/mpeg" {
		t.Fatalf("read %q (%v), content type %q", got, err, info.ContentType)
	}
}

// TestBlobStoreDefault: without blob_store, blobs go to Caddy's data directory, which
// provisioning (also run by `caddy validate`) does not create.
func TestBlobStoreDefault(t *testing.T) {
	data := t.TempDir()
	t.Setenv("XDG_DATA_HOME", data)
	app, err := provisionBlobs(t, "model_gateway {\n}")
	if err != nil {
		t.Fatal(err)
	}
	fs, ok := app.BlobStore().(*blobs.FS)
	want := filepath.Join(data, "caddy", "model_gateway", "blobs")
	if !ok || fs.Root() != want {
		t.Fatalf("blob store %#v, want the file store in %s", app.BlobStore(), want)
	}
	if _, err := os.Stat(want); !os.IsNotExist(err) {
		t.Fatalf("provisioning created the blob directory: %v", err)
	}
	roundTrip(t, app.BlobStore(), "music/ws/job.mp3")
	if _, err := os.Stat(filepath.Join(want, "music", "ws", "job.mp3")); err != nil {
		t.Fatalf("the blob is not in the data directory: %v", err)
	}
	app.pooled = new(pooledStore)
	if app.runtime().Blobs != app.BlobStore() {
		t.Fatal("the workers' runtime does not carry the app's blob store")
	}
}

func TestBlobStoreFileDirectoryFromEnv(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("GW_BLOB_DIR", dir)
	app, err := provisionBlobs(t, "model_gateway {\n blob_store file {env.GW_BLOB_DIR}/blobs\n}")
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, app.BlobStore(), "files/f1")
	if _, err := os.Stat(filepath.Join(dir, "blobs", "files", "f1")); err != nil {
		t.Fatalf("the blob is not in the configured directory: %v", err)
	}
}

// startFakeS3 serves an S3-compatible object store holding bucket over HTTP in process
// (gofakes3), closed when t ends: its backend, to look at the objects, and its server.
func startFakeS3(t *testing.T, bucket string) (*s3mem.Backend, *httptest.Server) {
	t.Helper()
	backend := s3mem.New()
	if err := backend.CreateBucket(bucket); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gofakes3.New(backend).Server())
	t.Cleanup(srv.Close)
	return backend, srv
}

// TestBlobStoreS3FromEnv: every S3 field goes through the replacer; the store reaches an
// S3-compatible server with them.
func TestBlobStoreS3FromEnv(t *testing.T) {
	backend, srv := startFakeS3(t, "gw-blobs")
	t.Setenv("GW_S3_ENDPOINT", strings.TrimPrefix(srv.URL, "http://"))
	t.Setenv("GW_S3_BUCKET", "gw-blobs")
	t.Setenv("GW_S3_KEY", "key-id")
	t.Setenv("GW_S3_SECRET", "s3cr3t-value")
	app, err := provisionBlobs(t, "model_gateway {\n blob_store s3 {\n  endpoint {env.GW_S3_ENDPOINT}\n  bucket {env.GW_S3_BUCKET}\n  region us-east-1\n"+
		"  access_key_id {env.GW_S3_KEY}\n  secret_access_key {env.GW_S3_SECRET}\n  use_tls off\n  path_style on\n }\n}")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := app.BlobStore().(*blobs.S3); !ok {
		t.Fatalf("blob store %T, want *blobs.S3", app.BlobStore())
	}
	roundTrip(t, app.BlobStore(), "music/ws/job.mp3")
	obj, err := backend.HeadObject("gw-blobs", "music/ws/job.mp3")
	if err != nil {
		t.Fatalf("the blob is not in the bucket: %v", err)
	}
	if obj.Size != int64(len("audio bytes of music/ws/job.mp3")) {
		t.Fatalf("object of %d bytes", obj.Size)
	}
}

// TestBlobStoreS3Provision: provisioning checks the fields and calls no server; its
// errors never show the secret.
func TestBlobStoreS3Provision(t *testing.T) {
	const secret = "s3cr3t-value"
	t.Setenv("GW_S3_SECRET", secret)
	tests := []struct {
		name    string
		json    string
		wantErr string
	}{
		{name: "unreachable server", json: `{"backend":"s3","endpoint":"blobs.invalid:9","bucket":"b","access_key_id":"k","secret_access_key":"` + secret + `"}`},
		{name: "bucket from an unset variable", json: `{"backend":"s3","endpoint":"s3.example.com","bucket":"{env.GW_S3_UNSET}"}`, wantErr: "a bucket is required (a field given as {env.NAME} is empty when NAME is unset)"},
		{name: "secret without key id", json: `{"backend":"s3","endpoint":"s3.example.com","bucket":"b","secret_access_key":"{env.GW_S3_SECRET}"}`, wantErr: "or neither"},
		{name: "endpoint with scheme", json: `{"backend":"s3","endpoint":"https://s3.example.com","bucket":"b","access_key_id":"k","secret_access_key":"` + secret + `"}`, wantErr: "without a scheme"},
		{name: "unknown field", json: `{"backend":"s3","endpoint":"e","bucket":"b","secret_access_key":"` + secret + `","secret":"x"}`, wantErr: `unknown field "secret"`},
		{name: "unknown backend", json: `{"backend":"gcs","secret_access_key":"` + secret + `"}`, wantErr: `unknown blob store backend "gcs"`},
		{name: "no backend", json: `{"secret_access_key":"` + secret + `"}`, wantErr: "backend is required"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
			defer cancel()
			app := &App{BlobStoreRaw: json.RawMessage(tc.json)}
			err := app.provisionBlobStore(ctx)
			if tc.wantErr == "" {
				if err != nil || app.BlobStore() == nil {
					t.Fatalf("provisioning: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || strings.Contains(err.Error(), secret) {
				t.Fatalf("error %v, want %q without the secret", err, tc.wantErr)
			}
		})
	}
}
