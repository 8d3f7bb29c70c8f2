package anthropic

import (
	"bytes"

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
// or reports false, leaving e partly filled. It reads the event in one pass with a
// rawjson.Cursor, the delta's fields included: an event is read once per frame of every
// stream.
func (e *streamEvent) fastDecode(data []byte) bool {
	if e.textDelta(data) {
		return true
	}
	cur := rawjson.NewCursor(data)
	return cur.Object(func(k []byte) (int, bool) {
		switch string(k) {
		case "type":
			return 0, rawjson.DecodeString(cur.Value(), &e.Type)
		case "message":
			return 1, rawjson.DecodePtr(&e.Message, cur.Value(), (*streamMessage).fastDecode)
		case "index":
			return 2, decodeIntPtr(cur.Value(), &e.Index, e.room.indexRoom())
		case "content_block":
			return 3, rawjson.DecodePtr(&e.ContentBlock, cur.Value(), (*ContentBlock).fastDecode)
		case "delta":
			return 4, e.decodeDelta(&cur)
		case "usage":
			return 5, e.Usage.UnmarshalJSON(cur.Value()) == nil
		}
		return -1, true
	}) && cur.Done()
}

// textDeltaHead and textDeltaMid are what a text delta holds, as the API writes it, before
// its index and between its index and its text.
const (
	textDeltaHead = `{"type":"content_block_delta","index":`
	textDeltaMid  = `,"delta":{"type":"text_delta","text":`
)

// textDelta decodes data when it is a text delta written exactly as the API writes it (no
// space, these members in this order, an index of at most nine digits), the most of a
// stream's events: the words around the index and the text are compared, the text checked
// and unquoted in one pass (StringEnd, then String). Anything else is left to the cursor.
// Reading such an event member by member took three to four times as long.
func (e *streamEvent) textDelta(data []byte) bool {
	rest, ok := bytes.CutPrefix(data, []byte(textDeltaHead))
	if !ok {
		return false
	}
	n, i := 0, 0
	for ; i < len(rest) && i < 9 && '0' <= rest[i] && rest[i] <= '9'; i++ {
		n = n*10 + int(rest[i]-'0')
	}
	if i == 0 || rest[0] == '0' && i > 1 {
		return false
	}
	if rest, ok = bytes.CutPrefix(rest[i:], []byte(textDeltaMid)); !ok {
		return false
	}
	end, ok := rawjson.StringEnd(rest)
	if !ok || string(rest[end:]) != "}}" {
		return false
	}
	text, ok := rawjson.String(rest[:end])
	if !ok {
		return false
	}
	index := e.room.indexRoom()
	if index == nil {
		index = new(int)
	}
	*index = n
	d := e.room.deltaRoom()
	if d == nil {
		d = new(streamDelta)
	}
	*d = streamDelta{Type: "text_delta", Text: text}
	e.Type, e.Index, e.Delta = "content_block_delta", index, d
	return true
}

// decodeDelta reads the delta at the cursor as DecodePtrIn does: null makes it nil, an
// object goes to the room, zeroed first, or to a new streamDelta without one.
func (e *streamEvent) decodeDelta(cur *rawjson.Cursor) bool {
	if cur.Null() {
		e.Delta = nil
		return true
	}
	d := e.room.deltaRoom()
	if d == nil {
		d = new(streamDelta)
	} else {
		*d = streamDelta{}
	}
	e.Delta = d
	return cur.Object(func(k []byte) (int, bool) {
		switch string(k) {
		case "type":
			return 0, rawjson.DecodeString(cur.Value(), &d.Type)
		case "text":
			return 1, rawjson.DecodeString(cur.Value(), &d.Text)
		case "partial_json":
			return 2, rawjson.DecodeString(cur.Value(), &d.PartialJSON)
		case "thinking":
			return 3, rawjson.DecodeString(cur.Value(), &d.Thinking)
		case "signature":
			return 4, rawjson.DecodeString(cur.Value(), &d.Signature)
		case "stop_reason":
			return 5, rawjson.DecodeStringPtr(cur.Value(), &d.StopReason)
		case "stop_sequence":
			return 6, rawjson.DecodeStringPtr(cur.Value(), &d.StopSequence)
		}
		return -1, true
	})
}

// The nested types' decoders below take a value the cursor has checked.

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
