// Package pricing turns token usage into money: integer nanodollars, one cost line per
// priced dimension. The same arithmetic bills requests and answers price calculations.
package pricing

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"

	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// Price is what a route charges, in nanodollars per million tokens (per request for
// PerRequest). Unset dimensions are resolved by Normalize.
type Price struct {
	Input       int64
	CachedInput int64
	CacheWrite  int64
	Output      int64
	Reasoning   int64
	PerRequest  int64
}

// IsZero tells whether nothing about the route costs money.
func (p Price) IsZero() bool { return p == Price{} }

// Dimension names of cost lines.
const (
	DimInput       = "input"
	DimCachedInput = "cached_input"
	DimCacheWrite  = "cache_write"
	DimOutput      = "output"
	DimReasoning   = "reasoning"
	DimRequest     = "request"
)

const perMillion = 1_000_000

// mulDivCeil returns ceil(a*b/c) for non-negative values without overflowing the product.
func mulDivCeil(a, b, c int64) int64 {
	if a <= 0 || b <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		// The quotient would not fit: saturate, the caller's reservation will refuse it.
		return 1<<63 - 1
	}
	q, r := bits.Div64(hi, lo, uint64(c))
	if r != 0 {
		q++
	}
	if q > 1<<63-1 {
		return 1<<63 - 1
	}
	return int64(q)
}

func addSat(a, b int64) int64 {
	if s := a + b; s >= a {
		return s
	}
	return 1<<63 - 1
}

// Cost prices usage: one line per dimension with a non-zero quantity (and the per-request
// fee when there is one). Each line is rounded up to the nanodollar, so the wallet is never
// charged less than the listed prices.
func Cost(u providers.Usage, p Price) ([]store.CostLine, int64) {
	// Sized to the lines there will be (usually input and output): the lines go into the
	// generation record and are made on every request.
	n := 0
	for _, q := range [...]int64{u.Input, u.CacheRead, u.CacheWrite, u.Output, u.Reasoning, p.PerRequest} {
		if q > 0 {
			n++
		}
	}
	lines := make([]store.CostLine, 0, n)
	var total int64
	add := func(dim string, qty, unit int64) {
		if qty <= 0 {
			return
		}
		n := mulDivCeil(qty, unit, perMillion)
		lines = append(lines, store.CostLine{Dimension: dim, Quantity: qty, UnitPriceNanos: unit, Nanos: n})
		total = addSat(total, n)
	}
	add(DimInput, u.Input, p.Input)
	add(DimCachedInput, u.CacheRead, p.CachedInput)
	add(DimCacheWrite, u.CacheWrite, p.CacheWrite)
	add(DimOutput, u.Output, p.Output)
	add(DimReasoning, u.Reasoning, p.Reasoning)
	if p.PerRequest > 0 {
		lines = append(lines, store.CostLine{Dimension: DimRequest, Quantity: 1, UnitPriceNanos: p.PerRequest, Nanos: p.PerRequest})
		total = addSat(total, p.PerRequest)
	}
	return lines, total
}

// WorstCase is the most a request can cost: every prompt token at the dearest input rate
// plus maxOutput tokens at the dearest output rate plus the request fee.
func WorstCase(p Price, promptTokens, maxOutput int64) int64 {
	in := max(p.Input, p.CachedInput, p.CacheWrite)
	out := max(p.Output, p.Reasoning)
	return addSat(addSat(mulDivCeil(promptTokens, in, perMillion), mulDivCeil(maxOutput, out, perMillion)), p.PerRequest)
}

// ParseUSD reads a decimal dollar amount ("0.15", "3", "1e-3" is refused) into nanodollars
// exactly, without floating point. At most nine decimals; negative amounts are refused.
func ParseUSD(s string) (int64, error) {
	s = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(s), "$"))
	if s == "" {
		return 0, errors.New("empty amount")
	}
	whole, frac, _ := strings.Cut(s, ".")
	if whole == "" {
		whole = "0"
	}
	if len(frac) > 9 {
		return 0, fmt.Errorf("amount %q has more than 9 decimals", s)
	}
	for _, part := range []string{whole, frac} {
		for _, c := range part {
			if c < '0' || c > '9' {
				return 0, fmt.Errorf("amount %q is not a non-negative decimal number", s)
			}
		}
	}
	w, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || w > (1<<63-1)/store.NanosPerUSD-1 {
		return 0, fmt.Errorf("amount %q is too large", s)
	}
	var f int64
	if frac != "" {
		f, _ = strconv.ParseInt(frac+strings.Repeat("0", 9-len(frac)), 10, 64)
	}
	return w*store.NanosPerUSD + f, nil
}

// FormatUSD writes nanodollars as an exact decimal dollar amount without trailing zeros.
func FormatUSD(nanos int64) string {
	sign := ""
	if nanos < 0 {
		sign = "-"
		nanos = -nanos
	}
	whole, frac := nanos/store.NanosPerUSD, nanos%store.NanosPerUSD
	if frac == 0 {
		return sign + strconv.FormatInt(whole, 10)
	}
	f := strings.TrimRight(fmt.Sprintf("%09d", frac), "0")
	return sign + strconv.FormatInt(whole, 10) + "." + f
}

// AppendUSD appends FormatUSD(nanos) to b without allocating a string.
func AppendUSD(b []byte, nanos int64) []byte {
	if nanos == math.MinInt64 {
		return append(b, FormatUSD(nanos)...)
	}
	if nanos < 0 {
		b = append(b, '-')
		nanos = -nanos
	}
	whole, frac := nanos/store.NanosPerUSD, nanos%store.NanosPerUSD
	b = strconv.AppendInt(b, whole, 10)
	if frac == 0 {
		return b
	}
	var digits [9]byte
	for i := len(digits) - 1; i >= 0; i-- {
		digits[i] = byte('0' + frac%10)
		frac /= 10
	}
	n := len(digits)
	for digits[n-1] == '0' {
		n--
	}
	b = append(b, '.')
	return append(b, digits[:n]...)
}
