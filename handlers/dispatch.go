package handlers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/modelgateway/caddy-modelgateway/billing"
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
