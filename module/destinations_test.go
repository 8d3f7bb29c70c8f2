package module

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"

	"github.com/modelgateway/caddy-modelgateway/notify"
)

func TestDestinationsCaddyfile(t *testing.T) {
	tests := []caddyfileCase{
		{name: "email", input: "model_gateway {\n destinations {\n  email {\n   host smtp.example.com\n   port 2525\n   security tls\n   username {env.SMTP_USERNAME}\n   password {env.SMTP_PASSWORD}\n   from \"Model Gateway <noreply@example.com>\"\n   timeout 10s\n  }\n }\n}",
			want: `{"destinations":{"email":{"host":"smtp.example.com","port":2525,"security":"tls","username":"{env.SMTP_USERNAME}","password":"{env.SMTP_PASSWORD}","from":"Model Gateway \u003cnoreply@example.com\u003e","timeout":10000000000}}}`},
		{name: "bare kinds", input: "model_gateway {\n destinations {\n  slack\n  webhook\n }\n}", want: `{"destinations":{"slack":{},"webhook":{}}}`},
		{name: "empty block", input: "model_gateway {\n destinations {\n }\n}", want: `{}`},
		{name: "unknown kind", input: "model_gateway {\n destinations {\n  pagerduty\n }\n}",
			wantErr: `unknown destination kind "pagerduty": no module model_gateway.destinations.pagerduty in this build, whose kinds are discord, email, slack, teams, webhook`},
		{name: "duplicate kind", input: "model_gateway {\n destinations {\n  slack\n  slack\n }\n}", wantErr: "destination kind slack already specified"},
		{name: "duplicate block", input: "model_gateway {\n destinations {\n }\n destinations {\n }\n}", wantErr: "destinations already specified"},
		{name: "argument", input: "model_gateway {\n destinations email\n}", wantErr: "wrong argument count"},
		{name: "options of a kind without any", input: "model_gateway {\n destinations {\n  teams {\n   url x\n  }\n }\n}", wantErr: "destination kind teams takes no options"},
		{name: "email without from", input: "model_gateway {\n destinations {\n  email {\n   host smtp.example.com\n  }\n }\n}", wantErr: "needs a host and a from address"},
		{name: "email bad security", input: "model_gateway {\n destinations {\n  email {\n   host h\n   from a@example.com\n   security ssl\n  }\n }\n}", wantErr: `security: want starttls, tls or none, got "ssl"`},
		{name: "email bad port", input: "model_gateway {\n destinations {\n  email {\n   host h\n   from a@example.com\n   port 70000\n  }\n }\n}", wantErr: "port 70000 is not a TCP port"},
		{name: "email duplicate option", input: "model_gateway {\n destinations {\n  email {\n   host h\n   host i\n  }\n }\n}", wantErr: "host already specified"},
		{name: "email unknown option", input: "model_gateway {\n destinations {\n  email {\n   host h\n   from a@example.com\n   tls_insecure on\n  }\n }\n}", wantErr: `unrecognized subdirective "tls_insecure"`},
		{name: "email argument", input: "model_gateway {\n destinations {\n  email smtp.example.com\n }\n}", wantErr: "wrong argument count"},
	}
	runCaddyfileCases(t, tests, func() caddyfile.Unmarshaler { return new(App) })
}

// provisionDestinationKinds provisions the outbound client and the destination kinds of
// the app that the JSON configuration describes, as Caddy loads it.
func provisionDestinationKinds(t *testing.T, config string) (*App, error) {
	t.Helper()
	var app App
	if err := json.Unmarshal([]byte(config), &app); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	t.Cleanup(cancel)
	if err := app.provisionWebhooks(caddy.NewReplacer()); err != nil {
		t.Fatal(err)
	}
	return &app, app.provisionDestinations(ctx)
}

func TestDestinationKindsByDefault(t *testing.T) {
	app, err := provisionDestinationKinds(t, `{}`)
	if err != nil {
		t.Fatal(err)
	}
	kinds := app.destinationKinds()
	for name, want := range map[string]notify.Kind{
		"slack": (*notify.Slack)(nil), "discord": (*notify.Discord)(nil), "teams": (*notify.Teams)(nil),
		"webhook": (*notify.Webhook)(nil), "email": notify.Unconfigured{},
	} {
		got, ok := kinds[name]
		if !ok {
			t.Errorf("kind %s is missing", name)
			continue
		}
		if gotType, wantType := fmt.Sprintf("%T", got), fmt.Sprintf("%T", want); gotType != wantType {
			t.Errorf("kind %s is %s, want %s", name, gotType, wantType)
		}
	}
	if len(kinds) != 5 {
		t.Errorf("kinds = %v, want the five of this build", kinds)
	}
	_, _, err = kinds["email"].Check(json.RawMessage(`{"to": ["a@example.com"]}`))
	if !errors.Is(err, notify.ErrKindNotConfigured) || !strings.Contains(err.Error(), "SMTP") {
		t.Errorf("an email destination without an SMTP server: %v, want ErrKindNotConfigured saying what to configure", err)
	}
	if env := app.notifyEnv(); env.Client == nil || env.Client != app.outbound {
		t.Error("the kinds' Env does not carry the app's outbound client")
	}
}

// The kinds check targets' URLs with the app's outbound client: what webhook_allow admits
// is what they take, as deliveries will call it.
func TestDestinationKindsCheckWithTheOutboundClient(t *testing.T) {
	target := json.RawMessage(`{"url": "https://127.0.0.1/hook", "secret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}`)
	guarded, err := provisionDestinationKinds(t, `{}`)
	if err != nil {
		t.Fatal(err)
	}
	var te *notify.TargetError
	if _, _, err := guarded.destinationKinds()["webhook"].Check(target); !errors.As(err, &te) || te.Field != "url" {
		t.Errorf("a loopback receiver without webhook_allow: %v, want refused", err)
	}
	allowed, err := provisionDestinationKinds(t, `{"webhook_allow": ["127.0.0.1"]}`)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := allowed.destinationKinds()["webhook"].Check(target); err != nil {
		t.Errorf("a receiver on a network webhook_allow admits: %v", err)
	}
}

func TestDestinationsProvisionRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, config, says string
	}{
		{"unknown kind", `{"destinations": {"sms": {"password": "hunter2"}}}`, `unknown destination kind "sms"`},
		{"email bad security", `{"destinations": {"email": {"host": "smtp.example.com", "from": "a@example.com", "security": "ssl", "password": "hunter2", "username": "u"}}}`, `security "ssl"`},
		{"email without host", `{"destinations": {"email": {"from": "a@example.com", "password": "hunter2"}}}`, "host is required"},
		{"email without from", `{"destinations": {"email": {"host": "smtp.example.com"}}}`, "from is required"},
		{"email credentials in the clear", `{"destinations": {"email": {"host": "smtp.example.com", "from": "a@example.com", "security": "none", "username": "u", "password": "hunter2"}}}`, "TLS"},
		{"email negative timeout", `{"destinations": {"email": {"host": "smtp.example.com", "from": "a@example.com", "timeout": -1}}}`, "timeout must not be negative"},
		{"unknown email option", `{"destinations": {"email": {"host": "smtp.example.com", "from": "a@example.com", "tls_insecure": true}}}`, "tls_insecure"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := provisionDestinationKinds(t, tc.config)
			if err == nil || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("provision = %v, want an error saying %q", err, tc.says)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("the error quotes the password: %v", err)
			}
		})
	}
}

// An email host given as a placeholder that resolves to nothing turns email off rather
// than failing the configuration, as an unset host does.
func TestEmailHostFromAnUnsetVariable(t *testing.T) {
	app, err := provisionDestinationKinds(t, `{"destinations": {"email": {"host": "{env.GW_TEST_UNSET_SMTP_HOST}", "from": "a@example.com"}}}`)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := app.destinationKinds()["email"].Check(json.RawMessage(`{"to": ["a@example.com"]}`)); !errors.Is(err, notify.ErrKindNotConfigured) {
		t.Errorf("Check = %v, want ErrKindNotConfigured", err)
	}
}

// smtpRelay is a real SMTP server (go-smtp) on the loopback interface that records the
// credentials it was given and the messages.
type smtpRelay struct {
	mu                 sync.Mutex
	username, password string
	from               string
	to                 []string
	data               []byte
}

type smtpRelaySession struct{ relay *smtpRelay }

func (s smtpRelaySession) AuthMechanisms() []string { return []string{sasl.Plain} }
func (s smtpRelaySession) Auth(string) (sasl.Server, error) {
	return sasl.NewPlainServer(func(_, user, pass string) error {
		s.relay.mu.Lock()
		defer s.relay.mu.Unlock()
		s.relay.username, s.relay.password = user, pass
		return nil
	}), nil
}
func (s smtpRelaySession) Mail(from string, _ *smtp.MailOptions) error {
	s.relay.mu.Lock()
	defer s.relay.mu.Unlock()
	s.relay.from = from
	return nil
}
func (s smtpRelaySession) Rcpt(to string, _ *smtp.RcptOptions) error {
	s.relay.mu.Lock()
	defer s.relay.mu.Unlock()
	s.relay.to = append(s.relay.to, to)
	return nil
}
func (s smtpRelaySession) Data(r io.Reader) error {
	b, err := io.ReadAll(r)
	s.relay.mu.Lock()
	defer s.relay.mu.Unlock()
	s.relay.data = b
	return err
}
func (smtpRelaySession) Reset()        {}
func (smtpRelaySession) Logout() error { return nil }

// startSMTPRelay starts a relay on a loopback port, which takes PLAIN authentication
// in the clear as the client allows on loopback only, and returns it and its port.
func startSMTPRelay(t *testing.T) (*smtpRelay, int) {
	t.Helper()
	relay := &smtpRelay{}
	srv := smtp.NewServer(smtp.BackendFunc(func(*smtp.Conn) (smtp.Session, error) { return smtpRelaySession{relay}, nil }))
	srv.Domain = "localhost"
	srv.AllowInsecureAuth = true
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return relay, l.Addr().(*net.TCPAddr).Port
}

// TestEmailFromTheCaddyfile: the email kind configured in a Caddyfile, its credentials
// from the environment, delivers through a real SMTP server with them.
func TestEmailFromTheCaddyfile(t *testing.T) {
	relay, port := startSMTPRelay(t)
	t.Setenv("GW_TEST_SMTP_USERNAME", "mailer")
	t.Setenv("GW_TEST_SMTP_PASSWORD", "pw-from-env")

	block := "model_gateway {\n destinations {\n  email {\n   host 127.0.0.1\n   port " + strconv.Itoa(port) +
		"\n   security none\n   username {env.GW_TEST_SMTP_USERNAME}\n   password {env.GW_TEST_SMTP_PASSWORD}\n   from \"Model Gateway <noreply@gateway.example.com>\"\n  }\n }\n}"
	parsed := new(App)
	if err := parsed.UnmarshalCaddyfile(caddyfile.NewTestDispenser(block)); err != nil {
		t.Fatal(err)
	}
	app, err := provisionDestinationKinds(t, string(caddyconfig.JSON(parsed, nil)))
	if err != nil {
		t.Fatal(err)
	}
	kind := app.destinationKinds()["email"]
	target, preview, err := kind.Check(json.RawMessage(`{"to": ["ops@example.com"]}`))
	if err != nil || preview != "o***@example.com" {
		t.Fatalf("Check = %q, %v", preview, err)
	}
	status, err := kind.Send(context.Background(), app.notifyEnv(), target, notify.Notification{
		ID: "ntf_1", Event: notify.EventTest, WorkspaceID: "ws_1", Title: "Test notification", Text: "It works.",
	})
	if err != nil || status != 250 {
		t.Fatalf("Send = %d, %v", status, err)
	}
	relay.mu.Lock()
	defer relay.mu.Unlock()
	if relay.username != "mailer" || relay.password != "pw-from-env" {
		t.Errorf("AUTH with %q/%q, want the environment's credentials", relay.username, relay.password)
	}
	if relay.from != "noreply@gateway.example.com" || strings.Join(relay.to, ",") != "ops@example.com" {
		t.Errorf("envelope from %q to %v", relay.from, relay.to)
	}
	if !strings.Contains(string(relay.data), "Subject: Test notification") || !strings.Contains(string(relay.data), "It works.") {
		t.Errorf("message:\n%s", relay.data)
	}
}

// TestValidateDestinations: `caddy validate` of a whole Caddyfile provisions the
// destination kinds, and refuses an email configuration that would send the password in
// the clear, without quoting it.
func TestValidateDestinations(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_DATA_HOME", filepath.Join(dir, "data"))
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(dir, "config"))
	t.Setenv("GW_TEST_SMTP_PASSWORD", "pw-from-env")
	validate := func(security string) error {
		cf := gatewayCaddyfile(freePort(t), filepath.Join(dir, "gateway.db"), `
		destinations {
			email {
				host smtp.example.com
				security `+security+`
				username mailer
				password {env.GW_TEST_SMTP_PASSWORD}
				from "Model Gateway <noreply@example.com>"
			}
			slack
		}`, "")
		cfgJSON, _, err := caddyconfig.GetAdapter("caddyfile").Adapt(caddyfile.Format([]byte(cf)), nil)
		if err != nil {
			t.Fatal(err)
		}
		var cfg caddy.Config
		if err := json.Unmarshal(cfgJSON, &cfg); err != nil {
			t.Fatal(err)
		}
		return caddy.Validate(&cfg)
	}
	if err := validate("starttls"); err != nil {
		t.Fatalf("a valid email configuration: %v", err)
	}
	err := validate("none")
	if err == nil || !strings.Contains(err.Error(), "only over TLS") {
		t.Fatalf("validate = %v, want the password refused in the clear", err)
	}
	if strings.Contains(err.Error(), "pw-from-env") {
		t.Errorf("the error quotes the password: %v", err)
	}
}

// TestNotificationsDocExamples: the Caddyfile and JSON examples of docs/notifications.md,
// and the destinations example of docs/configuration.md, load, so that what operators copy
// works.
func TestNotificationsDocExamples(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "docs", "notifications.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := readmeCaddyfiles(t, src)
	if len(blocks) == 0 {
		t.Fatal("docs/notifications.md has no ```caddyfile block")
	}
	// The configuration guide's destinations example too.
	guide, err := os.ReadFile(filepath.Join("..", "docs", "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range readmeCaddyfiles(t, guide) {
		if strings.Contains(b.body, "destinations {") {
			blocks = append(blocks, b)
		}
	}
	for _, b := range blocks {
		body := b.body
		if b.fragment {
			body = wrapFragment(body)
		}
		cfg, warnings, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(body), nil)
		if err != nil || len(warnings) > 0 {
			t.Fatalf("line %d: adapting: %v %v\n%s", b.line, err, warnings, body)
		}
		var parsed struct {
			Apps struct {
				Gateway json.RawMessage `json:"model_gateway"`
			} `json:"apps"`
		}
		if err := json.Unmarshal(cfg, &parsed); err != nil {
			t.Fatal(err)
		}
		if _, err := provisionDestinationKinds(t, string(parsed.Apps.Gateway)); err != nil {
			t.Errorf("line %d: provisioning: %v", b.line, err)
		}
	}
	// The JSON example of the SMTP settings, decoded as strictly as Caddy decodes a
	// module's configuration.
	start := strings.Index(string(src), "```json\n{\n  \"apps\"")
	if start < 0 {
		t.Fatal("docs/notifications.md has no JSON example of the app")
	}
	body := string(src[start+len("```json\n"):])
	body = body[:strings.Index(body, "```")]
	var doc struct {
		Apps struct {
			Gateway struct {
				Destinations map[string]json.RawMessage `json:"destinations"`
			} `json:"model_gateway"`
		} `json:"apps"`
	}
	if err := json.Unmarshal([]byte(body), &doc); err != nil {
		t.Fatal(err)
	}
	email := json.NewDecoder(bytes.NewReader(doc.Apps.Gateway.Destinations["email"]))
	email.DisallowUnknownFields()
	var cfg EmailDestination
	if err := email.Decode(&cfg); err != nil || cfg.Host == "" || cfg.From == "" {
		t.Fatalf("the JSON example's email entry: %+v, %v", cfg, err)
	}
	gateway, _ := json.Marshal(map[string]any{"destinations": doc.Apps.Gateway.Destinations})
	if _, err := provisionDestinationKinds(t, string(gateway)); err != nil {
		t.Errorf("provisioning the JSON example: %v", err)
	}
}
