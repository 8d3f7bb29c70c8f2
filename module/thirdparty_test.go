package module_test

import (
	"context"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/modelgateway/caddy-modelgateway/module"
	"github.com/modelgateway/caddy-modelgateway/providers"
)

// Echo is a provider type written as a third party writes one, in a package of its own
// with only the exported API of module and providers: it answers "<greeting>: <prompt>",
// one token per word. TestThirdPartyProviderEndToEnd (thirdparty_e2e_test.go) serves it.
type Echo struct {
	// Greeting starts every answer. Default: hello.
	Greeting string `json:"greeting,omitempty"`
}

func init() {
	caddy.RegisterModule(new(Echo))
}

// CaddyModule returns the Caddy module information.
func (*Echo) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "model_gateway.providers.echo", New: func() caddy.Module { return new(Echo) }}
}

// Provision sets the default greeting.
func (e *Echo) Provision(caddy.Context) error {
	if e.Greeting == "" {
		e.Greeting = "hello"
	}
	return nil
}

// UnmarshalCaddyfile reads the provider block's lines that are the type's own:
//
//	provider <name> {
//		type echo
//		greeting <word>
//	}
func (e *Echo) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the type's name
	for d.NextBlock(0) {
		switch d.Val() {
		case "greeting":
			if !d.NextArg() {
				return d.ArgErr()
			}
			e.Greeting = d.Val()
			if d.NextArg() {
				return d.ArgErr()
			}
		default:
			return d.Errf("unrecognized subdirective %q", d.Val())
		}
	}
	return nil
}

// Build returns the adapter.
func (e *Echo) Build(name string) (providers.Provider, error) {
	return &echoAdapter{name: name, greeting: e.Greeting}, nil
}

type echoAdapter struct {
	name, greeting string
}

func (a *echoAdapter) Name() string { return a.name }

func (a *echoAdapter) answer(req *providers.Request) *providers.Response {
	var prompt string
	for _, m := range req.Messages {
		for _, p := range m.Content {
			if m.Role == providers.RoleUser && p.Type == providers.PartText {
				prompt = p.Text
			}
		}
	}
	text := a.greeting + ": " + prompt
	return &providers.Response{
		ID: "echo-1", Model: req.Model, Text: text, FinishReason: providers.FinishStop,
		Usage: providers.Usage{Input: int64(len(strings.Fields(prompt))), Output: int64(len(strings.Fields(text)))},
	}
}

func (a *echoAdapter) Chat(_ context.Context, req *providers.Request) (*providers.Response, error) {
	return a.answer(req), nil
}

// ChatStream sends the answer a word at a time.
func (a *echoAdapter) ChatStream(ctx context.Context, req *providers.Request) (providers.Stream, error) {
	resp := a.answer(req)
	var events []providers.Event
	for _, w := range strings.SplitAfter(resp.Text, " ") {
		events = append(events, providers.Event{Type: providers.EventText, Text: w})
	}
	events = append(events,
		providers.Event{Type: providers.EventFinish, FinishReason: resp.FinishReason},
		providers.Event{Type: providers.EventUsage, Usage: resp.Usage})
	return &echoStream{ctx: ctx, events: events, i: -1}, nil
}

// echoStream gives out its events, until its call's context ends.
type echoStream struct {
	ctx    context.Context
	events []providers.Event
	i      int
	err    error
}

func (s *echoStream) Next() bool {
	if s.err = s.ctx.Err(); s.err != nil || s.i+1 >= len(s.events) {
		return false
	}
	s.i++
	return true
}

func (s *echoStream) Current() providers.Event { return s.events[s.i] }
func (s *echoStream) Err() error               { return s.err }
func (s *echoStream) Close() error             { return nil }

// Interface guards.
var (
	_ module.ProviderModule  = (*Echo)(nil)
	_ caddy.Provisioner      = (*Echo)(nil)
	_ caddyfile.Unmarshaler  = (*Echo)(nil)
	_ providers.ChatProvider = (*echoAdapter)(nil)
	_ providers.Stream       = (*echoStream)(nil)
)
