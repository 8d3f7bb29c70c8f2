package module

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/caddyserver/caddy/v2"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/modelgateway/caddy-modelgateway/handlers"
	"github.com/modelgateway/caddy-modelgateway/internal/ids"
	"github.com/modelgateway/caddy-modelgateway/internal/pricing"
	"github.com/modelgateway/caddy-modelgateway/store"
)

func init() {
	caddycmd.RegisterCommand(caddycmd.Command{
		Name:  "gateway",
		Short: "Manages the model gateway's workspaces, keys and credits",
		Long: `
Manages the model gateway's store directly, found from the same configuration
file that "caddy run" uses (--config, default ./Caddyfile).

  caddy gateway bootstrap [--name demo] [--credits 10]
  caddy gateway workspace create --name <name>
  caddy gateway workspace list
  caddy gateway workspace async --workspace <id> --enable|--disable
  caddy gateway key create --workspace <id> [--name <name>] [--management]
  caddy gateway key list --workspace <id>
  caddy gateway key revoke <key id>
  caddy gateway credits add --workspace <id> --amount <usd>
  caddy gateway credits show --workspace <id>

A key's plaintext is printed once, when it is created; only a hash is stored.`,
		CobraFunc: func(cmd *cobra.Command) {
			cmd.PersistentFlags().StringP("config", "c", "", "The server's configuration file (default: ./Caddyfile, which must exist)")
			cmd.PersistentFlags().StringP("adapter", "a", "", "Name of config adapter to apply")
			cmd.AddCommand(bootstrapCommand(), workspaceCommand(), keyCommand(), creditsCommand())
		},
	})
}

// withStore opens the store that the configuration names and runs fn with it.
func withStore(cmd *cobra.Command, fn func(ctx context.Context, s store.Store, out io.Writer) error) error {
	configFile, _ := cmd.Flags().GetString("config")
	adapter, _ := cmd.Flags().GetString("adapter")
	s, err := OpenConfiguredStore(cmd.Context(), configFile, adapter)
	if err != nil {
		return err
	}
	defer func() { _ = s.Close() }()
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	return fn(ctx, s, cmd.OutOrStdout())
}

// OpenConfiguredStore opens the store of the model_gateway app in a configuration file,
// as "caddy run --config <file> --adapter <adapter>" would. Without a file, ./Caddyfile
// must exist: "caddy run" would start without one, but a command that fell back to the
// default store would work on another database than the server's whenever the server's
// store has another path.
func OpenConfiguredStore(ctx context.Context, configFile, adapter string) (store.Store, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	if configFile == "" {
		if _, err := os.Stat(defaultConfigFile); errors.Is(err, fs.ErrNotExist) {
			path, _ := filepath.Abs(defaultConfigFile)
			return nil, fmt.Errorf("no configuration file: %s does not exist; name the server's with --config", path)
		}
	}
	cfgJSON, _, _, err := caddycmd.LoadConfig(configFile, adapter)
	if err != nil {
		return nil, fmt.Errorf("loading the configuration: %w", err)
	}
	var cfg struct {
		Apps map[string]json.RawMessage `json:"apps"`
	}
	if len(cfgJSON) > 0 {
		if err := json.Unmarshal(cfgJSON, &cfg); err != nil {
			return nil, fmt.Errorf("reading the configuration: %w", err)
		}
	}
	app := new(App)
	if raw, ok := cfg.Apps["model_gateway"]; ok {
		if err := json.Unmarshal(raw, app); err != nil {
			return nil, fmt.Errorf("reading the model_gateway app: %w", err)
		}
	}
	if app.Store == nil {
		app.Store = &StoreConfig{}
	}
	driver, target, err := app.Store.resolve(caddy.NewReplacer())
	if err != nil {
		return nil, err
	}
	s, err := openStore(ctx, driver, target, app.Store.Durability, zap.NewNop)
	if err != nil {
		return nil, fmt.Errorf("opening the %s store: %w", driver, err)
	}
	return s, nil
}

// defaultConfigFile is the configuration that "caddy run" loads without --config.
const defaultConfigFile = "Caddyfile"

func bootstrapCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bootstrap",
		Short: "Creates a workspace with credits and a standard key, for a first request",
		Args:  cobra.NoArgs,
	}
	name := cmd.Flags().String("name", "default", "Workspace name")
	credits := cmd.Flags().String("credits", "10", "Credits to add, in USD")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		amount, err := pricing.ParseUSD(*credits)
		if err != nil {
			return fmt.Errorf("--credits: %w", err)
		}
		return withStore(cmd, func(ctx context.Context, s store.Store, out io.Writer) error {
			ws := store.Workspace{ID: ids.New("ws"), Name: *name, CreatedAt: time.Now().UTC()}
			if err := s.CreateWorkspace(ctx, ws); err != nil {
				return fmt.Errorf("creating the workspace: %w", err)
			}
			bal := store.Balance{}
			if amount > 0 {
				if bal, err = s.AddCredits(ctx, ws.ID, amount, "bootstrap"); err != nil {
					return fmt.Errorf("adding credits: %w", err)
				}
			}
			k, plain, err := handlers.NewKey(ws.ID, store.KeyStandard, "bootstrap")
			if err != nil {
				return err
			}
			k.CreatedAt = time.Now().UTC()
			if err := s.CreateKey(ctx, k); err != nil {
				return fmt.Errorf("creating the key: %w", err)
			}
			_, _ = fmt.Fprintf(out, "workspace  %s (%s)\ncredits    %s USD\nkey        %s\n\nThe key is shown only this once; keep it.\n", ws.ID, ws.Name, pricing.FormatUSD(bal.BalanceNanos), plain)
			return nil
		})
	}
	return cmd
}

func workspaceCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "workspace", Short: "Creates and lists workspaces, and sets their async access"}
	create := &cobra.Command{Use: "create", Short: "Creates a workspace", Args: cobra.NoArgs}
	name := create.Flags().String("name", "", "Workspace name (required)")
	create.RunE = func(cmd *cobra.Command, _ []string) error {
		if *name == "" {
			return errors.New("--name is required")
		}
		return withStore(cmd, func(ctx context.Context, s store.Store, out io.Writer) error {
			ws := store.Workspace{ID: ids.New("ws"), Name: *name, CreatedAt: time.Now().UTC()}
			if err := s.CreateWorkspace(ctx, ws); err != nil {
				return fmt.Errorf("creating the workspace: %w", err)
			}
			_, _ = fmt.Fprintln(out, ws.ID)
			return nil
		})
	}
	list := &cobra.Command{Use: "list", Short: "Lists workspaces", Args: cobra.NoArgs}
	list.RunE = func(cmd *cobra.Command, _ []string) error {
		return withStore(cmd, func(ctx context.Context, s store.Store, out io.Writer) error {
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			_, _ = fmt.Fprintln(tw, "ID\tNAME\tCREATED")
			err := store.Each(func(p store.Page) ([]store.Workspace, error) { return s.ListWorkspaces(ctx, p) },
				func(ws store.Workspace) string { return ws.ID },
				func(ws store.Workspace) error {
					_, err := fmt.Fprintf(tw, "%s\t%s\t%s\n", ws.ID, ws.Name, ws.CreatedAt.Format(time.RFC3339))
					return err
				})
			if err != nil {
				return err
			}
			return tw.Flush()
		})
	}
	cmd.AddCommand(create, list, workspaceAsyncCommand())
	return cmd
}

func keyCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "key", Short: "Creates, lists and revokes API keys"}
	create := &cobra.Command{Use: "create", Short: "Creates a key and prints it once", Args: cobra.NoArgs}
	ws := create.Flags().String("workspace", "", "Workspace id (required)")
	name := create.Flags().String("name", "", "Key name")
	mgmt := create.Flags().Bool("management", false, "Create a management key instead of a standard key")
	role := create.Flags().String("role", "owner", "Management key role: owner, admin or member")
	scopes := create.Flags().String("scopes", "", "Management key scopes: read, write, all, or area:access,... (default: the role's)")
	create.RunE = func(cmd *cobra.Command, _ []string) error {
		if *ws == "" {
			return errors.New("--workspace is required")
		}
		kind := store.KeyStandard
		if *mgmt {
			kind = store.KeyManagement
		} else if cmd.Flags().Changed("role") || cmd.Flags().Changed("scopes") {
			return errors.New("--role and --scopes are for management keys: add --management")
		}
		var grantRole store.Role
		var grantScopes []string
		if kind == store.KeyManagement {
			var err error
			if grantRole, err = handlers.ParseRole(*role); err != nil {
				return fmt.Errorf("--role: %w", err)
			}
			if grantScopes, err = handlers.GrantScopes(grantRole, *scopes); err != nil {
				return fmt.Errorf("--scopes: %w", err)
			}
		}
		return withStore(cmd, func(ctx context.Context, s store.Store, out io.Writer) error {
			k, plain, err := handlers.NewKey(*ws, kind, *name)
			if err != nil {
				return err
			}
			if kind == store.KeyManagement {
				k.Role, k.Scopes = grantRole, grantScopes
			}
			k.CreatedAt = time.Now().UTC()
			if err := s.CreateKey(ctx, k); err != nil {
				if errors.Is(err, store.ErrNotFound) {
					return fmt.Errorf("no workspace %q", *ws)
				}
				return fmt.Errorf("creating the key: %w", err)
			}
			_, _ = fmt.Fprintln(out, plain)
			return nil
		})
	}
	list := &cobra.Command{Use: "list", Short: "Lists a workspace's keys", Args: cobra.NoArgs}
	lws := list.Flags().String("workspace", "", "Workspace id (required)")
	list.RunE = func(cmd *cobra.Command, _ []string) error {
		if *lws == "" {
			return errors.New("--workspace is required")
		}
		return withStore(cmd, func(ctx context.Context, s store.Store, out io.Writer) error {
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			_, _ = fmt.Fprintln(tw, "ID\tKIND\tROLE\tNAME\tSTATE\tCREATED")
			err := store.Each(func(p store.Page) ([]store.Key, error) { return s.ListKeys(ctx, *lws, p) },
				func(k store.Key) string { return k.ID },
				func(k store.Key) error {
					state := "active"
					switch {
					case k.RevokedAt != nil:
						state = "revoked"
					case k.Disabled:
						state = "disabled"
					}
					role := string(k.Role)
					if role == "" {
						role = "-"
					}
					_, err := fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.Kind, role, k.Name, state, k.CreatedAt.Format(time.RFC3339))
					return err
				})
			if err != nil {
				return err
			}
			return tw.Flush()
		})
	}
	revoke := &cobra.Command{Use: "revoke <key id>", Short: "Revokes a key for good", Args: cobra.ExactArgs(1)}
	revoke.RunE = func(cmd *cobra.Command, args []string) error {
		return withStore(cmd, func(ctx context.Context, s store.Store, out io.Writer) error {
			if err := s.RevokeKey(ctx, args[0], time.Now().UTC()); err != nil {
				if errors.Is(err, store.ErrNotFound) {
					return fmt.Errorf("no key %q", args[0])
				}
				return err
			}
			_, _ = fmt.Fprintf(out, "revoked %s\n", args[0])
			return nil
		})
	}
	cmd.AddCommand(create, list, revoke)
	return cmd
}

func creditsCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "credits", Short: "Adds credits to a workspace and shows its balance"}
	add := &cobra.Command{Use: "add", Short: "Adds credits (USD)", Args: cobra.NoArgs}
	ws := add.Flags().String("workspace", "", "Workspace id (required)")
	amount := add.Flags().String("amount", "", "Amount in USD, e.g. 10 or 2.50 (required)")
	note := add.Flags().String("note", "top-up", "Ledger note")
	add.RunE = func(cmd *cobra.Command, _ []string) error {
		if *ws == "" || *amount == "" {
			return errors.New("--workspace and --amount are required")
		}
		nanos, err := pricing.ParseUSD(*amount)
		if err != nil || nanos == 0 {
			return fmt.Errorf("--amount: want a positive USD amount such as 10 or 2.50")
		}
		return withStore(cmd, func(ctx context.Context, s store.Store, out io.Writer) error {
			bal, err := s.AddCredits(ctx, *ws, nanos, *note)
			if err != nil {
				if errors.Is(err, store.ErrNotFound) {
					return fmt.Errorf("no workspace %q", *ws)
				}
				return err
			}
			printBalance(out, bal)
			return nil
		})
	}
	show := &cobra.Command{Use: "show", Short: "Shows a workspace's balance", Args: cobra.NoArgs}
	sws := show.Flags().String("workspace", "", "Workspace id (required)")
	show.RunE = func(cmd *cobra.Command, _ []string) error {
		if *sws == "" {
			return errors.New("--workspace is required")
		}
		return withStore(cmd, func(ctx context.Context, s store.Store, out io.Writer) error {
			bal, err := s.GetBalance(ctx, *sws)
			if err != nil {
				if errors.Is(err, store.ErrNotFound) {
					return fmt.Errorf("no workspace %q", *sws)
				}
				return err
			}
			printBalance(out, bal)
			return nil
		})
	}
	cmd.AddCommand(add, show)
	return cmd
}

func printBalance(out io.Writer, b store.Balance) {
	_, _ = fmt.Fprintf(out, "balance    %s USD\nreserved   %s USD\navailable  %s USD\n",
		pricing.FormatUSD(b.BalanceNanos), pricing.FormatUSD(b.ReservedNanos), pricing.FormatUSD(b.Available()))
}
