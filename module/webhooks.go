package module

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"

	"github.com/caddyserver/caddy/v2"
	"github.com/spf13/cobra"

	"github.com/modelgateway/caddy-modelgateway/delivery"
	"github.com/modelgateway/caddy-modelgateway/handlers"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// provisionWebhooks reads secret_key, placeholders resolved ({env.GATEWAY_SECRET_KEY}):
// without one the webhook endpoint routes are off (logged at start, 503 on each route);
// one that is not 32 bytes of base64 fails the configuration, saying how to make one.
func (a *App) provisionWebhooks(repl *caddy.Replacer) error {
	allow, err := parseWebhookAllow(a.WebhookAllow)
	if err != nil {
		return err
	}
	opts := delivery.ClientOptions{Allow: allow}
	if tune := deliveryTuning.Load(); tune != nil && tune.client != nil {
		tune.client(&opts)
	}
	a.outbound = delivery.NewClient(opts)
	key := repl.ReplaceKnown(a.SecretKey, "")
	if key == "" {
		a.sealer = nil
		return nil
	}
	sealer, err := delivery.NewSealer(key)
	if err != nil {
		return fmt.Errorf("secret_key: %w", err)
	}
	a.sealer = sealer
	return nil
}

// parseWebhookAllow reads webhook_allow: CIDR prefixes, or single addresses (a /32 or
// /128 of their own).
func parseWebhookAllow(list []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range list {
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
			continue
		}
		addr, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("webhook_allow: %q is neither a network (10.0.0.0/8) nor an address", s)
		}
		out = append(out, netip.PrefixFrom(addr, addr.BitLen()))
	}
	return out, nil
}

// logWebhooks says at start when webhooks are off, and how to turn them on.
func (a *App) logWebhooks() {
	if a.sealer == nil {
		a.logger.Warn(handlers.WebhooksOffMessage)
	}
}

// workspaceAsyncCommand is `caddy gateway workspace async --workspace ws_... --enable|
// --disable`: the operator's switch of a workspace's access to async APIs (rotating
// webhook secrets). No API route changes it, so that no key grants itself the access.
func workspaceAsyncCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "async", Short: "Turns a workspace's access to async APIs on or off", Args: cobra.NoArgs}
	ws := cmd.Flags().String("workspace", "", "Workspace id (required)")
	enable := cmd.Flags().Bool("enable", false, "Turn the access on")
	disable := cmd.Flags().Bool("disable", false, "Turn the access off")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if *ws == "" {
			return errors.New("--workspace is required")
		}
		if *enable == *disable {
			return errors.New("give one of --enable or --disable")
		}
		return withStore(cmd, func(ctx context.Context, s store.Store, out io.Writer) error {
			got, err := s.SetWorkspaceAsyncAccess(ctx, *ws, *enable)
			if err != nil {
				return fmt.Errorf("setting the async access of %s: %w", *ws, err)
			}
			state := "off"
			if got.AsyncAccess {
				state = "on"
			}
			_, _ = fmt.Fprintf(out, "workspace %s: async access %s\n", got.ID, state)
			return nil
		})
	}
	return cmd
}
