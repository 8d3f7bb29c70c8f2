package pricing

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/modelgateway/caddy-modelgateway/internal/meter"
)

// ParseUSD reads a decimal dollar amount ("0.15", "3", "1e-3" is refused) into nanodollars
// exactly, without floating point. At most nine decimals; negative amounts are refused.
func ParseUSD(s string) (int64, error) {
	return parseBillionths(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(s), "$")), "amount")
}

// ParseSeconds reads a decimal number of seconds ("12.5") exactly, to the nanosecond.
func ParseSeconds(s string) (time.Duration, error) {
	n, err := parseBillionths(strings.TrimSpace(s), "duration")
	return time.Duration(n), err
}

// parseBillionths reads a non-negative decimal with at most nine decimals as a whole number
// of billionths, without floating point; what names the value in errors.
func parseBillionths(s, what string) (int64, error) {
	if s == "" {
		return 0, fmt.Errorf("empty %s", what)
	}
	whole, frac, _ := strings.Cut(s, ".")
	if whole == "" {
		whole = "0"
	}
	if len(frac) > 9 {
		return 0, fmt.Errorf("%s %q has more than 9 decimals", what, s)
	}
	for _, part := range []string{whole, frac} {
		for _, c := range part {
			if c < '0' || c > '9' {
				return 0, fmt.Errorf("%s %q is not a non-negative decimal number", what, s)
			}
		}
	}
	w, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || w > (1<<63-1)/billion-1 {
		return 0, fmt.Errorf("%s %q is too large", what, s)
	}
	var f int64
	if frac != "" {
		f, _ = strconv.ParseInt(frac+strings.Repeat("0", 9-len(frac)), 10, 64)
	}
	return w*billion + f, nil
}

// billion is a nanodollar's and a nanosecond's inverse.
const billion = 1_000_000_000

// FormatUSD writes nanodollars as an exact decimal dollar amount without trailing zeros.
func FormatUSD(nanos int64) string {
	sign := ""
	if nanos < 0 {
		sign = "-"
		nanos = -nanos
	}
	whole, frac := nanos/meter.NanosPerUSD, nanos%meter.NanosPerUSD
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
	whole, frac := nanos/meter.NanosPerUSD, nanos%meter.NanosPerUSD
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
