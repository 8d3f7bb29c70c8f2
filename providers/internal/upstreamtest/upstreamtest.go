// Package upstreamtest holds what the adapters' tests share to stand up a fake upstream.
package upstreamtest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/providers"
)

// NewServer starts an httptest server that answers with h, and returns it with a transport
// of its own to call it through. When the test ends, the transport's idle connections and
// then the server's are closed before the server itself, so that no connection goroutine
// outlives the test (the adapters' tests count them).
func NewServer(t testing.TB, h http.HandlerFunc) (*httptest.Server, *http.Transport) {
	t.Helper()
	srv := httptest.NewServer(h)
	tr := &http.Transport{}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		srv.CloseClientConnections()
		srv.Close()
	})
	return srv, tr
}

// NewProvider returns what newProvider makes of cfg once each of mods (nil ones skipped)
// has changed it, and fails the test on an error.
func NewProvider[C, P any](t testing.TB, newProvider func(C) (P, error), cfg C, mods ...func(*C)) P {
	t.Helper()
	for _, m := range mods {
		if m != nil {
			m(&cfg)
		}
	}
	p, err := newProvider(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Next returns the next request a fake upstream recorded in requests, and fails the test
// when none comes within 2 seconds.
func Next[T any](t testing.TB, requests <-chan T) T {
	t.Helper()
	select {
	case r := <-requests:
		return r
	case <-time.After(2 * time.Second):
		t.Fatal("the upstream got no request")
		var zero T
		return zero
	}
}

// StreamedRows are the rows of a batch that proves its adapter streams them: rows yields n
// rows whose bodies body makes and, before it yields row after, waits until the fake
// upstream has received row before (it calls seen with each count it received). An adapter
// that held the rows before it sent them never lets the upstream see row before while rows
// is still yielding, and rows fails with an error saying so after a minute instead of
// hanging the test.
func StreamedRows(n, before, after int, body func(i int) string) (rows func(yield func(providers.BatchRow) error) error, seen func(count int)) {
	reached := make(chan struct{})
	var once sync.Once
	seen = func(count int) {
		if count >= before {
			once.Do(func() { close(reached) })
		}
	}
	rows = func(yield func(providers.BatchRow) error) error {
		for i := range n {
			if i == after {
				select {
				case <-reached:
				case <-time.After(time.Minute):
					return fmt.Errorf("the upstream had not received row %d when row %d was yielded: the rows are not streamed", before, after)
				}
			}
			if err := yield(providers.BatchRow{CustomID: fmt.Sprint("row-", i), Body: json.RawMessage(body(i))}); err != nil {
				return err
			}
		}
		return nil
	}
	return rows, seen
}
