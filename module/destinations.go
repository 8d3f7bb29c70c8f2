package module

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/modelgateway/caddy-modelgateway/delivery"
	"github.com/modelgateway/caddy-modelgateway/notify"
)

func init() {
	caddy.RegisterModule(new(SlackDestination))
	caddy.RegisterModule(new(DiscordDestination))
	caddy.RegisterModule(new(TeamsDestination))
	caddy.RegisterModule(new(WebhookDestination))
	caddy.RegisterModule(new(EmailDestination))
}

// DestinationsNamespace is the Caddy module namespace of notification destination kinds:
// the module model_gateway.destinations.<kind> is the kind of the destinations whose
// type is <kind>.
const DestinationsNamespace = "model_gateway.destinations"

// DestinationModule is a notification destination kind: a Caddy module whose ID is
// model_gateway.destinations.<kind> and whose JSON fields are the kind's configuration (an
// entry of the app's destinations, by kind). Every kind of the build is on, its
// configuration empty when the app's destinations do not name it: one that cannot work
// without configuration returns a kind that refuses with notify.ErrKindNotConfigured. To
// read a Caddyfile, it implements caddyfile.Unmarshaler, given the tokens from the kind's
// name on.
type DestinationModule interface {
	caddy.Module
	// DestinationKind returns the kind, after Provision and Validate. client is the
	// gateway's outbound client (webhook_allow's networks admitted), the one deliveries
	// post with: the kind checks the URLs of its targets with it, so that a target is
	// refused when it is given for what would refuse it when it is called.
	DestinationKind(client *delivery.Client) notify.Kind
}

// SlackDestination is the slack kind: a Slack incoming webhook (notify.Slack). It has no
// configuration.
type SlackDestination struct{}

// CaddyModule returns the Caddy module information.
func (*SlackDestination) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: DestinationsNamespace + ".slack", New: func() caddy.Module { return new(SlackDestination) }}
}

// DestinationKind returns the kind.
func (*SlackDestination) DestinationKind(client *delivery.Client) notify.Kind {
	return notify.NewSlack(client)
}

// DiscordDestination is the discord kind: a Discord channel webhook (notify.Discord). It
// has no configuration.
type DiscordDestination struct{}

// CaddyModule returns the Caddy module information.
func (*DiscordDestination) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: DestinationsNamespace + ".discord", New: func() caddy.Module { return new(DiscordDestination) }}
}

// DestinationKind returns the kind.
func (*DiscordDestination) DestinationKind(client *delivery.Client) notify.Kind {
	return notify.NewDiscord(client)
}

// TeamsDestination is the teams kind: a Microsoft Teams Workflows webhook (notify.Teams).
// It has no configuration.
type TeamsDestination struct{}

// CaddyModule returns the Caddy module information.
func (*TeamsDestination) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: DestinationsNamespace + ".teams", New: func() caddy.Module { return new(TeamsDestination) }}
}

// DestinationKind returns the kind.
func (*TeamsDestination) DestinationKind(client *delivery.Client) notify.Kind {
	return notify.NewTeams(client)
}

// WebhookDestination is the webhook kind: a receiver of the workspace's own, signed with
// Standard Webhooks (notify.Webhook). It has no configuration.
type WebhookDestination struct{}

// CaddyModule returns the Caddy module information.
func (*WebhookDestination) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: DestinationsNamespace + ".webhook", New: func() caddy.Module { return new(WebhookDestination) }}
}

// DestinationKind returns the kind.
func (*WebhookDestination) DestinationKind(client *delivery.Client) notify.Kind {
	return notify.NewWebhook(client, nil)
}

// EmailDestination is the email kind: messages through the operator's SMTP server
// (notify.Email). It is off, refusing email destinations with notify.ErrKindNotConfigured,
// until Host is set.
type EmailDestination struct {
	// Host is the SMTP server's name, which its TLS certificate must hold. Placeholders
	// are resolved. Default: none, and email destinations are off (the other fields are
	// refused without it; a host whose placeholder resolves to nothing turns email off
	// with a warning).
	Host string `json:"host,omitempty"`
	// Port is the server's port. Default: 587 for starttls, 465 for tls, 25 for none.
	Port int `json:"port,omitempty"`
	// Security is "starttls" (upgrade a plain connection, refusing a server that does not
	// offer it), "tls" (TLS from the start, SMTPS) or "none" (a relay on the gateway's own
	// host or network). Default: starttls.
	Security string `json:"security,omitempty"`
	// Username and Password authenticate (PLAIN, or LOGIN where the server offers only
	// that), best given as {env.SMTP_USERNAME} and {env.SMTP_PASSWORD}; they are sent over
	// TLS only, or to a relay on the loopback interface. Default: no authentication.
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`
	// From is the sender, an address with an optional name ("Model Gateway
	// <noreply@example.com>"). Placeholders are resolved. Required with Host.
	From string `json:"from,omitempty"`
	// Timeout bounds one email's delivery, connection to the server's last answer.
	// Default: 30s.
	Timeout caddy.Duration `json:"timeout,omitempty"`

	kind notify.Kind
}

// CaddyModule returns the Caddy module information.
func (*EmailDestination) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: DestinationsNamespace + ".email", New: func() caddy.Module { return new(EmailDestination) }}
}

// emailOffHint says what turns email destinations on, to a user refused one.
const emailOffHint = "the gateway's operator has configured no SMTP server: destinations { email { host ... from ... } }"

// Provision resolves placeholders and checks the server's settings. It connects to
// nothing: Provision also runs under `caddy validate`, and a mail server that is down at
// start should not keep the gateway from serving everything else.
func (e *EmailDestination) Provision(ctx caddy.Context) error {
	repl := caddy.NewReplacer()
	host := strings.TrimSpace(repl.ReplaceKnown(e.Host, ""))
	if e.Host == "" && *e != (EmailDestination{}) {
		return errors.New("host is required with the other SMTP settings")
	}
	if host == "" {
		if e.Host != "" {
			ctx.Logger().Warn("email destinations are off: destinations.email.host is empty once its placeholders are resolved")
		}
		e.kind = notify.Unconfigured{Kind: "email", Hint: emailOffHint}
		return nil
	}
	kind, err := notify.NewEmail(notify.SMTPConfig{
		Host: host, Port: e.Port, Security: e.Security,
		Username: repl.ReplaceKnown(e.Username, ""), Password: repl.ReplaceKnown(e.Password, ""),
		From: repl.ReplaceKnown(e.From, ""), Timeout: time.Duration(e.Timeout),
	})
	if err != nil {
		// NewEmail's errors name fields, never the password's value.
		return fmt.Errorf("%w (a field given as {env.NAME} is empty when NAME is unset)", err)
	}
	e.kind = kind
	return nil
}

// Validate refuses a negative timeout.
func (e *EmailDestination) Validate() error {
	if e.Timeout < 0 {
		return errors.New("timeout must not be negative")
	}
	return nil
}

// DestinationKind returns the kind: email, or one that refuses when no host is set.
func (e *EmailDestination) DestinationKind(*delivery.Client) notify.Kind { return e.kind }

// provisionDestinations loads every destination kind of the build, each with its entry
// of destinations or an empty configuration. It needs the outbound client
// (provisionWebhooks).
func (a *App) provisionDestinations(ctx caddy.Context) error {
	for name := range a.DestinationsRaw {
		if err := checkDestinationKind(name); err != nil {
			return fmt.Errorf("destinations: %w", err)
		}
	}
	configured := map[string]any{}
	if len(a.DestinationsRaw) > 0 {
		// The kinds were checked above, so that an unknown one is told with the kinds
		// there are.
		mods, err := ctx.LoadModule(a, "DestinationsRaw")
		if err != nil {
			return fmt.Errorf("destinations: %w", err)
		}
		configured = mods.(map[string]any)
	}
	kinds := map[string]notify.Kind{}
	for _, info := range caddy.GetModules(DestinationsNamespace) {
		name := info.ID.Name()
		mod, ok := configured[name]
		if !ok {
			loaded, err := ctx.LoadModuleByID(string(info.ID), []byte("{}"))
			if err != nil {
				return fmt.Errorf("destinations: %s: %w", name, err)
			}
			mod = loaded
		}
		dm, ok := mod.(DestinationModule)
		if !ok {
			// A module of the namespace from another Go module that is no kind: a build
			// mistake, told at start rather than when a user is refused.
			return fmt.Errorf("destinations: %w", checkDestinationKind(name))
		}
		kind := dm.DestinationKind(a.outbound)
		if kind == nil {
			return fmt.Errorf("destinations: %s provisioned no kind", name)
		}
		kinds[name] = kind
	}
	a.destinations = kinds
	return nil
}

// checkDestinationKind tells whether name is a destination kind of this build.
func checkDestinationKind(name string) error {
	return checkGuest[DestinationModule](DestinationsNamespace, name, "destination kind", "kind", "DestinationKind")
}

// destinationKinds are the notification destination kinds of the configuration, by the
// name a destination's type gives: every kind of the build, provisioned. A kind the
// operator has not set up (email without an SMTP host) is there, and refuses with
// notify.ErrKindNotConfigured.
func (a *App) destinationKinds() map[string]notify.Kind { return a.destinations }

// notifyEnv is what the kinds' Send use: the outbound client, with webhook_allow's
// networks admitted.
func (a *App) notifyEnv() notify.Env { return notify.Env{Client: a.outbound} }

// Interface guards.
var (
	_ DestinationModule = (*SlackDestination)(nil)
	_ DestinationModule = (*DiscordDestination)(nil)
	_ DestinationModule = (*TeamsDestination)(nil)
	_ DestinationModule = (*WebhookDestination)(nil)
	_ DestinationModule = (*EmailDestination)(nil)
	_ caddy.Provisioner = (*EmailDestination)(nil)
	_ caddy.Validator   = (*EmailDestination)(nil)
)
