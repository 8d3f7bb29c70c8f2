package module

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/modelgateway/caddy-modelgateway/notify"
)

// runningApp is the model_gateway app of the running configuration.
func runningApp(t *testing.T) *App {
	t.Helper()
	app, err := caddy.ActiveContext().App("model_gateway")
	if err != nil {
		t.Fatal(err)
	}
	return app.(*App)
}

// TestDestinationKindsOfTheRunningGateway: the gateway started from a Caddyfile carries
// the kinds the notification API uses, which deliver through its outbound client (a
// receiver on loopback admitted by webhook_allow) and its SMTP server; a reload without
// the SMTP server turns email off.
func TestDestinationKindsOfTheRunningGateway(t *testing.T) {
	tuneDeliveries(t, time.Millisecond, nil) // receivers over plain http
	var mu sync.Mutex
	var posted []byte
	discord := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		posted = b
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(discord.Close)
	relay, smtpPort := startSMTPRelay(t)

	dir := t.TempDir()
	mock := "\t\tprovider mk {\n\t\t\ttype mock\n\t\t}\n\t\tmodel m:free {\n\t\t\troute mk m\n\t\t}\n"
	startGatewayIn(t, dir, "\t\twebhook_allow 127.0.0.1\n"+mock+`
		destinations {
			email {
				host 127.0.0.1
				port `+strconv.Itoa(smtpPort)+`
				security none
				from "Model Gateway <noreply@gateway.example.com>"
			}
		}`, "")
	app := runningApp(t)
	kinds := app.destinationKinds()
	n := notify.Notification{ID: "ntf_e2e", Event: notify.EventTest, WorkspaceID: "ws_1", Title: "Test notification", Text: "From the running gateway."}

	target, _, err := kinds["discord"].Check(json.RawMessage(`{"url": "` + discord.URL + `/api/webhooks/1/token"}`))
	if err != nil {
		t.Fatal(err)
	}
	if status, err := kinds["discord"].Send(context.Background(), app.notifyEnv(), target, n); err != nil || status != http.StatusNoContent {
		t.Fatalf("discord Send = %d, %v", status, err)
	}
	mu.Lock()
	body := string(posted)
	mu.Unlock()
	if !strings.Contains(body, `"title":"Test notification"`) {
		t.Errorf("discord received %s", body)
	}

	target, _, err = kinds["email"].Check(json.RawMessage(`{"to": ["ops@example.com"]}`))
	if err != nil {
		t.Fatal(err)
	}
	if status, err := kinds["email"].Send(context.Background(), app.notifyEnv(), target, n); err != nil || status != 250 {
		t.Fatalf("email Send = %d, %v", status, err)
	}
	relay.mu.Lock()
	to, data := relay.to, string(relay.data)
	relay.mu.Unlock()
	if strings.Join(to, ",") != "ops@example.com" || !strings.Contains(data, "From the running gateway.") {
		t.Errorf("the relay received %v:\n%s", to, data)
	}

	// Reloaded without the SMTP server: email destinations are refused, the others stay.
	startGatewayIn(t, dir, "\t\twebhook_allow 127.0.0.1\n"+mock, "")
	kinds = runningApp(t).destinationKinds()
	if _, _, err := kinds["email"].Check(json.RawMessage(`{"to": ["ops@example.com"]}`)); !errors.Is(err, notify.ErrKindNotConfigured) {
		t.Errorf("email after the reload: %v, want ErrKindNotConfigured", err)
	}
	if _, _, err := kinds["slack"].Check(json.RawMessage(`{"url": "https://hooks.slack.com/services/T0/B0/x"}`)); err != nil {
		t.Errorf("slack after the reload: %v", err)
	}
}
