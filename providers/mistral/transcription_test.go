package mistral

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/modelgateway/caddy-modelgateway/providers"
)

func streamHeaders(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
}

func write(w http.ResponseWriter, s string) {
	_, _ = io.WriteString(w, s)
	w.(http.Flusher).Flush()
}

// readFrame reads from r up to the end of the next frame.
func readFrame(t *testing.T, r io.Reader) string {
	t.Helper()
	var b []byte
	one := make([]byte, 1)
	for !bytes.HasSuffix(b, []byte("\n\n")) {
		if _, err := r.Read(one); err != nil {
			t.Fatalf("reading a frame after %q: %v", b, err)
		}
		b = append(b, one...)
	}
	return string(b)
}

// TestMistralTranscriptionStream: Mistral's events become OpenAI's as they arrive, a
// frame cut in two by the network included.
func TestMistralTranscriptionStream(t *testing.T) {
	gate := make(chan struct{})
	u := newUpstream(t, true, func(w http.ResponseWriter, r *http.Request) {
		streamHeaders(w)
		write(w, "event: transcription.language\ndata: {\"type\":\"transcription.language\",\"audio_language\":\"fr\"}\n\n"+
			"event: transcription.text.delta\ndata: {\"type\":\"transcription.text.delta\",\"text\":\"Bonjour\"}\n\n")
		select { // the client has the first delta before the rest is sent
		case <-gate:
		case <-r.Context().Done():
			return
		}
		write(w, "event: transcription.segment\ndata: {\"type\":\"transcription.segment\",\"text\":\"Bonjour à")
		time.Sleep(10 * time.Millisecond)
		write(w, " tous.\",\"start\":0.0,\"end\":1.42}\n\n")
		write(w, "event: transcription.text.delta\ndata: {\"type\":\"transcription.text.delta\",\"text\":\" à tous.\"}\n\n"+
			"event: transcription.done\ndata: {\"model\":\"voxtral-mini-2507\",\"text\":\"Bonjour à tous.\",\"language\":\"fr\","+
			"\"segments\":[{\"text\":\"Bonjour à tous.\",\"start\":0.0,\"end\":1.42,\"type\":\"transcription_segment\"}],"+
			"\"usage\":{\"prompt_audio_seconds\":2,\"prompt_tokens\":4,\"total_tokens\":3270,\"completion_tokens\":6},\"type\":\"transcription.done\"}\n\n")
	})
	p := u.provider(t, nil)
	body, ct := multipartUpload(t, []byte("audio"), true)
	resp, err := p.Forward(context.Background(), &providers.RawRequest{Format: providers.FormatOpenAITranscriptions,
		Reader: bytes.NewReader(body), Length: int64(len(body)), ContentType: ct, Stream: true})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if got := u.last(t); got.header.Get("Accept") != "text/event-stream" || !bytes.Equal(got.body, body) {
		t.Fatalf("request accept %q, body intact %v", got.header.Get("Accept"), bytes.Equal(got.body, body))
	}
	if resp.Header.Get("Content-Type") != "text/event-stream" || resp.ContentLength > 0 {
		t.Fatalf("response %v %d", resp.Header, resp.ContentLength)
	}
	if f := readFrame(t, resp.Body); f != "data: {\"type\":\"transcript.text.delta\",\"delta\":\"Bonjour\"}\n\n" {
		t.Fatalf("first frame %q", f)
	}
	close(gate)
	rest, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	want := "data: {\"type\":\"transcript.text.segment\",\"id\":\"seg_0\",\"start\":0.0,\"end\":1.42,\"text\":\"Bonjour à tous.\"}\n\n" +
		"data: {\"type\":\"transcript.text.delta\",\"delta\":\" à tous.\"}\n\n" +
		"data: {\"type\":\"transcript.text.done\",\"text\":\"Bonjour à tous.\",\"usage\":{\"type\":\"duration\",\"seconds\":2}}\n\n"
	if string(rest) != want {
		t.Fatalf("got  %q\nwant %q", rest, want)
	}
}

// TestTranscriptStream translates streams read a byte at a time, so that every frame is
// split across reads, and hands them out a byte at a time.
func TestTranscriptStream(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{
			name: "token usage, data-only frames, CRLF",
			in: "data: {\"type\":\"transcription.language\",\"audio_language\":\"en\"}\r\n\r\n" +
				"data: {\"type\":\"transcription.text.delta\",\"text\":\"Hello\\n\"}\r\n\r\n" +
				"data: {\"type\":\"transcription.done\",\"model\":\"voxtral-mini-2507\",\"text\":\"Hello\\n\",\"language\":null,\"segments\":[]," +
				"\"usage\":{\"prompt_audio_seconds\":null,\"prompt_tokens\":120,\"total_tokens\":125,\"completion_tokens\":5}}\r\n\r\n",
			want: "data: {\"type\":\"transcript.text.delta\",\"delta\":\"Hello\\n\"}\n\n" +
				"data: {\"type\":\"transcript.text.done\",\"text\":\"Hello\\n\",\"usage\":{\"type\":\"tokens\",\"input_tokens\":120,\"output_tokens\":5,\"total_tokens\":125}}\n\n",
		},
		{
			name: "speakers and numbered segments",
			in: "event: transcription.segment\ndata: {\"text\":\"Hi.\",\"start\":0,\"end\":0.5,\"speaker_id\":\"speaker_1\",\"type\":\"transcription.segment\"}\n\n" +
				"event: transcription.segment\ndata: {\"text\":\"Hey.\",\"start\":0.5,\"end\":1,\"speaker_id\":null,\"type\":\"transcription.segment\"}\n\n" +
				"event: transcription.done\ndata: {\"model\":\"m\",\"text\":\"Hi. Hey.\",\"language\":\"en\",\"usage\":{\"prompt_audio_seconds\":1.5,\"prompt_tokens\":1,\"total_tokens\":2,\"completion_tokens\":1}}\n\n",
			want: "data: {\"type\":\"transcript.text.segment\",\"id\":\"seg_0\",\"start\":0,\"end\":0.5,\"text\":\"Hi.\",\"speaker\":\"speaker_1\"}\n\n" +
				"data: {\"type\":\"transcript.text.segment\",\"id\":\"seg_1\",\"start\":0.5,\"end\":1,\"text\":\"Hey.\"}\n\n" +
				"data: {\"type\":\"transcript.text.done\",\"text\":\"Hi. Hey.\",\"usage\":{\"type\":\"duration\",\"seconds\":1.5}}\n\n",
		},
		{
			name: "other events pass, a done without usage has none",
			in: ": keep-alive\n\nevent: error\ndata: {\"message\":\"overloaded\"}\n\n" +
				"event: transcription.done\ndata: {\"model\":\"m\",\"text\":\"\",\"language\":null}\n\ndata: [DONE]\n\n",
			want: "event: error\ndata: {\"message\":\"overloaded\"}\n\n" +
				"data: {\"type\":\"transcript.text.done\",\"text\":\"\"}\n\ndata: [DONE]\n\n",
		},
		{
			name: "multi-line data",
			in:   "event: transcription.text.delta\ndata: {\"type\":\"transcription.text.delta\",\ndata:  \"text\":\"a\"}\n\n",
			want: "data: {\"type\":\"transcript.text.delta\",\"delta\":\"a\"}\n\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTranscriptStream(io.NopCloser(iotest.OneByteReader(strings.NewReader(tc.in))), "mistral", nil)
			got, err := io.ReadAll(iotest.OneByteReader(s))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Fatalf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestTranscriptStreamMalformed(t *testing.T) {
	redact := func(b []byte) []byte { return bytes.ReplaceAll(b, []byte(testKey), []byte("[redacted]")) }
	for _, in := range []string{
		"event: transcription.text.delta\ndata: {\"text\":42}\n\n",
		"event: transcription.text.delta\ndata: {\"text\":\"" + testKey + "\"\n\n",
		"event: transcription.segment\ndata: {\"text\":\"a\",\"start\":\"0\",\"end\":1}\n\n",
		"event: transcription.done\ndata: [\"done\"]\n\n",
		"event: transcription.done\ndata: {\"usage\":{}}\n\n",
	} {
		s := newTranscriptStream(io.NopCloser(strings.NewReader("event: transcription.text.delta\ndata: {\"text\":\"ok\"}\n\n"+in)), "mistral", redact)
		got, err := io.ReadAll(s)
		ue, ok := providers.AsUpstreamError(err)
		if !ok || !errors.Is(err, ErrMalformedFrame) || !ue.Retryable || strings.Contains(ue.Payload, testKey) {
			t.Fatalf("%q: err %v", in, err)
		}
		if string(got) != "data: {\"type\":\"transcript.text.delta\",\"delta\":\"ok\"}\n\n" {
			t.Fatalf("%q: before the failure %q", in, got)
		}
		if _, err2 := s.Read(make([]byte, 8)); err2 != err {
			t.Fatalf("read after the failure: %v", err2)
		}
	}
}

// TestMistralTranscriptionStreamIdle: a stream silent for longer than the idle timeout
// fails with a timeout; the caller's cancellation is its own error.
func TestMistralTranscriptionStreamIdle(t *testing.T) {
	u := newUpstream(t, true, func(w http.ResponseWriter, r *http.Request) {
		streamHeaders(w)
		write(w, "event: transcription.text.delta\ndata: {\"type\":\"transcription.text.delta\",\"text\":\"a\"}\n\n")
		<-r.Context().Done()
	})
	p := u.provider(t, func(c *Config) { c.StreamIdleTimeout = 80 * time.Millisecond })
	resp, err := p.Forward(context.Background(), &providers.RawRequest{Format: providers.FormatOpenAITranscriptions, Body: []byte("x"), ContentType: "multipart/form-data; boundary=x", Stream: true})
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if ue, ok := providers.AsUpstreamError(err); !ok || !ue.Timeout || !strings.Contains(string(got), `"delta":"a"`) {
		t.Fatalf("got %q err %v", got, err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	resp, err = p.Forward(ctx, &providers.RawRequest{Format: providers.FormatOpenAITranscriptions, Body: []byte("x"), ContentType: "multipart/form-data; boundary=x", Stream: true})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	time.AfterFunc(20*time.Millisecond, cancel)
	if _, err = io.ReadAll(resp.Body); !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v", err)
	}
	if _, ok := providers.AsUpstreamError(err); ok {
		t.Fatal("a cancellation must not be an UpstreamError")
	}
}
