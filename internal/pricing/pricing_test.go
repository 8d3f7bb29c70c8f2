package pricing

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
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
	u := Usage{Input: 1000, CachedInput: 200, CacheWrite: 100, Output: 50, Reasoning: 7}
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
	if _, n := Cost(Usage{Input: 1}, Price{Input: 150_000_001}); n != 151 {
		t.Fatalf("ceil: %d", n)
	}
	if _, n := Cost(Usage{Input: 1 << 62}, Price{Input: 1 << 62}); n != 1<<63-1 {
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

// usd is a price in nanodollars, for tables.
func usd(t *testing.T, s string) int64 {
	t.Helper()
	n, err := ParseUSD(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestCostByDimension prices each dimension alone: its line, its rounding and the request
// line that every call carries where the route charges a fee.
func TestCostByDimension(t *testing.T) {
	base := Price{
		Input: usd(t, "0.15"), CachedInput: usd(t, "0.075"), CacheWrite: usd(t, "0.1875"), Output: usd(t, "0.60"), Reasoning: usd(t, "1.2"),
		InputAudioTokens: usd(t, "40"), OutputAudioTokens: usd(t, "80"), ImageInputTokens: usd(t, "10"), ImageOutputTokens: usd(t, "40"),
		InputCharacters: usd(t, "15"), InputAudioSeconds: usd(t, "0.0001"), OutputAudioSeconds: usd(t, "0.0002"), Page: usd(t, "0.001"),
	}
	price, err := base.WithImages(
		ImagePrice{Size: "1024x1024", Quality: "high", Nanos: usd(t, "0.167")},
		ImagePrice{Size: "1024x1024", Nanos: usd(t, "0.04")},
		ImagePrice{Quality: "low", Nanos: usd(t, "0.011")},
	)
	if err != nil {
		t.Fatal(err)
	}
	if price, err = price.WithVideoSeconds(VideoPrice{Resolution: "720p", Nanos: usd(t, "0.10")}, VideoPrice{Resolution: "1080P", Nanos: usd(t, "0.30")}); err != nil {
		t.Fatal(err)
	}
	withFee := price
	withFee.PerRequest = usd(t, "0.001")

	tests := []struct {
		name  string
		usage Usage
		price Price
		dim   string
		qty   int64
		unit  int64
		nanos int64
	}{
		{"input", Usage{Input: 1000}, price, DimInput, 1000, 150_000_000, 150_000},
		{"input rounds up", Usage{Input: 1}, Price{Input: 150_000_001}, DimInput, 1, 150_000_001, 151},
		{"cached input", Usage{CachedInput: 1000}, price, DimCachedInput, 1000, 75_000_000, 75_000},
		{"cache write", Usage{CacheWrite: 3}, price, DimCacheWrite, 3, 187_500_000, 563},
		{"output", Usage{Output: 2}, price, DimOutput, 2, 600_000_000, 1200},
		{"reasoning", Usage{Reasoning: 7}, price, DimReasoning, 7, 1_200_000_000, 8400},
		{"input audio tokens", Usage{InputAudioTokens: 1234}, price, DimInputAudioTokens, 1234, 40_000_000_000, 49_360_000},
		{"output audio tokens", Usage{OutputAudioTokens: 3}, price, DimOutputAudioTokens, 3, 80_000_000_000, 240_000},
		{"image input tokens", Usage{ImageInputTokens: 1}, price, DimImageInputTokens, 1, 10_000_000_000, 10_000},
		{"image output tokens", Usage{ImageOutputTokens: 4160}, price, DimImageOutputTokens, 4160, 40_000_000_000, 166_400_000},
		{"input characters", Usage{InputCharacters: 4096}, price, DimInputCharacters, 4096, 15_000_000_000, 61_440_000},
		{"input characters round up", Usage{InputCharacters: 1}, Price{InputCharacters: 1}, DimInputCharacters, 1, 1, 1},
		{"input audio seconds", Usage{InputAudio: 90 * time.Second}, price, DimInputAudioSeconds, 90, 100_000, 9_000_000},
		{"a started second counts", Usage{InputAudio: 12*time.Second + time.Millisecond}, price, DimInputAudioSeconds, 13, 100_000, 1_300_000},
		{"output audio seconds", Usage{OutputAudio: 2500 * time.Millisecond}, price, DimOutputAudioSeconds, 3, 200_000, 600_000},
		{"image of size and quality", Usage{Images: 2, ImageSize: "1024x1024", ImageQuality: "high"}, price, DimImage, 2, 167_000_000, 334_000_000},
		{"image of size, any quality", Usage{Images: 1, ImageSize: "1024x1024", ImageQuality: "medium"}, price, DimImage, 1, 40_000_000, 40_000_000},
		{"size outranks quality", Usage{Images: 1, ImageSize: "1024X1024", ImageQuality: "low"}, price, DimImage, 1, 40_000_000, 40_000_000},
		{"image of quality, any size", Usage{Images: 3, ImageSize: "1536x1024", ImageQuality: "LOW"}, price, DimImage, 3, 11_000_000, 33_000_000},
		{"page", Usage{Pages: 12}, price, DimPage, 12, 1_000_000, 12_000_000},
		{"output video seconds", Usage{OutputVideo: 8 * time.Second, VideoResolution: "720p"}, price, DimOutputVideoSeconds, 8, 100_000_000, 800_000_000},
		{"resolution without case", Usage{OutputVideo: 4 * time.Second, VideoResolution: "1080p"}, price, DimOutputVideoSeconds, 4, 300_000_000, 1_200_000_000},
		{"request", Usage{}, withFee, DimRequest, 1, 1_000_000, 1_000_000},
		{"requests", Usage{Requests: 3}, withFee, DimRequest, 3, 1_000_000, 3_000_000},
		{"images where the route prices none", Usage{Images: 1, ImageSize: "1024x1024"}, base, DimImage, 1, 0, 0},
		{"video where the route prices none", Usage{OutputVideo: time.Second}, base, DimOutputVideoSeconds, 1, 0, 0},
	}
	// The key each keyed line priced, as the usage gave it.
	keys := map[string]string{
		"image of size and quality": "1024x1024/high", "image of size, any quality": "1024x1024/medium",
		"size outranks quality": "1024X1024/low", "image of quality, any size": "1536x1024/LOW",
		"output video seconds": "720p", "resolution without case": "1080p", "images where the route prices none": "1024x1024",
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lines, total, err := tc.price.Cost(tc.usage)
			if err != nil {
				t.Fatal(err)
			}
			want := CostLine{Dimension: tc.dim, Key: keys[tc.name], Quantity: tc.qty, UnitPriceNanos: tc.unit, Nanos: tc.nanos}
			if len(lines) != 1 || lines[0] != want || total != tc.nanos {
				t.Fatalf("lines %+v total %d, want %+v", lines, total, want)
			}
			if tc.price.PerRequest != 0 || tc.dim == DimRequest {
				return
			}
			fee := tc.price
			fee.PerRequest = 1000
			lines, total, _ = fee.Cost(tc.usage)
			if len(lines) != 2 || lines[1].Dimension != DimRequest || total != tc.nanos+1000 {
				t.Fatalf("with a fee: %+v %d", lines, total)
			}
		})
	}
}

// TestCostAllDimensions: a usage of every dimension has one line each, in the order of
// Dimensions, and the total is their sum.
func TestCostAllDimensions(t *testing.T) {
	p := Price{PerRequest: 1}
	for i, d := range Dimensions() {
		if !d.Keyed {
			if err := p.SetPerUnit(d.Name, int64(i+1)*1000); err != nil {
				t.Fatal(err)
			}
			if p.PerUnit(d.Name) != int64(i+1)*1000 {
				t.Fatalf("%s: PerUnit %d", d.Name, p.PerUnit(d.Name))
			}
		} else if err := p.SetPerUnit(d.Name, 1); err == nil {
			t.Fatalf("%s is keyed: SetPerUnit took it", d.Name)
		}
	}
	p, _ = p.WithImages(ImagePrice{Nanos: 5})
	p, _ = p.WithVideoSeconds(VideoPrice{Nanos: 7})
	u := Usage{Input: 1, CachedInput: 1, CacheWrite: 1, Output: 1, Reasoning: 1, InputAudioTokens: 1, OutputAudioTokens: 1,
		ImageInputTokens: 1, ImageOutputTokens: 1, InputCharacters: 1, InputAudio: 1, OutputAudio: 1, Images: 1, Pages: 1, OutputVideo: 1, Requests: 1}
	lines, total, err := p.Cost(u)
	if err != nil {
		t.Fatal(err)
	}
	dims := Dimensions()
	if len(lines) != len(dims) {
		t.Fatalf("%d lines for %d dimensions: %+v", len(lines), len(dims), lines)
	}
	var sum int64
	seen := map[string]bool{}
	for i, l := range lines {
		if l.Dimension != dims[i].Name || l.Quantity != 1 || l.Nanos <= 0 || seen[l.Dimension] {
			t.Errorf("line %d: %+v, want %s", i, l, dims[i].Name)
		}
		seen[l.Dimension] = true
		sum += l.Nanos
	}
	if sum != total {
		t.Fatalf("total %d, sum %d", total, sum)
	}
	if err := p.SetPerUnit("tokens", 1); err == nil {
		t.Fatal("SetPerUnit took an unknown dimension")
	}
	if err := p.SetPerUnit(DimInput, -1); err == nil {
		t.Fatal("SetPerUnit took a negative price")
	}
}

// TestCostUnpriced: images or video of a key the route does not price are refused, never
// priced 0; so are "auto" and a missing size where no price stands for any size.
func TestCostUnpriced(t *testing.T) {
	p, err := Price{Input: 1}.WithImages(ImagePrice{Size: "1024x1024", Quality: "standard", Nanos: 40_000_000}, ImagePrice{Size: "1024x1792", Nanos: 80_000_000})
	if err != nil {
		t.Fatal(err)
	}
	p, _ = p.WithVideoSeconds(VideoPrice{Resolution: "720p", Nanos: 1})
	// The usage's key as a cost line records it.
	lineKeys := map[string]string{"other size": "512x512/standard", "other quality": "1024x1024/hd", "auto size": "auto/standard",
		"no size": "standard", "other resolution": "1080p", "no resolution": ""}
	for _, tc := range []struct {
		name string
		u    Usage
		dim  string
		key  string
	}{
		{"other size", Usage{Images: 1, ImageSize: "512x512", ImageQuality: "standard"}, DimImage, "size 512x512, quality standard"},
		{"other quality", Usage{Images: 1, ImageSize: "1024x1024", ImageQuality: "hd"}, DimImage, "size 1024x1024, quality hd"},
		{"auto size", Usage{Images: 1, ImageSize: "auto", ImageQuality: "standard"}, DimImage, "size auto, quality standard"},
		{"no size", Usage{Images: 1, ImageQuality: "standard"}, DimImage, "size any, quality standard"},
		{"other resolution", Usage{OutputVideo: time.Second, VideoResolution: "1080p"}, DimOutputVideoSeconds, "resolution 1080p"},
		{"no resolution", Usage{OutputVideo: time.Second}, DimOutputVideoSeconds, "resolution any"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.u.Input = 10
			lines, total, err := p.Cost(tc.u)
			var ue *UnpricedError
			if !errors.As(err, &ue) || ue.Dimension != tc.dim || ue.Key != tc.key || len(ue.Priced) == 0 || lines != nil || total != 0 {
				t.Fatalf("Cost = %+v, %d, %v", lines, total, err)
			}
			if ue.LineKey != lineKeys[tc.name] {
				t.Errorf("line key %q, want %q", ue.LineKey, lineKeys[tc.name])
			}
		})
	}
	// No image, no check: a text call on the same route is priced.
	if _, total, err := p.Cost(Usage{Input: 10, ImageSize: "512x512"}); err != nil || total != 1 {
		t.Fatalf("no images: %d %v", total, err)
	}
	if _, _, err := p.Cost(Usage{Images: 1, ImageSize: "1024x1792", ImageQuality: "hd"}); err != nil {
		t.Fatalf("a size at any quality: %v", err)
	}
}

func TestKeyedPriceRules(t *testing.T) {
	for _, tc := range []struct {
		name   string
		images []ImagePrice
		video  []VideoPrice
		want   string
	}{
		{name: "auto size", images: []ImagePrice{{Size: "auto", Nanos: 1}}, want: `size "auto"`},
		{name: "auto quality", images: []ImagePrice{{Size: "1024x1024", Quality: "Auto", Nanos: 1}}, want: `quality "Auto"`},
		{name: "spaces", images: []ImagePrice{{Size: "1024 x 1024", Nanos: 1}}, want: "is not a size"},
		{name: "twice", images: []ImagePrice{{Size: "1024x1024", Quality: "hd", Nanos: 1}, {Size: "1024X1024", Quality: "HD", Nanos: 2}}, want: "priced twice"},
		{name: "any twice", images: []ImagePrice{{Nanos: 1}, {Nanos: 2}}, want: "size any, quality any is priced twice"},
		{name: "negative", images: []ImagePrice{{Nanos: -1}}, want: "negative"},
		{name: "auto resolution", video: []VideoPrice{{Resolution: "auto", Nanos: 1}}, want: `resolution "auto"`},
		{name: "resolution twice", video: []VideoPrice{{Resolution: "720p", Nanos: 1}, {Resolution: "720P", Nanos: 1}}, want: "priced twice"},
		{name: "negative video", video: []VideoPrice{{Nanos: -5}}, want: "negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if tc.images != nil {
				_, err = Price{}.WithImages(tc.images...)
			} else {
				_, err = Price{}.WithVideoSeconds(tc.video...)
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}

func TestPriceZeroAndEqual(t *testing.T) {
	if !(Price{}).IsZero() || (Price{Page: 1}).IsZero() {
		t.Fatal("IsZero of scalars")
	}
	zeroImages, _ := Price{}.WithImages(ImagePrice{Size: "1024x1024", Nanos: 0})
	if !zeroImages.IsZero() {
		t.Fatal("a price of zero per image is free")
	}
	a, _ := Price{Input: 1}.WithImages(ImagePrice{Size: "1024x1024", Nanos: 3})
	b, _ := Price{Input: 1}.WithImages(ImagePrice{Size: "1024x1024", Nanos: 3})
	if a.IsZero() || !a.Equal(b) || a.Equal(Price{Input: 1}) {
		t.Fatal("Equal of keyed prices")
	}
	// A price's copies share its keyed prices, which With* leave as they were.
	c, _ := a.WithVideoSeconds(VideoPrice{Nanos: 1})
	if c.Equal(a) || len(a.VideoSeconds()) != 0 || len(c.Images()) != 1 || c.Images()[0] != a.Images()[0] {
		t.Fatalf("With* changed the original: %+v %+v", a.VideoSeconds(), c.Images())
	}
	a.Images()[0].Nanos = 100
	if a.Images()[0].Nanos != 3 {
		t.Fatal("Images hands out the price's own list")
	}
}

// TestTokenCostAllocations: pricing a text call makes its cost lines and nothing else, and
// the worst case of a reservation nothing.
func TestTokenCostAllocations(t *testing.T) {
	p := Price{Input: 150_000_000, Output: 600_000_000, PerRequest: 1}
	u := Usage{Input: 1200, CachedInput: 100, Output: 300}
	if n := testing.AllocsPerRun(100, func() { _, _ = Cost(u, p) }); n != 1 {
		t.Fatalf("%.0f allocations to price a text call, want 1 (its lines)", n)
	}
	if n := testing.AllocsPerRun(100, func() { _ = WorstCase(p, 1000, 100) }); n != 0 {
		t.Fatalf("%.0f allocations for a worst case, want none", n)
	}
	// What a request's path reads of a text route's price costs nothing either.
	if n := testing.AllocsPerRun(100, func() {
		for _, d := range Dimensions() {
			_ = p.PerUnit(d.Name)
		}
		_, _ = p.Images(), p.VideoSeconds()
	}); n != 0 {
		t.Fatalf("%.0f allocations to read a text route's prices, want none", n)
	}
	lines, total := Cost(u, p)
	lines2, total2, err := p.Cost(u)
	if err != nil || total != total2 || !slices.Equal(lines, lines2) || lines[1].Dimension != DimCachedInput {
		t.Fatalf("Cost and Price.Cost differ: %+v %+v", lines, lines2)
	}
}

func TestParseSeconds(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		err  bool
	}{
		{"12.5", 12500 * time.Millisecond, false},
		{"0.000000001", 1, false},
		{"3", 3 * time.Second, false},
		{"1e3", 0, true},
		{"-1", 0, true},
		{"", 0, true},
		{"0.0000000001", 0, true},
	} {
		got, err := ParseSeconds(tc.in)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("ParseSeconds(%q) = %v, %v", tc.in, got, err)
		}
	}
}
