package openai

import (
	"encoding/json"

	"github.com/modelgateway/caddy-modelgateway/internal/rawjson"
)

// Hand-written decoders for the wire types every translated request decodes, and for the
// chunk every streamed frame decodes: reflection-based json.Unmarshal is the largest cost
// of a translation, and of relaying a stream. Each fastDecode
// fills the zero value of its struct exactly as json.Unmarshal would, or reports false
// for anything it does not reproduce exactly, and the caller then falls back to
// json.Unmarshal. What it refuses (any of these returns false):
//
//   - input that is not well-formed JSON, so that the fallback reports the same error;
//   - a key that encoding/json could match to a field only case-insensitively or after
//     unescaping: any key with an upper-case ASCII letter, a non-ASCII byte (encoding/json
//     folds the Kelvin sign to k and the long s to s) or a backslash;
//   - a field given twice in one object, which encoding/json merges into the first value;
//   - a value of the wrong JSON type for its field, or a number the field type cannot hold
//     (encoding/json fails on those);
//   - a custom UnmarshalJSON (TokenCount, Arguments, StopList) that fails;
//   - nesting deeper than maxFastDepth.
//
// Fields with a custom UnmarshalJSON are decoded by their method, given the raw value, null
// included, as encoding/json calls it. The decoders must follow types.go: a field added
// there and not here would be left zero. TestSeedsSetEveryField fails until the realistic
// seeds set the new field, and the equality checks with json.Unmarshal then fail until it
// is decoded here.

// maxFastDepth bounds the nesting the validator accepts, well under encoding/json's 10000
// so that hostile input cannot run deep recursion here; deeper input takes the fallback.
const maxFastDepth = 512

// fastDecode fills cr, which must be the zero ChatResponse, from data as
// json.Unmarshal(data, cr) would; false means it did not and cr is to be discarded.
func (cr *ChatResponse) fastDecode(data []byte) bool {
	if !validJSON(data) {
		return false
	}
	return rawjson.DecodeFields(rawjson.TrimSpace(data), func(k []byte, v []byte) (bool, bool) {
		switch string(k) {
		case "id":
			return true, rawjson.DecodeString(v, &cr.ID)
		case "object":
			return true, rawjson.DecodeString(v, &cr.Object)
		case "created":
			return true, rawjson.DecodeInt64(v, &cr.Created)
		case "model":
			return true, rawjson.DecodeString(v, &cr.Model)
		case "choices":
			return true, rawjson.DecodeSlice(&cr.Choices, v, (*ChatChoice).fastDecode)
		case "usage":
			return true, rawjson.DecodePtr(&cr.Usage, v, (*ChatUsage).fastDecode)
		case "system_fingerprint":
			return true, rawjson.DecodeStringPtr(v, &cr.SystemFingerprint)
		}
		return false, true
	})
}

func (c *ChatChoice) fastDecode(v []byte) bool {
	return rawjson.DecodeFields(v, func(k []byte, v []byte) (bool, bool) {
		switch string(k) {
		case "index":
			return true, rawjson.DecodeInt(v, &c.Index)
		case "message":
			return true, c.Message.fastDecode(v)
		case "finish_reason":
			return true, rawjson.DecodeStringPtr(v, &c.FinishReason)
		case "logprobs":
			return true, decodeRaw(&c.Logprobs, v)
		}
		return false, true
	})
}

func (m *ChatResponseMessage) fastDecode(v []byte) bool {
	return rawjson.DecodeFields(v, func(k []byte, v []byte) (bool, bool) {
		switch string(k) {
		case "role":
			return true, rawjson.DecodeString(v, &m.Role)
		case "content":
			return true, decodeRaw(&m.Content, v)
		case "refusal":
			return true, rawjson.DecodeStringPtr(v, &m.Refusal)
		case "tool_calls":
			return true, rawjson.DecodeSlice(&m.ToolCalls, v, (*ChatToolCall).fastDecode)
		case "reasoning_content":
			return true, decodeRaw(&m.ReasoningContent, v)
		case "reasoning":
			return true, decodeRaw(&m.Reasoning, v)
		}
		return false, true
	})
}

func (tc *ChatToolCall) fastDecode(v []byte) bool {
	return rawjson.DecodeFields(v, func(k []byte, v []byte) (bool, bool) {
		switch string(k) {
		case "id":
			return true, rawjson.DecodeString(v, &tc.ID)
		case "type":
			return true, rawjson.DecodeString(v, &tc.Type)
		case "function":
			return true, rawjson.DecodeFields(v, func(k []byte, v []byte) (bool, bool) {
				switch string(k) {
				case "name":
					return true, rawjson.DecodeString(v, &tc.Function.Name)
				case "arguments":
					return true, tc.Function.Arguments.UnmarshalJSON(v) == nil
				}
				return false, true
			})
		}
		return false, true
	})
}

func (u *ChatUsage) fastDecode(v []byte) bool {
	return rawjson.DecodeFields(v, func(k []byte, v []byte) (bool, bool) {
		switch string(k) {
		case "prompt_tokens":
			return true, u.PromptTokens.UnmarshalJSON(v) == nil
		case "completion_tokens":
			return true, u.CompletionTokens.UnmarshalJSON(v) == nil
		case "total_tokens":
			return true, u.TotalTokens.UnmarshalJSON(v) == nil
		case "prompt_tokens_details":
			return true, rawjson.DecodePtr(&u.PromptTokensDetails, v, func(d *PromptTokensDetails, v []byte) bool {
				return rawjson.DecodeFields(v, func(k []byte, v []byte) (bool, bool) {
					switch string(k) {
					case "cached_tokens":
						return true, d.CachedTokens.UnmarshalJSON(v) == nil
					case "cache_write_tokens":
						return true, d.CacheWriteTokens.UnmarshalJSON(v) == nil
					}
					return false, true
				})
			})
		case "completion_tokens_details":
			return true, rawjson.DecodePtr(&u.CompletionTokensDetails, v, func(d *CompletionTokensDetails, v []byte) bool {
				return rawjson.DecodeFields(v, func(k []byte, v []byte) (bool, bool) {
					if string(k) == "reasoning_tokens" {
						return true, d.ReasoningTokens.UnmarshalJSON(v) == nil
					}
					return false, true
				})
			})
		case "prompt_cache_hit_tokens":
			// As encoding/json: null clears the pointer without calling the method.
			return true, rawjson.DecodePtr(&u.PromptCacheHitTokens, v, func(c *TokenCount, v []byte) bool {
				return c.UnmarshalJSON(v) == nil
			})
		}
		return false, true
	})
}

// fastDecode fills c, which must be the zero ChatChunk (its Choices may have room, reused
// as DecodeSlice reuses it), from data as json.Unmarshal(data, c) would; false means it did
// not and c is to be discarded. It reads the frame in a single pass with a rawjson.Cursor,
// down to the delta's fields, instead of checking it and then scanning each nested level
// again.
func (c *ChatChunk) fastDecode(data []byte) bool { return c.decode(data, decodeRaw, nil) }

// decodeFrame is fastDecode for the stream, which runs it once per frame and is done with
// the chunk before the next frame replaces data: the delta's raw values (content and
// reasoning) are left where they are in data instead of copied, one allocation less per
// frame. Anything that keeps them must copy them.
func (c *ChatChunk) decodeFrame(data []byte) bool { return c.decode(data, aliasRaw, nil) }

// decode is fastDecode, with raw storing the delta's raw values. When id is not nil, the
// raw value of the chunk's "id" (which ChatChunk does not keep) is stored there, a slice
// of data.
func (c *ChatChunk) decode(data []byte, raw rawDecoder, id *[]byte) bool {
	cur := rawjson.NewCursor(data)
	return cur.Object(func(k []byte) (int, bool) {
		switch string(k) {
		case "choices":
			return 0, c.decodeChoices(&cur, raw)
		case "usage":
			return 1, decodeRaw(&c.Usage, cur.Value())
		case "error":
			return 2, decodeRaw(&c.Error, cur.Value())
		case "x_groq":
			return 3, rawjson.DecodePtr(&c.XGroq, cur.Value(), func(g *struct {
				Usage json.RawMessage `json:"usage"`
			}, v []byte) bool {
				return rawjson.DecodeFields(v, func(k []byte, v []byte) (bool, bool) {
					if string(k) == "usage" {
						return true, decodeRaw(&g.Usage, v)
					}
					return false, true
				})
			})
		case "id":
			if id == nil {
				return -1, true
			}
			*id = cur.Value()
			return 4, *id != nil
		}
		return -1, true
	}) && cur.Done()
}

// decodeChoices reads the choices array at the cursor into c.Choices as DecodeSlice does:
// null clears it, [] makes it empty but not nil, each element is zeroed before it is read.
func (c *ChatChunk) decodeChoices(cur *rawjson.Cursor, raw rawDecoder) bool {
	if cur.Null() {
		c.Choices = nil
		return true
	}
	s := c.Choices[:0]
	if s == nil {
		s = make([]ChunkChoice, 0)
	}
	for more := cur.Enter('['); more; more = cur.More('[') {
		s = append(s, ChunkChoice{})
		if !s[len(s)-1].decode(cur, raw) {
			c.Choices = s
			return false
		}
	}
	c.Choices = s
	return cur.OK()
}

// decode reads the choice at the cursor, null included (which leaves it zero).
func (ch *ChunkChoice) decode(cur *rawjson.Cursor, raw rawDecoder) bool {
	return cur.Object(func(k []byte) (int, bool) {
		switch string(k) {
		case "index":
			return 0, rawjson.DecodeInt(cur.Value(), &ch.Index)
		case "delta":
			return 1, ch.Delta.decode(cur, raw)
		case "finish_reason":
			return 2, rawjson.DecodeStringPtr(cur.Value(), &ch.FinishReason)
		}
		return -1, true
	})
}

// decode reads the delta at the cursor, null included (which leaves it as it is).
func (d *ChunkDelta) decode(cur *rawjson.Cursor, raw rawDecoder) bool {
	return cur.Object(func(k []byte) (int, bool) {
		switch string(k) {
		case "role":
			return 0, rawjson.DecodeString(cur.Value(), &d.Role)
		case "content":
			return 1, raw(&d.Content, cur.Value())
		case "refusal":
			return 2, rawjson.DecodeStringPtr(cur.Value(), &d.Refusal)
		case "tool_calls":
			return 3, rawjson.DecodeSlice(&d.ToolCalls, cur.Value(), (*ChunkToolCall).fastDecode)
		case "reasoning_content":
			return 4, raw(&d.ReasoningContent, cur.Value())
		case "reasoning":
			return 5, raw(&d.Reasoning, cur.Value())
		}
		return -1, true
	})
}

func (tc *ChunkToolCall) fastDecode(v []byte) bool {
	return rawjson.DecodeFields(v, func(k []byte, v []byte) (bool, bool) {
		switch string(k) {
		case "index":
			// As encoding/json: null clears the pointer, a number allocates.
			return true, rawjson.DecodePtr(&tc.Index, v, func(n *int, v []byte) bool {
				return rawjson.DecodeInt(v, n)
			})
		case "id":
			return true, rawjson.DecodeString(v, &tc.ID)
		case "type":
			return true, rawjson.DecodeString(v, &tc.Type)
		case "function":
			f := &tc.Function
			return true, rawjson.DecodeFields(v, func(k []byte, v []byte) (bool, bool) {
				switch string(k) {
				case "name":
					return true, rawjson.DecodeString(v, &f.Name)
				case "arguments":
					return true, f.Arguments.UnmarshalJSON(v) == nil
				}
				return false, true
			})
		}
		return false, true
	})
}

// fastDecode fills cr, which must be the zero ChatRequest, from data as
// json.Unmarshal(data, cr) would; false means it did not and cr is to be discarded.
func (cr *ChatRequest) fastDecode(data []byte) bool {
	if !validJSON(data) {
		return false
	}
	return rawjson.DecodeFields(rawjson.TrimSpace(data), func(k []byte, v []byte) (bool, bool) {
		switch string(k) {
		case "model":
			return true, rawjson.DecodeString(v, &cr.Model)
		case "messages":
			return true, rawjson.DecodeSlice(&cr.Messages, v, (*ChatMessage).fastDecode)
		case "tools":
			return true, rawjson.DecodeSlice(&cr.Tools, v, (*ChatTool).fastDecode)
		case "tool_choice":
			return true, decodeRaw(&cr.ToolChoice, v)
		case "parallel_tool_calls":
			return true, rawjson.DecodeBoolPtr(v, &cr.ParallelToolCalls)
		case "max_tokens":
			return true, rawjson.DecodeInt64Ptr(v, &cr.MaxTokens)
		case "max_completion_tokens":
			return true, rawjson.DecodeInt64Ptr(v, &cr.MaxCompletionTokens)
		case "temperature":
			return true, rawjson.DecodeFloat64Ptr(v, &cr.Temperature)
		case "top_p":
			return true, rawjson.DecodeFloat64Ptr(v, &cr.TopP)
		case "stop":
			return true, cr.Stop.UnmarshalJSON(v) == nil
		case "stream":
			return true, rawjson.DecodeBool(v, &cr.Stream)
		case "stream_options":
			return true, rawjson.DecodePtr(&cr.StreamOptions, v, func(o *StreamOptions, v []byte) bool {
				return rawjson.DecodeFields(v, func(k []byte, v []byte) (bool, bool) {
					if string(k) == "include_usage" {
						return true, rawjson.DecodeBool(v, &o.IncludeUsage)
					}
					return false, true
				})
			})
		case "response_format":
			return true, rawjson.DecodePtr(&cr.ResponseFormat, v, (*ResponseFormat).fastDecode)
		case "reasoning_effort":
			return true, rawjson.DecodeString(v, &cr.ReasoningEffort)
		case "user":
			return true, rawjson.DecodeString(v, &cr.User)
		case "safety_identifier":
			return true, rawjson.DecodeString(v, &cr.SafetyIdentifier)
		}
		return false, true
	})
}

func (m *ChatMessage) fastDecode(v []byte) bool {
	return rawjson.DecodeFields(v, func(k []byte, v []byte) (bool, bool) {
		switch string(k) {
		case "role":
			return true, rawjson.DecodeString(v, &m.Role)
		case "content":
			return true, decodeRaw(&m.Content, v)
		case "name":
			return true, rawjson.DecodeString(v, &m.Name)
		case "tool_calls":
			return true, rawjson.DecodeSlice(&m.ToolCalls, v, (*ChatToolCall).fastDecode)
		case "tool_call_id":
			return true, rawjson.DecodeString(v, &m.ToolCallID)
		}
		return false, true
	})
}

func (t *ChatTool) fastDecode(v []byte) bool {
	return rawjson.DecodeFields(v, func(k []byte, v []byte) (bool, bool) {
		switch string(k) {
		case "type":
			return true, rawjson.DecodeString(v, &t.Type)
		case "function":
			f := &t.Function
			return true, rawjson.DecodeFields(v, func(k []byte, v []byte) (bool, bool) {
				switch string(k) {
				case "name":
					return true, rawjson.DecodeString(v, &f.Name)
				case "description":
					return true, rawjson.DecodeString(v, &f.Description)
				case "parameters":
					return true, decodeRaw(&f.Parameters, v)
				case "strict":
					return true, rawjson.DecodeBoolPtr(v, &f.Strict)
				}
				return false, true
			})
		}
		return false, true
	})
}

func (rf *ResponseFormat) fastDecode(v []byte) bool {
	return rawjson.DecodeFields(v, func(k []byte, v []byte) (bool, bool) {
		switch string(k) {
		case "type":
			return true, rawjson.DecodeString(v, &rf.Type)
		case "json_schema":
			return true, rawjson.DecodePtr(&rf.JSONSchema, v, func(s *JSONSchema, v []byte) bool {
				return rawjson.DecodeFields(v, func(k []byte, v []byte) (bool, bool) {
					switch string(k) {
					case "name":
						return true, rawjson.DecodeString(v, &s.Name)
					case "description":
						return true, rawjson.DecodeString(v, &s.Description)
					case "schema":
						return true, decodeRaw(&s.Schema, v)
					case "strict":
						return true, rawjson.DecodeBoolPtr(v, &s.Strict)
					}
					return false, true
				})
			})
		}
		return false, true
	})
}

// decodeRaw copies v, null included, as json.RawMessage.UnmarshalJSON does: the body's
// buffer may be reused once decoding returns. A null, which OpenAI sends as the usage of
// every chunk of a stream that asks for usage, is the same four bytes every time: it gets
// one shared copy (full to capacity, so that an append copies it), not one per chunk.
func decodeRaw(dst *json.RawMessage, v []byte) bool {
	if string(v) == "null" {
		*dst = rawNull
		return true
	}
	*dst = append(json.RawMessage(nil), v...)
	return true
}

// rawDecoder stores a raw value: decodeRaw (a copy) or aliasRaw.
type rawDecoder func(dst *json.RawMessage, v []byte) bool

// aliasRaw is decodeRaw without the copy: dst is v itself, capped so that an append copies
// it (null is rawNull, as there).
func aliasRaw(dst *json.RawMessage, v []byte) bool {
	if string(v) == "null" {
		*dst = rawNull
		return true
	}
	*dst = v[:len(v):len(v)]
	return true
}

// rawNull is what decodeRaw stores for null; nothing writes into a decoded RawMessage.
var rawNull = json.RawMessage("null")[:4:4]

// validJSON reports whether data is one well-formed JSON value nested at most
// maxFastDepth deep (rawjson.ValidDepth, about 2.5 times faster than json.Valid, which
// alone costs a third of the json.Unmarshal the fast path saves).
func validJSON(data []byte) bool { return rawjson.ValidDepth(data, maxFastDepth) }
