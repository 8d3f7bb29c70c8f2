package pricing

import (
	"strings"
	"testing"
)

func TestBatchPrice(t *testing.T) {
	usd := func(s string) int64 {
		n, err := ParseUSD(s)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	base := Price{Input: usd("2.50"), CachedInput: usd("1.25"), Output: usd("10"), Reasoning: usd("10"), PerRequest: 3}
	base, err := base.WithImages(ImagePrice{Size: "1024x1024", Nanos: usd("0.04")}, ImagePrice{Nanos: 7})
	if err != nil {
		t.Fatal(err)
	}
	if base, err = base.WithVideoSeconds(VideoPrice{Resolution: "720p", Nanos: usd("0.10")}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		percent int64
		want    Price
		images  []int64
		video   []int64
	}{
		{name: "none", percent: 0, want: Price{Input: usd("2.50"), CachedInput: usd("1.25"), Output: usd("10"), Reasoning: usd("10"), PerRequest: 3},
			images: []int64{usd("0.04"), 7}, video: []int64{usd("0.10")}},
		// 3 and 7 nanodollars at half price round up: never billed below the discount.
		{name: "half", percent: 50, want: Price{Input: usd("1.25"), CachedInput: usd("0.625"), Output: usd("5"), Reasoning: usd("5"), PerRequest: 2},
			images: []int64{usd("0.02"), 4}, video: []int64{usd("0.05")}},
		{name: "quarter off", percent: 25, want: Price{Input: usd("1.875"), CachedInput: usd("0.9375"), Output: usd("7.5"), Reasoning: usd("7.5"), PerRequest: 3},
			images: []int64{usd("0.03"), 6}, video: []int64{usd("0.075")}},
		{name: "free", percent: 100, want: Price{}, images: []int64{0, 0}, video: []int64{0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := base.WithBatchDiscount(tc.percent)
			if err != nil {
				t.Fatal(err)
			}
			if p.BatchDiscount() != tc.percent {
				t.Fatalf("BatchDiscount %d, want %d", p.BatchDiscount(), tc.percent)
			}
			b := p.Batch()
			scalars := b
			scalars.keyed = nil
			if scalars != tc.want {
				t.Fatalf("batch price %+v, want %+v", scalars, tc.want)
			}
			for i, ip := range b.Images() {
				if ip.Nanos != tc.images[i] || ip.Size != base.Images()[i].Size {
					t.Errorf("image price %d: %+v, want %d", i, ip, tc.images[i])
				}
			}
			for i, vp := range b.VideoSeconds() {
				if vp.Nanos != tc.video[i] || vp.Resolution != "720p" {
					t.Errorf("video price %d: %+v, want %d", i, vp, tc.video[i])
				}
			}
			// The batch price is not discounted again, and the interactive one is unchanged.
			if b.BatchDiscount() != 0 || !b.Batch().Equal(b) {
				t.Fatal("a batch price is discounted again")
			}
			if base.Images()[0].Nanos != usd("0.04") || p.Input != usd("2.50") {
				t.Fatal("Batch changed the interactive price")
			}
		})
	}
}

// TestBatchCostIsDiscounted: a usage priced at the batch price costs the interactive cost
// less the discount, line by line.
func TestBatchCostIsDiscounted(t *testing.T) {
	p, err := Price{Input: 3_000_000_000, Output: 15_000_000_000}.WithBatchDiscount(50)
	if err != nil {
		t.Fatal(err)
	}
	u := Usage{Input: 1_000_000, Output: 200_000}
	_, full := Cost(u, p)
	lines, half := Cost(u, p.Batch())
	if full != 6_000_000_000 || half != 3_000_000_000 || len(lines) != 2 || lines[1].UnitPriceNanos != 7_500_000_000 {
		t.Fatalf("interactive %d, batch %d %+v", full, half, lines)
	}
}

func TestBatchDiscountRules(t *testing.T) {
	for _, percent := range []int64{-1, 101} {
		if _, err := (Price{Input: 1}).WithBatchDiscount(percent); err == nil || !strings.Contains(err.Error(), "want 0 to 100") {
			t.Errorf("discount %d: error %v", percent, err)
		}
	}
	discounted, _ := Price{Input: 1}.WithBatchDiscount(50)
	if discounted.Equal(Price{Input: 1}) {
		t.Error("prices with different batch prices are Equal")
	}
	free, _ := Price{}.WithBatchDiscount(50)
	if !free.IsZero() {
		t.Error("a free price with a batch discount is not free")
	}
}
