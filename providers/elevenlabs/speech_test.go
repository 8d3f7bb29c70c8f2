package elevenlabs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/providers"
)

// audioOf is a stand-in clip: bytes that are not text, so that a body read as a string or
// re-encoded would not survive.
func audioOf(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i/256)
	}
	return b
}

// TestElevenLabsSynthesize: the request is ElevenLabs' stream endpoint with the format's
// output_format, the key in xi-api-key and the JSON body; the audio comes back byte for
// byte with the format's media type, and the usage is the input's characters.
func TestElevenLabsSynthesize(t *testing.T) {
	clip := audioOf(70_000)
	tests := []struct {
		name, format, wantOutput, wantType string
		speed                              float64
	}{
		{name: "default is mp3", format: "", wantOutput: "mp3_44100_128", wantType: "audio/mpeg"},
		{name: "mp3", format: "mp3", wantOutput: "mp3_44100_128", wantType: "audio/mpeg", speed: 1.1},
		{name: "opus", format: "opus", wantOutput: "opus_48000_64", wantType: "audio/ogg"},
		{name: "pcm passes through", format: "pcm", wantOutput: "pcm_24000", wantType: "audio/pcm", speed: 0.8},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got struct {
				path, query, key, contentType string
				body                          map[string]any
			}
			f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
				got.path, got.query = r.URL.EscapedPath(), r.URL.RawQuery
				got.key, got.contentType = r.Header.Get("xi-api-key"), r.Header.Get("Content-Type")
				_ = json.NewDecoder(r.Body).Decode(&got.body)
				w.Header().Set("Content-Type", "audio/mpeg")
				_, _ = w.Write(clip)
			})
			input := "Héllo, 世界!"
			resp, err := f.provider(t).Synthesize(context.Background(), &providers.SpeechRequest{
				Model: "eleven_multilingual_v2", Input: input, Voice: "JBFqnCBsd6RMkjVDRZzb", Format: tc.format, Speed: tc.speed,
				Instructions: "whisper",
			})
			if err != nil {
				t.Fatal(err)
			}
			audio, err := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(audio, clip) {
				t.Fatalf("audio differs from the upstream's: %d bytes, want %d", len(audio), len(clip))
			}
			if resp.ContentType != tc.wantType {
				t.Errorf("content type %q, want %q", resp.ContentType, tc.wantType)
			}
			if !resp.UsageKnown || resp.Usage != (providers.MediaUsage{InputCharacters: 10}) {
				t.Errorf("usage %+v known %v, want 10 characters", resp.Usage, resp.UsageKnown)
			}
			if got.path != "/v1/text-to-speech/JBFqnCBsd6RMkjVDRZzb/stream" || got.query != "output_format="+tc.wantOutput {
				t.Errorf("request %s?%s", got.path, got.query)
			}
			if got.key != testKey || got.contentType != "application/json" {
				t.Errorf("key %q content type %q", got.key, got.contentType)
			}
			want := map[string]any{"text": input, "model_id": "eleven_multilingual_v2"}
			if tc.speed != 0 {
				want["voice_settings"] = map[string]any{"speed": tc.speed}
			}
			if b, w := mustJSON(t, got.body), mustJSON(t, want); b != w {
				t.Errorf("body %s, want %s", b, w)
			}
		})
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestElevenLabsSynthesizeVoiceEscaped: the voice is one path segment, whatever it holds.
func TestElevenLabsSynthesizeVoiceEscaped(t *testing.T) {
	var path string
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		path = r.URL.EscapedPath()
		_, _ = w.Write([]byte("x"))
	})
	resp, err := f.provider(t).Synthesize(context.Background(), &providers.SpeechRequest{Model: "m", Input: "hi", Voice: "a/../b?c"})
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if path != "/v1/text-to-speech/a%2F..%2Fb%3Fc/stream" {
		t.Fatalf("path %q", path)
	}
}

// TestElevenLabsSynthesizeWAV: wav is ElevenLabs' 24 kHz PCM behind a streamed WAV header.
func TestElevenLabsSynthesizeWAV(t *testing.T) {
	pcm := audioOf(48_000)
	var query string
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		query = r.URL.RawQuery
		w.Header().Set("Content-Type", "audio/pcm")
		_, _ = w.Write(pcm)
	})
	resp, err := f.provider(t).Synthesize(context.Background(), &providers.SpeechRequest{Model: "m", Input: "hi", Voice: "v", Format: "wav"})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if query != "output_format=pcm_24000" || resp.ContentType != "audio/wav" {
		t.Fatalf("query %q content type %q", query, resp.ContentType)
	}
	header := []byte{
		'R', 'I', 'F', 'F', 0xFF, 0xFF, 0xFF, 0xFF, 'W', 'A', 'V', 'E',
		'f', 'm', 't', ' ', 16, 0, 0, 0, // fmt chunk of 16 bytes
		1, 0, 1, 0, // PCM, mono
		0xC0, 0x5D, 0, 0, // 24000 Hz
		0x80, 0xBB, 0, 0, // 48000 bytes a second
		2, 0, 16, 0, // 2 bytes a frame, 16 bits
		'd', 'a', 't', 'a', 0xFF, 0xFF, 0xFF, 0xFF,
	}
	if len(got) < len(header) || !bytes.Equal(got[:len(header)], header) {
		t.Fatalf("header % x\nwant   % x", got[:min(len(got), 44)], header)
	}
	if !bytes.Equal(got[len(header):], pcm) {
		t.Fatalf("PCM after the header differs: %d bytes, want %d", len(got)-len(header), len(pcm))
	}
}

// TestElevenLabsSynthesizeStreams: the first bytes reach the caller while the upstream is still
// producing the rest: the fake holds its second chunk until the test has read the first.
func TestElevenLabsSynthesizeStreams(t *testing.T) {
	for _, format := range []string{"mp3", "wav"} {
		t.Run(format, func(t *testing.T) {
			first, rest := audioOf(1000), bytes.Repeat([]byte{0xAB}, 5000)
			release := make(chan struct{})
			f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
				_, _ = w.Write(first)
				w.(http.Flusher).Flush()
				select {
				case <-release:
				case <-time.After(2 * time.Second):
					// A buffering adapter never releases: the test then fails, slowly, instead of hanging.
				}
				_, _ = w.Write(rest)
			})
			start := time.Now()
			resp, err := f.provider(t).Synthesize(context.Background(), &providers.SpeechRequest{Model: "m", Input: "hi", Voice: "v", Format: format})
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			want := first
			if format == "wav" {
				want = append(wavHeader(pcmRate), first...)
			}
			buf := make([]byte, len(want))
			if _, err := io.ReadFull(resp.Body, buf); err != nil {
				t.Fatal(err)
			}
			if d := time.Since(start); d > time.Second {
				t.Fatalf("the first bytes took %v: the audio was not streamed", d)
			}
			if !bytes.Equal(buf, want) {
				t.Fatal("first bytes differ")
			}
			close(release)
			tail, err := io.ReadAll(resp.Body)
			if err != nil || !bytes.Equal(tail, rest) {
				t.Fatalf("rest: %d bytes, %v", len(tail), err)
			}
		})
	}
}

// TestElevenLabsSynthesizeRefused: what ElevenLabs cannot produce is refused before any
// call, as the caller's invalid request that names what it can do.
func TestElevenLabsSynthesizeRefused(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) { t.Error("the upstream was called") })
	p := f.provider(t)
	for _, tc := range []struct{ format, voice, want string }{
		{format: "aac", voice: "v", want: `response_format "aac"; it produces mp3, opus, wav and pcm`},
		{format: "flac", voice: "v", want: `response_format "flac"; it produces mp3, opus, wav and pcm`},
		{format: "ogg", voice: "v", want: "it produces mp3, opus, wav and pcm"},
		{format: "mp3", voice: "", want: "needs a voice"},
		{format: "mp3", voice: "alloy", want: `voice "alloy" is an OpenAI voice`},
	} {
		t.Run(tc.format+"/"+tc.voice, func(t *testing.T) {
			_, err := p.Synthesize(context.Background(), &providers.SpeechRequest{Model: "m", Input: "hi", Voice: tc.voice, Format: tc.format})
			ue, ok := providers.AsUpstreamError(err)
			if !ok || ue.Category != providers.CategoryInvalidRequest || ue.Status != 0 || ue.Retryable || !ue.Unsupported ||
				!errors.Is(err, ErrUnsupportedRequest) || !strings.Contains(ue.Message, tc.want) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %#v (%v), want an invalid request saying %q", err, err, tc.want)
			}
		})
	}
	if n := f.requests.Load(); n != 0 {
		t.Fatalf("%d requests reached the upstream", n)
	}
}

// TestElevenLabsSynthesizeBodyErrors: a body that breaks off or falls silent fails its read with an
// *UpstreamError; the caller's own cancellation stays a context error.
func TestElevenLabsSynthesizeBodyErrors(t *testing.T) {
	t.Run("idle", func(t *testing.T) {
		done := make(chan struct{})
		defer close(done)
		f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
			_, _ = w.Write([]byte("ID3"))
			w.(http.Flusher).Flush()
			select {
			case <-done:
			case <-r.Context().Done():
			}
		})
		p := f.provider(t, func(c *Config) { c.StreamIdleTimeout = 100 * time.Millisecond })
		resp, err := p.Synthesize(context.Background(), &providers.SpeechRequest{Model: "m", Input: "hi", Voice: "v"})
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		_, err = io.ReadAll(resp.Body)
		ue, ok := providers.AsUpstreamError(err)
		if !ok || !ue.Timeout || !ue.Retryable || !errors.Is(err, ErrIdleTimeout) {
			t.Fatalf("got %#v", err)
		}
	})
	t.Run("broken off", func(t *testing.T) {
		f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "1000")
			_, _ = w.Write([]byte("ID3 partial"))
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		})
		resp, err := f.provider(t).Synthesize(context.Background(), &providers.SpeechRequest{Model: "m", Input: "hi", Voice: "v", Format: "wav"})
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		got, err := io.ReadAll(resp.Body)
		ue, ok := providers.AsUpstreamError(err)
		if !ok || ue.Status != 0 || ue.Category != providers.CategoryServerError || !ue.Retryable {
			t.Fatalf("got %#v", err)
		}
		if !bytes.HasSuffix(got, []byte("ID3 partial")) {
			t.Fatalf("the bytes before the break were lost: %q", got)
		}
	})
	t.Run("caller cancels", func(t *testing.T) {
		done := make(chan struct{})
		defer close(done)
		f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
			_, _ = w.Write([]byte("ID3"))
			w.(http.Flusher).Flush()
			select {
			case <-done:
			case <-r.Context().Done():
			}
		})
		ctx, cancel := context.WithCancel(context.Background())
		resp, err := f.provider(t).Synthesize(ctx, &providers.SpeechRequest{Model: "m", Input: "hi", Voice: "v"})
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		buf := make([]byte, 3)
		if _, err := io.ReadFull(resp.Body, buf); err != nil {
			t.Fatal(err)
		}
		cancel()
		_, err = io.ReadAll(resp.Body)
		if _, ok := providers.AsUpstreamError(err); ok || !errors.Is(err, context.Canceled) {
			t.Fatalf("got %#v", err)
		}
	})
}
