// Package upstreamhttp is the HTTP plumbing the upstream adapters (providers/openai,
// providers/anthropic, providers/gemini, providers/elevenlabs, providers/mistral) share:
// the configuration every one of them has (Config) and the Client set up from it
// (Config.NewUpstream), one attempt and its timeout, sending a request and classifying a
// failure that left no response, reading a bounded body, Retry-After, the idle watchdog of
// a streamed body, the closing protocol of a stream, and keeping credentials out of the
// bodies kept for diagnostics.
//
// What an adapter's API says (its error bodies, their categories, its stream frames) stays
// in the adapter: the Client takes the adapter's ParseError, and the adapters decode their
// own frames.
package upstreamhttp

import (
	"errors"
	"mime"
	"net/http"
	"unicode/utf8"
)

// Sentinel causes the adapters share, set as UpstreamError.Err of the failures that have no
// transport error, so that callers can match them with errors.Is. The adapters export them
// under their own names (openai.ErrAttemptTimeout...).
var (
	// ErrAttemptTimeout: the attempt took longer than its timeout.
	ErrAttemptTimeout = errors.New("upstream attempt timeout")
	// ErrIdleTimeout: the stream stayed silent longer than its idle timeout.
	ErrIdleTimeout = errors.New("upstream stream idle timeout")
	// ErrMalformedResponse: a 2xx response body was not the expected JSON.
	ErrMalformedResponse = errors.New("malformed upstream response")
	// ErrMalformedFrame: a stream frame was not the expected JSON, or was larger than the
	// SSE reader's limit.
	ErrMalformedFrame = errors.New("malformed stream frame")
	// ErrClosed is the error of a stream read after Close.
	ErrClosed = errors.New("stream closed")
)

// Limits of what is read from an upstream.
const (
	// MaxErrorBody is how much of an error response is read.
	MaxErrorBody = 64 << 10
	// MaxResponseBody bounds a non-streamed answer.
	MaxResponseBody = 32 << 20
	// MaxMessage bounds the Message kept from an upstream error.
	MaxMessage = 2048
)

// IsJSON tells whether a header announces a JSON body: the answer of a server that ignored
// stream, when a stream was asked for.
func IsJSON(h http.Header) bool {
	mt, _, _ := mime.ParseMediaType(h.Get("Content-Type"))
	return mt == "application/json"
}

// Truncate keeps at most n bytes of s, without splitting a character.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
