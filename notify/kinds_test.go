package notify_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/modelgateway/caddy-modelgateway/delivery"
	"github.com/modelgateway/caddy-modelgateway/notify"
)

// loopbackClient is a delivery client that reaches the test's fakes: http allowed, and
// the loopback network admitted as an operator's webhook_allow would.
func loopbackClient() *delivery.Client {
	return delivery.NewClient(delivery.ClientOptions{AllowHTTP: true, Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
}

// fakeService is a local stand-in for a webhook service: it records each request and
// answers status with body.
type fakeService struct {
	*httptest.Server
	status int
	answer string

	mu  sync.Mutex
	got []receivedPost
}

type receivedPost struct {
	path   string
	header http.Header
	body   []byte
}

func newFakeService(t *testing.T, status int, answer string) *fakeService {
	t.Helper()
	f := &fakeService{status: status, answer: answer}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.got = append(f.got, receivedPost{path: r.URL.RequestURI(), header: r.Header.Clone(), body: body})
		f.mu.Unlock()
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		w.WriteHeader(f.status)
		_, _ = io.WriteString(w, f.answer)
	}))
	t.Cleanup(f.Close)
	return f
}

// only returns the one request the fake received.
func (f *fakeService) only(t *testing.T) receivedPost {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.got) != 1 {
		t.Fatalf("the fake received %d requests, want 1", len(f.got))
	}
	if ct := f.got[0].header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q", ct)
	}
	return f.got[0]
}

// sample is a notification with everything a kind renders, and text that would be markup
// if a kind passed it through.
func sample() notify.Notification {
	return notify.Notification{
		ID: "ntf_01JTEST", Event: notify.EventBalanceLow, WorkspaceID: "ws_123",
		Title: "Balance below 5.00 USD",
		Text:  "Key <@U123> & co spent it. <script>alert(1)</script>",
		Fields: []notify.Field{
			{Label: "Balance", Value: "4.20 USD"},
			{Label: "Threshold", Value: "5.00 USD"},
		},
		URL:        "https://gateway.example.com/credits",
		OccurredAt: time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC),
	}
}

// checked runs kind's Check on target and fails the test on a refusal.
func checked(t *testing.T, kind notify.Kind, target string) []byte {
	t.Helper()
	normalized, _, err := kind.Check(json.RawMessage(target))
	if err != nil {
		t.Fatalf("Check(%s): %v", target, err)
	}
	return normalized
}

func TestSlackSendsBlockKit(t *testing.T) {
	fake := newFakeService(t, http.StatusOK, "ok")
	client := loopbackClient()
	kind := notify.NewSlack(client)
	target := checked(t, kind, `{"url": "`+fake.URL+`/services/T000/B000/XXXXSECRET"}`)
	n := sample()
	status, err := kind.Send(context.Background(), notify.Env{Client: client}, target, n)
	if err != nil || status != http.StatusOK {
		t.Fatalf("Send = %d, %v", status, err)
	}
	got := fake.only(t)
	if got.path != "/services/T000/B000/XXXXSECRET" {
		t.Errorf("posted to %q", got.path)
	}
	var msg struct {
		Text   string `json:"text"`
		Blocks []struct {
			Type string `json:"type"`
			Text *struct {
				Type, Text string
			} `json:"text"`
			Fields []struct {
				Type, Text string
			} `json:"fields"`
			Elements []struct {
				Type, Text string
			} `json:"elements"`
		} `json:"blocks"`
	}
	if err := json.Unmarshal(got.body, &msg); err != nil {
		t.Fatalf("body %s: %v", got.body, err)
	}
	if !strings.HasPrefix(msg.Text, "Balance below 5.00 USD: Key &lt;@U123&gt; &amp; co") {
		t.Errorf("fallback text = %q", msg.Text)
	}
	if len(msg.Blocks) != 3 {
		t.Fatalf("blocks = %s", got.body)
	}
	header, section, context := msg.Blocks[0], msg.Blocks[1], msg.Blocks[2]
	if header.Type != "header" || header.Text.Type != "plain_text" || header.Text.Text != n.Title {
		t.Errorf("header block = %+v", header)
	}
	if section.Type != "section" || section.Text.Type != "mrkdwn" || strings.Contains(section.Text.Text, "<") ||
		!strings.Contains(section.Text.Text, "&lt;@U123&gt;") {
		t.Errorf("section text = %+v: the user's text must be escaped so it cannot mention or link", section.Text)
	}
	if len(section.Fields) != 2 || section.Fields[0].Text != "*Balance*\n4.20 USD" || section.Fields[1].Text != "*Threshold*\n5.00 USD" {
		t.Errorf("section fields = %+v", section.Fields)
	}
	if context.Type != "context" || len(context.Elements) != 1 {
		t.Fatalf("context block = %+v", context)
	}
	line := context.Elements[0].Text
	for _, want := range []string{"Low balance", "<!date^1772600767^", "|2026-03-04 05:06 UTC>", "<https://gateway.example.com/credits|Open>"} {
		if !strings.Contains(line, want) {
			t.Errorf("context %q lacks %q", line, want)
		}
	}
}

func TestSlackSplitsFieldsByTen(t *testing.T) {
	fake := newFakeService(t, http.StatusOK, "ok")
	client := loopbackClient()
	kind := notify.NewSlack(client)
	n := sample()
	n.Text = ""
	n.Fields = nil
	for i := range 12 {
		n.Fields = append(n.Fields, notify.Field{Label: "L" + string(rune('a'+i)), Value: "v"})
	}
	if _, err := kind.Send(context.Background(), notify.Env{Client: client}, checked(t, kind, `{"url": "`+fake.URL+`/hook"}`), n); err != nil {
		t.Fatal(err)
	}
	var msg struct {
		Blocks []struct {
			Type   string            `json:"type"`
			Text   json.RawMessage   `json:"text"`
			Fields []json.RawMessage `json:"fields"`
		} `json:"blocks"`
	}
	if err := json.Unmarshal(fake.only(t).body, &msg); err != nil {
		t.Fatal(err)
	}
	if len(msg.Blocks) != 4 || len(msg.Blocks[1].Fields) != 10 || len(msg.Blocks[2].Fields) != 2 || msg.Blocks[1].Text != nil {
		t.Errorf("want header, a section of 10 fields without text, one of 2, context; got %+v", msg.Blocks)
	}
}

func TestDiscordSendsAnEmbed(t *testing.T) {
	fake := newFakeService(t, http.StatusNoContent, "")
	client := loopbackClient()
	kind := notify.NewDiscord(client)
	target := checked(t, kind, `{"url": "`+fake.URL+`/api/webhooks/123/tok-en_SECRET"}`)
	n := sample()
	status, err := kind.Send(context.Background(), notify.Env{Client: client}, target, n)
	if err != nil || status != http.StatusNoContent {
		t.Fatalf("Send = %d, %v", status, err)
	}
	var msg struct {
		Embeds []struct {
			Title, Description, URL, Timestamp string
			Color                              int
			Fields                             []struct {
				Name, Value string
				Inline      bool
			}
			Footer struct{ Text string }
		}
		AllowedMentions *struct {
			Parse []string `json:"parse"`
		} `json:"allowed_mentions"`
	}
	got := fake.only(t)
	if err := json.Unmarshal(got.body, &msg); err != nil {
		t.Fatalf("body %s: %v", got.body, err)
	}
	if len(msg.Embeds) != 1 {
		t.Fatalf("embeds = %s", got.body)
	}
	e := msg.Embeds[0]
	if e.Title != n.Title || e.Description != n.Text || e.URL != n.URL || e.Footer.Text != "Low balance" {
		t.Errorf("embed = %+v", e)
	}
	if ts, err := time.Parse(time.RFC3339, e.Timestamp); err != nil || !ts.Equal(n.OccurredAt) {
		t.Errorf("timestamp %q, want %s", e.Timestamp, n.OccurredAt)
	}
	if len(e.Fields) != 2 || e.Fields[0].Name != "Balance" || e.Fields[0].Value != "4.20 USD" || !e.Fields[0].Inline {
		t.Errorf("fields = %+v", e.Fields)
	}
	if msg.AllowedMentions == nil || msg.AllowedMentions.Parse == nil || len(msg.AllowedMentions.Parse) != 0 {
		t.Errorf("allowed_mentions must be {\"parse\": []} so that no text pings anyone: %s", got.body)
	}
	// The colour tells a warning from a failure.
	warning := e.Color
	n.Event = notify.EventVideoFailed
	if _, err := kind.Send(context.Background(), notify.Env{Client: client}, target, n); err != nil {
		t.Fatal(err)
	}
	fake.mu.Lock()
	second := fake.got[1].body
	fake.mu.Unlock()
	if err := json.Unmarshal(second, &msg); err != nil {
		t.Fatal(err)
	}
	if msg.Embeds[0].Color == warning || warning == 0 {
		t.Errorf("balance.low and video.failed have colours %#x and %#x", warning, msg.Embeds[0].Color)
	}
}

func TestTeamsSendsAnAdaptiveCard(t *testing.T) {
	fake := newFakeService(t, http.StatusAccepted, "")
	client := loopbackClient()
	kind := notify.NewTeams(client)
	target := checked(t, kind, `{"url": "`+fake.URL+`/workflows/abc/triggers/manual/paths/invoke?api-version=2016-06-01&sig=SECRETSIG"}`)
	n := sample()
	status, err := kind.Send(context.Background(), notify.Env{Client: client}, target, n)
	if err != nil || status != http.StatusAccepted {
		t.Fatalf("Send = %d, %v", status, err)
	}
	got := fake.only(t)
	if !strings.Contains(got.path, "sig=SECRETSIG") {
		t.Errorf("the query, which authorizes the post, must be kept: posted to %q", got.path)
	}
	var msg struct {
		Type        string
		Attachments []struct {
			ContentType string
			Content     struct {
				Schema  string `json:"$schema"`
				Type    string
				Version string
				Body    []struct {
					Type, Text, Weight, Color string
					Facts                     []struct{ Title, Value string }
				}
				Actions []struct{ Type, Title, URL string }
			}
		}
	}
	if err := json.Unmarshal(got.body, &msg); err != nil {
		t.Fatalf("body %s: %v", got.body, err)
	}
	if msg.Type != "message" || len(msg.Attachments) != 1 || msg.Attachments[0].ContentType != "application/vnd.microsoft.card.adaptive" {
		t.Fatalf("envelope = %s", got.body)
	}
	card := msg.Attachments[0].Content
	if card.Type != "AdaptiveCard" || card.Version != "1.4" || !strings.Contains(card.Schema, "adaptive-card.json") {
		t.Errorf("card = %+v", card)
	}
	if len(card.Body) != 4 {
		t.Fatalf("body = %+v", card.Body)
	}
	if b := card.Body[0]; b.Type != "TextBlock" || b.Text != n.Title || b.Weight != "Bolder" || b.Color != "warning" {
		t.Errorf("title block = %+v", b)
	}
	if b := card.Body[1]; b.Type != "TextBlock" || b.Text != n.Text {
		t.Errorf("text block = %+v", b)
	}
	if b := card.Body[2]; b.Type != "FactSet" || len(b.Facts) != 2 || b.Facts[0].Title != "Balance" || b.Facts[1].Value != "5.00 USD" {
		t.Errorf("facts = %+v", b)
	}
	if b := card.Body[3]; !strings.Contains(b.Text, "Low balance") || !strings.Contains(b.Text, "2026-03-04 05:06 UTC") {
		t.Errorf("footer = %+v", b)
	}
	if len(card.Actions) != 1 || card.Actions[0].Type != "Action.OpenUrl" || card.Actions[0].URL != n.URL {
		t.Errorf("actions = %+v", card.Actions)
	}
}

// testSecret is a valid signing secret (24 bytes of key).
const testSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

func TestWebhookIsSignedForAnIndependentVerifier(t *testing.T) {
	fake := newFakeService(t, http.StatusOK, "")
	client := loopbackClient()
	sentAt := time.Date(2026, 3, 4, 5, 10, 0, 0, time.UTC)
	kind := notify.NewWebhook(client, func() time.Time { return sentAt })
	target := checked(t, kind, `{"url": "`+fake.URL+`/receiver", "secret": "`+testSecret+`"}`)
	n := sample()
	status, err := kind.Send(context.Background(), notify.Env{Client: client}, target, n)
	if err != nil || status != http.StatusOK {
		t.Fatalf("Send = %d, %v", status, err)
	}
	got := fake.only(t)
	// A receiver written with openai-go (its own Standard Webhooks implementation, not
	// the library the gateway signs with) accepts the post.
	verifier := openai.NewClient(option.WithAPIKey("unused"), option.WithWebhookSecret(testSecret))
	if err := verifier.Webhooks.VerifySignatureWithToleranceAndTime(got.body, got.header, 5*time.Minute, sentAt); err != nil {
		t.Fatalf("signature does not verify: %v", err)
	}
	other := openai.NewClient(option.WithAPIKey("unused"), option.WithWebhookSecret("whsec_"+strings.Repeat("QUFB", 8)))
	if err := other.Webhooks.VerifySignatureWithToleranceAndTime(got.body, got.header, 5*time.Minute, sentAt); err == nil {
		t.Error("another secret verifies the signature too")
	}
	if id := got.header.Get("webhook-id"); id != n.ID {
		t.Errorf("webhook-id = %q, want the notification's id %q", id, n.ID)
	}
	if ts := got.header.Get("webhook-timestamp"); ts != "1772601000" {
		t.Errorf("webhook-timestamp = %q, want the attempt's time", ts)
	}
	var payload struct {
		ID, Type, Timestamp string
		Data                struct {
			WorkspaceID string `json:"workspace_id"`
			Title, Text string
			Fields      []struct{ Label, Value string }
			URL         string
		}
	}
	if err := json.Unmarshal(got.body, &payload); err != nil {
		t.Fatal(err)
	}
	if payload.ID != n.ID || payload.Type != "balance.low" || payload.Timestamp != "2026-03-04T05:06:07Z" {
		t.Errorf("envelope = %+v", payload)
	}
	d := payload.Data
	if d.WorkspaceID != "ws_123" || d.Title != n.Title || d.Text != n.Text || d.URL != n.URL ||
		len(d.Fields) != 2 || d.Fields[0].Label != "Balance" || d.Fields[0].Value != "4.20 USD" {
		t.Errorf("data = %+v", d)
	}
	if strings.Contains(string(got.body), testSecret) {
		t.Error("the payload carries the secret")
	}
}

func TestRefusalIsASendError(t *testing.T) {
	fake := newFakeService(t, http.StatusNotFound, "no_service\n\n  (the webhook was removed)")
	client := loopbackClient()
	kind := notify.NewSlack(client)
	status, err := kind.Send(context.Background(), notify.Env{Client: client}, checked(t, kind, `{"url": "`+fake.URL+`/hook"}`), sample())
	var se *notify.SendError
	if !errors.As(err, &se) || se.Status != http.StatusNotFound || status != http.StatusNotFound {
		t.Fatalf("Send = %d, %v; want a *SendError 404", status, err)
	}
	if se.Message != "no_service (the webhook was removed)" {
		t.Errorf("message = %q, want the answer on one line", se.Message)
	}
}

func TestUnreachableNamesNoToken(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	client := loopbackClient()
	for _, kind := range []notify.Kind{notify.NewSlack(client), notify.NewDiscord(client), notify.NewTeams(client)} {
		target := checked(t, kind, `{"url": "http://`+addr+`/api/webhooks/1/TOKENTOKEN?sig=SIGSIG"}`)
		_, err := kind.Send(context.Background(), notify.Env{Client: client}, target, sample())
		if err == nil {
			t.Fatalf("%T: a closed port answered", kind)
		}
		var se *notify.SendError
		if errors.As(err, &se) {
			t.Errorf("%T: no answer came, yet the error is a *SendError: %v", kind, err)
		}
		if strings.Contains(err.Error(), "TOKENTOKEN") || strings.Contains(err.Error(), "SIGSIG") {
			t.Errorf("%T: the error quotes the URL's secret parts: %v", kind, err)
		}
	}
}

func TestSendGoesThroughTheGuard(t *testing.T) {
	fake := newFakeService(t, http.StatusOK, "")
	permissive := loopbackClient()
	kind := notify.NewDiscord(permissive)
	target := checked(t, kind, `{"url": "`+fake.URL+`/x"}`)
	// The same target sent with the default client, which refuses loopback and http.
	_, err := kind.Send(context.Background(), notify.Env{Client: delivery.NewClient(delivery.ClientOptions{AllowHTTP: true})}, target, sample())
	if !errors.Is(err, delivery.ErrForbiddenAddress) {
		t.Errorf("Send to loopback with the default guard = %v, want ErrForbiddenAddress", err)
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	if len(fake.got) != 0 {
		t.Error("the guarded post reached the fake")
	}
}

func TestCheckRefuses(t *testing.T) {
	guarded := delivery.NewClient(delivery.ClientOptions{})
	email, err := notify.NewEmail(notify.SMTPConfig{Host: "smtp.example.com", From: "noreply@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]notify.Kind{
		"slack": notify.NewSlack(guarded), "discord": notify.NewDiscord(guarded), "teams": notify.NewTeams(guarded),
		"webhook": notify.NewWebhook(guarded, nil), "email": email,
	}
	secret := `, "secret": "` + testSecret + `"`
	for _, tc := range []struct {
		name, kind, target, field, says string
	}{
		{"not an object", "slack", `"https://hooks.slack.com/services/T/B/X"`, "", "JSON object"},
		{"not JSON", "discord", `{"url": `, "", "valid JSON"},
		{"trailing", "teams", `{"url": "https://example.com/x"} {}`, "", "one JSON object"},
		{"no url", "slack", `{}`, "url", "required"},
		{"url not a string", "discord", `{"url": 12}`, "url", "string"},
		{"unknown field", "teams", `{"url": "https://example.com/x", "channel": "c"}`, "channel", "not a field"},
		{"http", "slack", `{"url": "http://hooks.slack.com/services/T/B/X"}`, "url", "https"},
		{"no scheme", "discord", `{"url": "discord.com/api/webhooks/1/x"}`, "url", "https"},
		{"unparsable", "teams", `{"url": "https://exa mple.com/SECRETPATH"}`, "url", "not a valid URL"},
		{"loopback", "slack", `{"url": "https://127.0.0.1/services/T/B/X"}`, "url", "public address"},
		{"private", "discord", `{"url": "https://10.1.2.3/api/webhooks/1/x"}`, "url", "public address"},
		{"metadata", "teams", `{"url": "https://169.254.169.254/latest"}`, "url", "public address"},
		{"mapped loopback", "webhook", `{"url": "https://[::ffff:127.0.0.1]/x"` + secret + `}`, "url", "public address"},
		{"decimal host", "webhook", `{"url": "https://2130706433/x"` + secret + `}`, "url", "public address"},
		{"credentials", "slack", `{"url": "https://user:pw@example.com/x"}`, "url", "credentials"},
		{"slack workflow URL", "slack", `{"url": "https://hooks.slack.com/workflows/T/A/1/x"}`, "url", "incoming webhook"},
		{"discord channel URL", "discord", `{"url": "https://discord.com/channels/1/2"}`, "url", "api/webhooks"},
		{"discord slack-compatible", "discord", `{"url": "https://discordapp.com/api/webhooks/1/x/slack"}`, "url", "api/webhooks"},
		{"teams not a workflow", "teams", `{"url": "https://prod-01.westus.logic.azure.com/other"}`, "url", "workflows"},
		{"no secret", "webhook", `{"url": "https://example.com/x"}`, "secret", "required"},
		{"secret without prefix", "webhook", `{"url": "https://example.com/x", "secret": "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}`, "secret", "whsec_"},
		{"secret not base64", "webhook", `{"url": "https://example.com/x", "secret": "whsec_!!not base64!!"}`, "secret", "base64"},
		{"secret too short", "webhook", `{"url": "https://example.com/x", "secret": "whsec_QUFBQQ=="}`, "secret", "bytes"},
		{"no recipients", "email", `{"to": []}`, "to", "required"},
		{"to not a list", "email", `{"to": "a@example.com"}`, "to", "list"},
		{"too many", "email", `{"to": ["a@x.com","b@x.com","c@x.com","d@x.com","e@x.com","f@x.com","g@x.com","h@x.com","i@x.com","j@x.com","k@x.com"]}`, "to", "at most 10"},
		{"not an address", "email", `{"to": ["a@example.com", "not-an-address"]}`, "to[1]", "not an email address"},
		{"no domain name", "email", `{"to": ["root@localhost"]}`, "to[0]", "domain name"},
		{"domain literal", "email", `{"to": ["a@[192.0.2.1]"]}`, "to[0]", "domain name"},
		{"quoted local part", "email", `{"to": ["\"john doe\"@example.com"]}`, "to[0]", "plain address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kind := kinds[tc.kind]
			_, _, err := kind.Check(json.RawMessage(tc.target))
			var te *notify.TargetError
			if !errors.As(err, &te) {
				t.Fatalf("Check = %v, want a *TargetError", err)
			}
			if te.Field != tc.field || !strings.Contains(te.Message, tc.says) {
				t.Errorf("refusal = field %q %q, want field %q saying %q", te.Field, te.Message, tc.field, tc.says)
			}
			for _, secret := range []string{"SECRETPATH", testSecret, "pw@", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"} {
				if strings.Contains(te.Error(), secret) {
					t.Errorf("the refusal quotes the target: %v", te)
				}
			}
		})
	}
}

func TestPreviewHidesTheSecretParts(t *testing.T) {
	guarded := delivery.NewClient(delivery.ClientOptions{})
	for _, tc := range []struct {
		kind    notify.Kind
		target  string
		preview string
		hidden  []string
	}{
		{notify.NewSlack(guarded), `{"url": " https://hooks.slack.com/services/T0SECRET/B0SECRET/abcdefghTOKENa1b2 "}`,
			"hooks.slack.com/…/a1b2", []string{"T0SECRET", "B0SECRET", "TOKEN", "services"}},
		{notify.NewDiscord(guarded), `{"url": "https://discord.com/api/webhooks/123456789/TOKENTOKENwxyz"}`,
			"discord.com/…/wxyz", []string{"123456789", "TOKEN", "webhooks"}},
		{notify.NewTeams(guarded), `{"url": "https://prod-12.westeurope.logic.azure.com:443/workflows/WFID/triggers/manual/paths/invoke?api-version=2016-06-01&sp=%2Ftriggers&sv=1.0&sig=SIGSIGSIG9876"}`,
			"prod-12.westeurope.logic.azure.com:443/…/9876", []string{"WFID", "SIGSIGSIG", "sig="}},
		{notify.NewWebhook(guarded, nil), `{"url": "https://hooks.example.com/in/PATHSECRET", "secret": "` + testSecret + `"}`,
			"hooks.example.com/…/CRET", []string{"PATHSECRET", testSecret, "whsec_"}},
	} {
		normalized, preview, err := tc.kind.Check(json.RawMessage(tc.target))
		if err != nil {
			t.Fatalf("%T: %v", tc.kind, err)
		}
		if preview != tc.preview {
			t.Errorf("%T preview = %q, want %q", tc.kind, preview, tc.preview)
		}
		for _, h := range tc.hidden {
			if strings.Contains(preview, h) {
				t.Errorf("%T preview %q shows %q", tc.kind, preview, h)
			}
		}
		var got map[string]string
		if err := json.Unmarshal(normalized, &got); err != nil || strings.TrimSpace(got["url"]) != got["url"] || got["url"] == "" {
			t.Errorf("%T normalized = %s: want the URL trimmed", tc.kind, normalized)
		}
	}
}

func TestEmailTargetNormalized(t *testing.T) {
	email, err := notify.NewEmail(notify.SMTPConfig{Host: "smtp.example.com", From: "noreply@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	normalized, preview, err := email.Check(json.RawMessage(`{"to": ["Ann <ann@Example.COM>", "bob@example.org", "ann@example.com"]}`))
	if err != nil {
		t.Fatal(err)
	}
	if string(normalized) != `{"to":["ann@example.com","bob@example.org"]}` {
		t.Errorf("normalized = %s: want bare addresses, domains in lower case, no duplicate", normalized)
	}
	if preview != "a***@example.com and 1 more" {
		t.Errorf("preview = %q", preview)
	}
}

func TestUnconfiguredKindRefuses(t *testing.T) {
	kind := notify.Unconfigured{Kind: "email", Hint: "set destinations.email.host"}
	if _, _, err := kind.Check(json.RawMessage(`{"to": ["a@example.com"]}`)); !errors.Is(err, notify.ErrKindNotConfigured) || !strings.Contains(err.Error(), "destinations.email.host") {
		t.Errorf("Check = %v", err)
	}
	if _, err := kind.Send(context.Background(), notify.Env{}, []byte(`{"to": ["a@example.com"]}`), sample()); !errors.Is(err, notify.ErrKindNotConfigured) {
		t.Errorf("Send = %v", err)
	}
}
