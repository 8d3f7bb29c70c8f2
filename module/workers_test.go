package module

import (
	"context"
	"net/url"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/modelgateway/caddy-modelgateway/store"
)

// TestWorkersRunOncePerStoreAcrossReloads: a background worker starts with the gateway,
// keeps running through reloads (old and new configurations overlap on one store) without a
// second copy, and stops when the last configuration lets go of the store.
func TestWorkersRunOncePerStoreAcrossReloads(t *testing.T) {
	var starts, stops atomic.Int32
	started := make(chan store.Store, 4)
	saved := backgroundWorkers
	backgroundWorkers = []worker{{name: "probe", run: func(ctx context.Context, s store.Store, _ *zap.Logger) {
		starts.Add(1)
		started <- s
		<-ctx.Done()
		stops.Add(1)
	}}}
	t.Cleanup(func() { backgroundWorkers = saved })

	block := `
		provider mk {
			type mock
		}
		model m:free {
			route mk m
		}`
	env := startGateway(t, block, "")
	select {
	case s := <-started:
		// The worker has the store, open.
		if err := s.Ping(context.Background()); err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the worker did not start")
	}
	u, _ := url.Parse(env.baseURL)
	port, _ := strconv.Atoi(u.Port())
	for range 2 {
		loadCaddyfile(t, gatewayCaddyfile(port, env.dbPath, block, ""))
	}
	if n, m := starts.Load(), stops.Load(); n != 1 || m != 0 {
		t.Fatalf("after two reloads the worker started %d times and stopped %d times, want once and never", n, m)
	}
	if err := caddy.Stop(); err != nil {
		t.Fatal(err)
	}
	if n := stops.Load(); n != 1 {
		t.Fatalf("the worker stopped %d times once the gateway stopped", n)
	}
}
