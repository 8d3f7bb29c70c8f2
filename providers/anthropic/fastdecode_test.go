package anthropic

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/modelgateway/caddy-modelgateway/internal/rawjson"
	"github.com/modelgateway/caddy-modelgateway/internal/wiretest"
)

// fastResponses are message bodies as the API sends them; the fast path must take them all.
var fastResponses = []string{
	messageResponse,
	benchResponse,
	`{"id":"msg_01","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[{"type":"text","text":"Hello!\nHow can I help you today?"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":12,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":14,"service_tier":"standard"}}`,
	`{"id":"msg_02","type":"message","role":"assistant","model":"claude-opus-4-1","content":[{"type":"text","text":"1, 2, 3"}],"stop_reason":"stop_sequence","stop_sequence":"4","usage":{"input_tokens":20,"output_tokens":8}}`,
	`{"id":"msg_03","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"thinking","thinking":"The user asks for \"x\".\n\nLet me think\u2026 \ud83e\udd14","signature":"ErUBCkYIBxgCIkD+/=="},{"type":"redacted_thinking","data":"EmwKAhgBEgy3va3pzix/LafPsn4aDFIT"},{"type":"text","text":"Voilà : 日本語 🎉","citations":null}],"stop_reason":"max_tokens","stop_sequence":null,"usage":{"input_tokens":472,"cache_creation_input_tokens":100,"cache_read_input_tokens":2000,"cache_creation":{"ephemeral_5m_input_tokens":100,"ephemeral_1h_input_tokens":0},"output_tokens":2048,"output_tokens_details":{"thinking_tokens":1500}}}`,
	`{"id":"msg_04","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"server_tool_use","id":"srvtoolu_01","name":"web_search","input":{"query":"weather Paris"}},{"type":"web_search_tool_result","tool_use_id":"srvtoolu_01","content":[{"type":"web_search_result","url":"https://example.com","title":"Paris","encrypted_content":"Eo8B","page_age":null}]},{"type":"text","text":"It is sunny.","citations":[{"type":"web_search_result_location","url":"https://example.com","title":"Paris","cited_text":"sunny"}]}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":3000,"output_tokens":50,"server_tool_use":{"web_search_requests":1}},"container":null}`,
	`{"id":"msg_05","type":"message","role":"assistant","model":"claude-haiku-4-5","content":[{"type":"tool_use","id":"toolu_01","name":"list_files","input":{}}],"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":5,"output_tokens":1}}`,
	`{"id":"msg_06","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":"max_tokens","stop_sequence":null,"usage":{"input_tokens":5,"output_tokens":0}}`,
	`{"model":"m","id":"x","usage":null,"type":"message","content":null,"stop_reason":"refusal","role":"assistant"}`,
}

// fastRequests are Messages requests as clients send them; the fast path must take them all.
var fastRequests = []string{
	multiTurnRequest,
	`{"model":"claude-sonnet-4-5","max_tokens":1024,"messages":[{"role":"user","content":"Hello, Claude"}]}`,
	`{"model":"claude-sonnet-4-5","max_tokens":1024,"system":"You are a helpful assistant.\nAnswer in French.","messages":[{"role":"user","content":"Bonjour"},{"role":"assistant","content":"Bonjour !"},{"role":"user","content":"Ça va ?"}],"temperature":0.7,"top_p":0.95,"top_k":5,"stop_sequences":["\n\nHuman:","END"],"stream":false,"metadata":{"user_id":"13803d75-b4b5-4c3e-b2a2-6f21399b021b"}}`,
	`{"model":"claude-opus-4-1","max_tokens":2048,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}},{"type":"image","source":{"type":"url","url":"https://example.com/cat.jpg"}},{"type":"document","source":{"type":"file","file_id":"file_011CNha8iCJcU1wXNR6q4V8w"},"title":"Vet report"},{"type":"text","text":"What is in these images and this report?","cache_control":{"type":"ephemeral"}}]}]}`,
	`{"model":"claude-sonnet-4-5","max_tokens":16000,"thinking":{"type":"adaptive"},"output_config":{"effort":"high","format":{"type":"json_schema","schema":{"type":"object","properties":{"answer":{"type":"string"}},"required":["answer"],"additionalProperties":false}}},"messages":[{"role":"user","content":"Answer in JSON."}]}`,
	`{"model":"claude-sonnet-4-5","max_tokens":1024,"tools":[{"type":"custom","name":"get_weather","description":"Get the weather","input_schema":{"type":"object","properties":{"city":{"type":"string"}}}},{"type":"web_search_20250305","name":"web_search","max_uses":5}],"tool_choice":{"type":"tool","name":"get_weather","disable_parallel_tool_use":false},"messages":[{"role":"user","content":"Weather?"},{"role":"assistant","content":[{"type":"tool_use","id":"toolu_01","name":"get_weather","input":{"city":"Paris"}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_01","is_error":true,"content":"city not found"}]}]}`,
	`{"model":"claude-haiku-4-5","max_tokens":0,"thinking":{"type":"disabled"},"tool_choice":{"type":"none"},"system":null,"messages":[{"role":"user","content":"warm the cache"}],"temperature":null,"stream":true}`,
	`{
  "model": "claude-sonnet-4-5",
  "max_tokens": 4096,
  "system": [{"type": "text", "text": "Tu es un assistant. Réponds \u00e0 la question."}],
  "messages": [
    {"role": "user", "content": [{"type": "text", "text": "Qu'est-ce que \"JSON\" ?"}]}
  ],
  "temperature": 1e-1,
  "top_k": -1,
  "service_tier": "auto",
  "context_management": {"edits": []}
}`,
}

// Inputs the fast path may leave to json.Unmarshal, kept as fuzz seeds for their shapes.
var edgeResponses = []string{
	`{"id":"a","id":null}`,
	`{"content":[{"type":"text","text":"a"}],"content":[{"id":"b"}]}`,
	`{"ID":"x","Type":"message"}`,
	`{"ſtop_reason":"end_turn"}`,
	`{"stop_re\u0061son":"end_turn"}`,
	"{\"type\":\"message\",\"content\":[{\"type\":\"text\",\"text\":\"bad \xff utf8\"}]}",
	`{"type":"message","content":[{"type":"text","text":"lone \ud800 surrogate"}]}`,
	`{"type":"message","content":[null,{"type":"text","text":null,"is_error":null,"input":null,"source":null}]}`,
	`{"type":"message","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"UE5H"}}]}`,
	`{"type":"message","stop_reason":1}`,
	`{"type":"message","content":{}}`,
	`null`,
	`[]`,
	`{"type":"message",}`,
}

var edgeRequests = []string{
	`{"max_tokens":1.0,"messages":[]}`,
	`{"max_tokens":1e3}`,
	`{"max_tokens":99999999999999999999}`,
	`{"temperature":1e400}`,
	`{"temperature":"0.5"}`,
	`{"stream":"true"}`,
	`{"stop_sequences":[null,"x"]}`,
	`{"stop_sequences":["a",1]}`,
	`{"messages":[null,{"role":"user","content":null}],"tools":[null],"tools":[]}`,
	`{"tool_choice":null,"thinking":null,"metadata":null,"output_config":{"format":null}}`,
	`{"tool_choice":{"type":"auto","type":"any"}}`,
	`{"Model":"x","model":"y"}`,
	`{"messages":[{"role":"user","content":"x","Content":"y"}]}`,
	`{"system":"\ud83c\udf89 \u00e9 \/ \b\f\r\t"}`,
	"{\"model\":\"\xc3\x28\"}",
	`"string"`,
}

func FuzzMessageFastDecode(f *testing.F) {
	for _, s := range slices.Concat(fastResponses, edgeResponses) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkFastDecode(t, data, func() fastDecoder { return new(Message) })
	})
}

func FuzzRequestFastDecode(f *testing.F) {
	for _, s := range slices.Concat(fastRequests, edgeRequests) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkFastDecode(t, data, func() fastDecoder { return new(MessagesRequest) })
	})
}

func FuzzValidJSON(f *testing.F) {
	for _, s := range slices.Concat(fastResponses[2:4], fastRequests[1:3], edgeResponses) {
		f.Add([]byte(s))
	}
	for _, s := range []string{``, ` `, `0`, ` -0.5e+10 `, `01`, `1.`, `.5`, `-`, `1e`, `1E-`, `tru`, `true `, `nulls`, `"\u00"`, `"\u00zz"`, `"\x"`, "\"\x01\"", "\"\xff\"", `[1,]`, `{"a" 1}`, `{"a":1,}`, `{,}`, `[}`, `{]`, `{"a":[{"b":{}}]}`, `[[[]]] x`,
		strings.Repeat(`[`, 64) + strings.Repeat(`]`, 64), strings.Repeat(`{"a":`, 70) + `1` + strings.Repeat(`}`, 70)} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if got, want := rawjson.Valid(data), json.Valid(data); got != want {
			t.Fatalf("rawjson.Valid(%q) = %v, json.Valid says %v", data, got, want)
		}
	})
}

// TestValidJSONDepth checks the depth limit, which rawjson.Valid leaves to json.Valid.
func TestValidJSONDepth(t *testing.T) {
	for _, depth := range []int{63, 64, 65, 10000, 10001} {
		data := []byte(strings.Repeat(`[`, depth) + strings.Repeat(`]`, depth))
		if got, want := rawjson.Valid(data), json.Valid(data); got != want {
			t.Errorf("depth %d: rawjson.Valid %v, json.Valid %v", depth, got, want)
		}
	}
}

type fastDecoder interface{ fastDecode(data []byte) bool }

// checkFastDecode checks that whatever the fast path takes, json.Unmarshal decodes to the
// same struct, and that the struct does not share memory with the input.
func checkFastDecode(t *testing.T, data []byte, fresh func() fastDecoder) {
	in := bytes.Clone(data)
	fast := fresh()
	if !fast.fastDecode(in) {
		return
	}
	clear(in) // RawMessage fields must hold copies
	if !json.Valid(data) {
		t.Fatalf("fast path took invalid JSON %q", data)
	}
	want := fresh()
	if err := json.Unmarshal(data, want); err != nil {
		t.Fatalf("fast path took %q, which json.Unmarshal rejects: %v", data, err)
	}
	if !reflect.DeepEqual(fast, want) {
		t.Fatalf("%q:\nfast path %s\nUnmarshal %s", data, dump(fast), dump(want))
	}
}

// dump shows a struct with its pointers followed, for failure messages.
func dump(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestFastDecodeTakesRealisticBodies keeps the fast path from turning into dead code: the
// bodies real clients and the API send must not fall back to json.Unmarshal.
func TestFastDecodeTakesRealisticBodies(t *testing.T) {
	for i, s := range fastResponses {
		checkFastDecode(t, []byte(s), func() fastDecoder { return new(Message) })
		if !new(Message).fastDecode([]byte(s)) {
			t.Errorf("response %d fell back to json.Unmarshal: %s", i, s)
		}
	}
	for i, s := range fastRequests {
		checkFastDecode(t, []byte(s), func() fastDecoder { return new(MessagesRequest) })
		if !new(MessagesRequest).fastDecode([]byte(s)) {
			t.Errorf("request %d fell back to json.Unmarshal: %s", i, s)
		}
	}
	for _, b := range requestBlocks(t) {
		checkFastDecode(t, []byte(b), func() fastDecoder { return new(ContentBlock) })
		if !new(ContentBlock).fastDecode([]byte(b)) {
			t.Errorf("request content block fell back to json.Unmarshal: %s", b)
		}
	}
}

// requestBlocks returns the content blocks of the messages of fastRequests, which
// DecodeRequest reads one by one with ContentBlock's own fast decoder.
func requestBlocks(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, s := range fastRequests {
		var r MessagesRequest
		if err := json.Unmarshal([]byte(s), &r); err != nil {
			t.Fatalf("%v: %s", err, s)
		}
		for _, m := range r.Messages {
			if c := bytes.TrimSpace(m.Content); len(c) > 0 && c[0] == '[' {
				blocks, err := rawjson.Elements(c)
				if err != nil {
					t.Fatalf("%v: %s", err, c)
				}
				for _, b := range blocks {
					out = append(out, string(b))
				}
			}
		}
	}
	return out
}

// TestSeedsSetEveryField keeps the realistic seeds setting every field of the types the
// fast decoders fill (as json.Unmarshal decodes them): a field added to types.go fails here
// until a seed sets it, and after that the TakesRealistic tests until the fast path decodes
// it. Each type has one decoder wherever it is held, so a field is covered once a seed sets
// it anywhere (wiretest.ByType): an image source in a request's block covers the blocks of
// a response too.
func TestSeedsSetEveryField(t *testing.T) {
	roots := []struct {
		seeds []string
		typ   reflect.Type
	}{
		{fastResponses, reflect.TypeFor[Message]()},
		{fastRequests, reflect.TypeFor[MessagesRequest]()},
		{fastStreamEvents, reflect.TypeFor[streamEvent]()},
		{fastUsages, reflect.TypeFor[Usage]()},
		{requestBlocks(t), reflect.TypeFor[ContentBlock]()},
	}
	types := make([]reflect.Type, len(roots))
	for i, r := range roots {
		types[i] = r.typ
	}
	cov := wiretest.NewCoverage(wiretest.ByType, types...)
	for _, r := range roots {
		for _, s := range r.seeds {
			v := reflect.New(r.typ)
			if err := json.Unmarshal([]byte(s), v.Interface()); err != nil {
				t.Fatalf("%v: %s", err, s)
			}
			cov.Mark(v.Interface())
		}
	}
	for _, field := range cov.Unset() {
		t.Errorf("no realistic seed sets %s", field)
	}
}

// TestFastDecodeEveryField holds each fast decoder to every field of its type without
// waiting for a seed: a value with every field set (wiretest.Fill, a field added to
// types.go included), as json.Marshal writes it, must take the fast path and decode as
// json.Unmarshal does.
func TestFastDecodeEveryField(t *testing.T) {
	for _, fresh := range []func() fastDecoder{
		func() fastDecoder { return new(Message) },
		func() fastDecoder { return new(MessagesRequest) },
		func() fastDecoder { return new(ContentBlock) },
		func() fastDecoder { return new(Usage) },
		newStreamEvent,
	} {
		v := fresh()
		wiretest.Fill(reflect.ValueOf(v).Elem(), "<é>\n\"\u2028", nil)
		data, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("%T: %v", v, err)
		}
		if !fresh().fastDecode(data) {
			t.Errorf("%T: the fast path refused %s", v, data)
			continue
		}
		checkFastDecode(t, data, fresh)
	}
}

// TestFastDecodeEdges runs the edge seeds through the same check as the fuzz targets, so that
// a plain go test covers them.
func TestFastDecodeEdges(t *testing.T) {
	for _, s := range edgeResponses {
		checkFastDecode(t, []byte(s), func() fastDecoder { return new(Message) })
	}
	for _, s := range edgeRequests {
		checkFastDecode(t, []byte(s), func() fastDecoder { return new(MessagesRequest) })
	}
}

// TestFastDecodeMutations checks the fast path against json.Unmarshal on every body made
// from a realistic one by one change: a value replaced with one of another type or an odd
// one, a key repeated, upper-cased, escaped or folded. Random bytes seldom reach these.
func TestFastDecodeMutations(t *testing.T) {
	for _, c := range []struct {
		bodies []string
		fresh  func() fastDecoder
	}{
		{fastResponses, func() fastDecoder { return new(Message) }},
		{fastRequests, func() fastDecoder { return new(MessagesRequest) }},
	} {
		total, fast := 0, 0
		for _, body := range c.bodies {
			for _, m := range mutations([]byte(body)) {
				checkFastDecode(t, m, c.fresh)
				total++
				if c.fresh().fastDecode(m) {
					fast++
				}
			}
		}
		t.Logf("%T: %d of %d mutated bodies on the fast path", c.fresh(), fast, total)
	}
}

// replacements are the values mutations puts in place of each value.
var replacements = []string{`null`, `true`, `false`, `0`, `-0`, `7`, `-1.5`, `1e3`, `1E-400`, `1e400`,
	`99999999999999999999`, `""`, `"x"`, `"a\nb\u00e9\ud83c\udf89\/"`, `"\ud800\u0041"`, "\"\xff\"", "\"\\n\xff\"",
	`[]`, `[null]`, `["x"]`, `[{}]`, `{}`, `{"type":"text","text":"t"}`}

// mutations returns the bodies made from body by one change each.
func mutations(body []byte) [][]byte {
	var out [][]byte
	splice := func(start, end int, with string) {
		m := append(append(bytes.Clone(body[:start]), with...), body[end:]...)
		out = append(out, m)
	}
	var walk func(start, end int)
	walk = func(start, end int) {
		for _, r := range replacements {
			splice(start, end, r)
		}
		v := body[start:end]
		switch v[0] {
		case '{':
			_ = rawjson.Each(v, func(key []byte, f rawjson.Field) bool {
				ks, ke := start+f.KeyStart, start+f.KeyStart+len(key)+2
				k, value := string(key), string(v[f.ValueStart:f.ValueEnd])
				splice(ks, ke, `"`+strings.ToUpper(k)+`"`)
				splice(ks, ke, fmt.Sprintf(`"\u%04x%s"`, k[0], k[1:]))
				splice(ks, ke, `"`+strings.Replace(k, "s", "ſ", 1)+`"`)
				splice(ks, ks, `"`+k+`":null,`)
				for _, again := range []string{value, `null`, `{}`, `[{}]`} {
					splice(start+f.ValueEnd, start+f.ValueEnd, `,"`+k+`":`+again)
				}
				walk(start+f.ValueStart, start+f.ValueEnd)
				return true
			})
		case '[':
			_ = rawjson.EachElement(v, func(elem []byte) bool {
				at := start + cap(v) - cap(elem) // elem is a slice of v
				walk(at, at+len(elem))
				return true
			})
		}
	}
	trimmed := bytes.TrimSpace(body)
	at := bytes.Index(body, trimmed)
	walk(at, at+len(trimmed))
	return out
}

// benchResponse is a typical answer: thinking with its signature, then a few paragraphs of
// markdown, with their newlines and quotes escaped.
var benchResponse = func() string {
	quote := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	thinking := strings.Repeat("The user wants a summary of the report. Key points:\n- revenue grew 12%\n- costs \"flat\"\n", 6)
	text := strings.Repeat("## Summary\n\nRevenue grew **12%** year over year, driven by the \"Pro\" plan; costs stayed flat.\n\n```go\nfmt.Println(\"ok\")\n```\n\n", 12)
	return `{"id":"msg_01XFDUDYJgAACzvnptvVoYEL","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[` +
		`{"type":"thinking","thinking":` + quote(thinking) + `,"signature":"EqQBCkYIBxgCKkBR7ccBvp3sSwvNKqXbVv6nIQ9RUbKFh5P2bwyAsbIR4dPqTOaz9tRfXUfbjOEnsmKSGNPkPe1GxeoPt2zS0Q8AEgwLCfSU6dr8vM4wQd0aDP6Vt+5dhrPmhN6CCCIw5MIE7WWfz1VjQ1yCN/FyRMT0F5RlZHEWWZb0KKCNCkh07p7bmPSBzd0oyKxj5Gz9KhBrJV9YMpnDSJEdZ/Wq+WKsGAI="},` +
		`{"type":"text","text":` + quote(text) + `}],` +
		`"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":1523,"cache_creation_input_tokens":0,"cache_read_input_tokens":1024,"cache_creation":{"ephemeral_5m_input_tokens":0,"ephemeral_1h_input_tokens":0},"output_tokens":612,"service_tier":"standard"}}`
}()

// fastUsages are usage objects as the API sends them, in a message and at either end of a
// stream; the usage decoder must take them all.
var fastUsages = []string{
	`{"input_tokens":12,"output_tokens":30}`,
	`{"input_tokens":5,"cache_creation_input_tokens":100,"cache_read_input_tokens":2000,"output_tokens":7,"output_tokens_details":{"thinking_tokens":3},"service_tier":"standard","server_tool_use":{"web_search_requests":1}}`,
	`{"output_tokens":15}`,
}

// FuzzUsageFastDecode: what the usage decoder takes, it reads as json.Unmarshal does.
func FuzzUsageFastDecode(f *testing.F) {
	for _, s := range slices.Concat(fastUsages, []string{
		`{"input_tokens":null,"output_tokens":12.0,"output_tokens_details":null}`,
		`{"input_tokens":1,"input_tokens":2}`, `{"Input_tokens":1}`, `{"output_tokens":"3"}`, `{}`, `[]`, `null`,
	}) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !json.Valid(data) {
			return
		}
		var fast, want Usage
		if !fast.fastDecode(data) {
			return
		}
		if err := json.Unmarshal(data, &want); err != nil {
			t.Fatalf("%s: taken by the fast path, refused by json.Unmarshal: %v", data, err)
		}
		if !reflect.DeepEqual(fast, want) {
			t.Fatalf("%s: fast %+v, json.Unmarshal %+v", data, fast, want)
		}
	})
}

// TestUsageFastDecodeTakesRealisticUsage keeps the usage decoder from turning into dead
// code: the usage the API sends takes it, and decodes as json.Unmarshal does.
func TestUsageFastDecodeTakesRealisticUsage(t *testing.T) {
	for _, s := range fastUsages {
		checkFastDecode(t, []byte(s), func() fastDecoder { return new(Usage) })
		var u Usage
		if !u.fastDecode([]byte(s)) {
			t.Errorf("the usage decoder refused %s", s)
		}
	}
}
