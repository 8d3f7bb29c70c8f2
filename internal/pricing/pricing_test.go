package pricing

import (
	"math"
	"testing"

	"github.com/modelgateway/caddy-modelgateway/providers"
)

func TestParseFormatUSD(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		err  bool
	}{
		{"0.15", 150_000_000, false},
		{"3", 3_000_000_000, false},
		{"$1.000000001", 1_000_000_001, false},
		{".5", 500_000_000, false},
		{"0.0000000001", 0, true},
		{"-1", 0, true},
		{"1e3", 0, true},
		{"", 0, true},
		{"99999999999999", 0, true},
	}
	for _, tc := range tests {
		got, err := ParseUSD(tc.in)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("ParseUSD(%q) = %d, %v", tc.in, got, err)
		}
		if !tc.err {
			back, _ := ParseUSD(FormatUSD(got))
			if back != got {
				t.Errorf("round trip of %q: %s", tc.in, FormatUSD(got))
			}
		}
	}
	if FormatUSD(-1_500_000_000) != "-1.5" || FormatUSD(0) != "0" {
		t.Fatal("format")
	}
}

func TestCost(t *testing.T) {
	p := Price{Input: 2_500_000_000, CachedInput: 1_250_000_000, CacheWrite: 3_125_000_000, Output: 10_000_000_000, Reasoning: 10_000_000_000, PerRequest: 1000}
	u := providers.Usage{Input: 1000, CacheRead: 200, CacheWrite: 100, Output: 50, Reasoning: 7}
	lines, total := Cost(u, p)
	want := map[string]int64{"input": 2_500_000, "cached_input": 250_000, "cache_write": 312_500, "output": 500_000, "reasoning": 70_000, "request": 1000}
	if len(lines) != len(want) {
		t.Fatalf("lines %+v", lines)
	}
	var sum int64
	for _, l := range lines {
		if want[l.Dimension] != l.Nanos {
			t.Errorf("%s: %d want %d", l.Dimension, l.Nanos, want[l.Dimension])
		}
		sum += l.Nanos
	}
	if sum != total {
		t.Fatalf("total %d != sum %d", total, sum)
	}
	// Rounding is upward, per line: one token at 0.15 USD/M is 150 nanos exactly; at 0.1 USD/M 100.
	if _, n := Cost(providers.Usage{Input: 1}, Price{Input: 150_000_001}); n != 151 {
		t.Fatalf("ceil: %d", n)
	}
	if _, n := Cost(providers.Usage{Input: 1 << 62}, Price{Input: 1 << 62}); n != 1<<63-1 {
		t.Fatalf("saturation: %d", n)
	}
	lines, n := Cost(u, Price{})
	if n != 0 || len(lines) != 5 {
		t.Fatalf("free route: %d %+v", n, lines)
	}
	for _, l := range lines {
		if l.Nanos != 0 {
			t.Fatalf("free line costs money: %+v", l)
		}
	}
	if got := WorstCase(p, 1000, 100); got != 3_125_000+1_000_000+1000 {
		t.Fatalf("worst case %d", got)
	}
}

func TestAppendUSD(t *testing.T) {
	for _, n := range []int64{0, 1, -1, 10, 999_999_999, 1_000_000_000, 1_500_000_000, -1_500_000_000, 123_456_789_012, 100_000_000, 1_000_000_001,
		math.MaxInt64, math.MinInt64, math.MinInt64 + 1} {
		if got, want := string(AppendUSD([]byte("x"), n)), "x"+FormatUSD(n); got != want {
			t.Errorf("AppendUSD(%d) = %s, want %s", n, got, want)
		}
	}
}
