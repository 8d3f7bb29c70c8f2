package upstreamhttp

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/modelgateway/caddy-modelgateway/providers"
)

func TestClientFetch(t *testing.T) {
	var seen *http.Request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = r.Clone(context.Background())
		switch r.URL.Path {
		case "/job":
			_, _ = io.WriteString(w, `{"id":"j"}`)
		case "/file":
			w.Header().Set("Location", "/signed")
			w.WriteHeader(http.StatusFound)
		default:
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"error":"no job, sk-secret"}`)
		}
	}))
	defer srv.Close()
	var got parsed
	c := testClient(srv.Client().Transport, &got)
	ctx := context.Background()

	resp, at, err := c.Fetch(ctx, Fetch{Method: http.MethodDelete, URL: srv.URL + "/job", Header: http.Header{"range": {"bytes=0-1"}}})
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	at.Cancel()
	if seen.Method != http.MethodDelete || seen.Header.Get("Authorization") != "Bearer sk-secret" || seen.Header.Get("Content-Type") != "" ||
		seen.Header.Get("Accept") != "application/json" || seen.Header.Get("Range") != "bytes=0-1" || seen.ContentLength != 0 {
		t.Errorf("request %s %v length %d", seen.Method, seen.Header, seen.ContentLength)
	}
	if c.Header.Get("Content-Type") != "application/json" {
		t.Error("Fetch changed the client's headers")
	}

	// A redirect is an error unless asked for; asked for, it is answered unread.
	_, _, err = c.Fetch(ctx, Fetch{URL: srv.URL + "/file"})
	if ue, ok := providers.AsUpstreamError(err); !ok || ue.Status != http.StatusFound {
		t.Errorf("redirect not asked for: %v", err)
	}
	resp, at, err = c.Fetch(ctx, Fetch{URL: srv.URL + "/file", Redirects: true, Anonymous: true})
	if err != nil || resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/signed" {
		t.Fatalf("redirect: %v %v", resp, err)
	}
	_ = resp.Body.Close()
	at.Cancel()
	if seen.Header.Get("Authorization") != "" || seen.Header.Get("Accept") != "application/json" {
		t.Errorf("anonymous request sent %v", seen.Header)
	}

	// A 404 is the job's: not found, not retryable, the body redacted.
	_, _, err = c.Fetch(ctx, Fetch{URL: srv.URL + "/gone"})
	err = JobNotFound(err)
	ue, ok := providers.AsUpstreamError(err)
	if !ok || ue.Category != providers.CategoryNotFound || ue.Retryable || got.body != `{"error":"no job, [redacted]"}` {
		t.Errorf("404: %+v, parsed %+v", ue, got)
	}
	if other := errors.New("x"); JobNotFound(other) != other {
		t.Error("JobNotFound changed an error that is no 404")
	}

	// Without a credential, only anonymous requests go out.
	c.NoCredential = true
	if _, _, err := c.Fetch(ctx, Fetch{URL: srv.URL + "/job"}); err == nil {
		t.Error("a request without its credential went out")
	} else if ue, _ := providers.AsUpstreamError(err); ue.Category != providers.CategoryCredentialsNotConfigured {
		t.Errorf("no credential: %+v", ue)
	}
	resp, at, err = c.Fetch(ctx, Fetch{URL: srv.URL + "/job", Anonymous: true})
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	at.Cancel()
}
