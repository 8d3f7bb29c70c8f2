package billing

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/internal/meter"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// A charge goes into a job row and comes back the same, its hold excepted; its record
// carries what it says.
func TestChargeRoundTripAndRecord(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ch := Charge{
		GenerationID: "gen_1", WorkspaceID: "ws_1", KeyID: "key_1", Endpoint: "/videos", Model: "veo", Most: 42,
		Provider: "google", UpstreamModel: "veo-3", Attempts: []store.Attempt{{Provider: "google", Status: 200, DurationMs: 9}},
		UpstreamID: "op_1", FinishReason: "completed", Status: 200, Start: start, FirstByte: start.Add(2 * time.Second),
		Hold:   &ReservationHold{id: "res_1"},
		Routes: []RouteName{{Provider: "openai", UpstreamModel: "sora-2"}, {Provider: "google", UpstreamModel: "veo-3"}},
		Failures: []Failure{{RouteName: RouteName{Provider: "openai", UpstreamModel: "sora-2"}, Category: "rate_limited", Status: 429,
			Code: "rate_limit_exceeded", Message: "slow down", Param: "model", Retryable: true, RetryAfter: 1500 * time.Millisecond,
			PayloadPreview: `{"error":{}}`}},
		// Every dimension set, so that none is lost on the way: a usage read back is priced
		// as the one written.
		Usage: meter.Usage{Input: 1, CachedInput: 2, CacheWrite: 3, Output: 4, Reasoning: 5, InputAudioTokens: 6, OutputAudioTokens: 7,
			ImageInputTokens: 8, ImageOutputTokens: 9, InputCharacters: 10, InputAudio: 1500 * time.Millisecond, OutputAudio: 11,
			Images: 12, ImageSize: "1024x1024", ImageQuality: "high", Pages: 13, OutputVideo: 8 * time.Second, VideoResolution: "720p", Requests: 14},
		UsageKnown: true, Metered: true,
		Carried: &Carried{Usage: meter.Usage{Input: 20, Output: 21}, Lines: []store.CostLine{{Dimension: "input", Quantity: 20, UnitPriceNanos: 3, Nanos: 1}}, Nanos: 1},
	}
	b, err := json.Marshal(ch)
	if err != nil {
		t.Fatal(err)
	}
	var back Charge
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	want := ch
	want.Hold = nil
	if !reflect.DeepEqual(back, want) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", back, want)
	}
	g := ch.Record(start.Add(5*time.Second), []store.CostLine{{Dimension: "output_video_seconds", Quantity: 8, Nanos: 40}}, 40)
	if g.ID != "gen_1" || g.Provider != "google" || g.UpstreamModel != "veo-3" || g.CostNanos != 40 || len(g.CostLines) != 1 ||
		g.LatencyMs != 2000 || g.GenerationMs != 3000 || g.EndToEndMs != 5000 || !g.CreatedAt.Equal(start) {
		t.Fatalf("record %+v", g)
	}
}
