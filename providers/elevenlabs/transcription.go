package elevenlabs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/internal/upstreamhttp"
)

// Transcribe sends req.File to Scribe as it is read and returns the transcript. The file
// is never held whole: the multipart body is its envelope around the file's reader, sent
// with a Content-Length when req.Size is known and chunked otherwise. A read error of
// req.File (the client's upload) is returned as it is, wrapped, not as an *UpstreamError:
// the upstream did nothing wrong. Translate is refused before any call.
func (p *Provider) Transcribe(ctx context.Context, req *providers.TranscriptionRequest) (*providers.Transcription, error) {
	if req.Translate {
		return nil, unsupported(p.name, "", "ElevenLabs Scribe cannot translate; it only transcribes in the spoken language")
	}
	if req.File == nil {
		return nil, unsupported(p.name, "file", "a transcription needs an audio file")
	}
	body, contentType := newUploadBody(req)
	resp, at, err := p.up.SendBody(ctx, p.base+"/v1/speech-to-text", upstreamhttp.Body{
		Reader: body, Length: body.length, ContentType: contentType,
	}, false, nil)
	// The transport may still hold the body once it has an answer: from here on, it can no
	// longer read the client's file.
	if fileErr := body.finish(); err != nil {
		if fileErr != nil && ctx.Err() == nil {
			return nil, fmt.Errorf("provider %s: reading the audio upload: %w", p.name, fileErr)
		}
		return nil, err
	}
	b, err := p.up.ReadBody(ctx, at, resp)
	if err != nil {
		return nil, err
	}
	var t Transcript
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, p.up.Malformed(resp.StatusCode, b, err)
	}
	return convertTranscript(&t, req), nil
}

// convertTranscript makes the neutral transcription of Scribe's answer: its words, and its
// items grouped by speaker into segments when diarization or segment timestamps were asked.
func convertTranscript(t *Transcript, req *providers.TranscriptionRequest) *providers.Transcription {
	out := &providers.Transcription{Text: t.Text, Language: t.LanguageCode}
	segments := req.Diarize || slices.Contains(req.Timestamps, "segment")
	var cur *providers.TranscriptionSegment
	var text strings.Builder
	endSegment := func() {
		if cur != nil {
			cur.Text = strings.TrimSpace(text.String())
			if cur.Text != "" {
				out.Segments = append(out.Segments, *cur)
			}
			cur = nil
			text.Reset()
		}
	}
	for _, w := range t.Words {
		speaker := ""
		if req.Diarize && w.SpeakerID != nil {
			speaker = *w.SpeakerID
		}
		start, end := seconds(w.Start), seconds(w.End)
		if w.Type == WordWord || w.Type == "" {
			out.Words = append(out.Words, providers.TranscriptionWord{Start: start, End: end, Word: w.Text, Speaker: speaker})
		}
		if !segments {
			continue
		}
		if w.Type == WordSpacing {
			// Spacing belongs to the segment it falls in; between two speakers, to neither.
			if cur != nil {
				text.WriteString(w.Text)
			}
			continue
		}
		if cur != nil && cur.Speaker != speaker {
			endSegment()
		}
		if cur == nil {
			cur = &providers.TranscriptionSegment{Start: start, Speaker: speaker}
		}
		cur.End = max(cur.End, end)
		text.WriteString(w.Text)
	}
	endSegment()
	return out
}

// seconds converts Scribe's time in seconds; absent is 0.
func seconds(s *float64) time.Duration {
	if s == nil || *s <= 0 {
		return 0
	}
	return time.Duration(*s * float64(time.Second))
}

// errUploadDone is the error of a read of the upload body after Transcribe has its answer.
var errUploadDone = errors.New("upload body read after the request ended")

// uploadBody is the multipart body of a transcription: the form fields and the file part's
// header, the client's file as it is read, and the closing boundary.
type uploadBody struct {
	// length is the body's length, -1 when the file's size is unknown.
	length int64

	mu      sync.Mutex
	r       io.Reader
	file    io.Reader
	fileErr error
	done    bool
}

// newUploadBody builds the body of req and returns it with its content type.
func newUploadBody(req *providers.TranscriptionRequest) (*uploadBody, string) {
	var head, tail bytes.Buffer
	sw := &switchWriter{w: &head}
	mw := multipart.NewWriter(sw)
	// Fields first, the file last, so that ElevenLabs has every option before the audio.
	// Writes to a bytes.Buffer do not fail.
	_ = mw.WriteField("model_id", req.Model)
	if req.Language != "" {
		_ = mw.WriteField("language_code", req.Language)
	}
	if req.Diarize {
		_ = mw.WriteField("diarize", "true")
	}
	if slices.Contains(req.Timestamps, "word") {
		_ = mw.WriteField("timestamps_granularity", "word")
	}
	if req.Temperature != nil {
		_ = mw.WriteField("temperature", strconv.FormatFloat(*req.Temperature, 'g', -1, 64))
	}
	name, ct := req.FileName, req.FileContentType
	if name == "" {
		name = "audio"
	}
	if ct == "" {
		ct = "application/octet-stream"
	}
	h := textproto.MIMEHeader{}
	h.Set("Content-Disposition", multipart.FileContentDisposition("file", name))
	h.Set("Content-Type", ct)
	_, _ = mw.CreatePart(h)
	sw.w = &tail
	_ = mw.Close()

	b := &uploadBody{length: -1}
	if req.Size >= 0 {
		b.length = int64(head.Len()) + req.Size + int64(tail.Len())
	}
	b.file = req.File
	b.r = io.MultiReader(&head, readerFunc(b.readFile), &tail)
	return b, mw.FormDataContentType()
}

func (b *uploadBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return 0, errUploadDone
	}
	return b.r.Read(p)
}

// readFile reads the client's file, keeping its error apart from the upstream's.
func (b *uploadBody) readFile(p []byte) (int, error) {
	n, err := b.file.Read(p)
	if err != nil && err != io.EOF {
		b.fileErr = err
	}
	return n, err
}

// finish ends the body, waiting for a read in progress, and returns the file's read error
// if there was one. The body is not read afterwards.
func (b *uploadBody) finish() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.done = true
	return b.fileErr
}

// switchWriter writes to w, which can be changed between writes.
type switchWriter struct{ w io.Writer }

func (s *switchWriter) Write(p []byte) (int, error) { return s.w.Write(p) }

// readerFunc is a function read as an io.Reader.
type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }
