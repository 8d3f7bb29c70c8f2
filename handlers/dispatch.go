package handlers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/modelgateway/caddy-modelgateway/billing"
	"github.com/modelgateway/caddy-modelgateway/internal/ids"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// Dispatch runs one API request in process for an authenticated caller, through the route
// table and the normal lifecycle, writing the answer (status, headers, body) into w: what
// a gateway-run batch row does for each endpoint it allows. path is relative to the API's
// base path ("/chat/completions"); body is the request's JSON. adm is where the request's
// credit comes from (a batch's budget); nil is the Gateway's default, a key lease or a
// reservation of its own. ctx ends the request as a client leaving would.
//
// The answer's outcome is in w, as a client would see it; the error is for what kept the
// request from being answered at all: a request that cannot be built, or an answer cut off
// after its first bytes (a binary answer that broke), which a client would see as a reset.
func (g *Gateway) Dispatch(ctx context.Context, caller *Caller, adm billing.Admission, method, path string, body []byte, w http.ResponseWriter) (err error) {
	if caller == nil {
		return errors.New("dispatching a request: no caller")
	}
	if adm != nil {
		ctx = context.WithValue(ctx, admissionKey{}, adm)
	}
	r, err := http.NewRequestWithContext(ctx, method, "http://gateway/v1"+path, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("dispatching a request: %w", err)
	}
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Content-Length", strconv.Itoa(len(body)))
	defer func() {
		if v := recover(); v != nil {
			if v != http.ErrAbortHandler {
				panic(v)
			}
			err = errors.New("the answer was cut off after its first bytes")
		}
	}()
	g.serveAs(w, r, path, caller)
	return nil
}

// generationIDKey carries, in a request's context, the generation id Dispatch was given
// (a batch row's, derived from the batch and the row, so that a row run again after a
// crash settles under the same id and is charged once).
type generationIDKey struct{}

// generationID is the generation id of the request of ctx: the one its dispatcher fixed,
// else a new one.
func generationID(ctx context.Context) string {
	if id, ok := ctx.Value(generationIDKey{}).(string); ok && id != "" {
		return id
	}
	return ids.New("gen")
}

// DispatchRow runs one row of a batch (batch.Dispatch): as Dispatch, for key keyID of
// workspace workspaceID, with generation id generationID, and returns the answer's status
// and body. A key that is gone or revoked answers the row as a request with it would be
// answered (401).
func (g *Gateway) DispatchRow(ctx context.Context, workspaceID, keyID string, adm billing.Admission, generationID, path string, body []byte) (int, []byte, error) {
	key, err := g.Store.GetKey(ctx, keyID)
	switch {
	case errors.Is(err, store.ErrNotFound) || err == nil && (key.WorkspaceID != workspaceID || key.RevokedAt != nil):
		e := newError(http.StatusUnauthorized, CodeUnauthorised, "the batch's API key was revoked or deleted; its rows are not run")
		b, _ := json.Marshal(e.body(SurfaceOpenAI, generationID))
		return e.Status, b, nil
	case err != nil:
		return 0, nil, fmt.Errorf("reading the batch's key: %w", err)
	}
	w := &rowWriter{header: http.Header{}}
	ctx = context.WithValue(ctx, generationIDKey{}, generationID)
	if err := g.Dispatch(ctx, &Caller{Key: key}, adm, http.MethodPost, path, body, w); err != nil {
		return 0, nil, err
	}
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.status, w.body.Bytes(), nil
}

// rowWriter keeps a batch row's answer: its status and body, for the row's record.
type rowWriter struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (w *rowWriter) Header() http.Header { return w.header }

func (w *rowWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}

func (w *rowWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.body.Write(p)
}
