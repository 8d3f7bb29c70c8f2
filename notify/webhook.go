package notify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/modelgateway/caddy-modelgateway/delivery"
)

// Webhook posts to a receiver of the workspace's own ({"url": "https://...", "secret":
// "whsec_..."}) the notification as JSON, signed as job webhooks are (Standard Webhooks:
// webhook-id, webhook-timestamp, webhook-signature), so that the receiver can tell the
// gateway's posts from anyone else's:
//
//	{"id": "ntf_...", "type": "balance.low", "timestamp": "2026-01-02T03:04:05Z",
//	 "data": {"workspace_id": "ws_...", "title": "...", "text": "...",
//	          "fields": [{"label": "...", "value": "..."}], "url": "..."}}
//
// webhook-id is the notification's id, the same on every attempt, for the receiver to
// deduplicate; webhook-timestamp is the attempt's time, which receivers hold to five
// minutes of their clock.
type Webhook struct {
	client *delivery.Client
	now    func() time.Time
}

// NewWebhook returns the custom webhook kind; client checks targets' URLs as it calls
// them (nil: the default guard), now (time.Now when nil) stamps each attempt's signature.
func NewWebhook(client *delivery.Client, now func() time.Time) *Webhook {
	if now == nil {
		now = time.Now
	}
	return &Webhook{client: guardOr(client), now: now}
}

type webhookTarget struct {
	URL    string `json:"url"`
	Secret string `json:"secret"`
}

// Check validates {"url": ..., "secret": ...}. The preview shows the URL's host and end,
// never the secret.
func (k *Webhook) Check(target json.RawMessage) ([]byte, string, error) {
	var t webhookTarget
	if err := decodeTarget(target, &t); err != nil {
		return nil, "", err
	}
	raw, u, err := checkTargetURL(k.client, "url", t.URL)
	if err != nil {
		return nil, "", err
	}
	t.Secret = strings.TrimSpace(t.Secret)
	if t.Secret == "" {
		// The gateway makes no secret of its own here: the target is never shown again,
		// so a secret it made could never reach the receiver.
		return nil, "", &TargetError{Field: "secret", Message: "is required: a Standard Webhooks signing secret, " + delivery.SecretPrefix + " followed by the base64 of 24 to 64 random bytes"}
	}
	if err := delivery.CheckSecret(t.Secret); err != nil {
		return nil, "", &TargetError{Field: "secret", Message: err.Error()}
	}
	normalized, err := json.Marshal(webhookTarget{URL: raw, Secret: t.Secret})
	if err != nil {
		return nil, "", fmt.Errorf("encoding the target: %w", err)
	}
	return normalized, urlPreview(u, raw), nil
}

type webhookPayload struct {
	ID        string      `json:"id"`
	Type      string      `json:"type"`
	Timestamp string      `json:"timestamp"`
	Data      webhookData `json:"data"`
}

type webhookData struct {
	WorkspaceID string         `json:"workspace_id"`
	Title       string         `json:"title"`
	Text        string         `json:"text"`
	Fields      []webhookField `json:"fields"`
	URL         string         `json:"url,omitempty"`
}

type webhookField struct {
	Label string `json:"label"`
	Value string `json:"value"`
}

// Send signs and posts the notification.
func (k *Webhook) Send(ctx context.Context, env Env, target []byte, n Notification) (int, error) {
	var t webhookTarget
	if err := json.Unmarshal(target, &t); err != nil || t.URL == "" || t.Secret == "" {
		return 0, errors.New("the stored target does not read as {\"url\": ..., \"secret\": ...}")
	}
	if n.ID == "" {
		// webhook-id is what a receiver deduplicates on: an empty one is a caller's bug.
		return 0, errors.New("a custom webhook notification needs an id")
	}
	signer, err := delivery.NewSigner(t.Secret)
	if err != nil {
		return 0, err
	}
	payload := webhookPayload{
		ID: n.ID, Type: n.Event, Timestamp: occurredAt(n).Format(time.RFC3339),
		Data: webhookData{WorkspaceID: n.WorkspaceID, Title: titleOf(n), Text: n.Text, Fields: make([]webhookField, len(n.Fields)), URL: n.URL},
	}
	for i, f := range n.Fields {
		payload.Data.Fields[i] = webhookField(f)
	}
	body, err := json.Marshal(payload)
	if err != nil {
		return 0, fmt.Errorf("encoding the message: %w", err)
	}
	h := http.Header{}
	if err := signer.SetHeaders(h, n.ID, k.now(), body); err != nil {
		return 0, err
	}
	return postBody(ctx, env, t.URL, h, body)
}

var _ Kind = (*Webhook)(nil)
