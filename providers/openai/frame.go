package openai

import (
	"encoding/json"

	"github.com/modelgateway/caddy-modelgateway/internal/rawjson"
)

// ChunkFrame is one frame of a chat completions stream as a relay that forwards the stream
// reads it: decoded with real JSON parsing, so that whitespace, key order and escapes never
// change what the relay sees, with the place of the chunk's id so that the relay can write
// its own id there without rebuilding the frame.
type ChunkFrame struct {
	ChatChunk
	// IDStart and IDEnd are the span of the top-level "id" value in the frame. IDEnd is 0
	// when the frame has none, or when it was read by encoding/json (keys with escapes, a
	// member given twice), which tells no positions.
	IDStart, IDEnd int
}

// Read decodes data, one frame's data, into f as json.Unmarshal into a ChatChunk would,
// reusing f's room for choices. It reports false when data is not a chat chunk (malformed
// JSON, or JSON of another shape); f is then to be ignored. The delta's content and
// reasoning are left in data: they are valid until data is reused.
func (f *ChunkFrame) Read(data []byte) bool {
	choices := f.Choices[:0]
	*f = ChunkFrame{}
	f.Choices = choices
	var id []byte
	if f.decode(data, aliasRaw, &id) {
		if id != nil {
			// id is a slice of data: its offset is what separates their capacities.
			f.IDStart = cap(data) - cap(id)
			f.IDEnd = f.IDStart + len(id)
		}
		return true
	}
	f.ChatChunk = ChatChunk{}
	return rawjson.UnmarshalFresh(data, &f.ChatChunk) == nil
}

// Failed reports whether the frame is an error the upstream sent inside its stream.
func (f *ChunkFrame) Failed() bool { return !isFalsy(f.Error) }

// UsageValue is the frame's usage, or Groq's (sent in x_groq instead); nil when it has none.
func (f *ChunkFrame) UsageValue() json.RawMessage {
	if !isNull(f.Usage) {
		return f.Usage
	}
	if f.XGroq != nil && !isNull(f.XGroq.Usage) {
		return f.XGroq.Usage
	}
	return nil
}

// Answer reports whether the frame carries a piece of the answer: text, a refusal,
// reasoning or a tool call, as opposed to the role-only first chunk, a finish or a usage
// chunk. The first such frame is the stream's first token.
func (f *ChunkFrame) Answer() bool {
	for i := range f.Choices {
		d := &f.Choices[i].Delta
		if len(d.ToolCalls) > 0 || (d.Refusal != nil && *d.Refusal != "") {
			return true
		}
		if nonEmpty(d.Content) || nonEmpty(d.ReasoningContent) || nonEmpty(d.Reasoning) {
			return true
		}
	}
	return false
}

// FinishReason is the first finish reason set among the frame's choices, "" when none is.
func (f *ChunkFrame) FinishReason() string {
	for i := range f.Choices {
		if fr := f.Choices[i].FinishReason; fr != nil && *fr != "" {
			return *fr
		}
	}
	return ""
}

// Text is the answer text of the frame's first choice, "" when it carries none.
func (f *ChunkFrame) Text() string {
	for i := range f.Choices {
		if f.Choices[i].Index == 0 {
			t, _ := contentText(f.Choices[i].Delta.Content)
			return t
		}
	}
	return ""
}

// nonEmpty reports whether a decoded raw content value holds any text: a string of at least
// one character (any escape decodes to one), or parts whose text is not empty.
func nonEmpty(raw json.RawMessage) bool {
	switch {
	case len(raw) == 0:
		return false
	case raw[0] == '"':
		return len(raw) > 2
	case raw[0] == '[':
		t, err := contentText(raw)
		return err == nil && t != ""
	}
	return false
}
