package module

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyevents"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/modelgateway/caddy-modelgateway/handlers"
)

// BenchmarkPublisher is what publishing a request's outcome adds to it when nothing
// subscribes to the event and no placeholder is read: its placeholders' function, and the
// look for subscribers at its end.
func BenchmarkPublisher(b *testing.B) {
	// The events app of a running configuration, logging as Caddy does by default.
	if err := caddy.Load([]byte(`{"admin":{"disabled":true},"apps":{"events":{}}}`), true); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = caddy.Stop() }()
	ctx := caddy.ActiveContext()
	events, err := ctx.App("events")
	if err != nil {
		b.Fatal(err)
	}
	p := &publisher{ctx: ctx, events: events.(*caddyevents.App)}
	if p.events.ShouldEmit(FinishedEvent) {
		b.Fatal("the event would be emitted: the benchmark would measure its subscriber")
	}
	// A request with its replacer, as Caddy's server makes it.
	request := func() context.Context {
		r := httptest.NewRequest("POST", "http://gw/v1/chat/completions", nil)
		_ = caddyhttp.NewTestReplacer(r)
		return r.Context()
	}
	// The difference between the two is what publishing costs.
	b.Run("request alone", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = request()
		}
	})
	b.Run("request published", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			rctx := request()
			p.Began(rctx, handlers.Outcome{})
			p.Finished(rctx, handlers.Outcome{})
		}
	})
}
