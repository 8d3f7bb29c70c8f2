package gemini

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/providers"
)

// audioFrame is one chunk of a speech stream carrying pcm, as Gemini sends it.
func audioFrame(mimeType string, pcm []byte) string {
	return fmt.Sprintf(`{"candidates":[{"content":{"role":"model","parts":[{"inlineData":{"mimeType":%q,"data":%q}}]},"index":0}],"modelVersion":"gemini-2.5-flash-preview-tts"}`,
		mimeType, base64.StdEncoding.EncodeToString(pcm))
}

const (
	pcm24k    = "audio/L16;codec=pcm;rate=24000"
	lastFrame = `{"candidates":[{"content":{"role":"model","parts":[]},"finishReason":"STOP","index":0}],` +
		`"usageMetadata":{"promptTokenCount":9,"candidatesTokenCount":120,"totalTokenCount":129,` +
		`"promptTokensDetails":[{"modality":"TEXT","tokenCount":9}],"candidatesTokensDetails":[{"modality":"AUDIO","tokenCount":120}]}}`
)

func speechRequest(format string) *providers.SpeechRequest {
	return &providers.SpeechRequest{Model: "gemini-2.5-flash-preview-tts", Input: "Héllo there", Voice: "Kore", Format: format}
}

// checkWAVHeader checks the 44-byte header of a streamed 16-bit PCM WAV file.
func checkWAVHeader(t *testing.T, h []byte, rate, channels int) {
	t.Helper()
	if len(h) < 44 {
		t.Fatalf("header of %d bytes", len(h))
	}
	le32, le16 := binary.LittleEndian.Uint32, binary.LittleEndian.Uint16
	if string(h[0:4]) != "RIFF" || string(h[8:16]) != "WAVEfmt " || string(h[36:40]) != "data" {
		t.Fatalf("not a WAV header: %q", h[:44])
	}
	if le32(h[4:]) != 0xFFFFFFFF || le32(h[40:]) != 0xFFFFFFFF {
		t.Errorf("sizes %#x and %#x, want the 0xFFFFFFFF placeholders", le32(h[4:]), le32(h[40:]))
	}
	if le32(h[16:]) != 16 || le16(h[20:]) != 1 || int(le16(h[22:])) != channels || int(le32(h[24:])) != rate ||
		int(le32(h[28:])) != rate*channels*2 || int(le16(h[32:])) != channels*2 || le16(h[34:]) != 16 {
		t.Errorf("fmt chunk %x, want PCM %d Hz, %d channels, 16 bits", h[16:36], rate, channels)
	}
}

func TestSynthesizeStreamsWAV(t *testing.T) {
	checkGoroutines(t)
	first, second := bytes.Repeat([]byte{1, 2}, 600), bytes.Repeat([]byte{3, 4}, 900)
	release := make(chan struct{})
	var fakeDone atomic.Bool
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		writeSSE(w, audioFrame(pcm24k, first))
		select {
		case <-release:
		case <-time.After(5 * time.Second):
		}
		fakeDone.Store(true)
		writeSSE(w, audioFrame(pcm24k, second), lastFrame)
	})
	p := f.provider(t)
	req := speechRequest("wav")
	req.Instructions = "Say in a cheerful tone"
	resp, err := p.Synthesize(context.Background(), req)
	if err != nil {
		close(release)
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.ContentType != "audio/wav" || !resp.UsageKnown || resp.Usage != (providers.MediaUsage{InputCharacters: 11}) {
		t.Errorf("response %q %v %+v", resp.ContentType, resp.UsageKnown, resp.Usage)
	}
	// The header and the first chunk are readable while the upstream still holds the rest.
	head := make([]byte, 44+len(first))
	if _, err := io.ReadFull(resp.Body, head); err != nil {
		t.Fatal(err)
	}
	if fakeDone.Load() {
		t.Error("the first audio was only readable once the upstream had finished")
	}
	ur, ok := resp.Body.(providers.UsageReporter)
	if !ok {
		t.Fatalf("body %T does not report its usage", resp.Body)
	}
	if u, ok := ur.Usage(); ok {
		t.Errorf("usage %+v known before the end", u)
	}
	close(release)
	rest, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	checkWAVHeader(t, head, 24000, 1)
	if got, want := append(head[44:], rest...), append(append([]byte(nil), first...), second...); !bytes.Equal(got, want) {
		t.Errorf("pcm of %d bytes, want %d", len(got), len(want))
	}
	u, ok := ur.Usage()
	if want := (providers.MediaUsage{Input: 9, OutputAudioTokens: 120, InputCharacters: 11}); !ok || u != want {
		t.Errorf("usage %+v %v, want %+v", u, ok, want)
	}

	reqs := f.requests()
	if len(reqs) != 1 || reqs[0].Path != "/v1beta/models/gemini-2.5-flash-preview-tts:streamGenerateContent" || reqs[0].RawQuery != "alt=sse" {
		t.Fatalf("requests %+v", reqs)
	}
	if reqs[0].Header.Get("X-Goog-Api-Key") != testKey || reqs[0].Header.Get("Accept") != "text/event-stream" {
		t.Errorf("headers %v", reqs[0].Header)
	}
	jsonEqual(t, reqs[0].Body, `{"contents":[{"role":"user","parts":[{"text":"Say in a cheerful tone: Héllo there"}]}],
		"generationConfig":{"responseModalities":["AUDIO"],"speechConfig":{"voiceConfig":{"prebuiltVoiceConfig":{"voiceName":"Kore"}}}}}`)
}

func TestSynthesizeFormats(t *testing.T) {
	pcm := []byte{0x10, 0x00, 0xf0, 0xff, 0x20, 0x00}
	cases := []struct {
		name, format, mimeType, contentType string
		rate, channels                      int
	}{
		{"pcm", "pcm", pcm24k, "audio/pcm", 0, 0},
		{"wav", "wav", pcm24k, "audio/wav", 24000, 1},
		{"wav at another rate", "wav", "audio/L16;codec=pcm;rate=16000", "audio/wav", 16000, 1},
		{"wav in stereo", "wav", "audio/L16; rate=48000; channels=2", "audio/wav", 48000, 2},
		{"wav of audio/pcm", "wav", "audio/pcm", "audio/wav", 24000, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
				writeSSE(w, audioFrame(tc.mimeType, pcm[:2]), audioFrame(tc.mimeType, pcm[2:]), lastFrame)
			})
			req := speechRequest(tc.format)
			req.Voice = ""
			resp, err := f.provider(t).Synthesize(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if resp.ContentType != tc.contentType {
				t.Errorf("content type %q", resp.ContentType)
			}
			if tc.rate != 0 {
				checkWAVHeader(t, b, tc.rate, tc.channels)
				b = b[44:]
			}
			if !bytes.Equal(b, pcm) {
				t.Errorf("audio %x, want %x", b, pcm)
			}
			// No voice: Gemini picks one.
			jsonEqual(t, f.requests()[0].Body, `{"contents":[{"role":"user","parts":[{"text":"Héllo there"}]}],"generationConfig":{"responseModalities":["AUDIO"]}}`)
		})
	}
}

func TestSynthesizeWholeJSONAnswer(t *testing.T) {
	pcm := []byte{1, 0, 2, 0, 3, 0, 4, 0}
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, "["+audioFrame(pcm24k, pcm[:4])+","+audioFrame(pcm24k, pcm[4:])+","+lastFrame+"]")
	})
	resp, err := f.provider(t).Synthesize(context.Background(), speechRequest("pcm"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || !bytes.Equal(b, pcm) {
		t.Fatalf("audio %x, %v", b, err)
	}
	if u, ok := resp.Body.(providers.UsageReporter).Usage(); !ok || u.OutputAudioTokens != 120 {
		t.Errorf("usage %+v %v", u, ok)
	}
}

func TestSynthesizeRefusedBeforeSending(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 500, `{}`) })
	p := f.provider(t)
	cases := []struct {
		name   string
		mod    func(*providers.SpeechRequest)
		cat    providers.Category
		substr string
	}{
		{"mp3", func(r *providers.SpeechRequest) { r.Format = "mp3" }, providers.CategoryInvalidRequest, "Gemini speech answers only wav or pcm"},
		{"opus", func(r *providers.SpeechRequest) { r.Format = "opus" }, providers.CategoryInvalidRequest, "only wav or pcm"},
		{"aac", func(r *providers.SpeechRequest) { r.Format = "aac" }, providers.CategoryInvalidRequest, "only wav or pcm"},
		{"flac", func(r *providers.SpeechRequest) { r.Format = "flac" }, providers.CategoryInvalidRequest, "only wav or pcm"},
		{"no format", func(r *providers.SpeechRequest) { r.Format = "" }, providers.CategoryInvalidRequest, "only wav or pcm"},
		{"empty input", func(r *providers.SpeechRequest) { r.Input = "  " }, providers.CategoryInvalidRequest, "empty"},
		{"openai voice", func(r *providers.SpeechRequest) { r.Voice = "coral" }, providers.CategoryInvalidRequest, `voice "coral" is an OpenAI voice`},
		{"speed", func(r *providers.SpeechRequest) { r.Speed = 1.25 }, providers.CategoryInvalidRequest, "Gemini speech has no speed"},
		{"model id with a path", func(r *providers.SpeechRequest) { r.Model = "../files/x" }, providers.CategoryModelUnavailable, "invalid model id"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := speechRequest("wav")
			tc.mod(req)
			_, err := p.Synthesize(context.Background(), req)
			ue := asUpstream(t, err)
			unsupported := strings.Contains(tc.substr, "wav or pcm") || strings.Contains(tc.substr, "OpenAI voice") || strings.Contains(tc.substr, "no speed")
			if ue.Category != tc.cat || ue.Status != 0 || ue.Retryable || !strings.Contains(ue.Message, tc.substr) || ue.Unsupported != unsupported {
				t.Errorf("got %+v, want category %s with %q", ue, tc.cat, tc.substr)
			}
		})
	}
	if n := len(f.requests()); n != 0 {
		t.Errorf("%d requests reached the upstream", n)
	}
}

func TestSynthesizeFailures(t *testing.T) {
	audio := audioFrame(pcm24k, []byte{1, 0, 2, 0})
	cases := []struct {
		name      string
		handler   http.HandlerFunc
		cfg       func(*Config)
		afterData bool // the failure comes from Read, after the first audio
		cat       providers.Category
		retryable bool
		status    int
		is        error
		substr    string
	}{
		{
			name: "rate limited",
			handler: func(w http.ResponseWriter, r *http.Request) {
				writeJSON(w, 429, `{"error":{"code":429,"message":"Resource has been exhausted","status":"RESOURCE_EXHAUSTED"}}`)
			},
			cat: providers.CategoryRateLimited, retryable: true, status: 429,
		},
		{
			name: "unknown voice",
			handler: func(w http.ResponseWriter, r *http.Request) {
				writeJSON(w, 400, `{"error":{"code":400,"message":"Voice alloy is not supported","status":"INVALID_ARGUMENT"}}`)
			},
			cat: providers.CategoryInvalidRequest, status: 400, substr: "alloy",
		},
		{
			name: "model not found",
			handler: func(w http.ResponseWriter, r *http.Request) {
				writeJSON(w, 404, `{"error":{"code":404,"message":"models/x is not found","status":"NOT_FOUND"}}`)
			},
			cat: providers.CategoryModelUnavailable, status: 404,
		},
		{
			name: "error frame before any audio",
			handler: func(w http.ResponseWriter, r *http.Request) {
				writeSSE(w, `{"error":{"code":503,"message":"The model is overloaded.","status":"UNAVAILABLE"}}`)
			},
			cat: providers.CategoryServerError, retryable: true, status: 503, substr: "overloaded",
		},
		{
			name: "error frame after audio",
			handler: func(w http.ResponseWriter, r *http.Request) {
				writeSSE(w, audio, `{"error":{"code":500,"message":"Internal error encountered.","status":"INTERNAL"}}`)
			},
			afterData: true, cat: providers.CategoryServerError, retryable: true, status: 500, substr: "Internal error",
		},
		{
			name: "no audio, finish OTHER",
			handler: func(w http.ResponseWriter, r *http.Request) {
				writeSSE(w, `{"candidates":[{"content":{"role":"model","parts":[{"text":"I cannot read that aloud."}]},"finishReason":"OTHER","index":0}]}`)
			},
			cat: providers.CategoryServerError, retryable: true, is: ErrUnusableAnswer, substr: "I cannot read that aloud",
		},
		{
			name: "blocked prompt",
			handler: func(w http.ResponseWriter, r *http.Request) {
				writeSSE(w, `{"promptFeedback":{"blockReason":"PROHIBITED_CONTENT"},"usageMetadata":{"promptTokenCount":5}}`)
			},
			cat: providers.CategoryInvalidRequest, substr: "PROHIBITED_CONTENT",
		},
		{
			name: "answer blocked",
			handler: func(w http.ResponseWriter, r *http.Request) {
				writeSSE(w, `{"candidates":[{"finishReason":"SAFETY","index":0}]}`)
			},
			cat: providers.CategoryInvalidRequest, substr: "SAFETY",
		},
		{
			name:    "malformed frame",
			handler: func(w http.ResponseWriter, r *http.Request) { writeSSE(w, audio, `{"candidates":"nope"}`) },
			cat:     providers.CategoryServerError, afterData: true, retryable: true, is: ErrMalformedFrame,
		},
		{
			name: "audio that is not PCM",
			handler: func(w http.ResponseWriter, r *http.Request) {
				writeSSE(w, audioFrame("audio/mpeg", []byte{0xff, 0xf3}))
			},
			cat: providers.CategoryServerError, retryable: true, is: ErrMalformedFrame,
		},
		{
			name: "connection broken after audio",
			handler: func(w http.ResponseWriter, r *http.Request) {
				writeSSE(w, audio)
				conn, buf, err := http.NewResponseController(w).Hijack()
				if err == nil {
					_ = buf.Flush()
					_ = conn.Close()
				}
			},
			afterData: true, cat: providers.CategoryServerError, retryable: true,
		},
		{
			name: "silent after audio",
			handler: func(w http.ResponseWriter, r *http.Request) {
				writeSSE(w, audio)
				select {
				case <-r.Context().Done():
				case <-time.After(5 * time.Second):
				}
			},
			cfg:       func(c *Config) { c.StreamIdleTimeout = 50 * time.Millisecond },
			afterData: true, cat: providers.CategoryServerError, retryable: true, is: ErrIdleTimeout,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t, tc.handler)
			var mods []func(*Config)
			if tc.cfg != nil {
				mods = append(mods, tc.cfg)
			}
			resp, err := f.provider(t, mods...).Synthesize(context.Background(), speechRequest("pcm"))
			if tc.afterData {
				if err != nil {
					t.Fatalf("Synthesize failed before the audio: %v", err)
				}
				got, rerr := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				if !bytes.Equal(got, []byte{1, 0, 2, 0}) {
					t.Errorf("audio before the failure %x", got)
				}
				if _, ok := resp.Body.(providers.UsageReporter).Usage(); ok {
					t.Error("usage known after a failure")
				}
				err = rerr
			} else if resp != nil {
				_ = resp.Body.Close()
				t.Fatal("Synthesize succeeded")
			}
			noKeyIn(t, err)
			ue := asUpstream(t, err)
			if ue.Category != tc.cat || ue.Retryable != tc.retryable || ue.Status != tc.status {
				t.Errorf("got %+v, want category %s retryable %v status %d", ue, tc.cat, tc.retryable, tc.status)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error %v is not %v", err, tc.is)
			}
			if !strings.Contains(ue.Message, tc.substr) {
				t.Errorf("message %q lacks %q", ue.Message, tc.substr)
			}
		})
	}
}

func TestSynthesizeCloseUnblocksRead(t *testing.T) {
	checkGoroutines(t)
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		writeSSE(w, audioFrame(pcm24k, []byte{1, 0}))
		<-r.Context().Done()
	})
	resp, err := f.provider(t).Synthesize(context.Background(), speechRequest("pcm"))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if n, err := resp.Body.Read(buf); n != 2 || err != nil {
		t.Fatalf("first read %d, %v", n, err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := resp.Body.Read(buf)
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	_ = resp.Body.Close()
	select {
	case err := <-done:
		if err == nil {
			t.Error("a read after Close succeeded")
		}
	case <-time.After(3 * time.Second):
		t.Fatal("Close did not unblock the read")
	}
}

func TestDirected(t *testing.T) {
	cases := []struct{ instructions, want string }{
		{"", "Hi"},
		{"Say in a cheerful tone", "Say in a cheerful tone: Hi"},
		{"Say in a cheerful tone:", "Say in a cheerful tone: Hi"},
		{"Speak slowly. ", "Speak slowly. Hi"},
	}
	for _, tc := range cases {
		if got := directed(tc.instructions, "Hi"); got != tc.want {
			t.Errorf("directed(%q) = %q, want %q", tc.instructions, got, tc.want)
		}
	}
}
