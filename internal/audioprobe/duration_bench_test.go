package audioprobe

import (
	"bytes"
	"testing"

	"github.com/modelgateway/caddy-modelgateway/internal/audiogen"
)

// BenchmarkDuration measures uploads of 25 MB and more, read to their end, in each
// container: the cost of walking every frame rather than trusting a header.
func BenchmarkDuration(b *testing.B) {
	for _, f := range []audiogen.File{
		{Name: "wav", Data: audiogen.WAV(16000, 0, [][]int16{audiogen.PCM(13<<20, 1)})},
		audiogen.MP3(64000, 1),
		audiogen.FLAC(16000, 13<<20, 16000, 16, true),
		audiogen.OggOpus(600000, 48000, false),
		audiogen.WebMOpus(500000, 1000, false),
		audiogen.M4A(600000, 48000, 48000, false),
	} {
		b.Run(f.Name, func(b *testing.B) {
			b.SetBytes(int64(len(f.Data)))
			for b.Loop() {
				if _, _, err := Duration(bytes.NewReader(f.Data)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
