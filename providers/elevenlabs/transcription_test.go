package elevenlabs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/providers"
)

// receivedForm is what the fake read of a multipart upload.
type receivedForm struct {
	fields        map[string]string
	order         []string
	fileName      string
	fileType      string
	fileSum       [32]byte
	fileLen       int64
	contentLength int64
	chunked       bool
	key           string
	path          string
}

// readForm reads a multipart upload part by part, as it arrives, hashing the file; onFile,
// when set, is called with the count of file bytes read so far after each read.
func readForm(t *testing.T, r *http.Request, onFile func(n int64)) (*receivedForm, error) {
	got := &receivedForm{fields: map[string]string{}, contentLength: r.ContentLength,
		chunked: len(r.TransferEncoding) > 0 && r.TransferEncoding[0] == "chunked", key: r.Header.Get("xi-api-key"), path: r.URL.Path}
	mr, err := r.MultipartReader()
	if err != nil {
		return nil, err
	}
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			return got, nil
		}
		if err != nil {
			return nil, err
		}
		got.order = append(got.order, part.FormName())
		if part.FileName() == "" {
			b, err := io.ReadAll(part)
			if err != nil {
				return nil, err
			}
			got.fields[part.FormName()] = string(b)
			continue
		}
		got.fileName, got.fileType = part.FileName(), part.Header.Get("Content-Type")
		h := sha256.New()
		buf := make([]byte, 32<<10)
		for {
			n, err := part.Read(buf)
			h.Write(buf[:n])
			got.fileLen += int64(n)
			if onFile != nil && n > 0 {
				onFile(got.fileLen)
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				return nil, err
			}
		}
		copy(got.fileSum[:], h.Sum(nil))
	}
}

const scribeAnswer = `{"language_code":"eng","language_probability":0.98,"text":"Hello there. (laughter) Hi!",
"words":[
 {"text":"Hello","start":0.119,"end":0.5,"type":"word","speaker_id":"speaker_0","logprob":-0.1},
 {"text":" ","start":0.5,"end":0.52,"type":"spacing","speaker_id":"speaker_0","logprob":0},
 {"text":"there.","start":0.52,"end":0.9,"type":"word","speaker_id":"speaker_0","logprob":-0.2},
 {"text":" ","start":0.9,"end":1.2,"type":"spacing","speaker_id":"speaker_0","logprob":0},
 {"text":"(laughter)","start":1.2,"end":1.9,"type":"audio_event","speaker_id":"speaker_1","logprob":0},
 {"text":" ","start":1.9,"end":2.0,"type":"spacing","speaker_id":"speaker_1","logprob":0},
 {"text":"Hi!","start":2.0,"end":2.25,"type":"word","speaker_id":"speaker_1","logprob":-0.05}
]}`

// TestElevenLabsTranscribe: the fake receives the upload intact (fields, file name and type, every
// byte of the file, last), with a Content-Length when the size is known, and the answer
// becomes the neutral transcription.
func TestElevenLabsTranscribe(t *testing.T) {
	file := audioOf(300_000)
	var got *receivedForm
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		var err error
		if got, err = readForm(t, r, nil); err != nil {
			t.Error(err)
			writeError(w, 400, `{"detail":"bad form"}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(scribeAnswer))
	})
	temp := 0.2
	out, err := f.provider(t).Transcribe(context.Background(), &providers.TranscriptionRequest{
		Model: "scribe_v1", File: bytes.NewReader(file), Size: int64(len(file)), FileName: `my "talk".m4a`,
		FileContentType: "audio/mp4", Language: "en", Prompt: "names: Ada", Temperature: &temp,
		Timestamps: []string{"word", "segment"}, Diarize: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	wantFields := map[string]string{"model_id": "scribe_v1", "language_code": "en", "diarize": "true", "timestamps_granularity": "word", "temperature": "0.2"}
	if !reflect.DeepEqual(got.fields, wantFields) {
		t.Errorf("fields %v, want %v", got.fields, wantFields)
	}
	if last := got.order[len(got.order)-1]; last != "file" {
		t.Errorf("parts in order %v: the file is not last", got.order)
	}
	if got.fileName != `my "talk".m4a` || got.fileType != "audio/mp4" {
		t.Errorf("file %q of type %q", got.fileName, got.fileType)
	}
	if got.fileLen != int64(len(file)) || got.fileSum != sha256.Sum256(file) {
		t.Errorf("file arrived with %d bytes, want %d, or changed", got.fileLen, len(file))
	}
	if got.chunked || got.contentLength <= int64(len(file)) || got.key != testKey || got.path != "/v1/speech-to-text" {
		t.Errorf("chunked %v content length %d key %q path %q", got.chunked, got.contentLength, got.key, got.path)
	}
	if out.Text != "Hello there. (laughter) Hi!" || out.Language != "eng" || out.Duration != 0 || out.UsageKnown {
		t.Errorf("transcription %+v", out)
	}
	if len(out.Words) != 3 || out.Words[0] != (providers.TranscriptionWord{Start: 119 * time.Millisecond, End: 500 * time.Millisecond, Word: "Hello", Speaker: "speaker_0"}) {
		t.Errorf("words %+v", out.Words)
	}
	wantSegments := []providers.TranscriptionSegment{
		{Start: 119 * time.Millisecond, End: 900 * time.Millisecond, Text: "Hello there.", Speaker: "speaker_0"},
		{Start: 1200 * time.Millisecond, End: 2250 * time.Millisecond, Text: "(laughter) Hi!", Speaker: "speaker_1"},
	}
	if !reflect.DeepEqual(out.Segments, wantSegments) {
		t.Errorf("segments %+v\nwant %+v", out.Segments, wantSegments)
	}
}

// TestElevenLabsTranscribeStreamsUpload: a 5 MB upload of unknown size goes out chunked as it is
// read: the fake sees the first megabyte before the rest of the file exists.
func TestElevenLabsTranscribeStreamsUpload(t *testing.T) {
	const total, firstPart = 5 << 20, 1 << 20
	file := audioOf(total)
	sawFirst := make(chan struct{})
	var signalled atomic.Bool
	var got *receivedForm
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		var err error
		got, err = readForm(t, r, func(n int64) {
			if n >= firstPart && signalled.CompareAndSwap(false, true) {
				close(sawFirst)
			}
		})
		if err != nil {
			t.Error(err)
		}
		_, _ = w.Write([]byte(`{"language_code":"eng","language_probability":1,"text":"ok","words":[]}`))
	})
	pr, pw := io.Pipe()
	go func() {
		if _, err := pw.Write(file[:firstPart]); err != nil {
			return
		}
		select {
		case <-sawFirst:
		case <-time.After(3 * time.Second):
			// An adapter that buffers the file never lets the fake see it: fail, not hang.
			pw.CloseWithError(errors.New("the first megabyte never reached the upstream"))
			return
		}
		_, _ = pw.Write(file[firstPart:])
		_ = pw.Close()
	}()
	out, err := f.provider(t).Transcribe(context.Background(), &providers.TranscriptionRequest{
		Model: "scribe_v1", File: pr, Size: -1, FileName: "big.wav", FileContentType: "audio/wav",
	})
	if err != nil {
		t.Fatal(err)
	}
	if out.Text != "ok" || out.Words != nil || out.Segments != nil {
		t.Errorf("transcription %+v", out)
	}
	if !got.chunked || got.fileLen != total || got.fileSum != sha256.Sum256(file) {
		t.Errorf("chunked %v, %d bytes of %d, or changed", got.chunked, got.fileLen, total)
	}
	if !reflect.DeepEqual(got.fields, map[string]string{"model_id": "scribe_v1"}) {
		t.Errorf("fields %v", got.fields)
	}
}

// failingReader fails after n bytes, as a client upload cut off does.
type failingReader struct {
	n   int
	err error
}

func (r *failingReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, r.err
	}
	n := min(len(p), r.n)
	r.n -= n
	return n, nil
}

// TestElevenLabsTranscribeUploadFails: the client's upload failing is the client's error, not the
// upstream's.
func TestElevenLabsTranscribeUploadFails(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = w.Write([]byte(`{"text":""}`))
	})
	cut := errors.New("client went away mid-upload")
	_, err := f.provider(t).Transcribe(context.Background(), &providers.TranscriptionRequest{
		Model: "scribe_v1", File: &failingReader{n: 100_000, err: cut}, Size: -1,
	})
	if _, ok := providers.AsUpstreamError(err); ok || !errors.Is(err, cut) {
		t.Fatalf("got %#v", err)
	}
}

// TestElevenLabsTranscribeRefused: a translation is refused before any call.
func TestElevenLabsTranscribeRefused(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) { t.Error("the upstream was called") })
	_, err := f.provider(t).Transcribe(context.Background(), &providers.TranscriptionRequest{
		Model: "scribe_v1", Translate: true, File: strings.NewReader("RIFF"), Size: 4,
	})
	ue, ok := providers.AsUpstreamError(err)
	if !ok || ue.Category != providers.CategoryInvalidRequest || ue.Status != 0 || !errors.Is(err, ErrUnsupportedRequest) ||
		!strings.Contains(ue.Message, "cannot translate") {
		t.Fatalf("got %#v", err)
	}
	if n := f.requests.Load(); n != 0 {
		t.Fatalf("%d requests reached the upstream", n)
	}
}

// TestElevenLabsTranscribeMalformed: a 2xx answer that is not a transcript is a retryable failure.
func TestElevenLabsTranscribeMalformed(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = w.Write([]byte(`<html>maintenance</html>`))
	})
	_, err := f.provider(t).Transcribe(context.Background(), &providers.TranscriptionRequest{Model: "scribe_v1", File: strings.NewReader("RIFF"), Size: 4})
	ue, ok := providers.AsUpstreamError(err)
	if !ok || ue.Category != providers.CategoryServerError || !ue.Retryable || !errors.Is(err, ErrMalformedResponse) || ue.Status != 200 {
		t.Fatalf("got %#v", err)
	}
}

// TestElevenLabsConvertTranscript: words are the answer's words; segments group consecutive
// items by speaker when diarized, and make one segment otherwise when segments are asked.
func TestElevenLabsConvertTranscript(t *testing.T) {
	s := func(v float64) *float64 { return &v }
	sp := func(v string) *string { return &v }
	answer := &Transcript{LanguageCode: "fra", Text: "Oui. Non. Peut-être.", Words: []Word{
		{Text: "Oui.", Start: s(0), End: s(0.4), Type: WordWord, SpeakerID: sp("speaker_0")},
		{Text: " ", Start: s(0.4), End: s(0.6), Type: WordSpacing, SpeakerID: sp("speaker_0")},
		{Text: "Non.", Start: s(0.6), End: s(1), Type: WordWord, SpeakerID: sp("speaker_1")},
		{Text: " ", Start: s(1), End: s(1.1), Type: WordSpacing, SpeakerID: sp("speaker_1")},
		{Text: "Peut-être.", Start: s(1.1), End: s(1.8), Type: WordWord, SpeakerID: sp("speaker_0")},
	}}
	for _, tc := range []struct {
		name     string
		req      providers.TranscriptionRequest
		segments []providers.TranscriptionSegment
		speaker  string
	}{
		{name: "diarized", req: providers.TranscriptionRequest{Diarize: true}, speaker: "speaker_0", segments: []providers.TranscriptionSegment{
			{Start: 0, End: 400 * time.Millisecond, Text: "Oui.", Speaker: "speaker_0"},
			{Start: 600 * time.Millisecond, End: time.Second, Text: "Non.", Speaker: "speaker_1"},
			{Start: 1100 * time.Millisecond, End: 1800 * time.Millisecond, Text: "Peut-être.", Speaker: "speaker_0"},
		}},
		{name: "segments without speakers", req: providers.TranscriptionRequest{Timestamps: []string{"segment"}}, segments: []providers.TranscriptionSegment{
			{Start: 0, End: 1800 * time.Millisecond, Text: "Oui. Non. Peut-être."},
		}},
		{name: "words only", req: providers.TranscriptionRequest{Timestamps: []string{"word"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := convertTranscript(answer, &tc.req)
			if out.Text != answer.Text || out.Language != "fra" {
				t.Errorf("text %q language %q", out.Text, out.Language)
			}
			if len(out.Words) != 3 || out.Words[2].Word != "Peut-être." || out.Words[2].Start != 1100*time.Millisecond || out.Words[0].Speaker != tc.speaker {
				t.Errorf("words %+v", out.Words)
			}
			if !reflect.DeepEqual(out.Segments, tc.segments) {
				t.Errorf("segments %+v\nwant %+v", out.Segments, tc.segments)
			}
		})
	}
}
