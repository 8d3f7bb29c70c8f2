package upstreamhttp

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// MaxRetryWait caps a retry delay, so that a wild value cannot park a route forever.
const MaxRetryWait = 24 * time.Hour

// RetryAfter reads retry-after-ms (milliseconds, as OpenAI and Anthropic send it) or, when
// it is absent or unreadable, Retry-After (see RetryAfterHeader), capped at MaxRetryWait.
// It is zero when neither says anything.
func RetryAfter(h http.Header, now time.Time) time.Duration {
	if h == nil {
		return 0
	}
	if v := strings.TrimSpace(h.Get("Retry-After-Ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms >= 0 && !math.IsInf(ms, 0) {
			return min(time.Duration(min(ms, float64(MaxRetryWait/time.Millisecond))*float64(time.Millisecond)), MaxRetryWait)
		}
	}
	return RetryAfterHeader(h, now)
}

// RetryAfterHeader reads Retry-After: seconds (fractions allowed) or an HTTP date, capped at
// MaxRetryWait; a date in the past, a negative or unreadable value is zero.
func RetryAfterHeader(h http.Header, now time.Time) time.Duration {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if s < 0 || math.IsNaN(s) {
			return 0
		}
		return min(time.Duration(min(s, MaxRetryWait.Seconds())*float64(time.Second)), MaxRetryWait)
	}
	if t, err := http.ParseTime(v); err == nil {
		return min(max(t.Sub(now), 0), MaxRetryWait)
	}
	return 0
}
