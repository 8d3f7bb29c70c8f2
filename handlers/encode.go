package handlers

import (
	"strconv"
	"time"

	"github.com/modelgateway/caddy-modelgateway/internal/rawjson"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// The gateway's own JSON additions (cost fields, meta) are appended by hand, byte for byte
// what encoding/json gives for them, without reflection on the hot path.

// appendJSONFloat appends a finite f as encoding/json formats a float64 (null otherwise,
// where encoding/json would fail).
func appendJSONFloat(b []byte, f float64) []byte {
	if out, ok := rawjson.AppendFloat64LikeMarshal(b, f); ok {
		return out
	}
	return append(b, "null"...)
}

func appendKey(b []byte, comma bool, key string) []byte {
	if comma {
		b = append(b, ',')
	}
	b = append(b, '"')
	b = append(b, key...)
	return append(b, '"', ':')
}

// appendMeta appends the timing block returned when the request asks for "meta": true, its
// keys in the sorted order encoding/json gives a map.
func (c *call) appendMeta(b []byte) []byte {
	now := c.g.Now()
	b = store.AppendAttemptsJSON(appendKey(append(b, '{'), false, "attempts"), c.Attempts)
	if len(c.dropped) > 0 {
		b = appendKey(b, true, "dropped_parameters")
		for i, d := range c.dropped {
			if i == 0 {
				b = append(b, '[')
			} else {
				b = append(b, ',')
			}
			b = rawjson.AppendStringLikeMarshal(b, d)
		}
		b = append(b, ']')
	}
	b = strconv.AppendInt(appendKey(b, true, "end_to_end_ms"), now.Sub(c.Start).Milliseconds(), 10)
	b = strconv.AppendInt(appendKey(b, true, "gateway_overhead_ms"), max(0, (now.Sub(c.Start)-c.upstreamTime).Milliseconds()), 10)
	var gen time.Duration
	if !c.FirstByte.IsZero() {
		gen = now.Sub(c.FirstByte)
		b = strconv.AppendInt(appendKey(b, true, "generation_ms"), gen.Milliseconds(), 10)
		b = strconv.AppendInt(appendKey(b, true, "latency_ms"), c.FirstByte.Sub(c.Start).Milliseconds(), 10)
	}
	if c.route != nil {
		b = rawjson.AppendStringLikeMarshal(appendKey(b, true, "provider"), c.route.ProviderName)
	}
	if c.skippedFrames > 0 {
		b = strconv.AppendInt(appendKey(b, true, "skipped_frames"), int64(c.skippedFrames), 10)
	}
	if !c.FirstByte.IsZero() {
		if secs := gen.Seconds(); secs > 0 {
			b = appendJSONFloat(appendKey(b, true, "throughput_tps"), float64(c.tokens().CompletionTokens())/secs)
		}
	}
	if c.route != nil {
		b = rawjson.AppendStringLikeMarshal(appendKey(b, true, "upstream_model"), c.route.UpstreamModel)
	}
	return append(b, '}')
}
