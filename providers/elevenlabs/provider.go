// Package elevenlabs is the adapter for ElevenLabs' speech APIs: text to speech
// (POST /v1/text-to-speech/{voice_id}/stream) and Scribe speech to text
// (POST /v1/speech-to-text). ElevenLabs is an upstream only: the package turns the neutral
// speech and transcription requests into ElevenLabs calls and its answers back into neutral
// responses. It implements providers.Provider, providers.SpeechSynthesizer and
// providers.Transcriber.
//
// Policies, where the formats do not meet one to one:
//
//   - Auth is the xi-api-key header. The key is redacted from every upstream body kept.
//   - Speech: SpeechRequest.Voice is the ElevenLabs voice id, Model its model_id, Speed goes
//     to voice_settings.speed when set (ElevenLabs judges its range). Instructions have no
//     ElevenLabs field and are dropped. The OpenAI response formats map to output_format:
//     mp3 is mp3_44100_128, opus is opus_48000_64 (Ogg Opus), pcm is pcm_24000 (24 kHz
//     16-bit mono little-endian, OpenAI's pcm), and wav is pcm_24000 wrapped on the fly in a
//     44-byte RIFF header whose sizes are the 0xFFFFFFFF placeholders of a streamed WAV.
//     aac and flac have no ElevenLabs output: they are refused before any call with an
//     *UpstreamError of category invalid_request wrapping ErrUnsupportedRequest.
//   - The audio streams: Synthesize returns once the response headers arrive, and its Body
//     yields the audio as ElevenLabs sends it. A read error of the Body, and a silence
//     longer than the idle timeout, is an *UpstreamError.
//   - Usage of speech is the input's count of Unicode characters, which ElevenLabs bills,
//     known before the audio ends.
//   - Transcription: the upload is streamed into the multipart body as ElevenLabs reads it,
//     never held whole, with the client's filename and content type. Language goes to
//     language_code, Diarize to diarize, a "word" granularity to timestamps_granularity,
//     Temperature to temperature; Prompt has no Scribe field and is dropped. Scribe does
//     not translate: Translate is refused before any call like an unsupported format.
//     Words are the answer's words (not its spacing or audio events); segments, when
//     diarization or segment timestamps are asked, group consecutive items by speaker.
//     Scribe reports no duration: Duration stays 0 and UsageKnown false, for the gateway
//     to measure the upload itself.
package elevenlabs

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/internal/upstreamhttp"
)

// DefaultBaseURL is ElevenLabs' API root, without the version.
const DefaultBaseURL = "https://api.elevenlabs.io"

// DefaultStreamIdleTimeout is the longest silence allowed in the audio by default.
const DefaultStreamIdleTimeout = 30 * time.Second

// Config configures one ElevenLabs upstream.
type Config struct {
	// Name is the operator's name for the provider; it defaults to "elevenlabs".
	Name string
	// BaseURL is the API root that /v1/text-to-speech and /v1/speech-to-text are appended
	// to, without the version (https://api.eu.residency.elevenlabs.io for the EU data
	// residency); it defaults to DefaultBaseURL.
	BaseURL string
	// APIKey is sent as the xi-api-key header; empty sends none (for a proxy that adds
	// credentials itself).
	APIKey string
	// RequireKey says the operator configured a credential: when APIKey is empty all the
	// same (the environment variable it named is unset) and no header carries one, every
	// call is refused at once with credentials_not_configured instead of reaching the
	// upstream.
	RequireKey bool
	// Headers are extra headers sent with every request (set before the credentials).
	Headers map[string]string
	// Transport makes the requests; nil means http.DefaultTransport.
	Transport http.RoundTripper
	// Timeout bounds one attempt from the request to the end of the response body, the
	// audio included; zero means no limit.
	Timeout time.Duration
	// StreamIdleTimeout is the longest silence allowed in the audio of a speech before it
	// fails with a timeout; zero means DefaultStreamIdleTimeout, a negative value disables
	// the check.
	StreamIdleTimeout time.Duration
}

// Provider calls one ElevenLabs upstream. It is safe for concurrent use.
type Provider struct {
	name string
	// base is the base URL without a trailing slash.
	base string
	up   *upstreamhttp.Client
	idle time.Duration
}

// New checks cfg and returns its Provider.
func New(cfg Config) (*Provider, error) {
	if cfg.Name == "" {
		cfg.Name = "elevenlabs"
	}
	if cfg.BaseURL == "" {
		cfg.BaseURL = DefaultBaseURL
	}
	u, err := upstreamhttp.ParseBaseURL(cfg.BaseURL)
	if err != nil {
		return nil, fmt.Errorf("elevenlabs provider %s: %w", cfg.Name, err)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("elevenlabs provider %s: base URL must have no query or fragment", cfg.Name)
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("elevenlabs provider %s: timeout must not be negative", cfg.Name)
	}
	idle := cfg.StreamIdleTimeout
	if idle == 0 {
		idle = DefaultStreamIdleTimeout
	}
	name, keyConfigured := cfg.Name, false
	up := &upstreamhttp.Client{
		Provider: name,
		HTTP:     upstreamhttp.NewHTTPClient(cfg.Transport),
		Header:   make(http.Header, len(cfg.Headers)+2),
		Timeout:  cfg.Timeout,
		ParseError: func(status int, h http.Header, body []byte) *providers.UpstreamError {
			return ParseError(name, status, h, body, keyConfigured)
		},
	}
	for k, v := range cfg.Headers {
		up.Header.Set(k, v)
		switch http.CanonicalHeaderKey(k) {
		case "Xi-Api-Key", "Authorization":
			// Credentials set through Headers (a proxy's) count as a key, and are secrets.
			keyConfigured = keyConfigured || v != ""
			if v = strings.TrimSpace(strings.TrimPrefix(v, "Bearer ")); len(v) >= 4 {
				up.Secrets.Add(v)
			}
		}
	}
	up.Header.Set("Content-Type", "application/json")
	if cfg.APIKey != "" {
		up.Header.Set("Xi-Api-Key", cfg.APIKey)
		keyConfigured = true
		up.Secrets.Add(cfg.APIKey)
	}
	up.NoCredential = cfg.RequireKey && !keyConfigured
	return &Provider{name: name, base: strings.TrimRight(cfg.BaseURL, "/"), up: up, idle: idle}, nil
}

// Name is the operator's name for the provider.
func (p *Provider) Name() string { return p.name }

// Interface guards.
var (
	_ providers.Provider          = (*Provider)(nil)
	_ providers.SpeechSynthesizer = (*Provider)(nil)
	_ providers.Transcriber       = (*Provider)(nil)
)
