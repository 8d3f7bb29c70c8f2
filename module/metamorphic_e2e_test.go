package module

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/anthropics/anthropic-sdk-go"
	aoption "github.com/anthropics/anthropic-sdk-go/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
)

// The metamorphic stream test: one upstream stream, written out in several legal ways
// (other whitespace, key order, escapes, data over several SSE lines), must give every
// client the same text, usage and finish reason, through every surface and passthrough,
// and must not trip the first-token timer while its tokens arrive slowly.

// jsonNode is a JSON value that keeps its members' order, so that it can be written back
// in another order.
type jsonNode struct {
	kind   byte // '{', '[', '"', or 'v' for numbers, booleans and null
	keys   []string
	elems  []*jsonNode
	scalar string // a string's value, or a literal's text
}

func parseNode(t *testing.T, s string) *jsonNode {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var read func() *jsonNode
	read = func() *jsonNode {
		tok, err := dec.Token()
		if err != nil {
			t.Fatalf("canonical frame %s: %v", s, err)
		}
		switch v := tok.(type) {
		case json.Delim:
			n := &jsonNode{kind: byte(v)}
			for dec.More() {
				if v == '{' {
					k, _ := dec.Token()
					n.keys = append(n.keys, k.(string))
				}
				n.elems = append(n.elems, read())
			}
			_, _ = dec.Token()
			return n
		case string:
			return &jsonNode{kind: '"', scalar: v}
		case json.Number:
			return &jsonNode{kind: 'v', scalar: v.String()}
		case bool:
			return &jsonNode{kind: 'v', scalar: strconv.FormatBool(v)}
		default:
			return &jsonNode{kind: 'v', scalar: "null"}
		}
	}
	return read()
}

// jsonStyle is one legal way of writing JSON.
type jsonStyle struct {
	name            string
	colon, comma    string
	indent          string // pretty printing when set: each member on its own line
	reverse, escape bool
}

var jsonStyles = []jsonStyle{
	{name: "compact", colon: ":", comma: ","},
	{name: "spaced", colon: ": ", comma: ", "}, // Python's json.dumps
	{name: "reordered", colon: ":", comma: ",", reverse: true},
	{name: "escaped", colon: ":", comma: ",", escape: true},
	{name: "multiline", colon: " : ", comma: ",", indent: "  "}, // data over several SSE lines
}

func (st jsonStyle) quote(b *strings.Builder, s string) {
	if !st.escape {
		q, _ := json.Marshal(s)
		b.Write(q)
		return
	}
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '/':
			b.WriteString(`\/`)
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r >= utf8.RuneSelf:
			if r > 0xFFFF {
				r1, r2 := (r-0x10000)>>10+0xD800, (r-0x10000)&0x3FF+0xDC00
				fmt.Fprintf(b, `\u%04x\u%04x`, r1, r2)
			} else {
				fmt.Fprintf(b, `\u%04x`, r)
			}
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
}

func (st jsonStyle) write(b *strings.Builder, n *jsonNode, depth int) {
	switch n.kind {
	case '"':
		st.quote(b, n.scalar)
		return
	case 'v':
		b.WriteString(n.scalar)
		return
	}
	b.WriteByte(n.kind)
	order := make([]int, len(n.elems))
	for i := range order {
		order[i] = i
		if st.reverse && n.kind == '{' {
			order[i] = len(n.elems) - 1 - i
		}
	}
	for j, i := range order {
		if j > 0 {
			b.WriteString(st.comma)
		}
		if st.indent != "" {
			b.WriteString("\n" + strings.Repeat(st.indent, depth+1))
		}
		if n.kind == '{' {
			st.quote(b, n.keys[i])
			b.WriteString(st.colon)
		}
		st.write(b, n.elems[i], depth+1)
	}
	if st.indent != "" && len(n.elems) > 0 {
		b.WriteString("\n" + strings.Repeat(st.indent, depth))
	}
	if n.kind == '{' {
		b.WriteByte('}')
	} else {
		b.WriteByte(']')
	}
}

// frame writes one SSE event's data in the style, a data: line per line.
func (st jsonStyle) frame(t *testing.T, data string) string {
	if data == "[DONE]" {
		return "data: [DONE]\n\n"
	}
	var b strings.Builder
	st.write(&b, parseNode(t, data), 0)
	var out strings.Builder
	for _, line := range strings.Split(b.String(), "\n") {
		out.WriteString("data: " + line + "\n")
	}
	return out.String() + "\n"
}

// sseEvent is one event of a canonical upstream stream; slow events are sent a gap after
// the one before.
type sseEvent struct {
	name, data string
	slow       bool
}

// metaPieces are the answer's pieces: escapes, non-ASCII letters, a slash, quotes.
var metaPieces = []string{"Hé", "llo /", " wörld", ` "q"`, " ✓"}

const metaText = `Héllo / wörld "q" ✓`

func quoted(s string) string { q, _ := json.Marshal(s); return string(q) }

// canonicalStreams are the upstream streams of each wire format, with 11 input tokens and
// 5 output tokens, ending normally.
func canonicalStreams() map[string][]sseEvent {
	chat := []sseEvent{{data: `{"id":"chatcmpl-up","object":"chat.completion.chunk","created":1,"model":"up","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`}}
	anth := []sseEvent{
		{name: "message_start", data: `{"type":"message_start","message":{"id":"msg_up","type":"message","role":"assistant","model":"up","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":11,"output_tokens":1}}}`},
		{name: "content_block_start", data: `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`},
	}
	var gem []sseEvent
	msg := `{"type":"message","id":"msg_1","status":"completed","role":"assistant","content":[{"type":"output_text","text":` + quoted(metaText) + `,"annotations":[]}]}`
	respObj := func(status, output, usage string) string {
		return `{"id":"resp_up","object":"response","created_at":1,"status":"` + status + `","model":"up","output":` + output + `,"usage":` + usage + `,"error":null,"incomplete_details":null,"tools":[]}`
	}
	seq := 0
	rev := func(name, body string, slow bool) sseEvent {
		seq++
		return sseEvent{name: name, data: fmt.Sprintf(`{"type":%q,"sequence_number":%d,%s}`, name, seq-1, body), slow: slow}
	}
	resp := []sseEvent{
		rev("response.created", `"response":`+respObj("in_progress", "[]", "null"), false),
		rev("response.output_item.added", `"output_index":0,"item":{"type":"message","id":"msg_1","status":"in_progress","role":"assistant","content":[]}`, false),
		rev("response.content_part.added", `"item_id":"msg_1","output_index":0,"content_index":0,"part":{"type":"output_text","text":"","annotations":[]}`, false),
	}
	for i, p := range metaPieces {
		chat = append(chat, sseEvent{data: `{"id":"chatcmpl-up","object":"chat.completion.chunk","created":1,"model":"up","choices":[{"index":0,"delta":{"content":` + quoted(p) + `},"finish_reason":null}]}`, slow: true})
		anth = append(anth, sseEvent{name: "content_block_delta", data: `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":` + quoted(p) + `}}`, slow: true})
		tail := ""
		if i == len(metaPieces)-1 {
			tail = `,"finishReason":"STOP"`
		}
		gem = append(gem, sseEvent{data: `{"candidates":[{"content":{"role":"model","parts":[{"text":` + quoted(p) + `}]},"index":0` + tail + `}],"usageMetadata":{"promptTokenCount":11,"candidatesTokenCount":5,"totalTokenCount":16},"modelVersion":"up"}`, slow: true})
		resp = append(resp, rev("response.output_text.delta", `"item_id":"msg_1","output_index":0,"content_index":0,"delta":`+quoted(p)+`,"logprobs":[]`, true))
	}
	chat = append(chat,
		sseEvent{data: `{"id":"chatcmpl-up","object":"chat.completion.chunk","created":1,"model":"up","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`},
		sseEvent{data: `{"id":"chatcmpl-up","object":"chat.completion.chunk","created":1,"model":"up","choices":[],"usage":{"prompt_tokens":11,"completion_tokens":5,"total_tokens":16}}`},
		sseEvent{data: "[DONE]"})
	anth = append(anth,
		sseEvent{name: "content_block_stop", data: `{"type":"content_block_stop","index":0}`},
		sseEvent{name: "message_delta", data: `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":5}}`},
		sseEvent{name: "message_stop", data: `{"type":"message_stop"}`})
	resp = append(resp,
		rev("response.output_text.done", `"item_id":"msg_1","output_index":0,"content_index":0,"text":`+quoted(metaText)+`,"logprobs":[]`, false),
		rev("response.content_part.done", `"item_id":"msg_1","output_index":0,"content_index":0,"part":{"type":"output_text","text":`+quoted(metaText)+`,"annotations":[]}`, false),
		rev("response.output_item.done", `"output_index":0,"item":`+msg, false),
		rev("response.completed", `"response":`+respObj("completed", "["+msg+"]", `{"input_tokens":11,"input_tokens_details":{"cached_tokens":0},"output_tokens":5,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":16}`), false))
	return map[string][]sseEvent{"chat": chat, "anthropic": anth, "gemini": gem, "responses": resp}
}

// newStyledUpstream serves every wire format's canonical stream under /<style>/..., each
// event written in that style, the slow ones gap apart.
func newStyledUpstream(t *testing.T, gap time.Duration) *httptest.Server {
	streams := canonicalStreams()
	styles := map[string]jsonStyle{}
	for _, st := range jsonStyles {
		styles[st.name] = st
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		parts := strings.SplitN(strings.TrimPrefix(r.URL.Path, "/"), "/", 2)
		st, ok := styles[parts[0]]
		var kind string
		switch rest := "/" + parts[len(parts)-1]; {
		case rest == "/v1/chat/completions":
			kind = "chat"
		case rest == "/v1/responses":
			kind = "responses"
		case rest == "/v1/messages":
			kind = "anthropic"
		case strings.HasSuffix(rest, ":streamGenerateContent"):
			kind = "gemini"
		}
		if !ok || kind == "" || len(parts) != 2 {
			http.Error(w, "unknown path "+r.URL.Path, http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		fl := w.(http.Flusher)
		fl.Flush()
		for _, ev := range streams[kind] {
			if ev.slow {
				select {
				case <-r.Context().Done():
					return
				case <-time.After(gap):
				}
			}
			if ev.name != "" {
				fmt.Fprintf(w, "event: %s\n", ev.name)
			}
			_, _ = io.WriteString(w, st.frame(t, ev.data))
			fl.Flush()
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// streamOutcome is what a client sees of a streamed answer.
type streamOutcome struct {
	text, finish      string
	input, output     int64
	overheadMs, e2eMs int64
}

func TestStreamsAreReadNotMatched(t *testing.T) {
	const gap = 300 * time.Millisecond
	up := newStyledUpstream(t, gap)
	var cfg strings.Builder
	upstreams := []string{"chat", "responses", "anthropic", "gemini"}
	for _, st := range jsonStyles {
		for _, kind := range upstreams {
			name := kind + "-" + st.name
			base := up.URL + "/" + st.name
			typ, extra := "openai", ""
			switch kind {
			case "chat":
				base += "/v1"
			case "responses":
				base += "/v1"
				extra = "api responses"
			case "anthropic":
				typ = "anthropic"
			case "gemini":
				typ = "gemini"
				base += "/v1beta"
			}
			fmt.Fprintf(&cfg, `
		provider %s {
			type %s
			%s
			base_url %s
			api_key sk-upstream-%s
			first_token_timeout 1s
			header_timeout 1s
			stream_idle_timeout 2s
			retries 0
		}`, name, typ, extra, base, name)
			cfg.WriteString(pricedModel("m-"+name, pricedRoute(name, "up")))
		}
	}
	env := startGateway(t, cfg.String(), "")
	_, key := env.workspace(50 * usd)
	ctx := context.Background()
	oc := env.openai(key)
	ac := anthropic.NewClient(aoption.WithBaseURL(env.baseURL+"/"), aoption.WithAPIKey(key), aoption.WithMaxRetries(0), aoption.WithHTTPClient(testClient))

	// readMeta takes meta's figures from a frame that carries it.
	readMeta := func(o *streamOutcome, frame string) {
		var v struct {
			Meta *struct {
				GatewayOverheadMs int64 `json:"gateway_overhead_ms"`
				EndToEndMs        int64 `json:"end_to_end_ms"`
			} `json:"meta"`
		}
		if json.Unmarshal([]byte(frame), &v) == nil && v.Meta != nil {
			o.overheadMs, o.e2eMs = v.Meta.GatewayOverheadMs, v.Meta.EndToEndMs
		}
	}
	surfaces := map[string]func(model string) (streamOutcome, error){
		"chat": func(model string) (streamOutcome, error) {
			stream := oc.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
				Model: model, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hello")},
				StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
			}, option.WithJSONSet("meta", true))
			acc := openai.ChatCompletionAccumulator{}
			var o streamOutcome
			for stream.Next() {
				ch := stream.Current()
				acc.AddChunk(ch)
				readMeta(&o, ch.RawJSON())
			}
			if err := stream.Err(); err != nil {
				return o, err
			}
			if len(acc.Choices) == 0 {
				return o, fmt.Errorf("no choices")
			}
			o.text, o.finish = acc.Choices[0].Message.Content, acc.Choices[0].FinishReason
			o.input, o.output = acc.Usage.PromptTokens, acc.Usage.CompletionTokens
			return o, nil
		},
		"responses": func(model string) (streamOutcome, error) {
			stream := oc.Responses.NewStreaming(ctx, responses.ResponseNewParams{
				Model: model, Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Hello")},
			}, option.WithJSONSet("meta", true))
			var o streamOutcome
			var text strings.Builder
			for stream.Next() {
				ev := stream.Current()
				switch ev.Type {
				case "response.output_text.delta":
					text.WriteString(ev.Delta)
				case "response.completed":
					o.finish = string(ev.Response.Status)
					o.input, o.output = ev.Response.Usage.InputTokens, ev.Response.Usage.OutputTokens
					readMeta(&o, ev.RawJSON())
				}
			}
			o.text = text.String()
			return o, stream.Err()
		},
		"messages": func(model string) (streamOutcome, error) {
			stream := ac.Messages.NewStreaming(ctx, anthropic.MessageNewParams{
				Model: anthropic.Model(model), MaxTokens: 256,
				Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Hello"))},
			}, aoption.WithJSONSet("meta", true))
			acc := anthropic.Message{}
			var o streamOutcome
			for stream.Next() {
				ev := stream.Current()
				if err := acc.Accumulate(ev); err != nil {
					return o, fmt.Errorf("accumulate %s: %v", ev.RawJSON(), err)
				}
				readMeta(&o, ev.RawJSON())
			}
			if err := stream.Err(); err != nil {
				return o, err
			}
			for _, b := range acc.Content {
				o.text += b.Text
			}
			o.finish = string(acc.StopReason)
			o.input, o.output = acc.Usage.InputTokens, acc.Usage.OutputTokens
			return o, nil
		},
	}
	wantFinish := map[string]string{"chat": "stop", "responses": "completed", "messages": "end_turn"}

	// Every combination runs at once: each takes about len(metaPieces) gaps.
	type result struct {
		surface, upstream, style string
		o                        streamOutcome
		err                      string
	}
	var mu sync.Mutex
	var results []result
	var wg sync.WaitGroup
	for surface, run := range surfaces {
		for _, kind := range upstreams {
			for _, st := range jsonStyles {
				wg.Add(1)
				go func() {
					defer wg.Done()
					res := result{surface: surface, upstream: kind, style: st.name}
					o, err := run("m-" + kind + "-" + st.name)
					res.o = o
					if err != nil {
						res.err = err.Error()
					}
					mu.Lock()
					results = append(results, res)
					mu.Unlock()
				}()
			}
		}
	}
	wg.Wait()
	for _, res := range results {
		name := res.surface + " ← " + res.upstream + " (" + res.style + ")"
		o := res.o
		switch {
		case res.err != "":
			t.Errorf("%s: %s", name, res.err)
		case o.text != metaText:
			t.Errorf("%s: text %q, want %q", name, o.text, metaText)
		case o.finish != wantFinish[res.surface]:
			t.Errorf("%s: finish %q, want %q", name, o.finish, wantFinish[res.surface])
		case o.input != 11 || o.output != 5:
			t.Errorf("%s: usage %d in / %d out, want 11 / 5", name, o.input, o.output)
		case o.e2eMs < int64(len(metaPieces))*gap.Milliseconds()*9/10:
			t.Errorf("%s: meta end_to_end_ms %d, shorter than the stream", name, o.e2eMs)
		case o.overheadMs > o.e2eMs/5:
			// The gateway's own time, not the upstream's generation.
			t.Errorf("%s: meta gateway_overhead_ms %d of end_to_end_ms %d", name, o.overheadMs, o.e2eMs)
		}
	}
	if len(results) != len(surfaces)*len(upstreams)*len(jsonStyles) {
		t.Fatalf("%d results", len(results))
	}
}
