package module

import (
	"context"
	"net/url"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/modelgateway/caddy-modelgateway/internal/workers"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// TestWorkersRunOncePerStoreAcrossReloads: a background worker starts with the gateway,
// keeps running through reloads (old and new configurations overlap on one store) without a
// second copy, and stops when the last configuration lets go of the store.
func TestWorkersRunOncePerStoreAcrossReloads(t *testing.T) {
	var starts, stops atomic.Int32
	started := make(chan store.Store, 4)
	saved := backgroundWorkers
	backgroundWorkers = []worker{{Name: "probe", Run: func(ctx context.Context, rt workers.Runtime[*appRuntime]) error {
		starts.Add(1)
		started <- rt.Store()
		<-ctx.Done()
		stops.Add(1)
		return nil
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

// TestWorkerRuntimeFollowsReloads: a worker started with the first configuration reads the
// newest one from its runtime after a reload (its models, its logger), not the one it
// started with, which Caddy stops once the new one started.
func TestWorkerRuntimeFollowsReloads(t *testing.T) {
	runtimes := make(chan workers.Runtime[*appRuntime], 1)
	saved := backgroundWorkers
	backgroundWorkers = []worker{{Name: "reader", Run: func(ctx context.Context, rt workers.Runtime[*appRuntime]) error {
		runtimes <- rt
		<-ctx.Done()
		return nil
	}}}
	t.Cleanup(func() { backgroundWorkers = saved })

	block := func(model string) string {
		return `
		provider mk {
			type mock
		}
		model ` + model + ` {
			route mk m
		}`
	}
	env := startGateway(t, block("first:free"), "")
	var rt workers.Runtime[*appRuntime]
	select {
	case rt = <-runtimes:
	case <-time.After(5 * time.Second):
		t.Fatal("the worker did not start")
	}
	first := rt.Current()
	if _, ok := first.Registry.Lookup("first:free"); !ok || first.Providers["mk"] == nil || first.Logger == nil || first.Owner == nil {
		t.Fatalf("the worker does not see the started configuration: %+v", first)
	}
	u, _ := url.Parse(env.baseURL)
	port, _ := strconv.Atoi(u.Port())
	loadCaddyfile(t, gatewayCaddyfile(port, env.dbPath, block("second:free"), ""))
	cur := rt.Current()
	if _, ok := cur.Registry.Lookup("second:free"); !ok {
		t.Fatal("after the reload the worker does not see the new configuration's models")
	}
	if _, ok := cur.Registry.Lookup("first:free"); ok {
		t.Fatal("after the reload the worker still sees the stopped configuration")
	}
	if cur.Owner != first.Owner {
		t.Fatal("the reload gave the worker another instance: the store handle was not kept")
	}
}
