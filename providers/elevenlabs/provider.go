// Package elevenlabs is the adapter for ElevenLabs' audio APIs: text to speech
// (POST /v1/text-to-speech/{voice_id}/stream), Scribe speech to text
// (POST /v1/speech-to-text) and music (POST /v1/music). ElevenLabs is an upstream only: the
// package turns the neutral speech, transcription and music requests into ElevenLabs calls
// and its answers back into neutral responses. It implements providers.Provider,
// providers.SpeechSynthesizer, providers.Transcriber and providers.MusicGenerator.
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
//   - Music is synchronous: POST /v1/music answers with the audio, which GenerateMusic
//     hands on as it streams (music.go); there is no task to poll. mp3 is mp3_44100_128,
//     ogg is opus_48000_128; wav and aac are refused before any call.
package elevenlabs

import (
	"time"

	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/internal/upstreamhttp"
)

// DefaultBaseURL is ElevenLabs' API root, without the version.
const DefaultBaseURL = "https://api.elevenlabs.io"

// DefaultStreamIdleTimeout is the longest silence allowed in the audio by default.
const DefaultStreamIdleTimeout = 30 * time.Second

// Config configures one ElevenLabs upstream; its fields are those of every HTTP adapter
// (upstreamhttp.Config). Name defaults to "elevenlabs", BaseURL (the API root that
// /v1/text-to-speech and /v1/speech-to-text are appended to, without the version:
// https://api.eu.residency.elevenlabs.io for the EU data residency) to DefaultBaseURL.
// APIKey is sent as the xi-api-key header; credentials set through Headers (xi-api-key or
// Authorization: a proxy's) count as a key and are redacted too. StreamIdleTimeout bounds
// the silences in the audio of a speech.
type Config upstreamhttp.Config

// Provider calls one ElevenLabs upstream. It is safe for concurrent use.
type Provider struct {
	name string
	// base is the base URL without a trailing slash.
	base string
	up   *upstreamhttp.Client
	idle time.Duration
}

// adapter is what upstreamhttp sets an ElevenLabs upstream up with.
var adapter = upstreamhttp.Adapter{
	Name: "elevenlabs", BaseURL: DefaultBaseURL, StreamIdleTimeout: DefaultStreamIdleTimeout,
	KeyHeader: "Xi-Api-Key", RefuseQuery: true, RedactHeaderKeys: true, ParseError: ParseError,
}

// New checks cfg and returns its Provider.
func New(cfg Config) (*Provider, error) {
	up, err := upstreamhttp.Config(cfg).NewUpstream(adapter)
	if err != nil {
		return nil, err
	}
	return &Provider{name: up.Client.Provider, base: up.Base, up: up.Client, idle: up.StreamIdleTimeout}, nil
}

// Name is the operator's name for the provider.
func (p *Provider) Name() string { return p.name }

// CredentialMissing tells whether the api_key configured resolved empty, with no header
// carrying one instead: every call is refused without reaching the upstream.
func (p *Provider) CredentialMissing() bool { return p.up.NoCredential }

// Interface guards.
var (
	_ providers.Provider          = (*Provider)(nil)
	_ providers.SpeechSynthesizer = (*Provider)(nil)
	_ providers.Transcriber       = (*Provider)(nil)
	_ providers.CredentialChecker = (*Provider)(nil)
)
