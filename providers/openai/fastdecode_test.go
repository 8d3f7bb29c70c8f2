package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/modelgateway/caddy-modelgateway/internal/wiretest"
)

// benchChatResponse is an OpenAI chat.completion as the API sends it.
const benchChatResponse = `{
  "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
  "object": "chat.completion",
  "created": 1741570283,
  "model": "gpt-4o-2024-08-06",
  "choices": [
    {
      "index": 0,
      "message": {
        "role": "assistant",
        "content": "The image shows a wooden boardwalk path running through a lush green field or meadow. The sky is bright blue with some scattered clouds, giving the scene a serene and peaceful atmosphere.",
        "refusal": null,
        "annotations": []
      },
      "logprobs": null,
      "finish_reason": "stop"
    }
  ],
  "usage": {
    "prompt_tokens": 1117,
    "completion_tokens": 46,
    "total_tokens": 1163,
    "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
    "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0, "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}
  },
  "service_tier": "default",
  "system_fingerprint": "fp_fc9f1d7035"
}`

// benchChatRequest is an agent's request as SDKs write it: a system prompt, a tool round
// trip, two tools with schemas, streaming with usage.
const benchChatRequest = `{"model":"gpt-4o-mini","messages":[` +
	`{"role":"system","content":"You are a helpful assistant. Answer briefly and use the tools when the question needs live data."},` +
	`{"role":"user","content":"What is the weather in Paris and what time is it there?"},` +
	`{"role":"assistant","content":null,"tool_calls":[{"id":"call_Kx9YQ2","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\",\"unit\":\"celsius\"}"}},` +
	`{"id":"call_7bLm0P","type":"function","function":{"name":"get_time","arguments":"{\"tz\":\"Europe/Paris\"}"}}]},` +
	`{"role":"tool","tool_call_id":"call_Kx9YQ2","content":"{\"temperature\":18,\"conditions\":\"partly cloudy\"}"},` +
	`{"role":"tool","tool_call_id":"call_7bLm0P","content":"14:05"},` +
	`{"role":"user","content":[{"type":"text","text":"Thanks. Should I take an umbrella?"}]}],` +
	`"tools":[{"type":"function","function":{"name":"get_weather","description":"Get the current weather for a city.",` +
	`"parameters":{"type":"object","properties":{"city":{"type":"string","description":"City name"},"unit":{"type":"string","enum":["celsius","fahrenheit"]}},"required":["city"],"additionalProperties":false},"strict":true}},` +
	`{"type":"function","function":{"name":"get_time","description":"Get the local time in a time zone.",` +
	`"parameters":{"type":"object","properties":{"tz":{"type":"string","description":"IANA time zone"}},"required":["tz"]}}}],` +
	`"tool_choice":"auto","parallel_tool_calls":true,"temperature":0.7,"top_p":1,"max_tokens":512,` +
	`"stream":true,"stream_options":{"include_usage":true},"user":"user-1234"}`

// chatResponseSeeds are chat.completion bodies as OpenAI and compatible servers send them;
// the fast path must handle every one.
var chatResponseSeeds = []string{
	benchChatResponse,
	`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-4o","choices":[{"index":0,
		"message":{"role":"assistant","content":"Hello!","refusal":null},"logprobs":null,"finish_reason":"stop"}],
		"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15,
		"prompt_tokens_details":{"cached_tokens":4,"audio_tokens":0},
		"completion_tokens_details":{"reasoning_tokens":2}}}`,
	// Tool calls, arguments as the API sends them and as some clients send them.
	`{"id":"chatcmpl-t","object":"chat.completion","created":1,"model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":"Let me check.","tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}},{"id":"call_2","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Rome\"}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":20,"completion_tokens":9,"total_tokens":29}}`,
	`{"id":"x","model":"llama","choices":[{"index":0,"message":{"role":"assistant","content":null,
		"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":{"a": [1, 2]}}},
		{"id":"c2","type":"function","function":{"name":"g","arguments":"{}"}},
		{"id":"c3","type":"function","function":{"name":"h","arguments":null}}]},"finish_reason":"stop"}]}`,
	// Refusal, content filter.
	`{"id":"chatcmpl-r","object":"chat.completion","created":1741570283,"model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":null,"refusal":"I'm sorry, I can't help with that."},"logprobs":null,"finish_reason":"content_filter"}],"usage":{"prompt_tokens":12,"completion_tokens":10,"total_tokens":22}}`,
	// DeepSeek: reasoning_content and its cache counters.
	`{"id":"930c60df-bf64-41c9-a88e-3ec75f81e00e","object":"chat.completion","created":1705651092,"model":"deepseek-reasoner","choices":[{"index":0,"message":{"role":"assistant","content":"4","reasoning_content":"2+2 is 4.\nSo the answer is 4."},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":16,"completion_tokens":10,"total_tokens":26,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":8},"prompt_cache_hit_tokens":0,"prompt_cache_miss_tokens":16},"system_fingerprint":"fp_7e73fd9a08"}`,
	// Groq and OpenRouter: reasoning, reasoning_details, float and null counters.
	`{"id":"gen-1","provider":"Groq","model":"qwen/qwq-32b","object":"chat.completion","created":1741570283,"choices":[{"logprobs":null,"finish_reason":"stop","native_finish_reason":"stop","index":0,"message":{"role":"assistant","content":"Yes.","refusal":null,"reasoning":"Think: yes.","reasoning_details":[{"type":"reasoning.text","text":"Think: yes.","format":"unknown","index":0}]}}],"usage":{"prompt_tokens":9.0,"completion_tokens":12,"total_tokens":21,"prompt_tokens_details":null,"completion_tokens_details":{"reasoning_tokens":null}},"x_groq":{"id":"req_01"}}`,
	// Mistral's reasoning models: content as an array of parts.
	`{"id":"m1","object":"chat.completion","model":"magistral-medium","created":1,"choices":[{"index":0,"message":{"role":"assistant","tool_calls":null,"content":[{"type":"thinking","thinking":[{"type":"text","text":"hm"}]},{"type":"text","text":"ok"}]},"finish_reason":"length"}],"usage":{"prompt_tokens":3,"total_tokens":7,"completion_tokens":4}}`,
	// vLLM: extra fields, stop_reason, logprobs object, usage with cache_write_tokens.
	`{"id":"cmpl-9","object":"chat.completion","created":1718000000,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"message":{"role":"assistant","content":"Bonjour","tool_calls":[]},"logprobs":{"content":[{"token":"Bon","logprob":-0.01,"bytes":[66,111,110],"top_logprobs":[]}]},"finish_reason":"stop","stop_reason":null}],"usage":{"prompt_tokens":5,"total_tokens":7,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":2,"cache_write_tokens":1}},"prompt_logprobs":null}`,
	// Two choices, null fields, escapes and non-ASCII text.
	`{"id":"chatcmpl-\u00e9","object":"chat.completion","created":0,"model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":"caf\u00e9 \"ok\"\n"},"finish_reason":null},{"index":1,"message":{"role":"assistant","content":"café ☕"},"finish_reason":"length"}],"usage":null,"system_fingerprint":null}`,
	// Gemini's OpenAI compatibility.
	`{"choices":[{"finish_reason":"stop","index":0,"message":{"content":"Hi there","role":"assistant"}}],"created":1741570283,"id":"abc","model":"gemini-2.0-flash","object":"chat.completion","usage":{"completion_tokens":3,"prompt_tokens":2,"total_tokens":5}}`,
	`{"choices":[{"message":{"content":"4","reasoning_content":"2+2"},"finish_reason":"stop"}]}`,
	`{"choices":[{"message":null,"finish_reason":"stop"},null]}`,
	`{"choices":[]}`,
	`{}`,
	`null`,
}

// chatResponseEdges are bodies the fast path may refuse; the fuzz test checks the ones it
// takes. They include the fuzzer's findings.
var chatResponseEdges = []string{
	`{"Choices":[{"message":{"content":"x"}}]}`,
	`{"choices":[{"message":{"CONTENT":"x"}}]}`,
	`{"choi\u0063es":[{"message":{"content":"x"}}]}`,
	"{\"usage\":{\"prompt_\xe2\x84\xaaokens\":1}}", // Kelvin sign: folds to k
	`{"choices":[{"index":0}],"choices":[{"finish_reason":"stop"}]}`,
	`{"usage":{"prompt_tokens":1},"usage":{"completion_tokens":2}}`,
	`{"id":"a","id":"b"}`,
	`{"x":1,"x":2,"id":"a"}`,
	"{\"id\":\"\xff\xfe\"}",
	"{\"id\":\"\xff\\n\"}",
	`{"created":1.0}`,
	`{"created":1e3}`,
	`{"created":99999999999999999999}`,
	`{"created":"1"}`,
	`{"choices":[{"index":1.5}]}`,
	`{"choices":{}}`,
	`{"choices":[1]}`,
	`{"choices":[{"message":[]}]}`,
	`{"choices":[{"message":{"tool_calls":[{"function":{"arguments":3}}]}}]}`,
	`{"choices":[{"message":{"refusal":3}}]}`,
	`{"usage":{"prompt_tokens":"3"}}`,
	`{"usage":{"prompt_tokens":1e400}}`,
	`{"usage":{"prompt_tokens":-1e30,"prompt_cache_hit_tokens":null}}`,
	`{"usage":{"prompt_cache_hit_tokens":7}}`,
	`{"usage":[]}`,
	`[]`,
	`"x"`,
	` {"id":"a"} `,
	`{"id":"a"} x`,
	`{"id":"a",}`,
	`{"id":tru}`,
	`{"id":"\x"}`,
	"{\"id\":\"a\tb\"}",
	`{"created":01}`,
	`{"created":-}`,
	`{"created":1.}`,
	`{"created":1e}`,
	`{"id":"\ud800"}`,
	`{"id":"\uD83D\uDE00"}`,
	``,
	` `,
	`{`,
	`nul`,
}

// deepBodies nest deeper than maxFastDepth: well-formed, but left to json.Unmarshal.
var deepBodies = []string{
	strings.Repeat(`{"a":`, maxFastDepth+1) + `1` + strings.Repeat(`}`, maxFastDepth+1),
	`{"choices":[{"logprobs":` + strings.Repeat(`[`, maxFastDepth) + strings.Repeat(`]`, maxFastDepth) + `}]}`,
}

// chatRequestSeeds are chat completions requests as SDKs and agents write them; the fast
// path must handle every one.
var chatRequestSeeds = []string{
	benchChatRequest,
	`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`,
	`{"model":"m","messages":[{"role":"developer","content":"be brief","name":"dev"},{"role":"user","content":[
		{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"data:image/png;base64,aGVsbG8=","detail":"low"}},
		{"type":"image_url","image_url":{"url":"https://x.test/a.png"}}]}]}`,
	// Response formats.
	`{"model":"gpt-4o-2024-08-06","messages":[{"role":"user","content":"Extract."}],"response_format":{"type":"json_schema","json_schema":{"name":"event","description":"An event","strict":true,"schema":{"type":"object","properties":{"name":{"type":"string"},"date":{"type":"string"}},"required":["name","date"],"additionalProperties":false}}}}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_object"},"stop":"\n\n","seed":42}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":10,"stop":["a","b"],"response_format":{"type":"text","json_schema":null}}`,
	// Tool choice as an object, and the Responses shape.
	`{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{}}}}],"tool_choice":{"type":"function","function":{"name":"f"}},"parallel_tool_calls":false}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"tool_choice":{"type":"function","name":"f"},"tools":null}`,
	// The sampling knobs of the API, most of them ignored by the gateway.
	`{"model":"gpt-4.1","messages":[{"role":"user","content":"x"}],"temperature":0,"top_p":0.95,"n":1,"presence_penalty":0.5,"frequency_penalty":-0.5,
		"logit_bias":{"50256":-100,"1734":5},"logprobs":true,"top_logprobs":3,"seed":7,"service_tier":"auto","store":false,
		"metadata":{"session":"abc"},"max_completion_tokens":2048,"reasoning_effort":"high","safety_identifier":"u-9f2",
		"prompt_cache_key":"k1","verbosity":"low","modalities":["text"],"prediction":{"type":"content","content":"x"},"web_search_options":{}}`,
	`{"model":"o3","messages":[{"role":"user","content":"x"}],"stream":true,"stream_options":{"include_usage":true,"include_obfuscation":false},"user":"alice"}`,
	`{"model":"m","messages":[{"role":"user","content":"x"}],"stream":false,"stream_options":null,"temperature":null,"max_tokens":null,"stop":null,"tool_choice":null,"user":null}`,
	// An assistant turn replayed with a refusal part, a null content and tool calls.
	`{"model":"m","messages":[{"role":"user","content":""},
		{"role":"assistant","content":[{"type":"text","text":"a"},{"type":"refusal","refusal":"b"}]},
		{"role":"assistant","content":null,"refusal":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":{"x":1}}}]},
		{"role":"tool","tool_call_id":"c1","content":[{"type":"text","text":"r"}]},
		{"role":"assistant","audio":null,"function_call":null,"content":"done"}]}`,
	// Pretty-printed, as some clients send it.
	"{\n  \"model\": \"llama3\",\n  \"messages\": [\n    {\n      \"role\": \"user\",\n      \"content\": \"hi\"\n    }\n  ],\n  \"temperature\": 1e-1,\n  \"max_tokens\": -1\n}\n",
	`{"messages":[{"role":"user","content":"caf\u00e9 \"q\" \/"}],"model":"a\tb"}`,
	`{"messages":[null,{}],"tools":[null,{"function":null}]}`,
	`{"messages":[]}`,
	`{}`,
	`null`,
}

// chatRequestEdges are requests the fast path may refuse.
var chatRequestEdges = []string{
	`{"Model":"m","messages":[{"role":"user","content":"x"}]}`,
	`{"messages":[{"Role":"user","content":"x"}]}`,
	`{"messages":[{"role":"user"}],"messages":[{"content":"x"}]}`,
	`{"stream_options":{"include_usage":true},"stream_options":{}}`,
	`{"temperature":"hot"}`,
	`{"temperature":1e400}`,
	`{"max_tokens":1.5}`,
	`{"max_tokens":9223372036854775808}`,
	`{"stream":1}`,
	`{"stream":"true"}`,
	`{"parallel_tool_calls":"false"}`,
	`{"stop":3}`,
	`{"stop":["a",1]}`,
	`{"stop":["a",null]}`,
	`{"tools":{}}`,
	`{"tools":[{"function":{"strict":1}}]}`,
	`{"messages":[{"tool_calls":[{"function":{"arguments":true}}]}]}`,
	`{"messages":"hi"}`,
	`{"response_format":"json"}`,
	`{"response_format":{"json_schema":[]}}`,
	"{\"model\":\"\xc3\x28\"}",
	"{\"messages\":[{\"content\":\"\xc3\x28\"}]}",
	"{\"model\xc3\xa9\":\"m\"}",
	`{"model":"m"`,
	`{"model":"m",}`,
}

// FuzzChatResponseFastDecode checks that whenever the fast path takes a body, it decodes it
// exactly as json.Unmarshal does, and that it never takes malformed JSON.
func FuzzChatResponseFastDecode(f *testing.F) {
	for _, s := range append(chatResponseSeeds, chatResponseEdges...) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkFastDecode(t, data, (*ChatResponse).fastDecode)
	})
}

// FuzzChatRequestFastDecode is FuzzChatResponseFastDecode for requests.
func FuzzChatRequestFastDecode(f *testing.F) {
	for _, s := range append(chatRequestSeeds, chatRequestEdges...) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkFastDecode(t, data, (*ChatRequest).fastDecode)
	})
}

// checkFastDecode runs fastDecode on data and, when it takes it, compares the result with
// json.Unmarshal's. It then overwrites its copy of data: nothing decoded may share the
// caller's buffer. It reports whether the fast path took data.
func checkFastDecode[T any](t *testing.T, data []byte, fastDecode func(*T, []byte) bool) bool {
	t.Helper()
	buf := bytes.Clone(data) // the fuzzing engine's input must not be modified
	var fast, want T
	handled := fastDecode(&fast, buf)
	if !json.Valid(data) {
		if handled {
			t.Fatalf("fast path took malformed JSON %q", data)
		}
		return false
	}
	if !handled {
		return false
	}
	if err := json.Unmarshal(data, &want); err != nil {
		t.Fatalf("fast path took %q, json.Unmarshal fails: %v", data, err)
	}
	if !reflect.DeepEqual(fast, want) {
		t.Fatalf("fast path decodes %q as\n%s\njson.Unmarshal as\n%s", data, dump(fast), dump(want))
	}
	for i := range buf {
		buf[i] = 'x'
	}
	if !reflect.DeepEqual(fast, want) {
		t.Fatalf("what the fast path decodes from %q shares its buffer", data)
	}
	return true
}

// dump shows a decoded struct both ways: JSON tells nil from empty slices, %+v shows every
// field.
func dump(v any) string {
	b, _ := json.Marshal(v)
	return fmt.Sprintf("%s\n%+v", b, v)
}

// TestFastDecodeTakesRealisticBodies keeps the fast path from silently becoming dead code:
// every realistic body must take it, and decode as json.Unmarshal does.
func TestFastDecodeTakesRealisticBodies(t *testing.T) {
	for _, s := range chatResponseSeeds {
		if !checkFastDecode(t, []byte(s), (*ChatResponse).fastDecode) {
			t.Errorf("response fast path refused %s", s)
		}
	}
	for _, s := range chatRequestSeeds {
		if !checkFastDecode(t, []byte(s), (*ChatRequest).fastDecode) {
			t.Errorf("request fast path refused %s", s)
		}
	}
}

// TestSeedsSetEveryField keeps the realistic seeds setting every field of the wire types
// (as json.Unmarshal decodes them): a field added to types.go then fails here until a seed
// sets it, and after that TestFastDecodeTakesRealisticBodies until the fast path decodes it.
func TestSeedsSetEveryField(t *testing.T) {
	check := func(seeds []string, typ reflect.Type) {
		cov := wiretest.NewCoverage(wiretest.ByPath, typ)
		for _, s := range seeds {
			v := reflect.New(typ)
			if err := json.Unmarshal([]byte(s), v.Interface()); err != nil {
				t.Fatalf("%v: %s", err, s)
			}
			cov.Mark(v.Interface())
		}
		for _, path := range cov.Unset() {
			t.Errorf("no realistic seed sets %s", path)
		}
	}
	check(chatResponseSeeds, reflect.TypeFor[ChatResponse]())
	check(chatRequestSeeds, reflect.TypeFor[ChatRequest]())
}

// TestFastDecodeRefuses pins the refusals that keep the fast path exact: each of these
// decodes differently (or fails) with json.Unmarshal than a naive exact-key decoder would.
func TestFastDecodeRefuses(t *testing.T) {
	for _, s := range []string{
		`{"Choices":[{"message":{"content":"x"}}]}`,
		`{"choi\u0063es":[]}`,
		"{\"usage\":{\"prompt_\xe2\x84\xaaokens\":1}}",
		`{"choices":[{"index":0}],"choices":[{"finish_reason":"stop"}]}`,
		`{"created":1.0}`,
		`{"id":"a"} x`,
		deepBodies[0],
		deepBodies[1],
	} {
		var cr ChatResponse
		if cr.fastDecode([]byte(s)) {
			t.Errorf("response fast path took %s", s)
		}
	}
	// Invalid UTF-8 was once refused here; rawjson.String now rewrites it with U+FFFD as
	// encoding/json does, so the fast path takes it and must agree.
	invalid := []byte("{\"id\":\"a\xffb\"}")
	var fast, want ChatResponse
	if !fast.fastDecode(invalid) || json.Unmarshal(invalid, &want) != nil || fast.ID != want.ID {
		t.Errorf("invalid UTF-8: fast path %q, json.Unmarshal %q", fast.ID, want.ID)
	}
	for _, s := range []string{
		`{"Model":"m"}`,
		`{"stream_options":{"include_usage":true},"stream_options":{}}`,
		`{"stop":["a",1]}`,
		`{"max_tokens":1.5}`,
		`{"model":"m",}`,
	} {
		var cr ChatRequest
		if cr.fastDecode([]byte(s)) {
			t.Errorf("request fast path took %s", s)
		}
	}
}

// TestValidJSON checks the validator against json.Valid on the seeds; the fuzz tests cover
// the rest through fastDecode.
func TestValidJSON(t *testing.T) {
	for _, list := range [][]string{chatResponseSeeds, chatResponseEdges, chatRequestSeeds, chatRequestEdges} {
		for _, s := range list {
			if got, want := validJSON([]byte(s)), json.Valid([]byte(s)); got != want {
				t.Errorf("validJSON(%q) = %v, want %v", s, got, want)
			}
		}
	}
	for _, s := range deepBodies {
		if !json.Valid([]byte(s)) || validJSON([]byte(s)) {
			t.Errorf("a body deeper than maxFastDepth should be valid JSON, refused by validJSON: %.40s", s)
		}
	}
}
