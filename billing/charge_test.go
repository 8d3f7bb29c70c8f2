package billing

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

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
		Hold: &ReservationHold{id: "res_1"},
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
