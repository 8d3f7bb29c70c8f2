package module

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/caddyserver/caddy/v2"

	"github.com/modelgateway/caddy-modelgateway/providers"
)

// ProvidersNamespace is the Caddy module namespace of provider types: the module
// model_gateway.providers.<type> builds the providers whose type is <type>.
const ProvidersNamespace = "model_gateway.providers"

// ProviderModule is a provider type: a Caddy module whose ID is
// model_gateway.providers.<type>, whose JSON fields are the type's own options, and which
// builds the adapter the routes of a provider call. Its Provision, Validate and Cleanup,
// when it has them, run as for any Caddy guest module, once per configuration load; resolve
// placeholders such as {env.API_KEY} in Provision. Its JSON must not have a "type" field,
// which names the module. To read a Caddyfile, it implements caddyfile.Unmarshaler (see
// the package documentation for what it is given).
type ProviderModule interface {
	caddy.Module
	// Build returns the adapter of the provider the configuration names name, after
	// Provision and Validate. The adapter implements providers.Provider, whose Name is name,
	// and the capabilities it has (providers.ChatProvider, providers.Forwarder,
	// providers.Embedder, providers.Moderator...): routing skips it for an endpoint whose
	// capability it lacks. It serves requests concurrently, each call tied to its context.
	Build(name string) (providers.Provider, error)
}

// PrefillAccepter is what a provider module also implements when its upstream accepts an
// assistant prefill (a request ending with an assistant turn, which the answer continues),
// so that a stream broken on another route can continue on this one. It sets the default
// of the prefill option, which is off for a module without it.
type PrefillAccepter interface {
	AcceptsPrefill() bool
}

// CredentialChecker is what a provider module also implements when it can tell that its
// upstream will refuse every call for want of a credential (an api_key whose environment
// variable is unset), so that the gateway names the provider when it starts rather than
// when the first client is refused.
type CredentialChecker interface {
	CredentialMissing() bool
}

// ProviderConfig is one upstream API: its adapter, a guest module of the provider type's
// choosing, and the resilience policy the gateway applies to every type.
type ProviderConfig struct {
	// AdapterRaw is the provider's type and the type's own options, the module
	// model_gateway.providers.<type>: {"type": "openai", "base_url": ..., "api_key": ...}.
	// Built in: openai (OpenAI and every OpenAI-compatible server), anthropic (the Messages
	// API), gemini (Google's generateContent), elevenlabs (ElevenLabs' speech and Scribe),
	// mistral (Mistral's API, OCR and Voxtral transcription included) and mock. Required.
	AdapterRaw json.RawMessage `json:"adapter" caddy:"namespace=model_gateway.providers inline_key=type"`

	// Resilience is the retry, timeout and circuit-breaking policy of the provider's routes.
	Resilience

	// prefill is the type's default for Resilience.Prefill.
	prefill bool
	// credentialMissing is what the module's CredentialChecker said.
	credentialMissing bool
}

// buildProviders loads every provider's adapter module and builds its adapter.
func (a *App) buildProviders(ctx caddy.Context) (map[string]providers.Provider, error) {
	out := make(map[string]providers.Provider, len(a.Providers))
	names := make([]string, 0, len(a.Providers))
	for name := range a.Providers {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		pc := a.Providers[name]
		if pc == nil {
			return nil, fmt.Errorf("provider %q: empty configuration", name)
		}
		p, err := pc.build(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("provider %q: %w", name, err)
		}
		out[name] = p
	}
	return out, nil
}

func (pc *ProviderConfig) build(ctx caddy.Context, name string) (providers.Provider, error) {
	if len(pc.AdapterRaw) == 0 {
		return nil, fmt.Errorf("adapter is required, with its type (%s)", providerTypes("or"))
	}
	// The type is checked here rather than by LoadModule, whose error would quote the
	// whole adapter object, api_key included.
	var head struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(pc.AdapterRaw, &head); err != nil {
		return nil, fmt.Errorf("adapter: %w", err)
	}
	if err := checkProviderType(head.Type); err != nil {
		return nil, err
	}
	mod, err := ctx.LoadModule(pc, "AdapterRaw")
	if err != nil {
		return nil, fmt.Errorf("loading the adapter: %w", err)
	}
	pm := mod.(ProviderModule) // checkProviderType made sure
	if pa, ok := mod.(PrefillAccepter); ok {
		pc.prefill = pa.AcceptsPrefill()
	}
	if cc, ok := mod.(CredentialChecker); ok {
		pc.credentialMissing = cc.CredentialMissing()
	}
	p, err := pm.Build(name)
	if err != nil {
		return nil, err
	}
	if p == nil {
		return nil, fmt.Errorf("%s built no adapter", pm.CaddyModule().ID)
	}
	return p, nil
}

// checkProviderType tells whether typ names a provider module of this build.
func checkProviderType(typ string) error {
	if typ == "" {
		return fmt.Errorf("type is required (%s)", providerTypes("or"))
	}
	id := ProvidersNamespace + "." + typ
	info, err := caddy.GetModule(id)
	if err != nil {
		return fmt.Errorf("unknown provider type %q: no module %s in this build, whose types are %s; "+
			"add a provider type from another Go module with xcaddy build --with <its module path>", typ, id, providerTypes("and"))
	}
	if _, ok := info.New().(ProviderModule); !ok {
		return fmt.Errorf("module %s is not a provider type: it has no Build method", id)
	}
	return nil
}

// providerTypes lists the provider types of this build, the last two joined by conj.
func providerTypes(conj string) string {
	var names []string
	for _, m := range caddy.GetModules(ProvidersNamespace) {
		names = append(names, m.ID.Name())
	}
	switch len(names) {
	case 0:
		return "none"
	case 1:
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " " + conj + " " + names[len(names)-1]
}
