package handlers

import (
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/billing"
	"github.com/modelgateway/caddy-modelgateway/internal/rawjson"
	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// meta is the reference for appendMeta: the map encoding/json turns into the same bytes.
func (c *call) metaMap() map[string]any {
	now := c.g.Now()
	m := map[string]any{
		"end_to_end_ms":       now.Sub(c.Start).Milliseconds(),
		"gateway_overhead_ms": max(0, (now.Sub(c.Start) - c.upstreamTime).Milliseconds()),
		"attempts":            c.Attempts,
	}
	if len(c.dropped) > 0 {
		m["dropped_parameters"] = c.dropped
	}
	if c.skippedFrames > 0 {
		m["skipped_frames"] = c.skippedFrames
	}
	if c.route != nil {
		m["provider"] = c.route.ProviderName
		m["upstream_model"] = c.route.UpstreamModel
	}
	if !c.FirstByte.IsZero() {
		m["latency_ms"] = c.FirstByte.Sub(c.Start).Milliseconds()
		gen := now.Sub(c.FirstByte)
		m["generation_ms"] = gen.Milliseconds()
		if secs := gen.Seconds(); secs > 0 {
			m["throughput_tps"] = float64(c.tokens().CompletionTokens()) / secs
		}
	}
	return m
}

func TestAppendJSONMatchesEncodingJSON(t *testing.T) {
	for _, s := range []string{"", "gen-01ABC", "a\"b\\c", "<tag> & co", "tab\there\n", "é ü 日本", "\u2028\u2029", "bad \xff utf8", "\x7f"} {
		want, _ := json.Marshal(s)
		if got := rawjson.AppendStringLikeMarshal(nil, s); string(got) != string(want) {
			t.Errorf("string %q: got %s want %s", s, got, want)
		}
	}
	for _, f := range []float64{0, 1, -1, 0.5, 1.0 / 3, 123456.789, 1e-7, 2.5e-9, 1e20, 1e21, 1.5e300, math.SmallestNonzeroFloat64, 7e-6} {
		want, _ := json.Marshal(f)
		if got := appendJSONFloat(nil, f); string(got) != string(want) {
			t.Errorf("float %v: got %s want %s", f, got, want)
		}
	}
	for _, lines := range [][]store.CostLine{{}, {{Dimension: "input", Quantity: 12, UnitPriceNanos: 150_000_000, Nanos: 2}}, {{Dimension: "output", Quantity: 1}, {Dimension: "request", Nanos: -3}}} {
		want, _ := json.Marshal(lines)
		if got := store.AppendCostLinesJSON(nil, nonNilLines(lines)); string(got) != string(want) {
			t.Errorf("lines: got %s want %s", got, want)
		}
	}
}

func TestAppendMetaMatchesMap(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	now := start.Add(1234 * time.Millisecond)
	g := &Gateway{Config: billing.Config{Now: func() time.Time { return now }}}
	rt := &Route{ProviderName: "open<ai>", UpstreamModel: "gpt-4o"}
	calls := []*call{
		{Charge: billing.Charge{Start: start}, g: g},
		{Charge: billing.Charge{Start: start, Attempts: []store.Attempt{}}, g: g},
		{Charge: billing.Charge{Start: start, FirstByte: start.Add(300 * time.Millisecond),
			Attempts: []store.Attempt{{Provider: "a", UpstreamModel: "m", Status: 500, DurationMs: 12, Error: "boom \"x\" <y>", Category: "server_error"},
				{Provider: "open<ai>", UpstreamModel: "gpt-4o", Status: 200, DurationMs: 800}}, Usage: providers.Usage{Output: 17, Reasoning: 3}.Metered()},
			g: g, route: rt, upstreamTime: 800 * time.Millisecond},
		{Charge: billing.Charge{Start: start, FirstByte: now}, g: g, route: rt, dropped: []string{"top_k", "seed"}, skippedFrames: 2, upstreamTime: 2 * time.Second},
	}
	for i, c := range calls {
		want, err := json.Marshal(c.metaMap())
		if err != nil {
			t.Fatal(err)
		}
		if got := c.appendMeta([]byte("x")); string(got) != "x"+string(want) {
			t.Errorf("call %d:\ngot  %s\nwant %s", i, got[1:], want)
		}
	}
}
