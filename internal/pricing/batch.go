package pricing

import "fmt"

// DefaultBatchDiscountPercent is what OpenAI, Anthropic and Gemini take off their
// interactive prices for a request run in one of their batches.
const DefaultBatchDiscountPercent = 50

// WithBatchDiscount returns p with a batch discount of percent (0 to 100): Batch prices each
// dimension, keyed ones included, percent below p, rounded up to the nanodollar so that a
// batch is never billed less than the listed price less the discount.
func (p Price) WithBatchDiscount(percent int64) (Price, error) {
	if percent < 0 || percent > 100 {
		return p, fmt.Errorf("batch discount %d%%: want 0 to 100", percent)
	}
	p.batchDiscount = percent
	return p, nil
}

// BatchDiscount is the percent taken off p for a request run in an upstream's batch
// (WithBatchDiscount); 0 when none is set.
func (p Price) BatchDiscount() int64 { return p.batchDiscount }

// Batch is the price of a request run in an upstream's native batch (OpenAI's Batch API,
// Anthropic's Message Batches), which the upstream bills at its batch prices: p less its
// batch discount. With no discount it is p: a batch the gateway runs itself, request by
// request, costs what interactive requests cost, and is priced with p, not Batch. The
// price returned has no batch discount of its own, so that it is never discounted twice.
func (p Price) Batch() Price {
	d := p.batchDiscount
	p.batchDiscount = 0
	if d == 0 {
		return p
	}
	keep := 100 - d
	for i := range numDimensions {
		if f := p.field(i); f != nil {
			*f = mulDivCeil(*f, keep, 100)
		}
	}
	if p.keyed != nil {
		k := &keyed{images: make([]ImagePrice, len(p.keyed.images)), video: make([]VideoPrice, len(p.keyed.video))}
		for i, ip := range p.keyed.images {
			ip.Nanos = mulDivCeil(ip.Nanos, keep, 100)
			k.images[i] = ip
		}
		for i, vp := range p.keyed.video {
			vp.Nanos = mulDivCeil(vp.Nanos, keep, 100)
			k.video[i] = vp
		}
		p.keyed = k
	}
	return p
}
