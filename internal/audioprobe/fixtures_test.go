package audioprobe

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The files in testdata were made by real encoders (commands in testdata/README.md), each from a
// tone of a known length. Lossy encoders pad to whole frames, so each is allowed one frame.
func TestFixtures(t *testing.T) {
	for _, tc := range []struct {
		file   string
		format Format
		want   time.Duration
		frame  time.Duration // the tolerance: one frame of the codec
	}{
		{"sox-8k-mono.wav", WAV, 1500 * time.Millisecond, 0},
		{"ffmpeg-ext-24bit-3ch.wav", WAV, 2756 * time.Second / 11025, 0},
		{"lame-cbr-16k.mp3", MP3, 2 * time.Second, 0},
		// Without a LAME tag the walk counts every decoded sample, the encoder's delay
		// (1,105 samples) and its padding of the last frame included.
		{"lame-noxing-id3.mp3", MP3, 2 * time.Second, (1105 + 576) * time.Second / 16000},
		{"lame-vbr-22k.mp3", MP3, 3 * time.Second, 0},
		{"lame-mpeg25-8k.mp3", MP3, 2500 * time.Millisecond, 0},
		// ADTS has no header to trim the priming (1,024 samples) and padding by.
		{"ffmpeg.aac", AAC, 1500 * time.Millisecond, 2048 * time.Second / 8000},
		// WebM and Matroska: with a duration in Info, then written into a pipe (no duration;
		// the last block's end, its length from the Opus TOC or the spacing of the blocks).
		// Block timestamps include Opus's 6.5 ms codec delay.
		{"ffmpeg-opus.webm", WebM, 1500 * time.Millisecond, 26500 * time.Microsecond},
		{"ffmpeg-opus-piped.webm", WebM, 1700 * time.Millisecond, 26500 * time.Microsecond},
		{"ffmpeg-vorbis-piped.webm", WebM, 1300 * time.Millisecond, 2048 * time.Second / 8000},
		{"ffmpeg-pcm-piped.mka", WebM, 1200 * time.Millisecond, 100 * time.Millisecond},
		{"layer2-32k.mp2", MP3, time.Second, 1152 * time.Second / 32000},
		{"ffmpeg-8k.flac", FLAC, 1500 * time.Millisecond, 0},
		{"sox-8k.flac", FLAC, 1250 * time.Millisecond, 0},
		// Written into a pipe, so that no header could be filled in at the end: a WAV with
		// placeholder sizes, a FLAC whose STREAMINFO has no total, an MP3 with no Xing frame.
		{"ffmpeg-piped.wav", WAV, 600 * time.Millisecond, 0},
		{"ffmpeg-piped.flac", FLAC, 1300 * time.Millisecond, 0},
		{"lame-piped.mp3", MP3, 1700 * time.Millisecond, (1105 + 576) * time.Second / 16000},
		{"ffmpeg.opus", Opus, 1500 * time.Millisecond, 20 * time.Millisecond},
		{"ffmpeg-vorbis.ogg", Vorbis, 1500 * time.Millisecond, 0},
		{"ffmpeg-flac.oga", OggFLAC, 1500 * time.Millisecond, 0},
		{"ffmpeg-aac.m4a", MP4, 1500 * time.Millisecond, 0}, // the edit list trims the priming
		{"ffmpeg-aac-faststart.m4a", MP4, 1500 * time.Millisecond, 0},
		// Fragmented, with no edit list: the priming samples are counted.
		{"ffmpeg-fragmented.m4a", MP4, 2200 * time.Millisecond, 1024 * time.Second / 8000},
	} {
		t.Run(tc.file, func(t *testing.T) {
			f, err := os.Open(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = f.Close() }()
			d, format, err := Duration(f)
			if err != nil {
				t.Fatal(err)
			}
			if format != tc.format {
				t.Errorf("format %q, want %q", format, tc.format)
			}
			if diff := (d - tc.want).Abs(); diff > tc.frame {
				t.Errorf("duration %v, want %v ± %v", d, tc.want, tc.frame)
			}
			t.Logf("%v", d)
		})
	}
}
