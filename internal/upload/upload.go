// Package upload reads a multipart/form-data request body and writes it on to an upstream
// without holding its files in memory.
//
// Parse reads the body part by part. Small fields (model, prompt, n...) are read into memory,
// bounded per field and in total. A file part is either left in the body, to be streamed to the
// upstream as it arrives, or spooled to a temporary file: it is spooled when a field the caller
// needs to choose a route (by default "model") has not been seen yet, as openai-go and
// openai-node send the file before the model, or always when the caller asks for a body it can
// send again (Options.Replay), so that a failed first route can fall back to the next one.
// Parse returns as soon as a file can be streamed; the parts after it are read while the
// upstream body is written.
//
// Field names are read as the SDKs send them: "image", "image[]" and "image[3]" are one list
// named "image" (Part.Name), likewise "include[]" or "timestamp_granularities[]"; a nested name
// such as "chunking_strategy[type]" is kept as is. Values stay strings; Form.Bool, Form.Int and
// Form.Float read the string-coerced booleans and numbers the SDKs send.
//
// The API: Parse returns a *Form; Form.Value, Values, Files, Bool, Int and Float read it,
// Form.Open reads a spooled file (to probe an audio file's duration), Form.SetLimit applies a
// route's lower limit, Form.Body builds a *Body per upstream request, Form.Close releases the
// spool. Errors: *TooLargeError (413), *FormError (400), ErrConsumed (no fallback possible),
// *SpoolError (the spool directory failed: the server's fault, not the client's), otherwise
// the request's own read error.
//
// A handler's flow:
//
//	boundary, err := upload.Boundary(r.Header.Get("Content-Type"))
//	form, err := upload.Parse(r.Body, boundary, upload.Options{Limit: 50 << 20, Length: r.ContentLength, Replay: len(routes) > 1})
//	// *upload.TooLargeError answers 413, *upload.FormError 400
//	defer func() { _ = form.Close() }() // releases the spool file
//	model, _ := form.Value("model")
//	// choose the routes for model; form.SetLimit(route.Limit) applies a lower per-route limit
//	body, err := form.Body(upload.BodyOptions{Set: map[string]string{"model": route.Model}, Drop: []string{"meta"}})
//	req, _ := http.NewRequestWithContext(ctx, "POST", url, body)
//	req.Header.Set("Content-Type", body.ContentType())
//	req.ContentLength = body.Len() // -1 (chunked) while a file is streamed
//	// on failure before any byte reached the client, and when form.Replayable():
//	body, err = form.Body(upload.BodyOptions{Set: map[string]string{"model": route2.Model}})
//
// The upstream body keeps the client's part order, each file's filename and content type, and
// the fields' values, with the changes BodyOptions asks for: fields replaced (the route's
// upstream model), gateway-only fields dropped, names renamed, lists written in one style. Two
// bodies built with the same options from a replayable form are byte for byte the same.
//
// The total size limit counts every byte of the request body, and reading stops with a
// *TooLargeError as soon as it is passed: a spooled upload fails in Parse, a streamed one while
// its body is read (the upstream request must then be abandoned, and the client answered 413).
// A handler that must send nothing upstream for an oversized upload of unknown length parses
// with Replay. The spool holds at most Limit bytes of the files and is released by Form.Close.
//
// Spool files are unlinked when made and kept for reuse (see spool.go). A spooled file's
// content follows room for its header, so that a body whose files are last (or followed only
// by fields) is one stretch of the spool: on Linux, Body offers the spool's descriptor
// (SyscallConn), and an HTTP/1 transport over plain TCP sends that stretch with sendfile(2),
// without copying it through the process; elsewhere, and over TLS, it is read part by part.
//
// A Form is not safe for concurrent use: read its fields before or after a Body is read, not
// while.
package upload

import (
	"errors"
	"fmt"
	"mime"
	"strings"
)

// Defaults of Options.
const (
	DefaultLimit          = 25 << 20
	DefaultMaxFieldBytes  = 64 << 10
	DefaultMaxFieldsBytes = 1 << 20
	DefaultMaxParts       = 1000
)

// TooLargeError is returned when the body, or one field, is larger than its limit; a handler
// answers 413 payload_too_large.
type TooLargeError struct {
	// Limit is the limit passed, in bytes.
	Limit int64
	// Field is the field that was too large, or empty for the whole body.
	Field string
}

func (e *TooLargeError) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("upload: field %q is larger than %d bytes", e.Field, e.Limit)
	}
	return fmt.Sprintf("upload: body is larger than the limit of %d bytes", e.Limit)
}

// FormError is returned for a body that is not a valid multipart form; a handler answers 400.
type FormError struct {
	Reason string
	Err    error
}

func (e *FormError) Error() string {
	if e.Err != nil {
		return "upload: malformed multipart body: " + e.Reason + ": " + e.Err.Error()
	}
	return "upload: malformed multipart body: " + e.Reason
}

func (e *FormError) Unwrap() error { return e.Err }

// SpoolError is returned when the spool file cannot be made or written (its directory is
// missing, unwritable or full): the server's failure, not the client's. Err holds the path.
type SpoolError struct {
	Op  string // "creating", "seeking in", "writing"
	Err error
}

func (e *SpoolError) Error() string { return "upload: " + e.Op + " the spool file: " + e.Err.Error() }

func (e *SpoolError) Unwrap() error { return e.Err }

// ErrConsumed is returned by Form.Body when an earlier body already read a streamed file from
// the request: it cannot be sent again. Options.Replay makes a form that can.
var ErrConsumed = errors.New("upload: the streamed body was already sent; parse with Replay to send it again")

// Boundary returns the boundary of a multipart/form-data Content-Type.
func Boundary(contentType string) (string, error) {
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil {
		return "", &FormError{Reason: "content type", Err: err}
	}
	if mt != "multipart/form-data" {
		return "", &FormError{Reason: fmt.Sprintf("content type %q is not multipart/form-data", mt)}
	}
	b := params["boundary"]
	if err := checkBoundary(b); err != nil {
		return "", err
	}
	return b, nil
}

func checkBoundary(b string) error {
	if b == "" || len(b) > 70 {
		return &FormError{Reason: "boundary must be 1 to 70 characters"}
	}
	if strings.ContainsAny(b, "\r\n") {
		return &FormError{Reason: "boundary contains a line break"}
	}
	return nil
}

// splitName returns the list name of a field sent as name[] or name[N], and whether it was.
// Any other name, nested ones such as chunking_strategy[type] included, is its own name.
func splitName(key string) (name string, list bool) {
	i := strings.IndexByte(key, '[')
	if i <= 0 || key[len(key)-1] != ']' {
		return key, false
	}
	for _, c := range key[i+1 : len(key)-1] {
		if c < '0' || c > '9' {
			return key, false
		}
	}
	return key[:i], true
}

// baseName is name up to its first bracket: "meta" for meta[user].
func baseName(name string) string {
	if i := strings.IndexByte(name, '['); i > 0 {
		return name[:i]
	}
	return name
}
