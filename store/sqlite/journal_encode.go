package sqlite

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/modelgateway/caddy-modelgateway/internal/rawjson"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// A journal record holds its generation as a JSON object of store.GenerationFields: times
// in milliseconds, and under short keys for the fields of the first journal's format (the
// journals a previous run left must still replay); a field added since is under its column.
var journalShortKeys = map[string]string{
	"id": "id", "workspace_id": "ws", "key_id": "key", "endpoint": "ep", "model": "m", "provider": "p",
	"upstream_model": "um", "upstream_id": "uid", "streamed": "st", "cancelled": "cx", "status": "s",
	"finish_reason": "fr", "error_code": "ec", "error_message": "em",
	"input_tokens": "it", "cache_read_tokens": "cr", "cache_write_tokens": "cw", "output_tokens": "ot",
	"reasoning_tokens": "rt", "cost_nanos": "cn", "unbilled_nanos": "ub", "cost_lines": "cl", "attempts": "at",
	"latency_ms": "lat", "generation_ms": "gms", "end_to_end_ms": "e2e", "created_at": "ca",
}

// journalKeys are the keys of store.GenerationFields in a record, and journalPrefixes what
// the encoder writes before each value: the key, quoted, after a comma but for the first.
var journalKeys, journalPrefixes = func() (keys, prefixes [len(store.GenerationFields)]string) {
	for i, f := range store.GenerationFields {
		keys[i] = f.Column
		if k, ok := journalShortKeys[f.Column]; ok {
			keys[i] = k
		}
		prefixes[i] = strconv.Quote(keys[i]) + ":"
		if i > 0 {
			prefixes[i] = "," + prefixes[i]
		}
	}
	return keys, prefixes
}()

// journalGen is a generation as a journal record holds it.
type journalGen store.Generation

func (j *journalGen) generation() store.Generation { return store.Generation(*j) }

// UnmarshalJSON reads what appendJournalRecord wrote. A field the record lacks (one added
// after it was written) stays zero.
func (j *journalGen) UnmarshalJSON(data []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return err
	}
	g := (*store.Generation)(j)
	*g = store.Generation{}
	for i, f := range store.GenerationFields {
		raw, ok := m[journalKeys[i]]
		if !ok {
			continue
		}
		var err error
		switch p := f.Addr(g).(type) {
		case *time.Time:
			var ms int64
			err = json.Unmarshal(raw, &ms)
			*p = fromMillis(ms)
		default:
			err = json.Unmarshal(raw, p)
		}
		if err != nil {
			return fmt.Errorf("journal record field %s: %w", journalKeys[i], err)
		}
	}
	return nil
}

// appendJournalRecord appends r as the JSON of a journalRecord.
func appendJournalRecord(b []byte, r *settleReq) []byte {
	b = append(b, `{"r":`...)
	b = rawjson.AppendString(b, r.reservationID)
	b = appendIntField(b, `,"h":`, r.held)
	b = append(b, `,"x":`...)
	b = strconv.AppendBool(b, r.release)
	b = appendIntField(b, `,"c":`, r.cost)
	b = appendIntField(b, `,"n":`, millis(r.now))
	b = append(b, `,"g":{`...)
	for i, f := range store.GenerationFields {
		b = append(b, journalPrefixes[i]...)
		switch p := f.Addr(r.g).(type) {
		case *string:
			b = rawjson.AppendString(b, *p)
		case *int64:
			b = strconv.AppendInt(b, *p, 10)
		case *int:
			b = strconv.AppendInt(b, int64(*p), 10)
		case *bool:
			b = strconv.AppendBool(b, *p)
		case *time.Time:
			b = strconv.AppendInt(b, millis(*p), 10)
		case *[]store.CostLine:
			b = store.AppendCostLinesJSON(b, *p)
		case *[]store.Attempt:
			b = store.AppendAttemptsJSON(b, *p)
		default:
			panic(fmt.Sprintf("sqlite: generation field of unknown type %T", p))
		}
	}
	return append(b, "}}"...)
}

func appendIntField(b []byte, key string, v int64) []byte {
	return strconv.AppendInt(append(b, key...), v, 10)
}

// appendInFlightRecord appends the trace of the request f as the JSON of a journalRecord
// with InFlight set: its generation holds what the request began with, under the keys
// journalKeys gives those fields.
func appendInFlightRecord(b []byte, f *store.InFlight) []byte {
	b = appendStringField(b, `{"i":true,"r":`, f.ReservationID)
	b = appendStringField(b, `,"g":{"id":`, f.GenerationID)
	b = appendStringField(b, `,"ws":`, f.WorkspaceID)
	b = appendStringField(b, `,"key":`, f.KeyID)
	b = appendStringField(b, `,"ep":`, f.Endpoint)
	b = appendStringField(b, `,"m":`, f.Model)
	b = appendIntField(b, `,"ca":`, millis(f.StartedAt))
	return append(b, "}}"...)
}

func appendStringField(b []byte, key, v string) []byte {
	return rawjson.AppendString(append(b, key...), v)
}
