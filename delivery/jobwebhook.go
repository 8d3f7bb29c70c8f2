package delivery

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/modelgateway/caddy-modelgateway/internal/ids"
)

// JobWebhook is a job's webhook configuration as stored on the job (store.Job.Webhook):
// either a webhook endpoint of the job's workspace (EndpointID), or a receiver URL given
// with the job itself (URL, with its own sealed secret and its deliveries' Target), and the
// event types it wants (empty: all of them).
type JobWebhook struct {
	EndpointID string   `json:"endpoint_id,omitempty"`
	URL        string   `json:"url,omitempty"`
	Events     []string `json:"events,omitempty"`
	// Target names the deliveries to URL (InlineTargetPrefix...): their claims' group, and
	// the context Secret is sealed with, so that the sealed bytes open for this job alone.
	Target string `json:"target,omitempty"`
	// Secret is URL's signing secret sealed by the Sealer; never shown.
	Secret []byte `json:"secret,omitempty"`
}

// InlineTargetPrefix starts the target of the deliveries to a URL a job's webhook names
// itself; any other target is a webhook endpoint's id.
const InlineTargetPrefix = "whurl_"

// IsInlineTarget tells whether a delivery's target is a job's own URL rather than a
// webhook endpoint.
func IsInlineTarget(target string) bool { return strings.HasPrefix(target, InlineTargetPrefix) }

// NewInlineTarget names the deliveries of a new job's own URL.
func NewInlineTarget() string { return ids.New(strings.TrimSuffix(InlineTargetPrefix, "_")) }

// ReadJobWebhook reads a job's stored webhook configuration; ok is false when the job has
// none.
func ReadJobWebhook(raw json.RawMessage) (w JobWebhook, ok bool, err error) {
	if len(raw) == 0 || string(raw) == "null" {
		return JobWebhook{}, false, nil
	}
	if err := json.Unmarshal(raw, &w); err != nil {
		return JobWebhook{}, false, fmt.Errorf("reading a job's webhook configuration: %w", err)
	}
	return w, true, nil
}

// DeliveryTarget is where the job's events go: its endpoint's id or its URL's target.
func (w JobWebhook) DeliveryTarget() string {
	if w.EndpointID != "" {
		return w.EndpointID
	}
	return w.Target
}

// Secret lengths the standard allows, in bytes of key.
const (
	minSecretBytes = 24
	maxSecretBytes = 64
)

// CheckSecret checks a signing secret a user gives: SecretPrefix followed by the base64
// of 24 to 64 random bytes, as Standard Webhooks asks. Its error quotes nothing of it.
func CheckSecret(secret string) error {
	b64, ok := strings.CutPrefix(secret, SecretPrefix)
	if !ok {
		return fmt.Errorf("a signing secret starts with %q", SecretPrefix)
	}
	key, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return errors.New("a signing secret is " + SecretPrefix + " followed by standard base64")
	}
	if len(key) < minSecretBytes || len(key) > maxSecretBytes {
		return fmt.Errorf("a signing secret's key is %d to %d bytes, not %d", minSecretBytes, maxSecretBytes, len(key))
	}
	return nil
}
