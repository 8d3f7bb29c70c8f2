// Package audioprobe measures how long an audio file plays, so that a transcription whose
// upstream reports no usage (text, srt and vtt answers carry none) is still billed its
// input seconds.
//
// The length is what a decoder would play, not what the headers say: a client writes the
// headers, and a decoder such as ffmpeg reads every frame. So Duration walks the frames,
// blocks, pages, chunks or sample tables to the end of the file, and where a header also
// gives the length (a Xing frame count, STREAMINFO's total, a WebM Duration, mdhd), the
// longer of the two readings counts; of several audio tracks, the longest. A file whose
// contents and headers disagree in a way no encoder writes (bytes after a WAV's chunks, an
// impossible sample rate) is refused with ErrRefused rather than billed at either reading.
//
// Duration reads the file once, front to back, through one small fixed buffer: uploads are
// 25 MB and more and reach the gateway as a streaming multipart part or a spooled temporary
// file, so nothing here holds the file whole. It never estimates from the file size at a
// guessed bitrate, which misprices every VBR file; a file it cannot measure is an error, and
// the caller decides what to bill rather than billing $0.
//
// Covered: WAV (RIFF and RF64, PCM, float, extensible and compressed formats), MP3 (MPEG-1,
// 2 and 2.5, layers I to III, with or without Xing, Info, LAME or VBRI headers), FLAC, Ogg
// (Opus, Vorbis, FLAC, Speex; chained links are added up) and MP4/M4A (whole or
// fragmented), AAC in ADTS frames and WebM/Matroska (browser recordings included).
// Not covered: AIFF, CAF, AMR.
package audioprobe

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"time"
)

// Format names the container (and for Ogg the codec) that Duration recognised.
type Format string

// The formats Duration measures.
const (
	WAV     Format = "wav"
	MP3     Format = "mp3"
	FLAC    Format = "flac"
	Opus    Format = "opus"    // Opus in Ogg
	Vorbis  Format = "vorbis"  // Vorbis in Ogg
	OggFLAC Format = "oggflac" // FLAC in Ogg
	Speex   Format = "speex"   // Speex in Ogg
	AAC     Format = "aac"     // AAC in ADTS frames (.aac)
	WebM    Format = "webm"    // WebM and Matroska
	MP4     Format = "mp4"     // MP4, M4A and QuickTime
)

var (
	// ErrUnknownFormat is returned for input that is none of the formats Duration reads.
	ErrUnknownFormat = errors.New("audioprobe: unrecognized audio format")
	// ErrMalformed wraps every error about input that looked like a known format but whose
	// headers are missing, inconsistent or hold no audio.
	ErrMalformed = errors.New("audioprobe: malformed audio")
	// ErrRefused wraps every error about a file whose headers and contents disagree in a way
	// that only a forged file does (data after its audio, an impossible sample rate): what a
	// decoder would play cannot be told, so the file is not to be billed by its length.
	ErrRefused = errors.New("audioprobe: audio refused")
)

// bufSize bounds the memory Duration uses. It holds the longest MPEG audio frame (2,881
// bytes) and the header after it, so that a frame can be checked against its successor.
const bufSize = 4096

// Duration reads an audio file from r to its end and returns how long it plays and its
// format. r is skipped through by seeking when it can (a spooled upload) where the bytes do
// not matter (a WAV's samples, an MP4's mdat). Errors from r are returned wrapped; the
// others wrap ErrUnknownFormat, ErrMalformed or ErrRefused, with the format when it was
// recognised. A file holding no audio at all is an error, never a zero duration.
func Duration(r io.Reader) (time.Duration, Format, error) {
	p := prober{br: bufio.NewReaderSize(r, bufSize), src: r}
	return p.probe()
}

// prober is one pass over one file.
type prober struct {
	br *bufio.Reader
	// src is the input under br: skipped past by seeking when it can (a spooled upload),
	// rather than read through.
	src io.Reader
}

func (p *prober) probe() (time.Duration, Format, error) {
	// An ID3v2 tag opens most MP3 files and, now and then, a FLAC file.
	tagged, err := p.skipID3v2()
	if err != nil {
		return 0, "", err
	}
	head, err := p.peek(12)
	if err != nil {
		return 0, "", err
	}
	var (
		d time.Duration
		f Format
	)
	switch {
	case len(head) >= 12 && (string(head[:4]) == "RIFF" || string(head[:4]) == "RF64") && string(head[8:12]) == "WAVE":
		f = WAV
		d, err = p.wav()
	case len(head) >= 4 && string(head[:4]) == "fLaC":
		f = FLAC
		d, err = p.flac()
	case len(head) >= 4 && string(head[:4]) == "OggS":
		d, f, err = p.ogg()
	case len(head) >= 4 && be32(head) == ebmlHeader:
		f = WebM
		d, err = p.webm()
	case len(head) >= 8 && isMP4Start(head):
		f = MP4
		d, err = p.mp4()
	default:
		// An ID3v2 tag vouches for MP3 even when junk sits between it and the first frame;
		// without one, the file must open on a frame that its successor confirms.
		limit := 0
		if tagged {
			limit = 64 << 10
		}
		d, f, err = p.mp3(limit)
		if errors.Is(err, errNoSync) {
			return 0, "", ErrUnknownFormat
		}
	}
	if err != nil {
		return 0, f, err
	}
	if d <= 0 {
		return 0, f, malformed(f, "no audio")
	}
	return d, f, nil
}

func malformed(f Format, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrMalformed, f, fmt.Sprintf(format, args...))
}

func refused(f Format, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrRefused, f, fmt.Sprintf(format, args...))
}

// readError wraps an error of the underlying reader; the end of the input is not one.
func readError(err error) error {
	return fmt.Errorf("audioprobe: reading: %w", err)
}

// peek returns up to n buffered bytes (n ≤ bufSize). Fewer than n means the input ends.
func (p *prober) peek(n int) ([]byte, error) {
	b, err := p.br.Peek(n)
	if err != nil && err != io.EOF {
		return b, readError(err)
	}
	return b, nil
}

// skip discards up to n bytes and returns how many there were; fewer than n means the
// input ends, which is not an error.
func (p *prober) skip(n int64) (int64, error) {
	if s, ok := p.src.(io.Seeker); ok && n > int64(p.br.Buffered()) {
		return p.seekPast(s, n)
	}
	var done int64
	for n > 0 {
		c := min(n, 1<<30)
		d, err := p.br.Discard(int(c))
		done += int64(d)
		n -= int64(d)
		if err == io.EOF {
			return done, nil
		}
		if err != nil {
			return done, readError(err)
		}
	}
	return done, nil
}

// seekPast is skip by seeking the input: the bytes buffered, then the rest without reading it.
func (p *prober) seekPast(s io.Seeker, n int64) (int64, error) {
	buffered := int64(p.br.Buffered())
	pos, err := s.Seek(0, io.SeekCurrent)
	if err != nil {
		return 0, readError(err)
	}
	end, err := s.Seek(0, io.SeekEnd)
	if err != nil {
		return 0, readError(err)
	}
	rest := max(0, min(n-buffered, end-pos))
	if _, err := s.Seek(pos+rest, io.SeekStart); err != nil {
		return 0, readError(err)
	}
	p.br.Reset(p.src)
	return buffered + rest, nil
}

// skipAll discards the rest of the input and returns its length.
func (p *prober) skipAll() (int64, error) {
	var done int64
	for {
		n, err := p.skip(1 << 30)
		done += n
		if err != nil || n < 1<<30 {
			return done, err
		}
	}
}

// samples turns a sample count at a rate into a duration, rounded to the nanosecond, without
// the overflow that count × 1e9 would hit for long files at high rates.
func samples(count, rate uint64) (time.Duration, bool) {
	if rate == 0 {
		return 0, false
	}
	sec, rem := count/rate, count%rate
	if sec > uint64(1<<63-1)/uint64(time.Second)-1 {
		return 0, false
	}
	// rem < rate < 2^33 in every caller, so rem × 1e9 fits in a uint64.
	if rate >= 1<<33 {
		return 0, false
	}
	return time.Duration(sec)*time.Second + time.Duration((rem*uint64(time.Second)+rate/2)/rate), true
}

func le16(b []byte) uint32 { return uint32(b[0]) | uint32(b[1])<<8 }
func le32(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}
func le64(b []byte) uint64 { return uint64(le32(b)) | uint64(le32(b[4:]))<<32 }
func be16(b []byte) uint32 { return uint32(b[0])<<8 | uint32(b[1]) }
func be24(b []byte) uint32 { return uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2]) }
func be32(b []byte) uint32 {
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}
func be64(b []byte) uint64 { return uint64(be32(b))<<32 | uint64(be32(b[4:])) }
