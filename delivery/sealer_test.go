package delivery

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
)

func newTestSealer(t *testing.T) *Sealer {
	t.Helper()
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	s, err := NewSealer(base64.StdEncoding.EncodeToString(key))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSealOpen(t *testing.T) {
	s := newTestSealer(t)
	secret, ctx := []byte("whsec_plaintext-marker"), []byte("we_1")
	sealed, err := s.Seal(secret, ctx)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sealed, secret) {
		t.Fatal("the ciphertext holds the plaintext")
	}
	if sealed[0] != sealVersion {
		t.Fatalf("version byte %d, want %d", sealed[0], sealVersion)
	}
	again, err := s.Seal(secret, ctx)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(sealed[1:13], again[1:13]) {
		t.Fatal("two seals share a nonce")
	}
	got, err := s.Open(sealed, ctx)
	if err != nil || !bytes.Equal(got, secret) {
		t.Fatalf("Open = %q, %v", got, err)
	}

	for i := range sealed {
		tampered := append([]byte(nil), sealed...)
		tampered[i] ^= 0x40
		if _, err := s.Open(tampered, ctx); err == nil {
			t.Fatalf("a ciphertext altered at byte %d opened", i)
		}
	}
	if _, err := s.Open(sealed[:len(sealed)-1], ctx); !errors.Is(err, ErrOpen) {
		t.Errorf("truncated: %v, want ErrOpen", err)
	}
	if _, err := s.Open(sealed, []byte("we_2")); !errors.Is(err, ErrOpen) {
		t.Errorf("another endpoint's context: %v, want ErrOpen", err)
	}
	if _, err := newTestSealer(t).Open(sealed, ctx); !errors.Is(err, ErrOpen) {
		t.Errorf("another key: %v, want ErrOpen", err)
	}
}

func TestNewSealerSaysHowToMakeAKey(t *testing.T) {
	for name, key := range map[string]string{
		"missing":    "",
		"blank":      "  ",
		"not base64": "not a key!",
		"too short":  base64.StdEncoding.EncodeToString(make([]byte, 16)),
		"too long":   base64.StdEncoding.EncodeToString(make([]byte, 33)),
	} {
		_, err := NewSealer(key)
		if err == nil {
			t.Errorf("%s key accepted", name)
			continue
		}
		if !strings.Contains(err.Error(), "openssl rand -base64 32") {
			t.Errorf("%s key: error %q does not say how to make one", name, err)
		}
	}
	if _, err := NewSealer(base64.RawURLEncoding.EncodeToString(make([]byte, 32))); err != nil {
		t.Errorf("unpadded URL base64 key: %v", err)
	}
}
