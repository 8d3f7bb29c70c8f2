package store

import (
	"encoding/json"
	"testing"
)

func TestAppendJSONMatchesMarshal(t *testing.T) {
	texts := []string{"", "input", "a\"b\\c", "<tag> & co", "tab\there\n", "é 日本", "\u2028", "bad \xff", "\x7f"}
	var lines [][]CostLine
	var attempts [][]Attempt
	lines = append(lines, nil, []CostLine{})
	attempts = append(attempts, nil, []Attempt{})
	for i, s := range texts {
		lines = append(lines, []CostLine{{Dimension: s, Quantity: int64(i), UnitPriceNanos: -7, Nanos: 1 << 62}, {Dimension: "output"}, {Dimension: "image", Key: s, Quantity: 1}})
		attempts = append(attempts, []Attempt{{Provider: s, UpstreamModel: s + "m", Status: 200 + i, DurationMs: -1, Error: s, Category: s}, {Provider: "p"}})
	}
	for _, l := range lines {
		want, _ := json.Marshal(l)
		if got := AppendCostLinesJSON(nil, l); string(got) != string(want) {
			t.Errorf("cost lines: got %s want %s", got, want)
		}
	}
	for _, a := range attempts {
		want, _ := json.Marshal(a)
		if got := AppendAttemptsJSON(nil, a); string(got) != string(want) {
			t.Errorf("attempts: got %s want %s", got, want)
		}
	}
}
