package providers

import "strings"

// Reasoning signatures (an Anthropic thinking block's signature, an OpenAI Responses
// reasoning item's encrypted_content, a Gemini thoughtSignature) are only valid for the
// provider that produced them. The gateway records their origin in the neutral model:
//
//   - An adapter that decodes an upstream answer (complete or streamed) turns every signature
//     into a tagged token, Tag(origin, raw) = "gw1:" + origin + ":" + raw, where origin is one
//     of the Sig* constants. "gw1" is the version of the scheme.
//   - Surface encoders hand the token to the client as is (clients treat it as opaque),
//     except that a token whose origin is the surface's own native provider format is
//     emitted raw (NativeSignature), so that what the client sends back is byte for byte
//     what that provider issued — which the same-format passthrough path forwards untouched.
//   - Surface decoders of client requests keep whatever token they get, tagged or raw.
//   - Upstream encoders send a signature (ReplaySignature) only when it is raw, of unknown
//     origin (passed through as before), or tagged with their own origin (sent untagged). A
//     signature tagged with another origin is dropped, together with its reasoning part
//     when the upstream needs a valid signature on it.

// Signature origins, one per upstream signature format.
const (
	SigAnthropic = "anthropic"
	SigOpenAI    = "openai"
	SigGemini    = "gemini"
)

// sigPrefix starts every tagged signature; the version lets the scheme change later.
const sigPrefix = "gw1:"

// Tag returns sig as a token that records origin. An empty sig stays empty, and a token
// already tagged is returned unchanged (an upstream that is itself a gateway keeps the
// first origin; raw signatures are base64 and never look tagged). origin must be a valid
// origin: lower-case letters, digits, '_' and '-'.
func Tag(origin, sig string) string {
	if sig == "" {
		return ""
	}
	if _, _, ok := Untag(sig); ok {
		return sig
	}
	return sigPrefix + origin + ":" + sig
}

// Untag splits a token made by Tag into its origin and raw signature. ok is false for an
// untagged signature, which comes back as raw with an empty origin.
func Untag(sig string) (origin, raw string, ok bool) {
	rest, found := strings.CutPrefix(sig, sigPrefix)
	if !found {
		return "", sig, false
	}
	origin, raw, found = strings.Cut(rest, ":")
	if !found || !validOrigin(origin) {
		return "", sig, false
	}
	return origin, raw, true
}

// validOrigin tells whether s can be an origin: lower-case letters, digits, '_' and '-'.
func validOrigin(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

// ReplaySignature is what an upstream of the given origin is sent for sig: the raw
// signature when sig is tagged with origin, sig itself when it is untagged, and ok false
// when it is tagged with another origin and must not be sent. An empty sig is ("", true).
func ReplaySignature(origin, sig string) (raw string, ok bool) {
	o, r, tagged := Untag(sig)
	if !tagged {
		return sig, true
	}
	if o != origin {
		return "", false
	}
	return r, true
}

// NativeSignature is how a surface whose native provider format is origin shows sig to
// its client: raw when sig is tagged with origin, unchanged otherwise.
func NativeSignature(origin, sig string) string {
	if o, r, ok := Untag(sig); ok && o == origin {
		return r
	}
	return sig
}
