package gemini

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/internal/upstreamtest"
)

const testKey = "AIzaSyTEST-secret-key-0123456789"

// recorded is a request the fake upstream received.
type recorded struct {
	Method, Path, RawQuery string
	Header                 http.Header
	Body                   []byte
}

// fakeGemini is an httptest upstream. Its handler sees every request after it is recorded.
type fakeGemini struct {
	srv       *httptest.Server
	transport *http.Transport
	mu        sync.Mutex
	reqs      []recorded
}

func newFake(t *testing.T, h http.HandlerFunc) *fakeGemini {
	t.Helper()
	f := &fakeGemini{}
	f.srv, f.transport = upstreamtest.NewServer(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.reqs = append(f.reqs, recorded{Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery, Header: r.Header.Clone(), Body: body})
		f.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body)) // the handler may read it too
		h(w, r)
	})
	return f
}

func (f *fakeGemini) provider(t *testing.T, mod ...func(*Config)) *Provider {
	t.Helper()
	return upstreamtest.NewProvider(t, New, Config{BaseURL: f.srv.URL + "/v1beta", APIKey: testKey, Transport: f.transport}, mod...)
}

func (f *fakeGemini) requests() []recorded {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]recorded(nil), f.reqs...)
}

// writeJSON answers with a JSON body.
func writeJSON(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

// writeSSE answers with Gemini's SSE framing: one data line of single-line JSON per frame,
// a blank line after.
func writeSSE(w http.ResponseWriter, frames ...string) {
	w.Header().Set("Content-Type", "text/event-stream")
	for _, f := range frames {
		var b bytes.Buffer
		if json.Compact(&b, []byte(f)) == nil {
			f = b.String()
		}
		_, _ = fmt.Fprintf(w, "data: %s\r\n\r\n", f)
		w.(http.Flusher).Flush()
	}
}

func simpleRequest() *providers.Request {
	return &providers.Request{Model: "gemini-2.5-flash", Messages: []providers.Message{user("Hi")}}
}

// collect drains a stream.
func collect(t *testing.T, st providers.Stream) ([]providers.Event, error) {
	t.Helper()
	var evs []providers.Event
	for st.Next() {
		evs = append(evs, st.Current())
		if len(evs) > 10000 {
			t.Fatal("stream does not end")
		}
	}
	return evs, st.Err()
}

func asUpstream(t *testing.T, err error) *providers.UpstreamError {
	t.Helper()
	ue, ok := providers.AsUpstreamError(err)
	if !ok {
		t.Fatalf("error %v (%T) is not an *UpstreamError", err, err)
	}
	return ue
}

// noKeyIn fails when the test key shows anywhere in what an error exposes.
func noKeyIn(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if strings.Contains(err.Error(), testKey) {
		t.Errorf("the API key leaks in the error: %v", err)
	}
	if ue, ok := providers.AsUpstreamError(err); ok {
		if strings.Contains(ue.Payload, testKey) || strings.Contains(ue.Message, testKey) {
			t.Errorf("the API key leaks in the payload or message: %+v", ue)
		}
	}
}

// checkGoroutines fails the test when goroutines started during it are still running once
// it is over (servers closed, idle connections dropped).
func checkGoroutines(t *testing.T) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(3 * time.Second)
		for {
			n := runtime.NumGoroutine()
			if n <= before {
				return
			}
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<16)
				buf = buf[:runtime.Stack(buf, true)]
				t.Errorf("%d goroutines before, %d after:\n%s", before, n, buf)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}
