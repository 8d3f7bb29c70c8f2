package main

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
)

// TestMemOf reads the runtime counters from an admin endpoint's /debug/vars, and reports
// failure for a proxy without one, an error status or a body without memstats.
func TestMemOf(t *testing.T) {
	body := `{"cmdline":["caddy"],"memstats":{"Alloc":1,"TotalAlloc":123456,"Mallocs":9,"NumGC":42,"PauseNs":[0,1]}}`
	status := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/debug/vars" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	defer srv.Close()
	_, portText, _ := net.SplitHostPort(srv.Listener.Addr().String())
	port, _ := strconv.Atoi(portText)
	ctx := context.Background()

	m, ok := memOf(ctx, &child{admin: port})
	if !ok || m.TotalAlloc != 123456 || m.NumGC != 42 {
		t.Fatalf("memOf = %+v, %v", m, ok)
	}
	if _, ok := memOf(ctx, &child{}); ok {
		t.Fatal("a proxy without an admin endpoint has counters")
	}
	if _, ok := memOf(ctx, nil); ok {
		t.Fatal("no proxy (direct) has counters")
	}
	body = `{"cmdline":["caddy"]}`
	if _, ok := memOf(ctx, &child{admin: port}); ok {
		t.Fatal("counters read from a body without memstats")
	}
	body, status = `{"memstats":{"TotalAlloc":1}}`, http.StatusInternalServerError
	if _, ok := memOf(ctx, &child{admin: port}); ok {
		t.Fatal("counters read from an error answer")
	}
}
