package mock

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/providers"
)

func userRequest(text string) *providers.Request {
	return &providers.Request{Model: "mock-1", Messages: []providers.Message{
		{Role: providers.RoleUser, Content: []providers.Part{{Type: providers.PartText, Text: text}}},
	}}
}

func collect(t *testing.T, s providers.Stream) ([]providers.Event, error) {
	t.Helper()
	defer s.Close()
	var events []providers.Event
	for s.Next() {
		events = append(events, s.Current())
	}
	return events, s.Err()
}

func TestDeterministicReply(t *testing.T) {
	p := New(Config{})
	if p.Name() != "mock" {
		t.Fatalf("name %q", p.Name())
	}
	a, err := p.Chat(context.Background(), userRequest("What is a gateway?"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := p.Chat(context.Background(), userRequest("What is a gateway?"))
	c, _ := p.Chat(context.Background(), userRequest("Something else entirely"))
	if a.Text != b.Text || a.ID != b.ID || a.Usage != b.Usage {
		t.Fatalf("same prompt, different answers: %+v %+v", a, b)
	}
	if a.Text == c.Text {
		t.Fatalf("different prompts, same answer %q", a.Text)
	}
	if !strings.HasPrefix(a.Text, "Mock reply: ") || a.FinishReason != providers.FinishStop || a.Model != "mock-1" {
		t.Fatalf("answer %+v", a)
	}
	if a.Usage.Output != int64(len(strings.Fields(a.Text))) || a.Usage.Input != 5 { // 18 characters
		t.Fatalf("usage %+v", a.Usage)
	}
}

func TestAnswers(t *testing.T) {
	tools := []providers.Tool{{Name: "get_weather"}, {Name: "get_time"}}
	tests := []struct {
		name   string
		cfg    Config
		req    *providers.Request
		text   string
		calls  []providers.ToolCall
		finish providers.FinishReason
		usage  providers.Usage
		err    providers.Category
	}{
		{
			name: "fixed text", cfg: Config{Text: "one two three"}, req: userRequest("hello"),
			text: "one two three", finish: providers.FinishStop, usage: providers.Usage{Input: 2, Output: 3},
		},
		{
			name: "truncated by max tokens", cfg: Config{Text: "one two three four"},
			req: func() *providers.Request {
				r := userRequest("hello")
				r.MaxTokens = new(int64)
				*r.MaxTokens = 2
				return r
			}(),
			text: "one two", finish: providers.FinishLength, usage: providers.Usage{Input: 2, Output: 2},
		},
		{
			name: "prompt estimate over system, turns and calls", cfg: Config{Text: "ok"},
			req: &providers.Request{System: "12345678", Messages: []providers.Message{
				{Role: providers.RoleUser, Content: []providers.Part{{Type: providers.PartText, Text: "éééé"}}},
				{Role: providers.RoleAssistant, ToolCalls: []providers.ToolCall{{Name: "f", Arguments: "{}"}}},
				{Role: providers.RoleTool, ToolCallID: "c", Content: []providers.Part{{Type: providers.PartText, Text: "x"}}},
			}},
			text: "ok", finish: providers.FinishStop, usage: providers.Usage{Input: 4, Output: 1}, // 16 characters
		},
		{
			name: "empty request", cfg: Config{Text: "ok"}, req: &providers.Request{},
			text: "ok", finish: providers.FinishStop, usage: providers.Usage{Input: 1, Output: 1},
		},
		{
			name: "tools offered, auto", cfg: Config{Text: "ok"},
			req:  func() *providers.Request { r := userRequest("hi"); r.Tools, r.ToolChoice = tools, "auto"; return r }(),
			text: "ok", finish: providers.FinishStop, usage: providers.Usage{Input: 1, Output: 1},
		},
		{
			name:   "tool required",
			req:    func() *providers.Request { r := userRequest("hi"); r.Tools, r.ToolChoice = tools, "required"; return r }(),
			calls:  []providers.ToolCall{{Name: "get_weather", Arguments: "{}"}},
			finish: providers.FinishToolCalls, usage: providers.Usage{Input: 1, Output: 4},
		},
		{
			name:   "tool by name",
			req:    func() *providers.Request { r := userRequest("hi"); r.Tools, r.ToolChoice = tools, "get_time"; return r }(),
			calls:  []providers.ToolCall{{Name: "get_time", Arguments: "{}"}},
			finish: providers.FinishToolCalls, usage: providers.Usage{Input: 1, Output: 3},
		},
		{
			name: "unknown tool",
			req:  func() *providers.Request { r := userRequest("hi"); r.Tools, r.ToolChoice = tools, "nope"; return r }(),
			err:  providers.CategoryInvalidRequest,
		},
		{
			name: "required without tools",
			req:  func() *providers.Request { r := userRequest("hi"); r.ToolChoice = "required"; return r }(),
			err:  providers.CategoryInvalidRequest,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := New(tc.cfg)
			resp, err := p.Chat(context.Background(), tc.req)
			if tc.err != "" {
				ue, ok := providers.AsUpstreamError(err)
				if !ok || ue.Category != tc.err || ue.Status != 400 {
					t.Fatalf("err = %v", err)
				}
				if _, err := p.ChatStream(context.Background(), tc.req); err == nil {
					t.Fatal("the stream did not fail")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if resp.Text != tc.text || resp.FinishReason != tc.finish || resp.Usage != tc.usage || len(resp.ToolCalls) != len(tc.calls) {
				t.Fatalf("got %+v", resp)
			}
			for i, c := range tc.calls {
				got := resp.ToolCalls[i]
				if got.Name != c.Name || got.Arguments != c.Arguments || !strings.HasPrefix(got.ID, "call_") {
					t.Fatalf("call %+v", got)
				}
			}

			// The stream says the same.
			s, err := p.ChatStream(context.Background(), tc.req)
			if err != nil {
				t.Fatal(err)
			}
			events, err := collect(t, s)
			if err != nil {
				t.Fatal(err)
			}
			var text strings.Builder
			var calls []providers.ToolCall
			for _, ev := range events[:len(events)-2] {
				switch ev.Type {
				case providers.EventText:
					text.WriteString(ev.Text)
				case providers.EventToolCall:
					calls = append(calls, ev.ToolCall)
				default:
					t.Fatalf("unexpected event %+v", ev)
				}
			}
			fin, use := events[len(events)-2], events[len(events)-1]
			if text.String() != resp.Text || len(calls) != len(resp.ToolCalls) ||
				fin.Type != providers.EventFinish || fin.FinishReason != resp.FinishReason ||
				use.Type != providers.EventUsage || use.Usage != resp.Usage {
				t.Fatalf("stream %+v, answer %+v", events, resp)
			}
		})
	}
}

func TestChunks(t *testing.T) {
	tests := []struct {
		chunks int
		text   string
		want   []string
	}{
		{0, "a b c d e f g h i j", []string{"a ", "b ", "c ", "d e ", "f ", "g ", "h ", "i j"}},
		{3, "a b c d e f", []string{"a b ", "c d ", "e f"}},
		{5, "a b", []string{"a ", "b"}},
		{1, "a  b", []string{"a  b"}},
	}
	for _, tc := range tests {
		t.Run(tc.text, func(t *testing.T) {
			s, err := New(Config{Text: tc.text, Chunks: tc.chunks}).ChatStream(context.Background(), userRequest("x"))
			if err != nil {
				t.Fatal(err)
			}
			events, err := collect(t, s)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, ev := range events {
				if ev.Type == providers.EventText {
					got = append(got, ev.Text)
				}
			}
			if strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Fatalf("pieces %q, want %q", got, tc.want)
			}
		})
	}
}

func TestPacing(t *testing.T) {
	p := New(Config{Text: "a b c d", Chunks: 4, Latency: 40 * time.Millisecond, ChunkInterval: 20 * time.Millisecond})
	start := time.Now()
	s, err := p.ChatStream(context.Background(), userRequest("x"))
	if err != nil {
		t.Fatal(err)
	}
	if !s.Next() {
		t.Fatal(s.Err())
	}
	first := time.Since(start)
	events, err := collect(t, s)
	total := time.Since(start)
	if err != nil || len(events) != 5 {
		t.Fatalf("%d events, err %v", len(events), err)
	}
	// 40 ms before the first piece, 3 × 20 ms between the pieces, nothing before finish and usage.
	if first < 40*time.Millisecond || total < 100*time.Millisecond {
		t.Fatalf("first event after %v, all after %v", first, total)
	}

	start = time.Now()
	if _, err := p.Chat(context.Background(), userRequest("x")); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 40*time.Millisecond {
		t.Fatalf("answer after %v", d)
	}
}

func TestCancellation(t *testing.T) {
	p := New(Config{Text: "a b c d", Chunks: 4, Latency: time.Hour, ChunkInterval: time.Hour})

	t.Run("during latency", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(20*time.Millisecond, cancel)
		start := time.Now()
		_, err := p.Chat(ctx, userRequest("x"))
		if !errors.Is(err, context.Canceled) || time.Since(start) > time.Second {
			t.Fatalf("err = %v after %v", err, time.Since(start))
		}
	})
	t.Run("already cancelled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := p.ChatStream(ctx, userRequest("x")); !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("between chunks", func(t *testing.T) {
		fast := New(Config{Text: "a b c d", Chunks: 4, ChunkInterval: time.Hour})
		ctx, cancel := context.WithCancel(context.Background())
		s, err := fast.ChatStream(ctx, userRequest("x"))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if !s.Next() {
			t.Fatal(s.Err())
		}
		time.AfterFunc(20*time.Millisecond, cancel)
		start := time.Now()
		if s.Next() || !errors.Is(s.Err(), context.Canceled) || time.Since(start) > time.Second {
			t.Fatalf("err = %v after %v", s.Err(), time.Since(start))
		}
		if s.Next() {
			t.Fatal("an event after the failure")
		}
	})
	t.Run("close unblocks next", func(t *testing.T) {
		s, err := p.ChatStream(context.Background(), userRequest("x"))
		if err != nil {
			t.Fatal(err)
		}
		time.AfterFunc(20*time.Millisecond, func() { _ = s.Close() })
		start := time.Now()
		if s.Next() || s.Err() == nil || time.Since(start) > time.Second {
			t.Fatalf("err = %v after %v", s.Err(), time.Since(start))
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

// One provider serves many concurrent streams, as in a load test.
func TestConcurrentStreams(t *testing.T) {
	p := New(Config{ChunkInterval: time.Millisecond})
	var wg sync.WaitGroup
	texts := make([]string, 32)
	for i := range texts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := p.ChatStream(context.Background(), userRequest("same prompt"))
			if err != nil {
				t.Error(err)
				return
			}
			defer s.Close()
			var b strings.Builder
			for s.Next() {
				b.WriteString(s.Current().Text)
			}
			texts[i] = b.String()
		}()
	}
	wg.Wait()
	for _, text := range texts[1:] {
		if text != texts[0] || text == "" {
			t.Fatalf("answers differ: %q %q", text, texts[0])
		}
	}
}
