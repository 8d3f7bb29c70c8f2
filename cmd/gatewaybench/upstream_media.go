package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"mime/multipart"
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

// eachPart calls fn with each part of a multipart request; on a malformed body or an error
// of fn it answers 400 and returns false.
func eachPart(w http.ResponseWriter, r *http.Request, fn func(*multipart.Part) error) bool {
	mr, err := r.MultipartReader()
	if err != nil {
		http.Error(w, "want a multipart body: "+err.Error(), http.StatusBadRequest)
		return false
	}
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			return true
		}
		if err == nil {
			err = fn(p)
		}
		if err == nil {
			_, err = io.Copy(io.Discard, p)
		}
		if err != nil {
			http.Error(w, "reading the multipart body: "+err.Error(), http.StatusBadRequest)
			return false
		}
	}
}

// transcriptions reads the upload's WAV header for its byte rate, the rest of it into
// nothing, and answers the seconds it holds as OpenAI reports them for whisper-1.
func (u *fakeUpstream) transcriptions(w http.ResponseWriter, r *http.Request) {
	var secs float64
	files := 0
	ok := eachPart(w, r, func(p *multipart.Part) (err error) {
		if p.FormName() == "file" {
			files++
			secs, err = wavSeconds(p)
		}
		return err
	})
	if !ok {
		return
	}
	if files != 1 {
		http.Error(w, fmt.Sprintf("want one file, got %d", files), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = fmt.Fprintf(w, `{"text":"~transcribed %.0f seconds of audio.","usage":{"type":"duration","seconds":%.0f}}`, secs, math.Ceil(secs))
}

// wavSeconds reads a canonical WAV file (a 44-byte header, then PCM) to its end and returns
// the seconds of audio it held; a file cut short or grown is an error.
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
	if want := binary.LittleEndian.Uint32(h[40:44]); n != int64(want) {
		return 0, fmt.Errorf("the audio holds %d bytes, its header says %d", n, want)
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

// editImages is how many pictures the bench's image edits carry.
const editImages = 2

// imageEdits reads the multipart body into nothing, checking that it holds the bench's
// pictures, each a whole PNG (its signature first, its IEND chunk last).
func (u *fakeUpstream) imageEdits(w http.ResponseWriter, r *http.Request) {
	images := 0
	ok := eachPart(w, r, func(p *multipart.Part) error {
		if p.FileName() == "" {
			return nil
		}
		images++
		return wholePNG(p)
	})
	if !ok {
		return
	}
	if images != editImages {
		http.Error(w, fmt.Sprintf("want %d images, got %d", editImages, images), http.StatusBadRequest)
		return
	}
	body := imageEditAnswer(images)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	_, _ = w.Write(body)
}

// wholePNG reads a PNG file to its end and fails unless it starts with the PNG signature
// and ends with the IEND chunk.
func wholePNG(r io.Reader) error {
	var sig [8]byte
	if _, err := io.ReadFull(r, sig[:]); err != nil {
		return err
	}
	if string(sig[:]) != "\x89PNG\r\n\x1a\n" {
		return errors.New("an image without the PNG signature")
	}
	var tail pngTail
	if _, err := io.Copy(&tail, r); err != nil {
		return err
	}
	if string(tail.last[:]) != "\x00\x00\x00\x00IEND\xaeB`\x82" {
		return errors.New("an image cut short: it does not end with the PNG IEND chunk")
	}
	return nil
}

// pngTail keeps the last 12 bytes written to it.
type pngTail struct{ last [12]byte }

func (t *pngTail) Write(p []byte) (int, error) {
	if len(p) >= len(t.last) {
		copy(t.last[:], p[len(p)-len(t.last):])
	} else {
		copy(t.last[:], t.last[len(p):])
		copy(t.last[len(t.last)-len(p):], p)
	}
	return len(p), nil
}
