package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
)

// The fake upstream's media endpoints, for the media tests (media.go):
//
//   - POST /v1/audio/speech answers audio/mpeg of unknown length: l after the request, the
//     first piece of speechPiece bytes at once, then n-1 more, i apart, each flushed alone
//     (the directive is read from the JSON body, the text to speak, which every arm passes on);
//   - POST /v1/audio/transcriptions and POST /v1/images/edits read their multipart body as it
//     arrives, into nothing (a 25 MB upload never sits in the fake's memory), and answer a small
//     JSON body with the usage a real upstream reports.

// speechPiece is the size of one piece of the fake's audio: a real text-to-speech upstream
// sends its first few KiB as soon as it has them, and the rest as it makes it.
const speechPiece = 4 << 10

// speechAudio is the bytes of one piece of audio: an MP3 frame header and noise. Nothing reads
// them but the load generator, which counts them.
var speechAudio = func() []byte {
	b := make([]byte, speechPiece)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	copy(b, []byte{0xff, 0xfb, 0x90, 0x64}) // MPEG-1 layer III, 128 kbit/s, 44.1 kHz
	return b
}()

func (u *fakeUpstream) speech(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, "reading the body", http.StatusBadRequest)
		return
	}
	d := parseDirective(body)
	if !sleepCtx(r.Context(), d.latency) {
		return
	}
	w.Header().Set("Content-Type", "audio/mpeg")
	rc := http.NewResponseController(w)
	for k := 0; k < d.n; k++ {
		if k > 0 && !sleepCtx(r.Context(), d.interval) {
			return
		}
		if _, err := w.Write(speechAudio); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
	}
}

// transcriptions reads the upload's WAV header for its byte rate, the rest of it into
// nothing, and answers the seconds it holds as OpenAI reports them for whisper-1.
func (u *fakeUpstream) transcriptions(w http.ResponseWriter, r *http.Request) {
	mr, err := r.MultipartReader()
	if err != nil {
		http.Error(w, "want a multipart body: "+err.Error(), http.StatusBadRequest)
		return
	}
	var secs float64
	files := 0
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			http.Error(w, "reading the multipart body: "+err.Error(), http.StatusBadRequest)
			return
		}
		if p.FormName() == "file" {
			files++
			if secs, err = wavSeconds(p); err != nil {
				http.Error(w, "reading the audio: "+err.Error(), http.StatusBadRequest)
				return
			}
			continue
		}
		if _, err := io.Copy(io.Discard, p); err != nil {
			http.Error(w, "reading the multipart body: "+err.Error(), http.StatusBadRequest)
			return
		}
	}
	if files != 1 {
		http.Error(w, fmt.Sprintf("want one file, got %d", files), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = fmt.Fprintf(w, `{"text":"~transcribed %.0f seconds of audio.","usage":{"type":"duration","seconds":%.0f}}`, secs, math.Ceil(secs))
}

// wavSeconds reads a canonical WAV file (a 44-byte header, then PCM) to its end and returns
// the seconds of audio it held.
func wavSeconds(r io.Reader) (float64, error) {
	var h [wavHeaderLen]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, err
	}
	if string(h[0:4]) != "RIFF" || string(h[8:12]) != "WAVE" {
		return 0, errors.New("not a WAV file")
	}
	rate := binary.LittleEndian.Uint32(h[28:32])
	if rate == 0 {
		return 0, errors.New("a WAV header with no byte rate")
	}
	n, err := io.Copy(io.Discard, r)
	if err != nil {
		return 0, err
	}
	return float64(n) / float64(rate), nil
}

// imageEditAnswer is the fake's answer to an image edit: a 1×1 PNG and gpt-image-1's usage
// for the images it read.
func imageEditAnswer(images int) []byte {
	const png1x1 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
	imageTokens, textTokens, output := 194*images, 12, 272
	return fmt.Appendf(nil, `{"created":1700000000,"data":[{"b64_json":%q}],"usage":{"input_tokens":%d,"input_tokens_details":{"image_tokens":%d,"text_tokens":%d},"output_tokens":%d,"total_tokens":%d}}`,
		png1x1, imageTokens+textTokens, imageTokens, textTokens, output, imageTokens+textTokens+output)
}

// imageEdits reads the multipart body into nothing, counting its images.
func (u *fakeUpstream) imageEdits(w http.ResponseWriter, r *http.Request) {
	mr, err := r.MultipartReader()
	if err != nil {
		http.Error(w, "want a multipart body: "+err.Error(), http.StatusBadRequest)
		return
	}
	images := 0
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			http.Error(w, "reading the multipart body: "+err.Error(), http.StatusBadRequest)
			return
		}
		if p.FileName() != "" {
			images++
		}
		if _, err := io.Copy(io.Discard, p); err != nil {
			http.Error(w, "reading the multipart body: "+err.Error(), http.StatusBadRequest)
			return
		}
	}
	if images == 0 {
		http.Error(w, "want at least one image", http.StatusBadRequest)
		return
	}
	body := imageEditAnswer(images)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	_, _ = w.Write(body)
}
