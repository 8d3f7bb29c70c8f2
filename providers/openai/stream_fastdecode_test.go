package openai

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/modelgateway/caddy-modelgateway/internal/wiretest"
)

// chatChunkSeeds are chat.completion.chunk frames as OpenAI and compatible servers stream
// them; the fast path must take every one.
var chatChunkSeeds = []string{
	chunkRole,
	chunkHello,
	chunkStop,
	chunkUsage,
	// OpenAI with include_usage: usage null on every chunk, system_fingerprint, obfuscation.
	`{"id":"chatcmpl-BpQ3rX9","object":"chat.completion.chunk","created":1751900000,"model":"gpt-4.1-mini-2025-04-14","service_tier":"default","system_fingerprint":"fp_6f2eabb9a5","choices":[{"index":0,"delta":{"content":" world"},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"x1Yz"}`,
	// n=2: the second choice's deltas, which the gateway ignores.
	`{"id":"chatcmpl-n2","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":1,"delta":{"content":"Bonjour"},"logprobs":null,"finish_reason":null}],"usage":null}`,
	// A tool call: the first piece with id, type and name, then argument fragments.
	`{"id":"chatcmpl-t","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_DdmO9pD3xa9XTPNJ32zg2hcA","type":"function","function":{"name":"get_weather","arguments":""}}],"refusal":null},"logprobs":null,"finish_reason":null}],"usage":null}`,
	`{"id":"chatcmpl-t","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\""}}]},"logprobs":null,"finish_reason":null}],"usage":null}`,
	`{"id":"chatcmpl-t","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"location\":\"Paris, France\"}"}}]},"logprobs":null,"finish_reason":null}],"usage":null}`,
	`{"id":"chatcmpl-t","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"tool_calls"}],"usage":null}`,
	// Parallel calls in one chunk; a server that sends no index and whole arguments (Gemini),
	// one that sends the arguments object itself, and one that sends nulls.
	`{"id":"p","model":"gpt-4o","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"f","arguments":"{}"}},{"index":1,"id":"call_b","type":"function","function":{"name":"g","arguments":"{\"x\":[1,2]}"}}]},"finish_reason":null}]}`,
	`{"choices":[{"delta":{"role":"assistant","tool_calls":[{"function":{"arguments":"{\"city\":\"Rome\"}","name":"get_weather"},"id":"function-call-1","type":"function"}]},"finish_reason":"tool_calls","index":0}],"created":1741570283,"id":"g1","model":"gemini-2.0-flash","object":"chat.completion.chunk"}`,
	`{"id":"o","model":"llama3.2","choices":[{"index":0,"delta":{"role":"assistant","content":"","tool_calls":[{"id":"call_x","index":0,"type":"function","function":{"name":"f","arguments":{"a": [1, {"b": null}]}}}]},"finish_reason":null}]}`,
	`{"id":"n","choices":[{"index":0,"delta":{"tool_calls":[{"index":null,"id":null,"type":null,"function":{"name":null,"arguments":null}},{"function":null},null]}}]}`,
	// The finish with usage in the same chunk (vLLM, Together), and float counters.
	`{"id":"cmpl-9","object":"chat.completion.chunk","created":1718000000,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":"length","stop_reason":null}],"usage":{"prompt_tokens":5,"total_tokens":7,"completion_tokens":2.0}}`,
	// Groq: usage under x_groq on the last chunk.
	`{"id":"chatcmpl-5d2","object":"chat.completion.chunk","created":1730241101,"model":"llama-3.3-70b-versatile","system_fingerprint":"fp_c5f20b5bb1","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"x_groq":{"id":"req_01jbd6g2qdfw2adyrt2az8hz4w","usage":{"queue_time":0.017,"prompt_tokens":40,"prompt_time":0.0025,"completion_tokens":9,"completion_time":0.036,"total_tokens":49,"total_time":0.038}}}`,
	`{"id":"chatcmpl-5d2","object":"chat.completion.chunk","created":1730241101,"model":"llama-3.3-70b-versatile","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"x_groq":{"id":"req_01jbd6g2qdfw2adyrt2az8hz4w"}}`,
	// Errors in the stream, as OpenAI and OpenRouter send them.
	`{"error":{"message":"The server had an error while processing your request. Sorry about that!","type":"server_error","param":null,"code":null}}`,
	`{"id":"gen-1","object":"chat.completion.chunk","created":1,"model":"openai/gpt-4o","provider":"OpenAI","error":{"code":502,"message":"Provider returned error","metadata":{"raw":"upstream"}},"choices":[{"index":0,"delta":{"content":""},"finish_reason":"error","native_finish_reason":"error"}]}`,
	`{"error":null,"choices":[]}`,
	`{"error":false}`,
	// Refusal, content filter.
	`{"id":"chatcmpl-r","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{"refusal":"I'm sorry, I can't help with that."},"logprobs":null,"finish_reason":null}],"usage":null}`,
	`{"id":"chatcmpl-r","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"content_filter"}]}`,
	// Azure's first frame: prompt filter results and no choice.
	`{"choices":[],"created":0,"id":"","model":"","object":"","prompt_filter_results":[{"prompt_index":0,"content_filter_results":{"hate":{"filtered":false,"severity":"safe"}}}]}`,
	// Logprobs, unknown to the gateway.
	`{"id":"l","model":"gpt-4o","choices":[{"index":0,"delta":{"content":"Hi"},"logprobs":{"content":[{"token":"Hi","logprob":-0.0001,"bytes":[72,105],"top_logprobs":[]}],"refusal":null},"finish_reason":null}]}`,
	// Reasoning deltas: DeepSeek, OpenRouter and Groq, Mistral's content parts.
	`{"id":"930c60df","object":"chat.completion.chunk","created":1705651092,"model":"deepseek-reasoner","system_fingerprint":"fp_7e73fd9a08","choices":[{"index":0,"delta":{"content":null,"reasoning_content":"Let me think"},"logprobs":null,"finish_reason":null}]}`,
	`{"id":"gen-2","provider":"Groq","model":"qwen/qwq-32b","object":"chat.completion.chunk","created":1,"choices":[{"index":0,"delta":{"role":"assistant","content":"","reasoning":"Hmm.","reasoning_details":[{"type":"reasoning.text","text":"Hmm."}]},"finish_reason":null,"native_finish_reason":null,"logprobs":null}]}`,
	`{"id":"m1","object":"chat.completion.chunk","model":"magistral-medium","created":1,"choices":[{"index":0,"delta":{"content":[{"type":"thinking","thinking":[{"type":"text","text":"hm"}]}]},"finish_reason":null}]}`,
	// Unicode, escapes and raw values with spaces inside, which RawMessage keeps verbatim.
	`{"id":"chatcmpl-\u00e9","model":"gpt-4o","choices":[{"index":0,"delta":{"content":"caf\u00e9 \ud83d\ude00 \"q\"\n\t\\ \/ \u2028"},"finish_reason":null}]}`,
	`{"id":"u","model":"gpt-4o","choices":[{"index":0,"delta":{"content":"日本語 ☕ é","refusal":"ñ","tool_calls":[{"index":0,"function":{"arguments":"{\"q\":\"\u00fcber \\\"x\\\"\"}"}}]}}]}`,
	"{ \"id\" : \"s\" ,\n \"choices\" : [ { \"index\" : 0 , \"delta\" : { \"content\" : [ 1 , { \"a\" : null } ] } } ] ,\n \"usage\" : { \"prompt_tokens\" : 1 } ,\n \"x_groq\" : { \"usage\" : [ ] } }",
	// Nulls everywhere.
	`{"id":null,"model":null,"choices":[{"index":null,"delta":null,"finish_reason":null},null],"usage":null,"error":null,"x_groq":null}`,
	`{"choices":[{"delta":{"role":null,"content":null,"refusal":null,"tool_calls":null,"reasoning_content":null,"reasoning":null}}],"x_groq":{"usage":null}}`,
	`{"choices":null}`,
	`{"choices":[]}`,
	`{}`,
	`null`,
}

// chatChunkEdges are frames the fast path may refuse; the fuzz test checks the ones it
// takes.
var chatChunkEdges = []string{
	`{"Choices":[{"delta":{"content":"x"}}]}`,
	`{"choices":[{"Delta":{"content":"x"}}]}`,
	`{"choices":[{"delta":{"CONTENT":"x"}}]}`,
	`{"X_GROQ":{"usage":{}}}`,
	`{"x_groq":{"Usage":{}}}`,
	`{"u\u0073age":{}}`,
	"{\"u\xc5\xbfage\":{}}", // long s: folds to s
	"{\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"argument\xc5\xbf\":\"x\"}}]}}]}", // long s
	`{"usage":{"prompt_tokens":1},"usage":{"completion_tokens":2}}`,
	`{"usage":null,"usage":{"prompt_tokens":1}}`,
	`{"x_groq":{"usage":{}},"x_groq":{"id":"a"}}`,
	`{"x_groq":{"usage":1,"usage":2}}`,
	`{"choices":[{"delta":{"content":"a"}}],"choices":[{"index":1}]}`,
	`{"choices":[{"delta":{"content":"a","content":"b"}}]}`,
	`{"choices":[{"delta":{"tool_calls":[{"index":0,"index":1}]}}]}`,
	`{"x":1,"x":2,"id":"a"}`,
	`{"choices":[{"index":1.0}]}`,
	`{"choices":[{"index":1e0}]}`,
	`{"choices":[{"index":"0"}]}`,
	`{"choices":[{"index":-0}]}`,
	`{"choices":[{"index":9223372036854775808}]}`,
	`{"choices":[{"delta":{"tool_calls":[{"index":"0"}]}}]}`,
	`{"choices":[{"delta":{"tool_calls":[{"index":2.5}]}}]}`,
	`{"choices":[{"delta":{"tool_calls":[{"index":-1}]}}]}`,
	`{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":3}}]}}]}`,
	`{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":true}}]}}]}`,
	`{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":"\ud800"}}]}}]}`,
	"{\"choices\":[{\"delta\":{\"tool_calls\":[{\"function\":{\"arguments\":\"a\xffb\\n\"}}]}}]}",
	"{\"choices\":[{\"delta\":{\"content\":\"a\xffb\"}}]}",
	"{\"id\":\"\xc3\x28\"}",
	`{"choices":[{"delta":{"tool_calls":{}}}]}`,
	`{"choices":[{"delta":{"tool_calls":[1]}}]}`,
	`{"choices":[{"delta":{"tool_calls":[{"function":[]}]}}]}`,
	`{"choices":[{"delta":"x"}]}`,
	`{"choices":[{"delta":{"refusal":1}}]}`,
	`{"choices":[{"delta":{"role":false}}]}`,
	`{"choices":[{"finish_reason":1}]}`,
	`{"choices":{}}`,
	`{"choices":[1]}`,
	`{"x_groq":[]}`,
	`{"x_groq":"x"}`,
	`{"id":1}`,
	`{"model":{}}`,
	`[]`,
	`"x"`,
	`1`,
	`true`,
	`oops`,
	`{"id":"a"} x`,
	`{"id":"a"}{"id":"b"}`,
	`{"error":{"message":"x"}`,
	`{"choices":[{"delta":{"content":"x"}}],}`,
	`{"id":"\x"}`,
	"{\"id\":\"a\tb\"}",
	`{"choices":[{"index":01}]}`,
	``,
	`{`,
}

// FuzzChatChunkFastDecode checks that whenever the fast path takes a frame, it decodes it
// exactly as json.Unmarshal does, and that it never takes malformed JSON.
func FuzzChatChunkFastDecode(f *testing.F) {
	for _, s := range append(chatChunkSeeds, chatChunkEdges...) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkFastDecode(t, data, (*ChatChunk).fastDecode)
		checkDecodeFrame(t, data)
	})
}

// checkDecodeFrame holds the stream's decodeFrame to fastDecode: the same answer and the
// same chunk, read before the frame's buffer changes; and its raw values full to capacity,
// so that appending to one cannot write into the frame.
func checkDecodeFrame(t *testing.T, data []byte) {
	t.Helper()
	var framed, fast ChatChunk
	buf := bytes.Clone(data)
	ok := framed.decodeFrame(buf)
	if fastOK := fast.fastDecode(data); ok != fastOK {
		t.Fatalf("decodeFrame(%q) took it: %v, fastDecode: %v", data, ok, fastOK)
	}
	if !ok {
		return
	}
	if !reflect.DeepEqual(framed, fast) {
		t.Fatalf("decodeFrame decodes %q as\n%s\nfastDecode as\n%s", data, dump(framed), dump(fast))
	}
	for _, ch := range framed.Choices {
		for _, raw := range []json.RawMessage{ch.Delta.Content, ch.Delta.ReasoningContent, ch.Delta.Reasoning} {
			if len(raw) != cap(raw) {
				t.Fatalf("decodeFrame of %q left room after a raw value (%d of %d)", data, len(raw), cap(raw))
			}
		}
	}
}

// TestChunkFastDecodeTakesRealisticChunks keeps the fast path from silently becoming dead
// code: every realistic chunk must take it, and decode as json.Unmarshal does.
func TestChunkFastDecodeTakesRealisticChunks(t *testing.T) {
	for _, s := range chatChunkSeeds {
		if !checkFastDecode(t, []byte(s), (*ChatChunk).fastDecode) {
			t.Errorf("chunk fast path refused %s", s)
		}
		checkDecodeFrame(t, []byte(s))
	}
}

// TestChunkFastDecodeEdges runs the edge cases and the deep bodies through the same check
// as the fuzz test, so that plain go test covers them.
func TestChunkFastDecodeEdges(t *testing.T) {
	for _, s := range append(chatChunkEdges, deepBodies...) {
		checkFastDecode(t, []byte(s), (*ChatChunk).fastDecode)
		checkDecodeFrame(t, []byte(s))
	}
}

// TestChunkSeedsSetEveryField is TestSeedsSetEveryField for ChatChunk: a field added to it
// fails here until a seed sets it, then TestChunkFastDecodeTakesRealisticChunks until the
// fast path decodes it.
func TestChunkSeedsSetEveryField(t *testing.T) {
	cov := wiretest.NewCoverage(wiretest.ByPath, reflect.TypeFor[ChatChunk]())
	for _, s := range chatChunkSeeds {
		var c ChatChunk
		if err := json.Unmarshal([]byte(s), &c); err != nil {
			t.Fatalf("%v: %s", err, s)
		}
		cov.Mark(c)
	}
	for _, path := range cov.Unset() {
		t.Errorf("no realistic chunk sets %s", path)
	}
}

// TestChunkFastDecodeRefuses pins the refusals that keep the fast path exact: each of these
// decodes differently (or fails) with json.Unmarshal than a naive exact-key decoder would.
func TestChunkFastDecodeRefuses(t *testing.T) {
	for _, s := range []string{
		`{"Choices":[{"delta":{"content":"x"}}]}`,
		`{"u\u0073age":{}}`,
		"{\"u\xc5\xbfage\":{}}",
		`{"choices":[{"delta":{"content":"a"}}],"choices":[{"index":1}]}`,
		`{"x_groq":{"usage":{}},"x_groq":{"id":"a"}}`,
		`{"choices":[{"delta":{"tool_calls":[{"index":2.5}]}}]}`,
		`{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":3}}]}}]}`,
		`{"id":"a"} x`,
		`oops`,
		deepBodies[0],
	} {
		var c ChatChunk
		if c.fastDecode([]byte(s)) {
			t.Errorf("chunk fast path took %s", s)
		}
	}
}

// TestChunkFastDecodeRawBytes pins what the RawMessage fields hold: the value's bytes as
// they came, spaces inside included, null as the literal.
func TestChunkFastDecodeRawBytes(t *testing.T) {
	data := []byte("{\"usage\" :\t{ \"prompt_tokens\" : 1 } , \"error\":null,\"choices\":[{\"delta\":{\"content\": \"a\\nb\" }}]}")
	var c ChatChunk
	if !c.fastDecode(data) {
		t.Fatal("refused")
	}
	if string(c.Usage) != `{ "prompt_tokens" : 1 }` || string(c.Error) != "null" || string(c.Choices[0].Delta.Content) != `"a\nb"` {
		t.Errorf("usage %q, error %q, content %q", c.Usage, c.Error, c.Choices[0].Delta.Content)
	}
}
