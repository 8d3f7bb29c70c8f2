package store

import (
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/internal/meter"
)

// TestRecordDimensions: a call's usage in the dimensions that are not tokens is recorded
// as it was metered, seconds in milliseconds, and its tokens are left to the caller.
func TestRecordDimensions(t *testing.T) {
	g := Generation{InputTokens: 5, OutputTokens: 6}
	g.RecordDimensions(&meter.Usage{Input: 100, OutputAudioTokens: 50, InputCharacters: 4096, Images: 2, Pages: 3,
		InputAudio: 61250 * time.Millisecond, OutputAudio: 2*time.Second + 999*time.Microsecond, OutputVideo: 8 * time.Second})
	want := Generation{InputTokens: 5, OutputTokens: 6, InputCharacters: 4096, Images: 2, Pages: 3,
		InputAudioMs: 61_250, OutputAudioMs: 2000, OutputVideoMs: 8000}
	if g.InputTokens != want.InputTokens || g.OutputTokens != want.OutputTokens || g.InputCharacters != want.InputCharacters ||
		g.Images != want.Images || g.Pages != want.Pages || g.InputAudioMs != want.InputAudioMs ||
		g.OutputAudioMs != want.OutputAudioMs || g.OutputVideoMs != want.OutputVideoMs {
		t.Fatalf("recorded %+v, want %+v", g, want)
	}
}
