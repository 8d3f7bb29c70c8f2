package upstreamhttp

import "bytes"

// Secrets are the credentials an adapter sends, kept out of every upstream body it keeps
// (error payloads and messages, previews of malformed answers).
type Secrets [][]byte

// Add adds a credential; an empty one is ignored.
func (s *Secrets) Add(v string) {
	if v != "" {
		*s = append(*s, []byte(v))
	}
}

// Redact replaces every secret in b with "[redacted]". b is returned as it is when it holds
// none.
func (s Secrets) Redact(b []byte) []byte {
	for _, secret := range s {
		if bytes.Contains(b, secret) {
			b = bytes.ReplaceAll(b, secret, []byte("[redacted]"))
		}
	}
	return b
}
