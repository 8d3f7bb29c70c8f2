package handlers

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/billing"
	"github.com/modelgateway/caddy-modelgateway/internal/pricing"
	"github.com/modelgateway/caddy-modelgateway/internal/rawjson"
	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/anthropic"
	"github.com/modelgateway/caddy-modelgateway/providers/openai"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// TestDecoratedUsageFallback: an answer that came without usage gets the call's, in the
// surface's format, with its cost; one that has usage keeps its own, and the fallback is not
// even encoded.
func TestDecoratedUsageFallback(t *testing.T) {
	c := &call{Charge: billing.Charge{GenerationID: "gen_1", Usage: providers.Usage{Input: 12, Output: 7}.Metered()}}
	encoded := 0
	enc := func(b []byte, u providers.Usage) []byte {
		encoded++
		return openai.AppendChatUsage(b, u)
	}

	out, err := c.appendDecorated(nil, []byte(`{"id":"up_1","choices":[]}`), "id", "usage", enc)
	if err != nil {
		t.Fatal(err)
	}
	usage, err := rawjson.Get(out, "usage")
	if err != nil || encoded != 1 {
		t.Fatalf("usage %s, %v, encoded %d times", usage, err, encoded)
	}
	for _, want := range []string{`"prompt_tokens":12`, `"completion_tokens":7`, `"cost_nanos":0`, `"cost_lines":[]`} {
		if !strings.Contains(string(usage), want) {
			t.Errorf("usage %s lacks %s", usage, want)
		}
	}
	if !strings.Contains(string(out), `"id":"gen_1"`) {
		t.Errorf("id not replaced: %s", out)
	}

	out, err = c.appendDecorated(nil, []byte(`{"id":"up_2","usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}`), "id", "usage", enc)
	if err != nil || encoded != 1 {
		t.Fatalf("%s, %v; the fallback was encoded %d times, want once in all", out, err, encoded)
	}
	if usage, _ := rawjson.Get(out, "usage"); !strings.Contains(string(usage), `"prompt_tokens":3`) || !strings.Contains(string(usage), `"cost_nanos":0`) {
		t.Errorf("the answer's own usage was not kept and costed: %s", usage)
	}
}

// TestAppendDecoratedAllocatesNothing: decorating an answer into a buffer with room builds
// the costed usage and the id in a pooled buffer and the cost figures on the stack. Each in
// a buffer of its own, that was five allocations per answer.
func TestAppendDecoratedAllocatesNothing(t *testing.T) {
	c := &call{Charge: billing.Charge{GenerationID: "gen_1", Usage: providers.Usage{Input: 12, Output: 7}.Metered()}}
	obj := []byte(`{"id":"up_1","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":7,"total_tokens":19}}`)
	dst := make([]byte, 0, 4096)
	allocs := testing.AllocsPerRun(200, func() {
		out, err := c.appendDecorated(dst[:0], obj, "id", "usage", openai.AppendChatUsage)
		if err != nil || !bytes.Contains(out, []byte(`"cost_nanos":0`)) {
			t.Fatalf("%s, %v", out, err)
		}
	})
	// Under the race detector sync.Pool drops a quarter of what is put back.
	limit := 0.0
	if raceEnabled {
		limit = 0.5
	}
	if allocs > limit {
		t.Fatalf("%.2f allocations per decorated answer, want none", allocs)
	}
}

// TestAnswerAdditionsMatchDecoration: a neutral answer encoded with its cost and meta written
// in is, byte for byte, what decorating the plain encoding (reading it back) gives, on the
// three surfaces, with and without meta, for text and for tool calls; and an answer an encoder
// wrote without them is decorated all the same.
func TestAnswerAdditionsMatchDecoration(t *testing.T) {
	clock, g, rt := pricedRoute()
	resps := map[string]providers.Response{
		"text":  {ID: "up_1", Text: "Hello \"there\"\n", FinishReason: providers.FinishStop, Usage: providers.Usage{Input: 12, CacheRead: 3, Output: 7, Reasoning: 2}},
		"tools": {ID: "up_2", ToolCalls: []providers.ToolCall{{ID: "call_1", Name: "get", Arguments: `{"city":"Paris"}`}}, FinishReason: providers.FinishToolCalls, Usage: providers.Usage{Input: 40, Output: 9}},
		"empty": {ID: "up_3", FinishReason: providers.FinishLength},
	}
	surfaces := map[string]struct {
		idKey string
		usage usageEncoder
		plain func(*call, *providers.Response) ([]byte, error)
		enc   neutralSurface
	}{
		"chat": {"id", openai.AppendChatUsage, func(c *call, r *providers.Response) ([]byte, error) {
			return openai.AppendChatResponse(nil, r, c.GenerationID, c.Start.Unix())
		}, chatSurface{}},
		"messages": {"", anthropic.AppendUsage, func(c *call, r *providers.Response) ([]byte, error) {
			return anthropic.AppendResponse(nil, r, c.GenerationID, "bench-an")
		}, anthropicSurface{}},
		"responses": {"", openai.AppendResponsesUsage, func(c *call, r *providers.Response) ([]byte, error) {
			return openai.EncodeResponsesResponse(r, c.GenerationID, c.Start.Unix(), "bench-an")
		}, responsesEncoder{}},
	}
	for sname, sf := range surfaces {
		for rname, resp := range resps {
			for _, meta := range []bool{false, true} {
				c := &call{Charge: billing.Charge{GenerationID: "gen_1", Start: clock.Add(-1500 * time.Millisecond), FirstByte: clock.Add(-time.Second),
					Attempts: []store.Attempt{{Provider: "an", Status: 200}}, Usage: resp.Usage.Metered()}, g: g, route: rt, model: &Model{Name: "bench-an"}, wantMeta: meta}
				r := resp
				got, err := sf.enc.response([]byte("prefix"), c, &r, "bench-an")
				if err != nil {
					t.Fatalf("%s %s meta=%v: %v", sname, rname, meta, err)
				}
				r = resp
				r.Model = "bench-an"
				plain, err := sf.plain(c, &r)
				if err != nil {
					t.Fatal(err)
				}
				want, err := c.appendDecorated([]byte("prefix"), plain, sf.idKey, "usage", sf.usage)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					t.Errorf("%s %s meta=%v:\n got %s\nwant %s", sname, rname, meta, got, want)
				}
				if !json.Valid(got[len("prefix"):]) || !bytes.Contains(got, []byte(`"cost_nanos":`)) || bytes.Contains(got, []byte(`"meta":`)) != meta {
					t.Errorf("%s %s meta=%v: %s", sname, rname, meta, got)
				}
				// An encoder that could not write the additions in (the slow one).
				without, err := c.appendAnswer([]byte("prefix"), sf.idKey, sf.usage, func(dst []byte, _ providers.Additions) ([]byte, bool, error) {
					return append(dst, plain...), false, nil
				})
				if err != nil || !bytes.Equal(without, want) {
					t.Errorf("%s %s meta=%v, written without additions:\n got %s, %v\nwant %s", sname, rname, meta, without, err, want)
				}
			}
		}
	}
}

// pricedRoute is a gateway at a fixed time and a route priced at 3 and 15 USD per million
// input and output tokens, for the calls whose answers the tests decorate.
func pricedRoute() (time.Time, *Gateway, *Route) {
	clock := time.Unix(1_790_000_000, 0)
	var price pricing.Price
	price.Input, _ = pricing.ParseUSD("3.00")
	price.Output, _ = pricing.ParseUSD("15.00")
	return clock, &Gateway{Config: billing.Config{Now: func() time.Time { return clock }}}, &Route{ProviderName: "an", UpstreamModel: "up-model", Price: price}
}

// TestStreamSinksDecorateTheirLastFrame: the chat and messages sinks end a stream with the
// frame that carries the usage (the usage chunk, message_delta) decorated as a complete
// answer is, its cost and, when asked, meta; and a sink whose encoder and buffers were
// handed back (release) leaves the next stream's frames as they would be from new ones.
func TestStreamSinksDecorateTheirLastFrame(t *testing.T) {
	clock, g, rt := pricedRoute()
	usage := providers.Usage{Input: 12, CacheRead: 3, Output: 7}
	events := []providers.Event{
		{Type: providers.EventText, Text: "Hello"},
		{Type: providers.EventText, Text: " there"},
		{Type: providers.EventFinish, FinishReason: providers.FinishStop},
	}
	surfaces := map[string]struct {
		sink  func(c *call) streamSink
		last  string // the event of the frame that carries the usage ("" for data only)
		plain func() []byte
		idKey string
		usage usageEncoder
	}{
		"chat": {
			func(c *call) streamSink { return chatSurface{includeUsage: true}.sink(c, "m") },
			"",
			func() []byte {
				b, _ := openai.NewChunkEncoder("gen_1", "m", clock.Add(-1500*time.Millisecond).Unix()).Encode(providers.Event{Type: providers.EventUsage, Usage: usage})
				return b
			},
			"id", openai.AppendChatUsage,
		},
		"messages": {
			func(c *call) streamSink { return anthropicSurface{}.sink(c, "m") },
			"message_delta",
			func() []byte {
				e := anthropic.NewStreamEncoder("gen_1", "m")
				e.Encode(events[0])
				for _, f := range e.Finish(providers.FinishStop, "", usage) {
					if f.Event == "message_delta" {
						return bytes.Clone(f.Data)
					}
				}
				return nil
			},
			"", anthropic.AppendUsage,
		},
	}
	for name, sf := range surfaces {
		for _, meta := range []bool{false, true, false} {
			c := &call{Charge: billing.Charge{GenerationID: "gen_1", Start: clock.Add(-1500 * time.Millisecond), FinishReason: string(providers.FinishStop),
				FirstByte: clock.Add(-time.Second), Attempts: []store.Attempt{{Provider: "an", Status: 200}}, Usage: usage.Metered()}, g: g, route: rt, model: &Model{Name: "m"},
				wantMeta: meta}
			want, err := c.appendDecorated(nil, sf.plain(), sf.idKey, "usage", sf.usage)
			if err != nil {
				t.Fatal(err)
			}
			sink := sf.sink(c)
			sink.start()
			for _, ev := range events {
				sink.event(ev)
			}
			var got []byte
			frames := sink.finish(c)
			for _, f := range frames {
				if f.event == sf.last && bytes.Contains(f.data, []byte(`"usage"`)) {
					got = bytes.Clone(f.data)
				}
			}
			if last := frames[len(frames)-1]; sf.last == "" && string(last.data) != "[DONE]" {
				t.Errorf("%s: the last frame is %s, want [DONE]", name, last.data)
			}
			sink.(releaser).release()
			if !bytes.Equal(got, want) {
				t.Errorf("%s meta=%v:\n got %s\nwant %s", name, meta, got, want)
			}
			if !json.Valid(got) || !bytes.Contains(got, []byte(`"cost_nanos":`)) || bytes.Contains(got, []byte(`"meta":`)) != meta {
				t.Errorf("%s meta=%v: %s", name, meta, got)
			}
		}
	}
}
