package module

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// fakeUpstream records what it was sent; each kind speaks its provider's real wire format.
type fakeUpstream struct {
	*httptest.Server
	mu     sync.Mutex
	bodies []map[string]any
	paths  []string
	header []http.Header
}

func (f *fakeUpstream) record(r *http.Request) map[string]any {
	data, _ := io.ReadAll(r.Body)
	var req map[string]any
	_ = json.Unmarshal(data, &req)
	f.mu.Lock()
	f.bodies = append(f.bodies, req)
	f.paths = append(f.paths, r.URL.Path+"?"+r.URL.RawQuery)
	f.header = append(f.header, r.Header.Clone())
	f.mu.Unlock()
	return req
}

func (f *fakeUpstream) last() (map[string]any, string, http.Header) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := len(f.bodies) - 1
	return f.bodies[n], f.paths[n], f.header[n]
}

func hasTools(req map[string]any) bool {
	tools, _ := req["tools"].([]any)
	return len(tools) > 0
}

// newFakeAnthropic answers /v1/messages: text, or a tool_use block when tools are offered.
// Usage: 12 input tokens (+3 read from cache), 6 output tokens.
func newFakeAnthropic(t *testing.T) *fakeUpstream {
	f := &fakeUpstream{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req := f.record(r)
		if r.URL.Path != "/v1/messages" || r.Header.Get("x-api-key") == "" || r.Header.Get("anthropic-version") == "" {
			w.WriteHeader(404)
			fmt.Fprint(w, `{"type":"error","error":{"type":"not_found_error","message":"not found"}}`)
			return
		}
		model, _ := req["model"].(string)
		if req["stream"] == true {
			w.Header().Set("Content-Type", "text/event-stream")
			fl := w.(http.Flusher)
			ev := func(name, data string) { fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, data); fl.Flush() }
			ev("message_start", fmt.Sprintf(`{"type":"message_start","message":{"id":"msg_up","type":"message","role":"assistant","model":%q,"content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":12,"cache_read_input_tokens":3,"cache_creation_input_tokens":0,"output_tokens":1}}}`, model))
			ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`)
			ev("ping", `{"type":"ping"}`)
			for _, p := range []string{"Hello ", "from ", "anthropic"} {
				ev("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":%q}}`, p))
			}
			ev("content_block_stop", `{"type":"content_block_stop","index":0}`)
			ev("message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":6}}`)
			ev("message_stop", `{"type":"message_stop"}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		content := `[{"type":"text","text":"Hello from anthropic"}]`
		stop := "end_turn"
		if hasTools(req) {
			content = `[{"type":"text","text":"Let me check."},{"type":"tool_use","id":"toolu_01","name":"get_weather","input":{"city":"Paris"}},{"type":"tool_use","id":"toolu_02","name":"get_weather","input":{"city":"Rome"}}]`
			stop = "tool_use"
		}
		fmt.Fprintf(w, `{"id":"msg_up","type":"message","role":"assistant","model":%q,"content":%s,"stop_reason":%q,"stop_sequence":null,"usage":{"input_tokens":12,"cache_read_input_tokens":3,"cache_creation_input_tokens":0,"output_tokens":6}}`, model, content, stop)
	}))
	t.Cleanup(f.Close)
	return f
}

// newFakeGemini answers generateContent and streamGenerateContent?alt=sse.
// Usage: 15 prompt tokens (3 cached), 6 candidate tokens.
func newFakeGemini(t *testing.T) *fakeUpstream {
	f := &fakeUpstream{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req := f.record(r)
		if r.Header.Get("x-goog-api-key") == "" || r.URL.Query().Get("key") != "" {
			w.WriteHeader(403)
			fmt.Fprint(w, `{"error":{"code":403,"message":"Method doesn't allow unregistered callers","status":"PERMISSION_DENIED"}}`)
			return
		}
		usage := `"usageMetadata":{"promptTokenCount":15,"cachedContentTokenCount":3,"candidatesTokenCount":6,"totalTokenCount":21}`
		switch {
		case strings.HasSuffix(r.URL.Path, ":streamGenerateContent"):
			w.Header().Set("Content-Type", "text/event-stream")
			fl := w.(http.Flusher)
			for i, p := range []string{"Hello ", "from ", "gemini"} {
				tail := ""
				if i == 2 {
					tail = `,"finishReason":"STOP"`
				}
				fmt.Fprintf(w, "data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":%q}]},\"index\":0%s}],%s}\n\n", p, tail, usage)
				fl.Flush()
			}
		case strings.HasSuffix(r.URL.Path, ":generateContent"):
			w.Header().Set("Content-Type", "application/json")
			parts := `[{"text":"Hello from gemini"}]`
			if hasTools(req) {
				parts = `[{"text":"Let me check."},{"functionCall":{"name":"get_weather","args":{"city":"Paris"}}},{"functionCall":{"name":"get_weather","args":{"city":"Rome"}}}]`
			}
			fmt.Fprintf(w, `{"candidates":[{"content":{"role":"model","parts":%s},"finishReason":"STOP","index":0}],%s,"modelVersion":"gemini-test"}`, parts, usage)
		default:
			w.WriteHeader(404)
			fmt.Fprint(w, `{"error":{"code":404,"message":"not found","status":"NOT_FOUND"}}`)
		}
	}))
	t.Cleanup(f.Close)
	return f
}

// chatWithTools answers like OpenAI: two tool calls in one turn when tools are offered.
func chatWithTools(text string, prompt, completion int) func(w http.ResponseWriter, r *http.Request, req map[string]any) {
	plain := chatOK(text, prompt, completion)
	return func(w http.ResponseWriter, r *http.Request, req map[string]any) {
		if !hasTools(req) {
			plain(w, r, req)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"chatcmpl-t","object":"chat.completion","created":1,"model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":"Let me check.","tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}},{"id":"call_2","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Rome\"}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`,
			req["model"], prompt, completion, prompt+completion)
	}
}

// newFakeResponses answers OpenAI's /v1/responses. Usage: 15 input tokens (3 cached), 6 output.
func newFakeResponses(t *testing.T) *fakeUpstream {
	f := &fakeUpstream{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req := f.record(r)
		if r.URL.Path != "/v1/responses" {
			w.WriteHeader(404)
			fmt.Fprint(w, `{"error":{"message":"unknown path","type":"invalid_request_error","param":null,"code":null}}`)
			return
		}
		model, _ := req["model"].(string)
		usage := `{"input_tokens":15,"input_tokens_details":{"cached_tokens":3},"output_tokens":6,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":21}`
		msg := `{"type":"message","id":"msg_1","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Hello from responses","annotations":[]}]}`
		respObj := func(status, output, usage string) string {
			return fmt.Sprintf(`{"id":"resp_up","object":"response","created_at":1,"status":%q,"model":%q,"output":%s,"usage":%s,"error":null,"incomplete_details":null,"parallel_tool_calls":true,"tool_choice":"auto","tools":[]}`, status, model, output, usage)
		}
		if req["stream"] == true {
			w.Header().Set("Content-Type", "text/event-stream")
			seq := 0
			ev := func(name, body string) {
				fmt.Fprintf(w, "event: %s\ndata: {\"type\":%q,\"sequence_number\":%d,%s}\n\n", name, name, seq, body)
				seq++
				w.(http.Flusher).Flush()
			}
			ev("response.created", `"response":`+respObj("in_progress", "[]", "null"))
			ev("response.in_progress", `"response":`+respObj("in_progress", "[]", "null"))
			ev("response.output_item.added", `"output_index":0,"item":{"type":"message","id":"msg_1","status":"in_progress","role":"assistant","content":[]}`)
			ev("response.content_part.added", `"item_id":"msg_1","output_index":0,"content_index":0,"part":{"type":"output_text","text":"","annotations":[]}`)
			for _, p := range []string{"Hello ", "from ", "responses"} {
				ev("response.output_text.delta", fmt.Sprintf(`"item_id":"msg_1","output_index":0,"content_index":0,"delta":%q,"logprobs":[]`, p))
			}
			ev("response.output_text.done", `"item_id":"msg_1","output_index":0,"content_index":0,"text":"Hello from responses","logprobs":[]`)
			ev("response.content_part.done", `"item_id":"msg_1","output_index":0,"content_index":0,"part":{"type":"output_text","text":"Hello from responses","annotations":[]}`)
			ev("response.output_item.done", `"output_index":0,"item":`+msg)
			ev("response.completed", `"response":`+respObj("completed", "["+msg+"]", usage))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		output := "[" + msg + "]"
		if hasTools(req) {
			output = `[{"type":"message","id":"msg_1","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Let me check.","annotations":[]}]},` +
				`{"type":"function_call","id":"fc_1","call_id":"call_1","name":"get_weather","arguments":"{\"city\":\"Paris\"}","status":"completed"},` +
				`{"type":"function_call","id":"fc_2","call_id":"call_2","name":"get_weather","arguments":"{\"city\":\"Rome\"}","status":"completed"}]`
		}
		fmt.Fprint(w, respObj("completed", output, usage))
	}))
	t.Cleanup(f.Close)
	return f
}
