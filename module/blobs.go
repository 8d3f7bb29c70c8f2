package module

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/caddyserver/caddy/v2"

	"github.com/modelgateway/caddy-modelgateway/blobs"
)

func init() {
	caddy.RegisterModule(new(FileBlobStore))
	caddy.RegisterModule(new(S3BlobStore))
}

// BlobsNamespace is the Caddy module namespace of blob store backends: the module
// model_gateway.blobs.<backend> is the app's blob_store whose backend is <backend>.
const BlobsNamespace = "model_gateway.blobs"

// BlobStoreModule is a blob store backend: a Caddy module whose ID is
// model_gateway.blobs.<backend> and whose JSON fields are the backend's options. Its JSON
// must not have a "backend" field, which names the module. To read a Caddyfile, it
// implements caddyfile.Unmarshaler, given the tokens from the backend's name on.
type BlobStoreModule interface {
	caddy.Module
	// BlobStore returns the store, after Provision and Validate.
	BlobStore() blobs.Store
}

// DefaultBlobDir is the file blob store's directory when the configuration names none.
func DefaultBlobDir() string {
	return filepath.Join(caddy.AppDataDir(), "model_gateway", "blobs")
}

// FileBlobStore keeps blobs in a directory (blobs.FS): the default, for one instance, or
// several that share the directory.
type FileBlobStore struct {
	// Root is the directory. Placeholders are resolved. Default: model_gateway/blobs under
	// Caddy's data directory.
	Root string `json:"root,omitempty"`

	store *blobs.FS
}

// CaddyModule returns the Caddy module information.
func (*FileBlobStore) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: BlobsNamespace + ".file", New: func() caddy.Module { return new(FileBlobStore) }}
}

// Provision resolves the directory; it creates nothing (the first blob does).
func (f *FileBlobStore) Provision(caddy.Context) error {
	root := caddy.NewReplacer().ReplaceKnown(f.Root, "")
	if root == "" {
		root = DefaultBlobDir()
	}
	s, err := blobs.NewFS(root)
	if err != nil {
		return err
	}
	f.store = s
	return nil
}

// BlobStore returns the store.
func (f *FileBlobStore) BlobStore() blobs.Store { return f.store }

// S3BlobStore keeps blobs in a bucket of an S3-compatible object store (blobs.S3): for
// several gateway instances without a shared disk.
type S3BlobStore struct {
	// Endpoint is the server's host and optional port, without a scheme
	// ("s3.eu-west-1.amazonaws.com", "minio.internal:9000"). Required.
	Endpoint string `json:"endpoint,omitempty"`
	// Bucket holds the blobs; it must exist. Required.
	Bucket string `json:"bucket,omitempty"`
	// Region is the bucket's region. Default: asked of the server.
	Region string `json:"region,omitempty"`
	// AccessKeyID and SecretAccessKey sign the requests, e.g. "{env.S3_ACCESS_KEY_ID}";
	// both empty send anonymous requests.
	AccessKeyID     string `json:"access_key_id,omitempty"`
	SecretAccessKey string `json:"secret_access_key,omitempty"`
	// UseTLS connects with HTTPS. Default: true.
	UseTLS *bool `json:"use_tls,omitempty"`
	// PathStyle puts the bucket in the URL's path (endpoint/bucket/key), as most
	// self-hosted servers (MinIO, Garage, SeaweedFS) want, rather than in its host name.
	// Default: false.
	PathStyle bool `json:"path_style,omitempty"`

	store *blobs.S3
}

// CaddyModule returns the Caddy module information.
func (*S3BlobStore) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: BlobsNamespace + ".s3", New: func() caddy.Module { return new(S3BlobStore) }}
}

// Provision resolves placeholders and checks the fields. It makes no request: Provision
// also runs under `caddy validate`, and an object store that is down at start should not
// keep the gateway from serving everything else.
func (s *S3BlobStore) Provision(caddy.Context) error {
	repl := caddy.NewReplacer()
	cfg := blobs.S3Config{
		Endpoint: repl.ReplaceKnown(s.Endpoint, ""), Bucket: repl.ReplaceKnown(s.Bucket, ""),
		Region:      repl.ReplaceKnown(s.Region, ""),
		AccessKeyID: repl.ReplaceKnown(s.AccessKeyID, ""), SecretAccessKey: repl.ReplaceKnown(s.SecretAccessKey, ""),
		Secure: s.UseTLS == nil || *s.UseTLS, PathStyle: s.PathStyle,
	}
	store, err := blobs.NewS3(cfg)
	if err != nil {
		// NewS3's errors name fields, never their values but the endpoint's.
		return fmt.Errorf("%w (a field given as {env.NAME} is empty when NAME is unset)", err)
	}
	s.store = store
	return nil
}

// BlobStore returns the store.
func (s *S3BlobStore) BlobStore() blobs.Store { return s.store }

// provisionBlobStore loads the configured blob store backend, or the file store in
// Caddy's data directory.
func (a *App) provisionBlobStore(ctx caddy.Context) error {
	if len(a.BlobStoreRaw) == 0 {
		f := new(FileBlobStore)
		if err := f.Provision(ctx); err != nil {
			return fmt.Errorf("blob_store: %w", err)
		}
		a.blobs = f.store
		return nil
	}
	// The backend is checked here rather than by LoadModule, whose error would quote the
	// whole object, secret_access_key included.
	var head struct {
		Backend string `json:"backend"`
	}
	if err := json.Unmarshal(a.BlobStoreRaw, &head); err != nil {
		return fmt.Errorf("blob_store: %w", err)
	}
	if err := checkBlobBackend(head.Backend); err != nil {
		return fmt.Errorf("blob_store: %w", err)
	}
	mod, err := ctx.LoadModule(a, "BlobStoreRaw")
	if err != nil {
		return fmt.Errorf("blob_store: %w", err)
	}
	store := mod.(BlobStoreModule).BlobStore() // checkBlobBackend made sure
	if store == nil {
		return fmt.Errorf("blob_store: %s provisioned no store", head.Backend)
	}
	a.blobs = store
	return nil
}

// checkBlobBackend tells whether backend names a blob store module of this build.
func checkBlobBackend(backend string) error {
	return checkGuest[BlobStoreModule](BlobsNamespace, backend, "blob store backend", "backend", "BlobStore")
}

// blobBackends lists the blob store backends of this build.
func blobBackends() string { return moduleNames(BlobsNamespace) }

// checkGuest tells whether name names a module of namespace in this build that is a T: a
// guest module's name, checked before it is loaded, so that the error lists the names
// there are and quotes none of the configuration. noun names such a module ("blob store
// backend"), short its name's role ("backend"), method the one that makes a T.
func checkGuest[T any](namespace, name, noun, short, method string) error {
	if name == "" {
		return fmt.Errorf("%s is required (%s)", short, moduleNames(namespace))
	}
	id := namespace + "." + name
	info, err := caddy.GetModule(id)
	if err != nil {
		return fmt.Errorf("unknown %s %q: no module %s in this build, whose %ss are %s", noun, name, id, short, moduleNames(namespace))
	}
	if _, ok := info.New().(T); !ok {
		return fmt.Errorf("module %s is not a %s: it has no %s method", id, noun, method)
	}
	return nil
}

// moduleNames lists the names of namespace's modules in this build.
func moduleNames(namespace string) string {
	var names []string
	for _, m := range caddy.GetModules(namespace) {
		names = append(names, m.ID.Name())
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// BlobStore is the configuration's blob store (music audio, uploaded files, batch
// output), provisioned.
func (a *App) BlobStore() blobs.Store { return a.blobs }

// Interface guards.
var (
	_ BlobStoreModule   = (*FileBlobStore)(nil)
	_ BlobStoreModule   = (*S3BlobStore)(nil)
	_ caddy.Provisioner = (*FileBlobStore)(nil)
	_ caddy.Provisioner = (*S3BlobStore)(nil)
)
