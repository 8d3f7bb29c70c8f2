package delivery

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
)

// keyHowTo ends every error about the operator's key, so that whoever reads it can fix it.
const keyHowTo = "give 32 random bytes in base64, made with: openssl rand -base64 32"

// sealVersion is the first byte of every ciphertext: the format (AES-256-GCM, 12-byte
// random nonce), so that a later format can be told apart and old rows still opened.
const sealVersion = 1

// ErrKeyMissing is the error of NewSealer given no key.
var ErrKeyMissing = errors.New("webhook secret key is not set: " + keyHowTo)

// ErrOpen is the error of Open for a ciphertext that was not sealed by this key for this
// context, or was altered since.
var ErrOpen = errors.New("opening sealed secret: not sealed by this key, or altered")

// Sealer encrypts secrets kept at rest (webhook signing secrets) with AES-256-GCM under
// the operator's key, so that a copy of the database alone never yields them.
type Sealer struct {
	aead cipher.AEAD
	key  []byte
}

// NewSealer returns a sealer of the operator's key, 32 bytes given in base64 (standard or
// URL alphabet, padded or not).
func NewSealer(keyBase64 string) (*Sealer, error) {
	keyBase64 = strings.TrimSpace(keyBase64)
	if keyBase64 == "" {
		return nil, ErrKeyMissing
	}
	key, err := decodeKey(keyBase64)
	if err != nil {
		return nil, fmt.Errorf("webhook secret key is not base64: %s", keyHowTo)
	}
	if len(key) != 32 {
		return nil, fmt.Errorf("webhook secret key is %d bytes, not 32: %s", len(key), keyHowTo)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("webhook secret key: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("webhook secret key: %w", err)
	}
	return &Sealer{aead: aead, key: key}, nil
}

// Derive returns a 32-byte key for purpose ("video download links"), derived from the
// operator's key by HMAC-SHA256, so that one secret_key serves every use without any of
// them revealing it or another's key.
func (s *Sealer) Derive(purpose string) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte("model_gateway derived key: " + purpose))
	return m.Sum(nil)
}

func decodeKey(s string) ([]byte, error) {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if key, err := enc.DecodeString(s); err == nil {
			return key, nil
		}
	}
	return nil, errors.New("not base64")
}

// Seal returns plaintext encrypted and authenticated: the version byte, a random nonce,
// then the ciphertext with its tag. context (a webhook endpoint's id) is authenticated but
// not stored: a ciphertext copied to another row does not open there.
func (s *Sealer) Seal(plaintext, context []byte) ([]byte, error) {
	ns := s.aead.NonceSize()
	out := make([]byte, 1+ns, 1+ns+len(plaintext)+s.aead.Overhead())
	out[0] = sealVersion
	if _, err := rand.Read(out[1:]); err != nil {
		return nil, fmt.Errorf("sealing: %w", err)
	}
	return s.aead.Seal(out, out[1:1+ns], plaintext, context), nil
}

// Open returns the plaintext that Seal sealed with the same context; anything else, or a
// ciphertext altered in any byte, is ErrOpen.
func (s *Sealer) Open(sealed, context []byte) ([]byte, error) {
	ns := s.aead.NonceSize()
	if len(sealed) < 1+ns+s.aead.Overhead() {
		return nil, ErrOpen
	}
	if sealed[0] != sealVersion {
		return nil, fmt.Errorf("opening sealed secret: unknown format version %d", sealed[0])
	}
	plaintext, err := s.aead.Open(nil, sealed[1:1+ns], sealed[1+ns:], context)
	if err != nil {
		return nil, ErrOpen
	}
	return plaintext, nil
}
