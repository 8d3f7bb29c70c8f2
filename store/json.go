package store

import (
	"strconv"

	"github.com/modelgateway/caddy-modelgateway/internal/rawjson"
)

// AppendCostLinesJSON appends lines byte for byte as json.Marshal encodes them (null for
// nil), without reflection: every answer and every record carries them.
func AppendCostLinesJSON(b []byte, lines []CostLine) []byte {
	if lines == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, l := range lines {
		if i > 0 {
			b = append(b, ',')
		}
		b = rawjson.AppendStringLikeMarshal(append(b, `{"dimension":`...), l.Dimension)
		if l.Key != "" {
			b = rawjson.AppendStringLikeMarshal(append(b, `,"key":`...), l.Key)
		}
		b = strconv.AppendInt(append(b, `,"quantity":`...), l.Quantity, 10)
		b = strconv.AppendInt(append(b, `,"unit_price_nanos":`...), l.UnitPriceNanos, 10)
		b = strconv.AppendInt(append(b, `,"nanos":`...), l.Nanos, 10)
		b = append(b, '}')
	}
	return append(b, ']')
}

// AppendAttemptsJSON appends attempts byte for byte as json.Marshal encodes them (null for
// nil, error and category left out when empty).
func AppendAttemptsJSON(b []byte, attempts []Attempt) []byte {
	if attempts == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, a := range attempts {
		if i > 0 {
			b = append(b, ',')
		}
		b = rawjson.AppendStringLikeMarshal(append(b, `{"provider":`...), a.Provider)
		b = rawjson.AppendStringLikeMarshal(append(b, `,"upstream_model":`...), a.UpstreamModel)
		b = strconv.AppendInt(append(b, `,"status":`...), int64(a.Status), 10)
		b = strconv.AppendInt(append(b, `,"duration_ms":`...), a.DurationMs, 10)
		if a.Error != "" {
			b = rawjson.AppendStringLikeMarshal(append(b, `,"error":`...), a.Error)
		}
		if a.Category != "" {
			b = rawjson.AppendStringLikeMarshal(append(b, `,"category":`...), a.Category)
		}
		b = append(b, '}')
	}
	return append(b, ']')
}
