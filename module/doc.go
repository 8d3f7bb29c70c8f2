// Package module is the only package that knows Caddy: the model_gateway app (what exists
// once per process: store, providers, models), the http.handlers.model_gateway handler,
// the built-in provider types, their Caddyfile syntax and the `caddy gateway` command group.
//
// # Provider types
//
// A provider's type is a Caddy guest module of the namespace model_gateway.providers, which
// implements ProviderModule: model_gateway.providers.openai, .anthropic, .gemini,
// .elevenlabs, .mistral and .mock are built in. Another upstream needs no change here: a Go
// module of its own registers its type,
//
//	func init() { caddy.RegisterModule(new(Echo)) }
//
//	func (*Echo) CaddyModule() caddy.ModuleInfo {
//		return caddy.ModuleInfo{ID: "model_gateway.providers.echo", New: func() caddy.Module { return new(Echo) }}
//	}
//
//	func (e *Echo) Build(name string) (providers.Provider, error) { ... }
//
// and Caddy is built with both, as xcaddy build --with github.com/modelgateway/caddy-modelgateway
// --with example.com/echo does. The adapter Build returns implements the capabilities of
// package providers it has (ChatProvider, Forwarder, Embedder, Moderator...).
//
// The gateway keeps what every provider has, the resilience options (Resilience), and hands
// the rest to the type's module. In JSON, a provider is {"adapter": {"type": "echo", ...the
// module's fields}, "retries": 1, ...}. In a Caddyfile, the module's UnmarshalCaddyfile
// (caddyfile.Unmarshaler) is given the provider block's other lines, as a block after the
// type's name, the way reverse_proxy hands "transport http { ... }" to its transport:
//
//	provider p {                 echo {
//		type echo                    greeting hi
//		greeting hi      ->      }
//		retries 1
//	}
package module
