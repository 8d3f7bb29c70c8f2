package delivery

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// SecretPrefix starts every signing secret, as Standard Webhooks writes them.
const SecretPrefix = "whsec_"

// secretBytes is the length of a signing key: the standard asks for 24 to 64 random bytes,
// and 32 match HMAC-SHA256's block of security.
const secretBytes = 32

// RotationGrace is how long the secret a rotation replaced keeps signing beside the new
// one, so that a receiver can roll to the new secret without refusing an event meanwhile.
const RotationGrace = 24 * time.Hour

// Headers of a signed request.
const (
	HeaderID        = standardwebhooks.HeaderWebhookID
	HeaderTimestamp = standardwebhooks.HeaderWebhookTimestamp
	HeaderSignature = standardwebhooks.HeaderWebhookSignature
)

// NewSecret returns a new signing secret: SecretPrefix and the base64 of 32 random bytes.
func NewSecret() (string, error) {
	key := make([]byte, secretBytes)
	if _, err := rand.Read(key); err != nil {
		return "", fmt.Errorf("making a signing secret: %w", err)
	}
	return SecretPrefix + base64.StdEncoding.EncodeToString(key), nil
}

// Signer signs webhook requests with one or more secrets at once: each signature is the
// standard's v1 HMAC-SHA256, and a receiver that knows any one of the secrets verifies.
type Signer struct {
	hooks []*standardwebhooks.Webhook
}

// NewSigner returns a signer of the given secrets (whsec_ followed by base64). At least
// one is needed; an empty one is skipped, so that a previous secret that has none can be
// passed as is.
func NewSigner(secrets ...string) (*Signer, error) {
	s := &Signer{}
	for _, secret := range secrets {
		if secret == "" {
			continue
		}
		if !strings.HasPrefix(secret, SecretPrefix) {
			// The library would take the bare base64 too; refusing it keeps a secret mistyped
			// by an operator from signing with a key the receiver was never given.
			return nil, fmt.Errorf("signing secret does not start with %q", SecretPrefix)
		}
		hook, err := standardwebhooks.NewWebhook(secret)
		if err != nil {
			// The library's error would quote nothing secret, but a base64 error names the
			// offending byte's position only; keep it that way.
			return nil, errors.New("signing secret is not whsec_ followed by base64")
		}
		s.hooks = append(s.hooks, hook)
	}
	if len(s.hooks) == 0 {
		return nil, errors.New("no signing secret")
	}
	return s, nil
}

// SigningSecrets returns the secrets that sign at now: the current one, and the previous
// one too while its grace runs (previousUntil after now).
func SigningSecrets(current, previous string, previousUntil, now time.Time) []string {
	if previous != "" && now.Before(previousUntil) {
		return []string{current, previous}
	}
	return []string{current}
}

// Sign returns the webhook-signature header's value for message id sent at ts with body:
// one v1 signature per secret, separated by spaces as the standard allows.
func (s *Signer) Sign(id string, ts time.Time, body []byte) (string, error) {
	sigs := make([]string, len(s.hooks))
	for i, hook := range s.hooks {
		sig, err := hook.Sign(id, ts, body)
		if err != nil {
			return "", fmt.Errorf("signing message %q: %w", id, err)
		}
		sigs[i] = sig
	}
	return strings.Join(sigs, " "), nil
}

// SetHeaders sets on h the three headers of message id sent at ts with body. The
// timestamp is the attempt's, not the event's: receivers refuse one more than five
// minutes off, and a retry may come hours after the event.
func (s *Signer) SetHeaders(h http.Header, id string, ts time.Time, body []byte) error {
	sig, err := s.Sign(id, ts, body)
	if err != nil {
		return err
	}
	h.Set(HeaderID, id)
	h.Set(HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
	h.Set(HeaderSignature, sig)
	return nil
}
