package delivery

import (
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

func mustSecret(t *testing.T) string {
	t.Helper()
	s, err := NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestNewSecret(t *testing.T) {
	a, b := mustSecret(t), mustSecret(t)
	if a == b {
		t.Fatal("two secrets are equal")
	}
	if !strings.HasPrefix(a, "whsec_") {
		t.Fatalf("secret %q lacks whsec_", a)
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(a, "whsec_"))
	if err != nil || len(key) != 32 {
		t.Fatalf("secret decodes to %d bytes, err %v; want 32", len(key), err)
	}
}

// verify checks h and body as a receiver holding secret does, with the standard's own
// library.
func verify(t *testing.T, secret string, body []byte, h http.Header) error {
	t.Helper()
	hook, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	return hook.Verify(body, h)
}

func TestSignerVerifiedUnderEitherSecret(t *testing.T) {
	current, previous, stranger := mustSecret(t), mustSecret(t), mustSecret(t)
	signer, err := NewSigner(current, previous)
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"type":"video.completed","data":{"id":"video_1"}}`)
	ts := time.Now()
	h := http.Header{}
	if err := signer.SetHeaders(h, "msg_1", ts, body); err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(h.Get(HeaderSignature), "v1,"); got != 2 {
		t.Fatalf("signature header %q holds %d signatures, want 2", h.Get(HeaderSignature), got)
	}
	for name, secret := range map[string]string{"current": current, "previous": previous} {
		if err := verify(t, secret, body, h); err != nil {
			t.Errorf("receiver with the %s secret: %v", name, err)
		}
	}
	if err := verify(t, stranger, body, h); err == nil {
		t.Error("a receiver with another secret verified the message")
	}

	tampered := append([]byte(nil), body...)
	tampered[10] ^= 1
	if err := verify(t, current, tampered, h); err == nil {
		t.Error("a tampered body verified")
	}
	moved := h.Clone()
	moved.Set(HeaderTimestamp, strconv.FormatInt(ts.Unix()+1, 10))
	if err := verify(t, current, body, moved); err == nil {
		t.Error("a tampered timestamp verified")
	}
	renamed := h.Clone()
	renamed.Set(HeaderID, "msg_2")
	if err := verify(t, current, body, renamed); err == nil {
		t.Error("a tampered message id verified")
	}
}

func TestSignerAfterGraceSignsWithCurrentOnly(t *testing.T) {
	current, previous := mustSecret(t), mustSecret(t)
	rotated := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	until := rotated.Add(RotationGrace)
	if got := SigningSecrets(current, previous, until, until.Add(-time.Second)); len(got) != 2 {
		t.Fatalf("within the grace: %d secrets sign, want 2", len(got))
	}
	secrets := SigningSecrets(current, previous, until, until)
	if len(secrets) != 1 || secrets[0] != current {
		t.Fatalf("at the grace's end: secrets %d, want the current one only", len(secrets))
	}
	signer, err := NewSigner(secrets...)
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{}`)
	h := http.Header{}
	if err := signer.SetHeaders(h, "msg_1", time.Now(), body); err != nil {
		t.Fatal(err)
	}
	if err := verify(t, previous, body, h); err == nil {
		t.Error("the previous secret still verifies after its grace")
	}
	if err := verify(t, current, body, h); err != nil {
		t.Errorf("current secret: %v", err)
	}
}

func TestNewSignerRefusesMalformedSecrets(t *testing.T) {
	for _, secrets := range [][]string{nil, {""}, {"abc"}, {"whsec_!!!"}} {
		if _, err := NewSigner(secrets...); err == nil {
			t.Errorf("NewSigner(%q) took it", secrets)
		}
	}
}
