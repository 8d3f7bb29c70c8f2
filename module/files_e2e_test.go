//go:build unix

package module

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/openai/openai-go/v3"

	"github.com/modelgateway/caddy-modelgateway/blobs"
	"github.com/modelgateway/caddy-modelgateway/files"
)

// filesMaxSize is the max_file_size of the files tests: small, so that a file over it is
// cheap to send.
const filesMaxSize = 64 << 10

// batchRows is a batch file of n chat rows, as openai-go's users write them.
func batchRows(n int) []byte {
	var b bytes.Buffer
	for i := range n {
		fmt.Fprintf(&b, `{"custom_id":"row-%d","method":"POST","url":"/v1/chat/completions","body":{"model":"chat","messages":[{"role":"user","content":"say %d"}]}}`+"\n", i, i)
	}
	return b.Bytes()
}

// uploadRaw sends POST /files with the parts in the order given (name, value; a name
// "file" is the file part) and returns the status and body.
func uploadRaw(t *testing.T, env *gatewayEnv, key string, parts ...[2]string) (int, []byte) {
	t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	for _, p := range parts {
		var w io.Writer
		var err error
		if p[0] == "file" {
			w, err = mw.CreateFormFile("file", "rows.jsonl")
		} else {
			w, err = mw.CreateFormField(p[0])
		}
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(w, p[1])
	}
	_ = mw.Close()
	req, _ := http.NewRequest(http.MethodPost, env.baseURL+"/v1/files", &body)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := doRetryingDial(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

// wantAPIError checks that err is the gateway's error with status and code, its message
// containing each of want, and returns its raw JSON body.
func wantAPIError(t *testing.T, what string, err error, status int, code string, want ...string) string {
	t.Helper()
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != status || apiErr.Code != code {
		t.Fatalf("%s: %v, want %d %s", what, err, status, code)
	}
	for _, w := range want {
		if !strings.Contains(apiErr.Message, w) {
			t.Fatalf("%s: message %q does not say %q", what, apiErr.Message, w)
		}
	}
	return apiErr.RawJSON()
}

// TestFilesEndToEnd drives the files family with openai-go through in-process Caddy, the
// files kept in each blob store backend: an upload is kept byte for byte with its
// checksum and read back whole and by range; another workspace sees none of it; listing is
// refused; a bad batch file and one over max_file_size are refused and leave nothing
// stored; a deleted file is gone with its blob.
func TestFilesEndToEnd(t *testing.T) {
	backend, s3 := startFakeS3(t, "files")

	for _, bc := range []struct {
		name      string
		blobStore string
		// blobs lists the keys the blob store holds under prefix, in dir (the data directory).
		blobs func(t *testing.T, dir, prefix string) []string
	}{
		{name: "file", blobs: func(t *testing.T, dir, prefix string) []string {
			root := filepath.Join(dir, "data", "caddy", "model_gateway", "blobs")
			var keys []string
			err := filepath.WalkDir(filepath.Join(root, filepath.FromSlash(prefix)), func(path string, d fs.DirEntry, err error) error {
				if err != nil || d.IsDir() {
					return err
				}
				rel, _ := filepath.Rel(root, path)
				keys = append(keys, filepath.ToSlash(rel))
				return nil
			})
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Fatal(err)
			}
			return keys
		}},
		{name: "s3", blobStore: `blob_store s3 {
			endpoint ` + strings.TrimPrefix(s3.URL, "http://") + `
			bucket files
			region us-east-1
			access_key_id files-key
			secret_access_key files-secret
			use_tls off
			path_style on
		}`, blobs: func(t *testing.T, _, prefix string) []string {
			p := gofakes3.NewPrefix(&prefix, nil)
			list, err := backend.ListBucket("files", &p, gofakes3.ListBucketPage{})
			if err != nil {
				t.Fatal(err)
			}
			var keys []string
			for _, c := range list.Contents {
				keys = append(keys, c.Key)
			}
			return keys
		}},
	} {
		t.Run(bc.name, func(t *testing.T) {
			dir := t.TempDir()
			env := startGatewayIn(t, dir, fmt.Sprintf("max_file_size %d\n%s", filesMaxSize, bc.blobStore), "")
			ws, key := env.workspace(usd)
			_, otherKey := env.workspace(usd)
			client, other := env.openai(key), env.openai(otherKey)
			ctx := context.Background()
			stored := func() []string { return bc.blobs(t, dir, "files/"+ws+"/") }

			rows := batchRows(3)
			f, err := client.Files.New(ctx, openai.FileNewParams{
				File: openai.File(bytes.NewReader(rows), "rows.jsonl", "application/jsonl"), Purpose: openai.FilePurposeBatch})
			if err != nil {
				t.Fatalf("Files.New: %v", err)
			}
			if !strings.HasPrefix(f.ID, "file-") || f.Object != "file" || f.Bytes != int64(len(rows)) || f.Filename != "rows.jsonl" ||
				f.Purpose != openai.FileObjectPurposeBatch || f.Status != openai.FileObjectStatusProcessed ||
				f.ExpiresAt != f.CreatedAt+int64(files.DefaultBatchExpiry/time.Second) || time.Since(time.Unix(f.CreatedAt, 0)) > time.Minute {
				t.Fatalf("Files.New answered %s", f.RawJSON())
			}
			if keys := stored(); len(keys) != 1 || keys[0] != files.BlobKey(ws, f.ID) {
				t.Fatalf("the %s blob store holds %v, want [%s]", bc.name, keys, files.BlobKey(ws, f.ID))
			}
			rec, err := env.store.GetFile(ctx, ws, f.ID)
			if err != nil || rec.SHA256 != checksum(rows) || rec.ContentType != "application/jsonl" {
				t.Fatalf("the record %+v (%v): want sha256 %s", rec, err, checksum(rows))
			}

			got, err := client.Files.Get(ctx, f.ID)
			if err != nil || got.RawJSON() != f.RawJSON() {
				t.Fatalf("Files.Get: %v %s, want %s", err, got.RawJSON(), f.RawJSON())
			}
			resp, err := client.Files.Content(ctx, f.ID)
			if err != nil {
				t.Fatalf("Files.Content: %v", err)
			}
			content, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if !bytes.Equal(content, rows) || resp.Header.Get("Content-Type") != "application/jsonl" || resp.Header.Get("ETag") != `"`+checksum(rows)+`"` {
				t.Fatalf("Files.Content: %d bytes, headers %v", len(content), resp.Header)
			}

			req, _ := http.NewRequest(http.MethodGet, env.baseURL+"/v1/files/"+f.ID+"/content", nil)
			req.Header.Set("Authorization", "Bearer "+key)
			req.Header.Set("Range", "bytes=10-49")
			rr, err := doRetryingDial(req)
			if err != nil {
				t.Fatal(err)
			}
			part, _ := io.ReadAll(rr.Body)
			rr.Body.Close()
			if rr.StatusCode != http.StatusPartialContent || !bytes.Equal(part, rows[10:50]) ||
				rr.Header.Get("Content-Range") != fmt.Sprintf("bytes 10-49/%d", len(rows)) {
				t.Fatalf("range: %d %q %v", rr.StatusCode, part, rr.Header)
			}

			_, err = client.Files.List(ctx, openai.FileListParams{})
			wantAPIError(t, "Files.List", err, http.StatusBadRequest, "not_supported")
			if status, raw := env.get(key, "/files"); status != http.StatusBadRequest || !strings.Contains(string(raw), `"reason":"file_list_not_supported_with_shared_gateway_key"`) {
				t.Fatalf("GET /files: %d %s", status, raw)
			}

			// Another workspace: as if the file did not exist.
			_, err = other.Files.Get(ctx, f.ID)
			wantAPIError(t, "another workspace's Files.Get", err, http.StatusNotFound, "not_found")
			if status, raw := env.get(otherKey, "/files/"+f.ID); status != http.StatusNotFound || !strings.Contains(string(raw), `"reason":"file_not_found_or_not_owned"`) {
				t.Fatalf("another workspace's GET /files/{id}: %d %s", status, raw)
			}
			_, err = other.Files.Content(ctx, f.ID)
			wantAPIError(t, "another workspace's Files.Content", err, http.StatusNotFound, "not_found")
			_, err = other.Files.Delete(ctx, f.ID)
			wantAPIError(t, "another workspace's Files.Delete", err, http.StatusNotFound, "not_found")
			if _, err := client.Files.Get(ctx, f.ID); err != nil {
				t.Fatalf("the file after another workspace's delete: %v", err)
			}

			// expires_after, and a purpose that is not checked as a batch.
			notes := []byte("not jsonl at all\n")
			u, err := client.Files.New(ctx, openai.FileNewParams{
				File: openai.File(bytes.NewReader(notes), "notes.txt", "text/plain"), Purpose: openai.FilePurposeUserData,
				ExpiresAfter: openai.FileNewParamsExpiresAfter{Seconds: 3600}})
			if err != nil || u.ExpiresAt != u.CreatedAt+3600 || u.Purpose != openai.FileObjectPurposeUserData {
				t.Fatalf("Files.New with expires_after: %v %s", err, u.RawJSON())
			}
			_, err = client.Files.New(ctx, openai.FileNewParams{
				File: openai.File(bytes.NewReader(notes), "notes.txt", "text/plain"), Purpose: openai.FilePurposeUserData,
				ExpiresAfter: openai.FileNewParamsExpiresAfter{Seconds: 60}})
			wantAPIError(t, "expires_after of a minute", err, http.StatusBadRequest, "validation_error", "expires_after[seconds]", "3600")
			_, err = client.Files.New(ctx, openai.FileNewParams{
				File: openai.File(bytes.NewReader(notes), "notes.txt", "text/plain"), Purpose: "training"})
			wantAPIError(t, "an unknown purpose", err, http.StatusBadRequest, "validation_error", `"training"`, "user_data")

			// A bad batch file: refused naming its line, nothing kept, whether the purpose
			// comes after the file (openai-go) or before it.
			before := stored()
			bad := append(batchRows(2), []byte(`{"custom_id":"row-9","method":"GET","url":"/v1/chat/completions","body":{}}`+"\n")...)
			_, err = client.Files.New(ctx, openai.FileNewParams{
				File: openai.File(bytes.NewReader(bad), "bad.jsonl", "application/jsonl"), Purpose: openai.FilePurposeBatch})
			wantAPIError(t, "a bad batch file", err, http.StatusBadRequest, "validation_error", "line 3", `method "GET"`)
			status, body := uploadRaw(t, env, key, [2]string{"purpose", "batch"}, [2]string{"file", string(batchRows(1)) + "{\"custom_id\":\"row-0\"}\n"})
			if status != http.StatusBadRequest || !strings.Contains(string(body), "line 2") {
				t.Fatalf("a bad batch file, purpose first: %d %s", status, body)
			}
			dup := append(batchRows(2), batchRows(1)...)
			status, body = uploadRaw(t, env, key, [2]string{"file", string(dup)}, [2]string{"purpose", "batch"})
			if status != http.StatusBadRequest || !strings.Contains(string(body), `line 3 of the batch file repeats custom_id \"row-0\"`) {
				t.Fatalf("a batch file repeating a custom_id: %d %s", status, body)
			}
			// Over max_file_size: 413 naming the limit, nothing kept.
			big := bytes.Repeat([]byte("x"), filesMaxSize+1)
			_, err = client.Files.New(ctx, openai.FileNewParams{
				File: openai.File(bytes.NewReader(big), "big.bin", "application/octet-stream"), Purpose: openai.FilePurposeUserData})
			wantAPIError(t, "a file over the limit", err, http.StatusRequestEntityTooLarge, "payload_too_large", fmt.Sprint(filesMaxSize))
			if after := stored(); fmt.Sprint(after) != fmt.Sprint(before) {
				t.Fatalf("refused uploads left blobs: %v, was %v", after, before)
			}
			// Exactly the limit is taken.
			edge, err := client.Files.New(ctx, openai.FileNewParams{
				File: openai.File(bytes.NewReader(big[:filesMaxSize]), "edge.bin", "application/octet-stream"), Purpose: openai.FilePurposeUserData})
			if err != nil || edge.Bytes != filesMaxSize {
				t.Fatalf("a file of exactly max_file_size: %v", err)
			}

			// Delete: gone, with its blob.
			d, err := client.Files.Delete(ctx, f.ID)
			if err != nil || !d.Deleted || d.ID != f.ID || d.Object != "file" {
				t.Fatalf("Files.Delete: %v %+v", err, d)
			}
			_, err = client.Files.Get(ctx, f.ID)
			wantAPIError(t, "Files.Get after delete", err, http.StatusNotFound, "not_found")
			_, err = client.Files.Content(ctx, f.ID)
			wantAPIError(t, "Files.Content after delete", err, http.StatusNotFound, "not_found")
			_, err = client.Files.Delete(ctx, f.ID)
			wantAPIError(t, "Files.Delete again", err, http.StatusNotFound, "not_found")
			for _, k := range stored() {
				if k == files.BlobKey(ws, f.ID) {
					t.Fatalf("the deleted file's blob is still stored")
				}
			}
			var obj map[string]any
			if err := json.Unmarshal([]byte(u.RawJSON()), &obj); err != nil || obj["status_details"] != nil {
				t.Fatalf("status_details: %v", obj)
			}
		})
	}
}

// TestFilesExpiryEndToEnd: a file whose expires_at passes answers 404 at once, and the
// gateway's files worker removes its blob and record.
func TestFilesExpiryEndToEnd(t *testing.T) {
	prev := filesSweepEvery.Load()
	filesSweepEvery.Store(int64(100 * time.Millisecond))
	t.Cleanup(func() { filesSweepEvery.Store(prev) })

	dir := t.TempDir()
	env := startGatewayIn(t, dir, "", "")
	ws, key := env.workspace(usd)
	ctx := context.Background()
	client := env.openai(key)
	blobStore, err := blobs.NewFS(filepath.Join(dir, "data", "caddy", "model_gateway", "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	// expires_after is at least an hour, so the test records a file of a shorter life
	// itself, as a batch records its output file.
	content := []byte("soon gone\n")
	f, err := files.Save(ctx, env.store, blobStore, files.Meta{WorkspaceID: ws, Filename: "short.txt", Purpose: files.PurposeUserData,
		ContentType: "text/plain", ExpiresAt: time.Now().Add(1500 * time.Millisecond)}, bytes.NewReader(content))
	if err != nil {
		t.Fatal(err)
	}
	kept, err := client.Files.New(ctx, openai.FileNewParams{
		File: openai.File(bytes.NewReader(content), "kept.txt", "text/plain"), Purpose: openai.FilePurposeUserData})
	if err != nil {
		t.Fatal(err)
	}
	got, err := client.Files.Get(ctx, f.ID)
	if err != nil || got.ExpiresAt != f.ExpiresAt.Unix() || got.Filename != "short.txt" {
		t.Fatalf("Files.Get before expiry: %v %s", err, got.RawJSON())
	}
	waitFor(t, "the expired file's blob removed", func() bool {
		_, err := blobStore.Stat(ctx, f.BlobKey)
		return errors.Is(err, blobs.ErrNotFound)
	})
	_, err = client.Files.Get(ctx, f.ID)
	wantAPIError(t, "Files.Get after expiry", err, http.StatusNotFound, "not_found")
	_, err = client.Files.Content(ctx, f.ID)
	wantAPIError(t, "Files.Content after expiry", err, http.StatusNotFound, "not_found")
	waitFor(t, "the expired file's record purged", func() bool {
		due, err := env.store.DueFiles(ctx, time.Now(), 10)
		return err == nil && len(due) == 0
	})
	if _, err := blobStore.Stat(ctx, files.BlobKey(ws, kept.ID)); err != nil {
		t.Fatalf("the sweep removed a live file: %v", err)
	}
}
