package mock

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/internal/audiogen"
	"github.com/modelgateway/caddy-modelgateway/internal/audioprobe"
	"github.com/modelgateway/caddy-modelgateway/providers"
)

func speak(t *testing.T, p *Provider, req *providers.SpeechRequest) (*providers.SpeechResponse, []byte) {
	t.Helper()
	resp, err := p.Synthesize(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

func TestSynthesize(t *testing.T) {
	const input = "Bonjour à tous" // 14 characters: 700 ms, 16,800 samples
	tests := []struct {
		format, contentType string
		size                int
		probe               time.Duration // what audioprobe measures, 0 for none
	}{
		{"wav", "audio/wav", 44 + 2*16800, 700 * time.Millisecond},
		{"pcm", "audio/pcm", 2 * 16800, 0},
		{"mp3", "audio/mpeg", 30 * 96, 30 * 24 * time.Millisecond}, // 29.2 frames of 576 samples, rounded up
		{"", "audio/mpeg", 30 * 96, 30 * 24 * time.Millisecond},
		{"opus", "audio/opus", 16800 / 4, 0},
		{"aac", "audio/aac", 16800 / 4, 0},
		{"flac", "audio/flac", 16800 / 4, 0},
	}
	p := New(Config{Chunks: 3})
	for _, tc := range tests {
		t.Run(tc.format, func(t *testing.T) {
			req := &providers.SpeechRequest{Model: "mock-tts", Input: input, Voice: "alloy", Format: tc.format}
			resp, b := speak(t, p, req)
			if resp.ContentType != tc.contentType || len(b) != tc.size {
				t.Fatalf("%s of %d bytes, want %s of %d", resp.ContentType, len(b), tc.contentType, tc.size)
			}
			if !resp.UsageKnown || resp.Usage != (providers.MediaUsage{InputCharacters: 14}) {
				t.Errorf("usage %+v %v", resp.Usage, resp.UsageKnown)
			}
			if _, again := speak(t, p, req); !bytes.Equal(b, again) {
				t.Error("the same request made different audio")
			}
			if tc.probe != 0 {
				d, _, err := audioprobe.Duration(bytes.NewReader(b))
				if err != nil || d != tc.probe {
					t.Errorf("audioprobe measures %v (%v), want %v", d, err, tc.probe)
				}
			}
			if tc.format == "pcm" && bytes.Count(b, []byte{0}) == len(b) {
				t.Error("the pcm is silent, want a tone")
			}
		})
	}
}

func TestSynthesizeSpeed(t *testing.T) {
	_, normal := speak(t, New(Config{}), &providers.SpeechRequest{Input: "abcd", Format: "pcm"})
	_, fast := speak(t, New(Config{}), &providers.SpeechRequest{Input: "abcd", Format: "pcm", Speed: 2})
	if len(normal) != 2*4800 || len(fast) != len(normal)/2 {
		t.Errorf("%d bytes at speed 1, %d at speed 2", len(normal), len(fast))
	}
}

func TestSynthesizeUnknownFormat(t *testing.T) {
	_, err := New(Config{}).Synthesize(context.Background(), &providers.SpeechRequest{Input: "x", Format: "ogg"})
	if ue, ok := providers.AsUpstreamError(err); !ok || ue.Category != providers.CategoryInvalidRequest || ue.Status != 400 {
		t.Fatalf("err %v", err)
	}
}

func TestSynthesizePacing(t *testing.T) {
	p := New(Config{Chunks: 4, Latency: 40 * time.Millisecond, ChunkInterval: 20 * time.Millisecond})
	start := time.Now()
	resp, err := p.Synthesize(context.Background(), &providers.SpeechRequest{Input: "hello", Format: "wav"})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if d := time.Since(start); d < 40*time.Millisecond {
		t.Errorf("answered after %v, before the latency", d)
	}
	// One chunk a read at most, however large the buffer: four reads of data.
	buf := make([]byte, 1<<20)
	var sizes []int
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			sizes = append(sizes, n)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	total := 0
	for _, n := range sizes {
		total += n
	}
	if len(sizes) != 4 || total != 44+2*6000 {
		t.Errorf("reads of %v bytes, want four chunks of %d in all", sizes, 44+2*6000)
	}
	if d := time.Since(start); d < 40*time.Millisecond+3*20*time.Millisecond {
		t.Errorf("read whole after %v, faster than the pace", d)
	}
}

func TestSynthesizeCancellation(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := New(Config{Latency: time.Second}).Synthesize(ctx, &providers.SpeechRequest{Input: "x", Format: "mp3"}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled during the latency: %v", err)
	}

	resp, err := New(Config{Chunks: 2, ChunkInterval: time.Hour}).Synthesize(context.Background(), &providers.SpeechRequest{Input: "x", Format: "pcm"})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<16)
	if n, err := resp.Body.Read(buf); n == 0 || err != nil {
		t.Fatalf("first read %d, %v", n, err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := resp.Body.Read(buf)
		done <- err
	}()
	time.Sleep(10 * time.Millisecond)
	_ = resp.Body.Close()
	select {
	case err := <-done:
		if !errors.Is(err, errClosed) {
			t.Errorf("read after Close: %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("Close did not unblock the read")
	}
}

func TestTranscribe(t *testing.T) {
	_, wav := speak(t, New(Config{}), &providers.SpeechRequest{Input: "hello", Format: "wav"}) // 250 ms
	_, mp3 := speak(t, New(Config{}), &providers.SpeechRequest{Input: "hello", Format: "mp3"})
	mp3Duration, _, err := audioprobe.Duration(bytes.NewReader(mp3))
	if err != nil || mp3Duration <= 0 {
		t.Fatalf("the mock's mp3: %v, %v", mp3Duration, err)
	}
	tests := []struct {
		name     string
		req      providers.TranscriptionRequest
		text     string
		language string
		duration time.Duration
		words    int
		speakers string
	}{
		{
			name: "mp3", req: providers.TranscriptionRequest{File: bytes.NewReader(mp3), FileName: "clip.mp3", Language: "fr"},
			text: fmt.Sprintf("mock transcription of clip.mp3 (%d bytes)", len(mp3)), language: "fr", duration: mp3Duration,
		},
		{
			name: "wav measured", req: providers.TranscriptionRequest{File: bytes.NewReader(wav), FileName: "Hello.WAV", Timestamps: []string{"word", "segment"}},
			text: "mock transcription of Hello.WAV (12044 bytes)", language: "en", duration: 250 * time.Millisecond, words: 6,
		},
		{
			name: "wav by type", req: providers.TranscriptionRequest{File: bytes.NewReader(wav), FileName: "upload", FileContentType: "audio/x-wav", Diarize: true},
			text: "mock transcription of upload (12044 bytes)", language: "en", duration: 250 * time.Millisecond, speakers: "AB",
		},
		{
			name: "translation", req: providers.TranscriptionRequest{File: bytes.NewReader(wav), Translate: true, Language: "de"},
			text: "mock translation of audio (12044 bytes)", language: "en", duration: 250 * time.Millisecond,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := tc.req
			file := req.File
			got, err := New(Config{}).Transcribe(context.Background(), &req)
			if err != nil {
				t.Fatal(err)
			}
			if n, _ := file.Read(make([]byte, 1)); n != 0 {
				t.Error("the file was not read to its end")
			}
			if got.Text != tc.text || got.Language != tc.language || got.Duration != tc.duration || got.UsageKnown {
				t.Errorf("got %+v", got)
			}
			if len(got.Words) != tc.words {
				t.Errorf("%d words, want %d", len(got.Words), tc.words)
			}
			var joined []string
			var speakers string
			for _, s := range got.Segments {
				joined = append(joined, s.Text)
				speakers += s.Speaker
			}
			if strings.Join(joined, " ") != tc.text || len(got.Segments) != 2 || speakers != tc.speakers {
				t.Errorf("segments %+v", got.Segments)
			}
			if tc.duration > 0 && got.Segments[len(got.Segments)-1].End != tc.duration {
				t.Errorf("segments end at %v, want %v", got.Segments[len(got.Segments)-1].End, tc.duration)
			}
			for i, w := range got.Words {
				if w.Word != strings.Fields(tc.text)[i] || w.End <= w.Start {
					t.Errorf("word %d: %+v", i, w)
				}
			}
		})
	}
}

// TestTranscribeRefusesWhatIsNotAudio: like OpenAI, the mock answers 400 to a file it
// cannot read as audio, and bills nothing since it answers nothing.
func TestTranscribeRefusesWhatIsNotAudio(t *testing.T) {
	for _, data := range []string{"", "just some notes, not audio", "RIFF\x00\x00\x00\x00WAVE"} {
		_, err := New(Config{}).Transcribe(context.Background(), &providers.TranscriptionRequest{File: strings.NewReader(data), FileName: "notes.wav"})
		ue, ok := providers.AsUpstreamError(err)
		if !ok || ue.Category != providers.CategoryInvalidRequest || !strings.Contains(ue.Message, "not audio") {
			t.Errorf("%q: %v", data, err)
		}
	}
}

type failingReader struct{ err error }

func (f failingReader) Read([]byte) (int, error) { return 0, f.err }

func TestTranscribeReadError(t *testing.T) {
	boom := errors.New("upload too large")
	_, err := New(Config{}).Transcribe(context.Background(), &providers.TranscriptionRequest{File: failingReader{boom}, FileName: "a.wav"})
	if !errors.Is(err, boom) {
		t.Fatalf("err %v", err)
	}
}

// The mock reports what a forged file plays, not what its headers claim, and refuses as
// not audio a file the gateway would refuse too.
func TestTranscribeReportsWhatForgedAudioPlays(t *testing.T) {
	for _, f := range audiogen.Forged(30) {
		got, err := New(Config{}).Transcribe(context.Background(), &providers.TranscriptionRequest{File: bytes.NewReader(f.Data), FileName: "upload"})
		if f.Refusable {
			if ue, ok := providers.AsUpstreamError(err); !ok || ue.Category != providers.CategoryInvalidRequest {
				t.Errorf("%s: %v, want it refused", f.Name, err)
			}
			continue
		}
		if err != nil || got.Duration != f.Length {
			t.Errorf("%s: %v, %v; want %v", f.Name, got, err, f.Length)
		}
	}
}
