package anthropic

import (
	"github.com/modelgateway/caddy-modelgateway/internal/rawjson"
)

// Hand-written decoders for the data of stream events (streamEvent and what it holds). A
// relayed stream decodes one event per token or so, and encoding/json's reflection was the
// largest CPU cost of a stream after the syscalls. They follow the rules of fastdecode.go:
// each fastDecode fills its struct exactly as json.Unmarshal would fill a zero one, or
// reports false and the caller resets the struct and falls back to json.Unmarshal, whose
// result and errors stay the reference. Left to encoding/json, as there: invalid JSON (a
// malformed frame), keys it would match case-insensitively or with Unicode folding, a known
// key repeated, a value of the wrong type, an index written as a float or out of range.
// FuzzStreamEventFastDecode holds the decoders to json.Unmarshal.

// fastDecode fills e from an event's data as json.Unmarshal would into a zero streamEvent,
// or reports false, leaving e partly filled.
func (e *streamEvent) fastDecode(data []byte) bool {
	// Checked and decoded in one pass: an event is read once per frame of every stream.
	return rawjson.DecodeFieldsValid(data, func(key, v []byte) (bool, bool) {
		switch string(key) {
		case "type":
			return true, rawjson.DecodeString(v, &e.Type)
		case "message":
			return true, rawjson.DecodePtr(&e.Message, v, (*streamMessage).fastDecode)
		case "index":
			return true, decodeIntPtr(v, &e.Index, e.room.indexRoom())
		case "content_block":
			return true, rawjson.DecodePtr(&e.ContentBlock, v, (*ContentBlock).fastDecode)
		case "delta":
			return true, rawjson.DecodePtrIn(&e.Delta, e.room.deltaRoom(), v, (*streamDelta).fastDecode)
		case "usage":
			return true, e.Usage.UnmarshalJSON(v) == nil
		}
		return false, true
	})
}

// The nested types' decoders take a value of data DecodeFieldsValid has checked.

func (m *streamMessage) fastDecode(data []byte) bool {
	return rawjson.DecodeFields(data, func(key, v []byte) (bool, bool) {
		switch string(key) {
		case "id":
			return true, rawjson.DecodeString(v, &m.ID)
		case "model":
			return true, rawjson.DecodeString(v, &m.Model)
		case "usage":
			return true, m.Usage.UnmarshalJSON(v) == nil
		}
		return false, true
	})
}

func (d *streamDelta) fastDecode(data []byte) bool {
	return rawjson.DecodeFields(data, func(key, v []byte) (bool, bool) {
		switch string(key) {
		case "type":
			return true, rawjson.DecodeString(v, &d.Type)
		case "text":
			return true, rawjson.DecodeString(v, &d.Text)
		case "partial_json":
			return true, rawjson.DecodeString(v, &d.PartialJSON)
		case "thinking":
			return true, rawjson.DecodeString(v, &d.Thinking)
		case "signature":
			return true, rawjson.DecodeString(v, &d.Signature)
		case "stop_reason":
			return true, rawjson.DecodeStringPtr(v, &d.StopReason)
		case "stop_sequence":
			return true, rawjson.DecodeStringPtr(v, &d.StopSequence)
		}
		return false, true
	})
}

// decodeIntPtr decodes an *int field: null makes it nil, an integer literal that fits an int
// goes to room, or to a new int when room is nil; anything else (1.0, 1e3, "1") is left to
// encoding/json.
func decodeIntPtr(v []byte, dst **int, room *int) bool {
	if rawjson.IsNull(v) {
		*dst = nil
		return true
	}
	var n int
	if !rawjson.DecodeInt(v, &n) {
		return false
	}
	if room == nil {
		room = new(int)
	}
	*room = n
	*dst = room
	return true
}
