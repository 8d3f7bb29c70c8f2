package handlers

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelgateway/caddy-modelgateway/internal/rawjson"
	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/anthropic"
	"github.com/modelgateway/caddy-modelgateway/providers/openai"
)

// flushWatch is a client connection that records what was written and what of it was
// flushed.
type flushWatch struct {
	h                 http.Header
	body              bytes.Buffer
	flushes, flushedN int
}

func (w *flushWatch) Header() http.Header { return w.h }
func (w *flushWatch) WriteHeader(int)     {}
func (w *flushWatch) Write(b []byte) (int, error) {
	return w.body.Write(b)
}
func (w *flushWatch) Flush() {
	if w.flushedN < w.body.Len() {
		w.flushes++
	}
	w.flushedN = w.body.Len()
}

// piecesBody is an upstream body that arrives in pieces, one per Read, as packets do; before
// giving the next piece it checks that the client has everything written so far: a relay
// may hold events that arrived together, never while it waits for more.
type piecesBody struct {
	t      *testing.T
	w      *flushWatch
	pieces []string
	reads  int
}

func (b *piecesBody) Read(p []byte) (int, error) {
	if b.w.flushedN != b.w.body.Len() {
		b.t.Errorf("read %d: waiting for the upstream with %d bytes written but not flushed:\n%s",
			b.reads, b.w.body.Len()-b.w.flushedN, b.w.body.String()[b.w.flushedN:])
	}
	if len(b.pieces) == 0 {
		return 0, io.EOF
	}
	b.reads++
	n := copy(p, b.pieces[0])
	if n < len(b.pieces[0]) {
		b.pieces[0] = b.pieces[0][n:]
	} else {
		b.pieces = b.pieces[1:]
	}
	return n, nil
}

func (b *piecesBody) Close() error { return nil }

// piecesTransport answers every request with a body that arrives in pieces.
type piecesTransport struct{ body func() io.ReadCloser }

func (t piecesTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	_, _ = io.Copy(io.Discard, r.Body)
	_ = r.Body.Close()
	return &http.Response{StatusCode: http.StatusOK, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Content-Type": {"text/event-stream"}}, Body: t.body(), ContentLength: -1, Request: r}, nil
}

func serveWatched(t *testing.T, p providers.Provider, path, body string, w *flushWatch) {
	t.Helper()
	g, key := benchGateway(t, p)
	r := httptest.NewRequest(http.MethodPost, "http://gw/v1"+path, strings.NewReader(body))
	r.Header.Set("Authorization", "Bearer "+key)
	r.Header.Set("Content-Type", "application/json")
	g.ServeHTTP(w, r, path)
}

// TestRelaysFlushWhatArrivedTogether: every relay, passthrough or through an adapter,
// reaches the client in one flush per upstream read that brought events (a last content
// chunk with its finish chunk, usage chunk and [DONE]; an Anthropic message_start with
// content_block_start and the first delta), the gateway's final frames with the last, and
// flushes every event before it waits for the upstream again (piecesBody checks).
func TestRelaysFlushWhatArrivedTogether(t *testing.T) {
	chunk := func(delta, finish string) string {
		return fmt.Sprintf(`data: {"id":"chatcmpl-up1","object":"chat.completion.chunk","created":1700000000,"model":"up-model","choices":[{"index":0,"delta":%s,"finish_reason":%s}]}`+"\n\n", delta, finish)
	}
	openaiPieces := []string{
		chunk(`{"role":"assistant","content":"one "}`, "null"),
		chunk(`{"content":"two "}`, "null"),
		chunk(`{"content":"three"}`, "null") + chunk(`{}`, `"stop"`) +
			`data: {"id":"chatcmpl-up1","object":"chat.completion.chunk","created":1700000000,"model":"up-model","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15}}` + "\n\n" +
			"data: [DONE]\n\n",
	}
	ev := func(name, data string) string { return "event: " + name + "\ndata: " + data + "\n\n" }
	anthropicPieces := []string{
		ev("message_start", `{"type":"message_start","message":{"id":"msg_up1","type":"message","role":"assistant","model":"up-model","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":12,"output_tokens":1}}}`) +
			ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`) +
			ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"one "}}`),
		ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"two"}}`),
		ev("content_block_stop", `{"type":"content_block_stop","index":0}`) +
			ev("message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":2}}`) +
			ev("message_stop", `{"type":"message_stop"}`),
	}
	rev := func(seq int, name, body string) string {
		return fmt.Sprintf("event: %s\ndata: {\"type\":%q,\"sequence_number\":%d,%s}\n\n", name, name, seq, body)
	}
	delta := func(seq int, text string) string {
		return rev(seq, "response.output_text.delta", fmt.Sprintf(`"item_id":"msg_1","output_index":0,"content_index":0,"delta":%q`, text))
	}
	respObj := func(status, usage string) string {
		return fmt.Sprintf(`"response":{"id":"resp_up","object":"response","created_at":1,"status":%q,"model":"up-model","output":[],"usage":%s}`, status, usage)
	}
	responsesPieces := []string{
		rev(0, "response.created", respObj("in_progress", "null")) + delta(1, "one "),
		delta(2, "two "),
		delta(3, "three") + rev(4, "response.completed", respObj("completed", `{"input_tokens":12,"output_tokens":3,"total_tokens":15}`)),
	}
	const (
		chatBody      = `{"model":"bench-model","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"Count."}]}`
		messagesBody  = `{"model":"bench-model","max_tokens":256,"stream":true,"messages":[{"role":"user","content":"Count."}]}`
		responsesBody = `{"model":"bench-model","stream":true,"input":"Count."}`
	)
	for _, tc := range []struct {
		name, wire, path, body string
		wants                  []string
	}{
		{"chat passthrough", "openai", "/chat/completions", chatBody, []string{`"three"`, `"cost_lines"`}},
		{"chat to Anthropic-wire", "anthropic", "/chat/completions", chatBody, []string{`"two"`, `"cost_lines"`}},
		{"messages to OpenAI-wire", "openai", "/messages", messagesBody, []string{`"three"`, `"cost_lines"`, `{"type":"message_stop"}`}},
		{"messages passthrough", "anthropic", "/messages", messagesBody, []string{`"two"`, `"cost_lines"`, `{"type":"message_stop"}`}},
		{"responses passthrough", "responses", "/responses", responsesBody, []string{`"three"`, `"cost_lines"`, `"response.completed"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &flushWatch{h: http.Header{}}
			pieces := map[string][]string{"openai": openaiPieces, "anthropic": anthropicPieces, "responses": responsesPieces}[tc.wire]
			tr := piecesTransport{body: func() io.ReadCloser { return &piecesBody{t: t, w: w, pieces: append([]string(nil), pieces...)} }}
			var p providers.Provider
			var err error
			switch tc.wire {
			case "openai":
				p, err = openai.New(openai.Config{Name: "bench", BaseURL: "http://upstream.invalid/v1", APIKey: "k", Transport: tr})
			case "responses":
				p, err = openai.New(openai.Config{Name: "bench", BaseURL: "http://upstream.invalid/v1", APIKey: "k", Transport: tr, API: "responses"})
			default:
				p, err = anthropic.New(anthropic.Config{Name: "bench", BaseURL: "http://upstream.invalid", APIKey: "k", Transport: tr})
			}
			if err != nil {
				t.Fatal(err)
			}
			serveWatched(t, p, tc.path, tc.body, w)
			out := w.body.String()
			for _, want := range tc.wants {
				if !strings.Contains(out, want) {
					t.Fatalf("stream lacks %s:\n%s", want, out)
				}
			}
			if !strings.HasSuffix(out, "data: [DONE]\n\n") {
				t.Fatalf("stream did not end with [DONE]:\n%s", out)
			}
			if w.flushedN != w.body.Len() {
				t.Fatalf("%d bytes never flushed", w.body.Len()-w.flushedN)
			}
			if w.flushes != len(pieces) {
				t.Fatalf("%d flushes for %d upstream reads, want one each:\n%s", w.flushes, len(pieces), out)
			}
		})
	}
}

// TestRelayChunkKinds: a relayed chat chunk that is a JSON object is passed on with the
// gateway's id; one that is not JSON, even after a whole object, is skipped and counted; a
// JSON value that is not an object is passed on as it came.
func TestRelayChunkKinds(t *testing.T) {
	p := newBenchProvider()
	p.stream = []byte(`data: {"id":"chatcmpl-up1","object":"chat.completion.chunk","created":1,"model":"up-model","choices":[{"index":0,"delta":{"role":"assistant","content":"one"},"finish_reason":null}]}` + "\n\n" +
		`data: {"id":"chatcmpl-up1","choices":[` + "\n\n" +
		`data: {"id":"chatcmpl-up1","choices":[]} trailing` + "\n\n" +
		`data: [1,2]` + "\n\n" +
		`data: {"id":"chatcmpl-up1","object":"chat.completion.chunk","created":1,"model":"up-model","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}` + "\n\n" +
		"data: [DONE]\n\n")
	w := &flushWatch{h: http.Header{}}
	serveWatched(t, p, "/chat/completions", benchChatBody+`,"stream":true}`, w)
	out := w.body.String()
	if strings.Contains(out, "trailing") || strings.Contains(out, `"choices":[`+"\n") || strings.Contains(out, "chatcmpl-up1") {
		t.Fatalf("a malformed chunk or the upstream's id was passed on:\n%s", out)
	}
	if !strings.Contains(out, "data: [1,2]\n\n") || !strings.Contains(out, `"one"`) || !strings.Contains(out, `"skipped_frames":2`) {
		t.Fatalf("stream:\n%s", out)
	}
}

// TestEventFieldsMatchGet: the Responses relay's one-pass read of an event finds the type
// and sequence_number rawjson.Get finds (escaped keys, repeated keys, absent members), and
// fails exactly when the event is not a well-formed JSON object.
func TestEventFieldsMatchGet(t *testing.T) {
	for _, data := range []string{
		`{"type":"response.output_text.delta","sequence_number":7,"delta":"hi"}`,
		`{"typ\u0065":"response.created","sequence_numbe\u0072":1}`,
		`{"type":"a","type":"b","sequence_number":1,"sequence_number":2}`,
		`{"delta":"no type"}`,
		`{"type":"x","sequence_number":3} trailing`,
		`{"type":"x",`,
		`[1,2]`,
		`"type"`,
		`{"ty\"pe":"q","sequence_number":"not a number"}`,
	} {
		var ef eventFields
		err := ef.read([]byte(data))
		isObject := rawjson.Valid([]byte(data)) && strings.HasPrefix(data, "{")
		if (err == nil) != isObject {
			t.Fatalf("%s: read %v, a valid object %v", data, err, isObject)
		}
		if err != nil {
			continue
		}
		typ, _ := rawjson.Get([]byte(data), "type")
		seq, _ := rawjson.Get([]byte(data), "sequence_number")
		if string(ef.typ) != string(typ) || string(ef.seq) != string(seq) {
			t.Fatalf("%s: read type %s, sequence %s; Get %s, %s", data, ef.typ, ef.seq, typ, seq)
		}
	}
}
