package audioprobe

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/internal/audiogen"
)

// Files whose headers understate their length are measured at the length a decoder plays,
// which audiogen knows from the samples it wrote, or refused.
func TestForgedHeaders(t *testing.T) {
	for _, f := range audiogen.Forged(60) {
		t.Run(f.Name, func(t *testing.T) {
			for rname, mk := range readers {
				d, _, err := Duration(mk(f.Data))
				switch {
				case f.Refusable && errors.Is(err, ErrRefused):
				case err != nil:
					t.Fatalf("%s: %v; want %v", rname, err, f.Length)
				case d != f.Length:
					t.Fatalf("%s: %v; want %v", rname, d, f.Length)
				}
			}
		})
	}
}

// FuzzForgedLength holds Duration to the length of generated files, whatever their headers
// claim: a fuzzed container, length and claim.
func FuzzForgedLength(f *testing.F) {
	f.Add(byte(0), uint16(3000), uint16(1))
	f.Add(byte(1), uint16(100), uint16(1))
	f.Add(byte(2), uint16(20000), uint16(8000))
	f.Add(byte(3), uint16(300), uint16(50))
	f.Add(byte(4), uint16(300), uint16(1000))
	f.Add(byte(5), uint16(500), uint16(48000))
	f.Add(byte(6), uint16(700), uint16(2))
	f.Fuzz(func(t *testing.T, kind byte, n, claim uint16) {
		if n == 0 {
			return
		}
		var file audiogen.File
		switch kind % 7 {
		case 0:
			// Two data chunks, split at the claim; an empty one would be a placeholder size.
			pcm := audiogen.PCM(int(n), uint32(claim))
			chunks := [][]int16{pcm}
			if split := int(claim) % len(pcm); split > 0 {
				chunks = [][]int16{pcm[:split], pcm[split:]}
			}
			file = audiogen.File{Data: audiogen.WAV(8000, 0, chunks), Length: seconds(uint64(n), 8000)}
		case 1:
			file = audiogen.MP3(int(n), int(claim))
			if int(claim) > int(n) {
				file.Length = seconds(uint64(claim)*1152, 44100) // the count is longer: a file cut short
			}
		case 2:
			file = audiogen.FLAC(8000, int(n), int(claim), 16, claim%2 == 1)
			if int(claim) > int(n) {
				file.Length = seconds(uint64(claim), 8000)
			}
		case 3:
			file = audiogen.OggOpus(int(n), uint64(claim), claim%2 == 1)
			if claim%2 == 1 && file.Length < time.Second {
				file.Length = time.Second // the decoy stream is the longer
			}
		case 4:
			file = audiogen.WebMOpus(int(n), float64(claim), claim%2 == 1)
			if claim%2 == 1 && file.Length < time.Second {
				file.Length = time.Second // the decoy track is the longer
			}
			if l := seconds(uint64(claim), 1000); l > file.Length {
				file.Length = l
			}
		case 5:
			file = audiogen.M4A(int(n), 48000, uint32(claim), claim%2 == 1)
			if decoy := seconds(48000/1024*1024, 48000); claim%2 == 1 && decoy > file.Length {
				file.Length = decoy // the decoy track is the longer
			}
			if l := seconds(uint64(claim), 48000); l > file.Length {
				file.Length = l
			}
		case 6:
			file = audiogen.MP3(int(n), -1)
		}
		d, _, err := Duration(bytes.NewReader(file.Data))
		short := time.Duration(0) // an edit list may trim an encoder's priming and padding
		if kind%7 == 5 {
			short = seconds(maxEditTrim, 48000)
		}
		if err != nil || d > file.Length || d < file.Length-short {
			t.Fatalf("kind %d, %d units, claim %d: %v, %v; want %v", kind%7, n, claim, d, err, file.Length)
		}
	})
}
