package gemini

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"math"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/internal/upstreamhttp"
)

// fuzzInput hands out values from fuzz bytes; once they run out it gives zeros.
type fuzzInput struct{ b []byte }

func (f *fuzzInput) byte() byte {
	if len(f.b) == 0 {
		return 0
	}
	c := f.b[0]
	f.b = f.b[1:]
	return c
}

func (f *fuzzInput) n(max int) int { return int(f.byte()) % max }

func (f *fuzzInput) str() string {
	n := int(f.byte())
	if n > len(f.b) {
		n = len(f.b)
	}
	s := string(f.b[:n])
	f.b = f.b[n:]
	return s
}

func (f *fuzzInput) pick(options ...string) string {
	if i := f.n(len(options) + 1); i < len(options) {
		return options[i]
	}
	return f.str()
}

func (f *fuzzInput) float() *float64 {
	if f.n(2) == 0 {
		return nil
	}
	var b [8]byte
	for i := range b {
		b[i] = f.byte()
	}
	v := math.Float64frombits(binary.LittleEndian.Uint64(b[:]))
	return &v
}

func (f *fuzzInput) int64() *int64 {
	if f.n(2) == 0 {
		return nil
	}
	v := int64(int8(f.byte())) * 1000
	return &v
}

// fuzzRequest builds a neutral request of any shape from fuzz bytes.
func fuzzRequest(data []byte) *providers.Request {
	in := &fuzzInput{b: data}
	req := &providers.Request{Model: "gemini-2.5-flash", System: in.str()}
	for i, n := 0, in.n(9); i < n; i++ {
		var m providers.Message
		switch in.n(5) {
		case 0, 1:
			m.Role = providers.RoleUser
		case 2:
			m.Role = providers.RoleAssistant
			for j, k := 0, in.n(4); j < k; j++ {
				m.ToolCalls = append(m.ToolCalls, providers.ToolCall{
					ID:        in.pick("call_1", "call_2", syntheticIDPrefix+"x_0", ""),
					Name:      in.pick("get_weather", "a b", "9x", ""),
					Arguments: in.pick(`{"a":1}`, "", "[1]", "null"),
				})
			}
		case 3:
			m.Role = providers.RoleTool
			m.ToolCallID = in.pick("call_1", "call_2", syntheticIDPrefix+"x_0", "")
			m.Name = in.pick("get_weather", "")
		default:
			m.Role = providers.Role(in.pick("system", ""))
		}
		for j, k := 0, in.n(4); j < k; j++ {
			var p providers.Part
			switch in.n(5) {
			case 0, 1:
				p = text(in.str())
			case 2:
				p = providers.Part{Type: providers.PartImage, ImageURL: in.pick("https://x.test/a.png", "http://x.test/a.png", "data:image/png;base64,AQI=", "gs://b/o")}
			case 3:
				p = providers.Part{Type: providers.PartImage, MediaType: in.pick("image/png", ""), Data: []byte(in.str())}
			default:
				p = providers.Part{Type: providers.PartReasoning, Text: in.str(), Signature: in.pick("c2ln", "skip", "!!")}
			}
			m.Content = append(m.Content, p)
		}
		m.Name = in.pick("", "bob")
		req.Messages = append(req.Messages, m)
	}
	for i, n := 0, in.n(3); i < n; i++ {
		req.Tools = append(req.Tools, providers.Tool{
			Name:        in.pick("get_weather", "a b", "a_b", "mcp.server:tool"),
			Description: in.str(),
			Parameters:  json.RawMessage(in.pick(`{"type":"object","properties":{"a":{"type":["string","null"]}},"required":["a","b"]}`, `{"$ref":"#"}`, ``, `true`)),
		})
	}
	req.ToolChoice = in.pick("", "auto", "none", "required", "get_weather")
	if in.n(2) == 0 {
		req.ParallelToolCalls = new(bool)
	}
	req.MaxTokens = in.int64()
	req.Temperature = in.float()
	req.TopP = in.float()
	req.TopK = in.int64()
	for i, n := 0, in.n(8); i < n; i++ {
		req.Stop = append(req.Stop, in.str())
	}
	req.ResponseFormat = in.pick("", "json_object", "json_schema")
	req.JSONSchema = json.RawMessage(in.pick(`{"type":"object","properties":{"b":{"type":"string"},"a":{"const":1}}}`, ``))
	req.ReasoningEffort = in.pick("", "minimal", "low", "medium", "high", "none")
	if b := in.int64(); b != nil {
		req.ThinkingBudget = *b
	}
	req.User = in.pick("", "u")
	return req
}

func FuzzEncodeRequest(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("\x04sys!\x08\x00\x02hi\x02\x02\x00\x00\x00\x03\x00\x03\x00\x00\x01"))
	f.Add([]byte("\x00\x05\x02\x03\x01\x00\x00\x00\x02\x01\x01\x02\x01\x04ok!!\x03\x00\x01\x00\x01\x02ab\x00\x01\x04\x04\x02\x01\x02\x03\x04\x05\x06\x07"))
	f.Add(bytes.Repeat([]byte{2, 3, 1, 0, 2, 3, 1, 4}, 40))
	f.Add(bytes.Repeat([]byte{0xff, 0x80, 0x01, 0x7f}, 64))
	f.Fuzz(func(t *testing.T, data []byte) {
		req := fuzzRequest(data)
		_ = Unsupported(req)
		body, names, err := encodeRequest(req)
		if err != nil {
			return
		}
		var gr GenerateContentRequest
		if err := json.Unmarshal(body, &gr); err != nil {
			t.Fatalf("invalid body %s: %v", body, err)
		}
		if len(gr.Contents) == 0 {
			t.Fatal("no contents")
		}
		if gc := gr.GenerationConfig; gc != nil && len(gc.StopSequences) > maxStopSequences {
			t.Fatalf("%d stop sequences", len(gc.StopSequences))
		}
		for i, c := range gr.Contents {
			if c.Role != "user" && c.Role != "model" {
				t.Fatalf("content %d has role %q", i, c.Role)
			}
			if i > 0 && gr.Contents[i-1].Role == c.Role {
				t.Fatalf("contents %d and %d have the same role", i-1, i)
			}
			if len(c.Parts) == 0 {
				t.Fatalf("content %d has no parts", i)
			}
			for j, p := range c.Parts {
				data := 0
				if p.Text != "" {
					data++
				}
				if p.InlineData != nil {
					data++
				}
				if p.FileData != nil {
					data++
				}
				if fc := p.FunctionCall; fc != nil {
					data++
					if !validToolName(fc.Name) || !isObject(fc.Args) || len(fc.ID) >= len(syntheticIDPrefix) && fc.ID[:len(syntheticIDPrefix)] == syntheticIDPrefix {
						t.Fatalf("content %d part %d: bad function call %+v", i, j, fc)
					}
				}
				if fr := p.FunctionResponse; fr != nil {
					data++
					if !validToolName(fr.Name) || !isObject(fr.Response) {
						t.Fatalf("content %d part %d: bad function response %+v", i, j, fr)
					}
				}
				if data != 1 {
					t.Fatalf("content %d part %d has %d data fields: %+v", i, j, data, p)
				}
				if p.ThoughtSignature != "" && !validSignature(p.ThoughtSignature) {
					t.Fatalf("invalid signature %q sent", p.ThoughtSignature)
				}
			}
		}
		for _, tool := range gr.Tools {
			for _, d := range tool.FunctionDeclarations {
				if !validToolName(d.Name) {
					t.Fatalf("declared name %q", d.Name)
				}
				if names.client(d.Name) == "" {
					t.Fatalf("name %q does not map back", d.Name)
				}
			}
		}
	})
}

func isObject(raw json.RawMessage) bool {
	var m map[string]any
	return json.Unmarshal(raw, &m) == nil && m != nil
}

// allowedSchemaKeys are the keys of Gemini's Schema.
var allowedSchemaKeys = map[string]bool{
	"type": true, "format": true, "title": true, "description": true, "nullable": true, "enum": true,
	"items": true, "properties": true, "required": true, "propertyOrdering": true, "anyOf": true,
	"default": true, "example": true, "minItems": true, "maxItems": true, "minLength": true,
	"maxLength": true, "pattern": true, "minimum": true, "maximum": true, "minProperties": true,
	"maxProperties": true,
}

func FuzzSanitizeSchema(f *testing.F) {
	f.Add(`{"type":"object","properties":{"a":{"$ref":"#/$defs/A"}},"$defs":{"A":{"type":["string","null"],"const":"x"}}}`)
	f.Add(`{"allOf":[{"properties":{"a":{"type":"integer","enum":[1]}}},{"required":["a"]}],"oneOf":[{"type":"null"}]}`)
	f.Add(`{"items":[{"prefixItems":true}],"examples":[],"exclusiveMaximum":true,"$ref":"#"}`)
	f.Add(`[]`)
	f.Fuzz(func(t *testing.T, in string) {
		s, err := sanitizeSchema(json.RawMessage(in), true)
		if err != nil || s == nil {
			return
		}
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("invalid output %s: %v", b, err)
		}
		checkSchemaKeys(t, v, 0)
	})
}

func checkSchemaKeys(t *testing.T, v any, depth int) {
	m, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("schema %v is not an object", v)
	}
	for k, val := range m {
		if !allowedSchemaKeys[k] {
			t.Fatalf("key %q is not in Gemini's Schema: %v", k, m)
		}
		switch k {
		case "items":
			checkSchemaKeys(t, val, depth+1)
		case "properties":
			for _, p := range val.(map[string]any) {
				checkSchemaKeys(t, p, depth+1)
			}
		case "anyOf":
			for _, p := range val.([]any) {
				checkSchemaKeys(t, p, depth+1)
			}
		case "enum":
			for _, e := range val.([]any) {
				if _, ok := e.(string); !ok {
					t.Fatalf("non-string enum value %v", e)
				}
			}
		}
	}
}

func FuzzStreamDecode(f *testing.F) {
	f.Add([]byte("data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"Hi\"}],\"role\":\"model\"},\"finishReason\":\"STOP\",\"index\":0}],\"usageMetadata\":{\"promptTokenCount\":3,\"candidatesTokenCount\":1}}\r\n\r\n"))
	f.Add([]byte("data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"t\",\"thought\":true},{\"functionCall\":{\"name\":\"f\",\"args\":{\"a\":[1]}},\"thoughtSignature\":\"c2ln\"}]}}]}\n\ndata: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"\"}]},\"finishReason\":\"STOP\"}]}\n\n"))
	f.Add([]byte("data: {\"promptFeedback\":{\"blockReason\":\"SAFETY\"}}\n\n"))
	f.Add([]byte("data: {\"error\":{\"code\":429,\"message\":\"slow\",\"status\":\"RESOURCE_EXHAUSTED\"}}\n\n"))
	f.Add([]byte("data: {\"candidates\":[{\"finishReason\":\"MALFORMED_FUNCTION_CALL\"}]}\n\n"))
	f.Add([]byte("data: {\"candidates\":[{\"content\":\n\n"))
	f.Add([]byte(": ping\r\revent: x\rdata: [DONE]\r\r\xef\xbb\xbfdata: {}\n"))
	f.Add([]byte("data: {\"usageMetadata\":{\"promptTokenCount\":\"12\",\"thoughtsTokenCount\":1e3}}\n\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		st := newStream(context.Background(), "gemini", upstreamhttp.NewAttempt(context.Background(), 0),
			io.NopCloser(bytes.NewReader(body)), 0, nil, func(b []byte) []byte { return b })
		defer st.Close()
		done := make(chan struct{})
		var events []providers.Event
		go func() {
			defer close(done)
			for st.Next() {
				events = append(events, st.Current())
				if len(events) > 4*len(body)+4 {
					t.Errorf("%d events from %d bytes", len(events), len(body))
					return
				}
			}
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("the stream hangs")
		}
		finishes, usages, calls := 0, 0, 0
		for i, ev := range events {
			switch ev.Type {
			case providers.EventFinish:
				finishes++
			case providers.EventUsage:
				usages++
				if i != len(events)-1 {
					t.Fatalf("usage is not the last event: %+v", events)
				}
				if u := ev.Usage; u.Input < 0 || u.CacheRead < 0 || u.Output < 0 || u.Reasoning < 0 {
					t.Fatalf("negative usage %+v", u)
				}
			case providers.EventText, providers.EventReasoning, providers.EventToolCall:
				if finishes > 0 {
					t.Fatalf("content after the finish: %+v", events)
				}
				if ev.Type == providers.EventToolCall {
					if ev.Index != calls || ev.ToolCall.ID == "" || !json.Valid([]byte(ev.ToolCall.Arguments)) {
						t.Fatalf("bad tool call event %+v", ev)
					}
					calls++
				}
			}
		}
		if finishes > 1 || usages > 1 {
			t.Fatalf("%d finishes, %d usages", finishes, usages)
		}
		if (st.Err() == nil) != (finishes == 1) {
			t.Fatalf("err %v with %d finishes", st.Err(), finishes)
		}
		if err := st.Err(); err != nil {
			if _, ok := providers.AsUpstreamError(err); !ok {
				t.Fatalf("error %v is not an *UpstreamError", err)
			}
		}
	})
}
