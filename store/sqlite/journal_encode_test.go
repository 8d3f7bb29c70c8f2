package sqlite

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/store"
)

func randomText(rng *rand.Rand) string {
	alphabet := []string{"a", "Z", " ", "\"", "\\", "\n", "\t", "<", ">", "&", "é", "\u2028", "\x01", "\xff", "日本", "/"}
	var s string
	for range rng.IntN(12) {
		s += alphabet[rng.IntN(len(alphabet))]
	}
	return s
}

// The hand-written encoders write what encoding/json reads back to the same values as
// json.Marshal's output (which also escapes <, > and &): cost lines and attempts, and
// journal records as a journalRecord.
func TestJournalEncoding(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 500 {
		g := store.Generation{
			ID: randomText(rng), WorkspaceID: randomText(rng), KeyID: randomText(rng), Endpoint: randomText(rng),
			Model: randomText(rng), Provider: randomText(rng), UpstreamModel: randomText(rng), UpstreamID: randomText(rng),
			Streamed: rng.IntN(2) == 0, Cancelled: rng.IntN(2) == 0, Status: rng.IntN(600), FinishReason: randomText(rng),
			ErrorCode: randomText(rng), ErrorMessage: randomText(rng),
			InputTokens: rng.Int64(), CacheReadTokens: rng.Int64N(100), CacheWriteTokens: -rng.Int64N(100),
			OutputTokens: rng.Int64(), ReasoningTokens: rng.Int64(), CostNanos: rng.Int64(), UnbilledNanos: rng.Int64(),
			LatencyMs: rng.Int64(), GenerationMs: rng.Int64(), EndToEndMs: rng.Int64(),
			CreatedAt: time.UnixMilli(rng.Int64N(1 << 42)).UTC(),
		}
		switch i % 3 {
		case 1:
			g.CostLines, g.Attempts = []store.CostLine{}, []store.Attempt{}
		case 2:
			for range 1 + rng.IntN(3) {
				g.CostLines = append(g.CostLines, store.CostLine{Dimension: randomText(rng), Quantity: rng.Int64(), UnitPriceNanos: rng.Int64(), Nanos: -rng.Int64()})
				g.Attempts = append(g.Attempts, store.Attempt{Provider: randomText(rng), UpstreamModel: randomText(rng), Status: rng.IntN(600),
					DurationMs: rng.Int64(), Error: randomText(rng), Category: randomText(rng)})
			}
		}
		var lines, wantLines []store.CostLine
		var attempts, wantAttempts []store.Attempt
		for _, c := range []struct {
			got, want []byte
			dst, ref  any
		}{
			{store.AppendCostLinesJSON(nil, g.CostLines), mustMarshal(t, g.CostLines), &lines, &wantLines},
			{store.AppendAttemptsJSON(nil, g.Attempts), mustMarshal(t, g.Attempts), &attempts, &wantAttempts},
		} {
			if err := json.Unmarshal(c.got, c.dst); err != nil {
				t.Fatalf("%s: %v", c.got, err)
			}
			_ = json.Unmarshal(c.want, c.ref)
			if !reflect.DeepEqual(c.dst, c.ref) {
				t.Fatalf("hand-encoded %s\njson.Marshal %s", c.got, c.want)
			}
		}
		r := &settleReq{g: &g, cost: rng.Int64(), reservationID: randomText(rng), held: rng.Int64(), release: rng.IntN(2) == 0,
			now: time.UnixMilli(rng.Int64N(1 << 42))}
		data := appendJournalRecord(nil, r)
		var rec journalRecord
		if err := json.Unmarshal(data, &rec); err != nil {
			t.Fatalf("%s: %v", data, err)
		}
		back := rec.request()
		// Strings with invalid UTF-8 come back with U+FFFD, as from json.Marshal.
		wantJSON, _ := json.Marshal(g)
		var wantG store.Generation
		_ = json.Unmarshal(wantJSON, &wantG)
		if !reflect.DeepEqual(*back.g, wantG) || back.cost != r.cost || back.held != r.held || back.release != r.release ||
			!back.now.Equal(r.now) || !back.lease || !back.deferred {
			t.Fatalf("record %s\nreads back %+v\n      want %+v", data, *back.g, wantG)
		}
		var wantRes string
		_ = json.Unmarshal(mustMarshal(t, r.reservationID), &wantRes)
		if back.reservationID != wantRes {
			t.Fatalf("reservation %q reads back %q", r.reservationID, back.reservationID)
		}
	}
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
