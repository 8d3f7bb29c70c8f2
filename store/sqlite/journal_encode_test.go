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

// A record as the first journal format wrote it (a journal left by a gateway before the
// generation's fields were listed once) reads back whole.
func TestJournalReadsTheFirstFormat(t *testing.T) {
	const rec = `{"r":"res_1","h":5,"x":true,"c":7,"n":1700000000000,"g":{"id":"gen_1","ws":"ws_1","key":"k",` +
		`"ep":"/chat/completions","m":"m","p":"p","um":"um","uid":"uid","fr":"stop","ec":"e","em":"msg","st":true,"cx":false,` +
		`"s":200,"it":1,"cr":2,"cw":3,"ot":4,"rt":5,"cn":6,"ub":7,"lat":8,"gms":9,"e2e":10,"ca":1700000000123,` +
		`"cl":[{"dimension":"input","quantity":1,"unit_price_nanos":2,"nanos":3}],"at":null}}`
	var r journalRecord
	if err := json.Unmarshal([]byte(rec), &r); err != nil {
		t.Fatal(err)
	}
	req := r.request()
	want := store.Generation{ID: "gen_1", WorkspaceID: "ws_1", KeyID: "k", Endpoint: "/chat/completions", Model: "m", Provider: "p",
		UpstreamModel: "um", UpstreamID: "uid", FinishReason: "stop", ErrorCode: "e", ErrorMessage: "msg", Streamed: true, Status: 200,
		InputTokens: 1, CacheReadTokens: 2, CacheWriteTokens: 3, OutputTokens: 4, ReasoningTokens: 5, CostNanos: 6, UnbilledNanos: 7,
		LatencyMs: 8, GenerationMs: 9, EndToEndMs: 10, CreatedAt: time.UnixMilli(1700000000123).UTC(),
		CostLines: []store.CostLine{{Dimension: "input", Quantity: 1, UnitPriceNanos: 2, Nanos: 3}}}
	if !reflect.DeepEqual(*req.g, want) || req.reservationID != "res_1" || req.held != 5 || !req.release || req.cost != 7 ||
		!req.now.Equal(time.UnixMilli(1700000000000)) {
		t.Fatalf("read %+v\nwant %+v", *req.g, want)
	}
	// Only the fields of that format have short keys: a field added since is under its column.
	columns := map[string]bool{}
	for _, f := range store.GenerationFields {
		columns[f.Column] = true
	}
	for col := range journalShortKeys {
		if !columns[col] {
			t.Errorf("journal key for %q, which is no column", col)
		}
	}
}
