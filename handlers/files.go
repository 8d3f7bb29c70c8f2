package handlers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/modelgateway/caddy-modelgateway/blobs"
	"github.com/modelgateway/caddy-modelgateway/files"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// The files family: POST /files streams an upload into the blob store (package files
// keeps the records and blobs), GET /files/{id} and /content read a file of the workspace,
// DELETE /files/{id} removes it. GET /files is refused (fileListRefused).

// maxFileFieldBytes bounds a field of the upload form (purpose, expires_after[...]).
const maxFileFieldBytes = 4 << 10

// fileFormSlack is what the upload form may hold beside the file: its fields and framing.
const fileFormSlack = 1 << 20

// filesOff answers a file route while the gateway has no blob store.
func (g *Gateway) filesOff() *APIError {
	if g.Blobs == nil {
		return newError(http.StatusServiceUnavailable, CodeNotConfigured, "files are off: the gateway has no blob store to keep them in (blob_store)")
	}
	return nil
}

// maxFileSize is the largest file POST /files takes.
func (g *Gateway) maxFileSize() int64 {
	if g.MaxFileSize > 0 {
		return g.MaxFileSize
	}
	return files.DefaultMaxSize
}

// fileObject is OpenAI's file object, as openai-go's FileObject decodes it.
type fileObject struct {
	ID            string  `json:"id"`
	Object        string  `json:"object"`
	Bytes         int64   `json:"bytes"`
	CreatedAt     int64   `json:"created_at"`
	Filename      string  `json:"filename"`
	Purpose       string  `json:"purpose"`
	Status        string  `json:"status"`
	ExpiresAt     *int64  `json:"expires_at"`
	StatusDetails *string `json:"status_details"`
}

func renderFile(f store.File) fileObject {
	o := fileObject{ID: f.ID, Object: "file", Bytes: f.Bytes, CreatedAt: f.CreatedAt.Unix(), Filename: f.Filename,
		Purpose: f.Purpose, Status: "processed"}
	if !f.ExpiresAt.IsZero() {
		at := f.ExpiresAt.Unix()
		o.ExpiresAt = &at
	}
	return o
}

// fileNotFound answers a file id that is not one of the workspace's live files.
func fileNotFound() *APIError {
	e := newError(http.StatusNotFound, CodeNotFound, "file not found or not owned")
	e.Param = "file_id"
	e.Extra = map[string]any{"reason": "file_not_found_or_not_owned"}
	return e
}

// ownFile returns the workspace's live file named by the path, or 404: another
// workspace's, a deleted, an expired and a missing one alike.
func (g *Gateway) ownFile(ctx context.Context, r *http.Request, c *Caller) (store.File, error) {
	f, err := g.Store.GetFile(ctx, c.Key.WorkspaceID, r.PathValue("file_id"))
	switch {
	case errors.Is(err, store.ErrNotFound):
		return store.File{}, fileNotFound()
	case err != nil:
		return store.File{}, err
	}
	return f, nil
}

// createFile serves POST /files: the file part is streamed into the blob store as it
// arrives (size unknown, its SHA-256 computed on the way), bounded by max_file_size; a
// batch file is checked line by line on the way. The client's parts may come in any order
// (openai-go sends the file before purpose): a batch file whose purpose came first stops at
// its first bad line, one whose purpose comes after is checked all the same and removed
// when bad. Whatever is refused leaves nothing stored.
func (g *Gateway) createFile(w http.ResponseWriter, r *http.Request, c *Caller) error {
	if apiErr := g.filesOff(); apiErr != nil {
		return apiErr
	}
	limit := g.maxFileSize()
	if r.ContentLength > limit+fileFormSlack {
		return fileTooLarge(limit)
	}
	r.Body = http.MaxBytesReader(w, r.Body, limit+fileFormSlack)
	mr, err := r.MultipartReader()
	if err != nil {
		return newError(http.StatusBadRequest, CodeValidation, "the body must be multipart/form-data with a file part and purpose")
	}
	up := &fileUpload{id: files.NewID(), ws: c.Key.WorkspaceID, limit: limit}
	defer func() {
		// Whatever refuses the upload after its file was stored removes the file.
		if up.stored != nil {
			_ = g.Blobs.Delete(context.WithoutCancel(r.Context()), up.stored.Key)
		}
	}()
	if err := g.readFileParts(r.Context(), mr, up); err != nil {
		return err
	}
	m, apiErr := up.meta(g.Now())
	if apiErr != nil {
		return apiErr
	}
	if m.Purpose == files.PurposeBatch {
		if err := up.checker.Close(); err != nil {
			return batchFileError(err)
		}
	}
	ctx, cancel := g.storeContext(r.Context())
	defer cancel()
	stored := *up.stored
	up.stored = nil // kept now, or removed by Record when it fails
	f, err := files.Record(ctx, g.Store, g.Blobs, m, stored)
	if err != nil {
		return g.storeUnavailable("recording the uploaded file", err)
	}
	return writeJSON(w, http.StatusOK, renderFile(f))
}

// fileUpload is what POST /files has read.
type fileUpload struct {
	id, ws      string
	limit       int64
	purpose     *string
	anchor      *string
	seconds     *string
	filename    string
	stored      *blobs.Info
	checker     *files.BatchChecker
	contentType string
}

// readFileParts reads the upload form, streaming its file into the blob store.
func (g *Gateway) readFileParts(ctx context.Context, mr *multipart.Reader, up *fileUpload) error {
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return formError(err, up.limit)
		}
		name := part.FormName()
		switch name {
		case "file":
			if up.stored != nil {
				return paramError("file", "the form has more than one file part: upload one file per request")
			}
			if err := g.storeFilePart(ctx, part, up); err != nil {
				return err
			}
		case "purpose", "expires_after[anchor]", "expires_after[seconds]":
			v, apiErr := readFileField(part, name, up.limit)
			if apiErr != nil {
				return apiErr
			}
			*map[string]**string{"purpose": &up.purpose, "expires_after[anchor]": &up.anchor, "expires_after[seconds]": &up.seconds}[name] = &v
		default:
			return paramError(name, fmt.Sprintf("unknown field %q: POST /files takes file, purpose and expires_after[anchor], expires_after[seconds]", name))
		}
	}
	if up.stored == nil {
		return paramError("file", "the form has no file part: send the file as the multipart field \"file\"")
	}
	return nil
}

// readFileField reads a small field of the upload form.
func readFileField(part *multipart.Part, name string, limit int64) (string, *APIError) {
	v, err := io.ReadAll(io.LimitReader(part, maxFileFieldBytes+1))
	if err != nil {
		return "", formError(err, limit)
	}
	if len(v) > maxFileFieldBytes {
		return "", paramError(name, fmt.Sprintf("%s is longer than %d bytes", name, maxFileFieldBytes))
	}
	return string(v), nil
}

// formError answers a failure to read the upload form.
func formError(err error, limit int64) *APIError {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return fileTooLarge(limit)
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return unreadable(err)
	}
	return newError(http.StatusBadRequest, CodeValidation, "could not read the multipart form: "+err.Error())
}

// storeFilePart streams the file part into the blob store under the upload's key.
func (g *Gateway) storeFilePart(ctx context.Context, part *multipart.Part, up *fileUpload) error {
	up.filename = part.FileName()
	if up.filename == "" {
		up.filename = "file"
	}
	up.contentType = blobs.DefaultContentType
	if ct := part.Header.Get("Content-Type"); ct != "" {
		if mt, params, err := mime.ParseMediaType(ct); err == nil {
			if v := mime.FormatMediaType(mt, params); v != "" && len(v) <= blobs.MaxContentTypeLength {
				up.contentType = v
			}
		}
	}
	// A batch file whose purpose came first is refused at its first bad line; otherwise
	// the check's verdict waits for the purpose.
	up.checker = &files.BatchChecker{FailFast: up.purpose != nil && *up.purpose == files.PurposeBatch}
	bounded := &boundedReader{r: part, left: up.limit}
	var src io.Reader = bounded
	if up.purpose == nil || *up.purpose == files.PurposeBatch {
		src = io.TeeReader(bounded, up.checker)
	}
	info, err := g.Blobs.Put(ctx, files.BlobKey(up.ws, up.id), src, -1, up.contentType)
	switch {
	case bounded.over:
		return fileTooLarge(up.limit)
	case up.checker.FailFast && up.checker.Err() != nil:
		return batchFileError(up.checker.Err())
	case err != nil:
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) || errors.Is(err, os.ErrDeadlineExceeded) || ctx.Err() != nil {
			return formError(err, up.limit)
		}
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return newError(http.StatusBadRequest, CodeValidation, "the upload ended before its file part did")
		}
		return fmt.Errorf("storing an uploaded file: %w", err)
	}
	up.stored = &info
	return nil
}

// boundedReader yields at most left bytes of r; one more sets over and fails the read.
type boundedReader struct {
	r    io.Reader
	left int64
	over bool
}

var errFileTooLarge = errors.New("the file is larger than the limit")

func (b *boundedReader) Read(p []byte) (int, error) {
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.r.Read(p)
	if int64(n) > b.left {
		b.over = true
		return 0, errFileTooLarge
	}
	b.left -= int64(n)
	return n, err
}

// meta checks the fields read and says what the file is.
func (up *fileUpload) meta(now time.Time) (files.Meta, *APIError) {
	m := files.Meta{ID: up.id, WorkspaceID: up.ws, Filename: up.filename, ContentType: up.stored.ContentType}
	if up.purpose == nil || *up.purpose == "" {
		return m, paramError("purpose", "purpose is required: one of "+strings.Join(files.UploadPurposes, ", "))
	}
	if !slices.Contains(files.UploadPurposes, *up.purpose) {
		return m, paramError("purpose", fmt.Sprintf("purpose %q is not one of %s", *up.purpose, strings.Join(files.UploadPurposes, ", ")))
	}
	m.Purpose = *up.purpose
	if up.anchor != nil && *up.anchor != "created_at" {
		return m, paramError("expires_after[anchor]", fmt.Sprintf("expires_after[anchor] %q: the only anchor is created_at", *up.anchor))
	}
	switch {
	case up.seconds != nil:
		n, err := strconv.ParseInt(*up.seconds, 10, 64)
		lo, hi := int64(files.MinExpiresAfter/time.Second), int64(files.MaxExpiresAfter/time.Second)
		if err != nil || n < lo || n > hi {
			return m, paramError("expires_after[seconds]", fmt.Sprintf("expires_after[seconds] must be a whole number from %d to %d", lo, hi))
		}
		m.ExpiresAt = now.Add(time.Duration(n) * time.Second)
	case up.anchor != nil:
		return m, paramError("expires_after[seconds]", "expires_after[seconds] is required with expires_after[anchor]")
	case m.Purpose == files.PurposeBatch:
		m.ExpiresAt = now.Add(files.DefaultBatchExpiry)
	}
	return m, nil
}

func fileTooLarge(limit int64) *APIError {
	e := newError(http.StatusRequestEntityTooLarge, CodePayloadTooLarge, fmt.Sprintf(
		"the file is larger than this gateway's limit of %d bytes (max_file_size); nothing was stored", limit))
	e.Param = "file"
	e.Extra = map[string]any{"max_file_size": limit}
	return e
}

// batchFileError answers a batch file that is not a batch's input.
func batchFileError(err error) *APIError {
	e := newError(http.StatusBadRequest, CodeValidation, err.Error()+"; nothing was stored")
	e.Param = "file"
	var le *files.LineError
	if errors.As(err, &le) && le.Line > 0 {
		e.Extra = map[string]any{"line": le.Line}
	}
	return e
}

// getFile serves GET /files/{file_id}.
func (g *Gateway) getFile(w http.ResponseWriter, r *http.Request, c *Caller) error {
	f, err := g.ownFile(r.Context(), r, c)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, renderFile(f))
}

// fileContent serves GET /files/{file_id}/content: the file, streamed from the blob store,
// whole or by the client's Range (206), with the upload's Content-Type and its SHA-256 as
// the ETag.
func (g *Gateway) fileContent(w http.ResponseWriter, r *http.Request, c *Caller) error {
	if apiErr := g.filesOff(); apiErr != nil {
		return apiErr
	}
	// The record's lookup is bounded as a read is; the content's stream is not.
	ctx, cancel := g.storeContext(r.Context())
	f, err := g.ownFile(ctx, r, c)
	cancel()
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return g.storeUnavailable("reading the file", err)
		}
		return err
	}
	info, err := g.Blobs.Stat(r.Context(), f.BlobKey)
	if errors.Is(err, blobs.ErrNotFound) {
		return fileNotFound() // removed as it expired or was deleted
	}
	if err != nil {
		return fmt.Errorf("reading the content of %s: %w", f.ID, err)
	}
	h := w.Header()
	h.Set("Content-Type", info.ContentType)
	if info.SHA256 != "" {
		h.Set("ETag", `"`+info.SHA256+`"`)
	}
	h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": f.Filename}))
	body := &blobSeeker{ctx: r.Context(), store: g.Blobs, key: f.BlobKey, size: info.Size}
	defer body.Close()
	http.ServeContent(w, r, "", info.ModTime, body)
	return nil
}

// deleteFile serves DELETE /files/{file_id}: the file is gone at once; its blob is removed
// now or, failing that, by the sweep.
func (g *Gateway) deleteFile(w http.ResponseWriter, r *http.Request, c *Caller) error {
	if apiErr := g.filesOff(); apiErr != nil {
		return apiErr
	}
	f, err := files.Remove(r.Context(), g.Store, g.Blobs, c.Key.WorkspaceID, r.PathValue("file_id"))
	switch {
	case errors.Is(err, store.ErrNotFound):
		return fileNotFound()
	case err != nil:
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"id": f.ID, "object": "file", "deleted": true})
}

// listFiles serves GET /files: refused, because listing through the operator's shared
// upstream credential would show other tenants' files at the provider.
func (g *Gateway) listFiles(http.ResponseWriter, *http.Request, *Caller) error {
	e := newError(http.StatusBadRequest, CodeNotSupported,
		"listing files is not supported on the shared gateway key; keep the ids POST /files answers and read each with GET /files/{file_id}")
	e.Extra = map[string]any{"reason": "file_list_not_supported_with_shared_gateway_key"}
	return e
}
