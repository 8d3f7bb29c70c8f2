package handlers

import (
	"encoding/json"
	"math"
	"strconv"
	"time"

	"github.com/modelgateway/caddy-modelgateway/store"
)

// The gateway's own JSON additions (cost fields, meta) are appended by hand, byte for byte
// what encoding/json gives for them, without reflection on the hot path.

// appendJSONString appends s as encoding/json quotes it.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			// Escapes, HTML-safe characters and UTF-8: leave them to encoding/json.
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// appendJSONFloat appends a finite f as encoding/json formats a float64.
func appendJSONFloat(b []byte, f float64) []byte {
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// Clean up e-09 to e-9, as encoding/json does.
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

func appendKey(b []byte, comma bool, key string) []byte {
	if comma {
		b = append(b, ',')
	}
	b = append(b, '"')
	b = append(b, key...)
	return append(b, '"', ':')
}

// appendCostLines appends lines as a JSON array ([] for none).
func appendCostLines(b []byte, lines []store.CostLine) []byte {
	b = append(b, '[')
	for i, l := range lines {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendKey(append(b, '{'), false, "dimension")
		b = appendJSONString(b, l.Dimension)
		b = strconv.AppendInt(appendKey(b, true, "quantity"), l.Quantity, 10)
		b = strconv.AppendInt(appendKey(b, true, "unit_price_nanos"), l.UnitPriceNanos, 10)
		b = strconv.AppendInt(appendKey(b, true, "nanos"), l.Nanos, 10)
		b = append(b, '}')
	}
	return append(b, ']')
}

// appendAttempts appends attempts as a JSON array (null for a nil slice).
func appendAttempts(b []byte, attempts []store.Attempt) []byte {
	if attempts == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, a := range attempts {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(appendKey(append(b, '{'), false, "provider"), a.Provider)
		b = appendJSONString(appendKey(b, true, "upstream_model"), a.UpstreamModel)
		b = strconv.AppendInt(appendKey(b, true, "status"), int64(a.Status), 10)
		b = strconv.AppendInt(appendKey(b, true, "duration_ms"), a.DurationMs, 10)
		if a.Error != "" {
			b = appendJSONString(appendKey(b, true, "error"), a.Error)
		}
		if a.Category != "" {
			b = appendJSONString(appendKey(b, true, "category"), a.Category)
		}
		b = append(b, '}')
	}
	return append(b, ']')
}

// appendMeta appends the timing block returned when the request asks for "meta": true, its
// keys in the sorted order encoding/json gives a map.
func (c *call) appendMeta(b []byte) []byte {
	now := c.g.Now()
	b = appendAttempts(appendKey(append(b, '{'), false, "attempts"), c.attempts)
	if len(c.dropped) > 0 {
		b = appendKey(b, true, "dropped_parameters")
		for i, d := range c.dropped {
			if i == 0 {
				b = append(b, '[')
			} else {
				b = append(b, ',')
			}
			b = appendJSONString(b, d)
		}
		b = append(b, ']')
	}
	b = strconv.AppendInt(appendKey(b, true, "end_to_end_ms"), now.Sub(c.start).Milliseconds(), 10)
	b = strconv.AppendInt(appendKey(b, true, "gateway_overhead_ms"), max(0, (now.Sub(c.start)-c.upstreamTime).Milliseconds()), 10)
	var gen time.Duration
	if !c.firstByte.IsZero() {
		gen = now.Sub(c.firstByte)
		b = strconv.AppendInt(appendKey(b, true, "generation_ms"), gen.Milliseconds(), 10)
		b = strconv.AppendInt(appendKey(b, true, "latency_ms"), c.firstByte.Sub(c.start).Milliseconds(), 10)
	}
	if c.route != nil {
		b = appendJSONString(appendKey(b, true, "provider"), c.route.ProviderName)
	}
	if c.skippedFrames > 0 {
		b = strconv.AppendInt(appendKey(b, true, "skipped_frames"), int64(c.skippedFrames), 10)
	}
	if !c.firstByte.IsZero() {
		if secs := gen.Seconds(); secs > 0 {
			b = appendJSONFloat(appendKey(b, true, "throughput_tps"), float64(c.usage.CompletionTokens())/secs)
		}
	}
	if c.route != nil {
		b = appendJSONString(appendKey(b, true, "upstream_model"), c.route.UpstreamModel)
	}
	return append(b, '}')
}
