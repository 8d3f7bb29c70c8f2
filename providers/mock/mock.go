// Package mock is a provider that needs no network, for trying the gateway offline and for
// load-testing the gateway itself. Its answers are deterministic: the same request always
// gets the same text, tool call and usage, after the configured latency and at the configured
// chunk pace. It never fails on its own, except for a request a real upstream rejects too
// (a tool_choice that names no tool of the request, an unknown audio format, an image size
// that is not WIDTHxHEIGHT), and video models named to fail (video.go).
//
// Beside chat it has every neutral capability the gateway routes by: embeddings and
// moderations (media.go), speech and transcription (audio.go: a tone as WAV or PCM, silent
// MP3 frames, paced in chunks like a stream), images (images.go: tiny gradients, PNG or
// JPEG), OCR (ocr.go: a page of markdown per page asked) and music (music.go: the tone or
// silent MP3 frames of the length asked, synchronous or as a task to poll by model name).
package mock

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/modelgateway/caddy-modelgateway/providers"
)

// DefaultChunks is the number of text events of a streamed answer by default.
const DefaultChunks = 8

// Config configures a mock provider.
type Config struct {
	// Name is the operator's name for the provider; it defaults to "mock".
	Name string
	// Latency is the wait before the answer, or before the first event of a stream.
	Latency time.Duration
	// Chunks is the number of text events a streamed answer is cut into (fewer when the
	// answer has fewer words); it defaults to DefaultChunks.
	Chunks int
	// ChunkInterval is the wait between two text events of a stream.
	ChunkInterval time.Duration
	// Text is a fixed answer; empty means an answer derived from the last user message.
	Text string
	// VideoRender is how long a video job takes from its start (DefaultVideoRender when
	// 0); VideoBytesPerSecond is the size of its content a second of video
	// (DefaultVideoBytesPerSecond when 0).
	VideoRender         time.Duration
	VideoBytesPerSecond int64
}

// Provider is the mock provider. It is safe for concurrent use.
type Provider struct {
	// videos is what it keeps of its video jobs (video.go).
	videos videoJobs

	cfg Config
	// music follows the music tasks of the async shape (music.go).
	music musicTasks
}

// New returns the mock provider of cfg.
func New(cfg Config) *Provider {
	if cfg.Name == "" {
		cfg.Name = "mock"
	}
	if cfg.Chunks <= 0 {
		cfg.Chunks = DefaultChunks
	}
	return &Provider{cfg: cfg}
}

// Name is the operator's name for the provider.
func (p *Provider) Name() string { return p.cfg.Name }

// Chat waits for the latency, then answers.
func (p *Provider) Chat(ctx context.Context, req *providers.Request) (*providers.Response, error) {
	a, err := p.answer(req)
	if err != nil {
		return nil, err
	}
	if err := wait(ctx, nil, nil, p.cfg.Latency); err != nil {
		return nil, fmt.Errorf("provider %s: %w", p.cfg.Name, err)
	}
	return &providers.Response{
		ID:           a.id,
		Model:        req.Model,
		Text:         a.text,
		ToolCalls:    a.calls,
		FinishReason: a.finish,
		Usage:        a.usage,
	}, nil
}

// ChatStream returns the answer as a stream: the text in Config.Chunks events (or the tool
// call), then EventFinish, then EventUsage. The stream waits for the latency before its
// first event and for the chunk interval between text events; no goroutine is involved.
func (p *Provider) ChatStream(ctx context.Context, req *providers.Request) (providers.Stream, error) {
	a, err := p.answer(req)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("provider %s: %w", p.cfg.Name, err)
	}
	var events []providers.Event
	for _, piece := range split(a.text, p.cfg.Chunks) {
		events = append(events, providers.Event{Type: providers.EventText, Text: piece})
	}
	for i, tc := range a.calls {
		events = append(events, providers.Event{Type: providers.EventToolCall, Index: i, ToolCall: tc})
	}
	events = append(events,
		providers.Event{Type: providers.EventFinish, FinishReason: a.finish},
		providers.Event{Type: providers.EventUsage, Usage: a.usage})
	return &stream{
		name:     p.cfg.Name,
		ctx:      ctx,
		events:   events,
		latency:  p.cfg.Latency,
		interval: p.cfg.ChunkInterval,
		closed:   make(chan struct{}),
	}, nil
}

// answer is what the mock says to a request.
type answer struct {
	id     string
	text   string
	calls  []providers.ToolCall
	finish providers.FinishReason
	usage  providers.Usage
}

// vocabulary is what derived answers are made of.
var vocabulary = strings.Fields(`the gateway routes every request to a model and streams its answer back
	while the wallet keeps count of tokens spent on prompts completions and cached context so that
	each workspace sees its usage in real time across providers regions and keys`)

func (p *Provider) answer(req *providers.Request) (*answer, error) {
	prompt := lastUserText(req)
	seed := hash(req.Model + "\x00" + prompt)
	a := &answer{id: fmt.Sprintf("mock-%016x", seed), finish: providers.FinishStop}

	if tool, ok, err := forcedTool(req); err != nil {
		return nil, &providers.UpstreamError{
			Provider: p.cfg.Name,
			Status:   400,
			Code:     "invalid_tool_choice",
			Type:     "invalid_request_error",
			Message:  err.Error(),
			Category: providers.CategoryInvalidRequest,
		}
	} else if ok {
		call := providers.ToolCall{ID: fmt.Sprintf("call_mock_%016x", seed), Name: tool, Arguments: "{}"}
		a.calls = []providers.ToolCall{call}
		a.finish = providers.FinishToolCalls
		a.usage = providers.Usage{Input: estimateTokens(req), Output: int64(max(1, ceilDiv(len(call.Name)+len(call.Arguments), 4)))}
		return a, nil
	}

	text := p.cfg.Text
	if text == "" {
		text = "Mock reply: " + sentence(seed)
	}
	words := strings.Fields(text)
	if req.MaxTokens != nil && *req.MaxTokens >= 0 && int64(len(words)) > *req.MaxTokens {
		words = words[:*req.MaxTokens]
		text = strings.Join(words, " ")
		a.finish = providers.FinishLength
	}
	a.text = text
	a.usage = providers.Usage{Input: estimateTokens(req), Output: int64(len(words))}
	return a, nil
}

// forcedTool tells which tool the request forces, if any.
func forcedTool(req *providers.Request) (string, bool, error) {
	switch req.ToolChoice {
	case "", "auto", "none":
		return "", false, nil
	case "required":
		if len(req.Tools) == 0 {
			return "", false, errors.New("tool_choice is required but the request has no tools")
		}
		return req.Tools[0].Name, true, nil
	}
	for _, t := range req.Tools {
		if t.Name == req.ToolChoice {
			return t.Name, true, nil
		}
	}
	return "", false, fmt.Errorf("tool_choice names %q, which is not among the tools", req.ToolChoice)
}

func lastUserText(req *providers.Request) string {
	for i := len(req.Messages) - 1; i >= 0; i-- {
		m := req.Messages[i]
		if m.Role != providers.RoleUser {
			continue
		}
		var b strings.Builder
		for _, part := range m.Content {
			if part.Type == providers.PartText {
				b.WriteString(part.Text)
			}
		}
		return b.String()
	}
	return ""
}

// sentence makes 8 to 15 words of the vocabulary from seed.
func sentence(seed uint64) string {
	state := seed
	n := 8 + int(splitmix(&state)%8)
	words := make([]string, n)
	for i := range words {
		words[i] = vocabulary[splitmix(&state)%uint64(len(vocabulary))]
	}
	return strings.Join(words, " ") + "."
}

// splitmix is SplitMix64: a tiny deterministic generator, enough to pick words.
func splitmix(state *uint64) uint64 {
	*state += 0x9E3779B97F4A7C15
	z := *state
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

func hash(s string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(s))
	return h.Sum64()
}

// estimateTokens is the usual four characters a token over the system prompt and every
// message's text, tool calls and tool results; at least 1.
func estimateTokens(req *providers.Request) int64 {
	chars := utf8.RuneCountInString(req.System)
	for _, m := range req.Messages {
		for _, part := range m.Content {
			chars += utf8.RuneCountInString(part.Text)
		}
		for _, tc := range m.ToolCalls {
			chars += utf8.RuneCountInString(tc.Name) + utf8.RuneCountInString(tc.Arguments)
		}
	}
	return int64(max(1, ceilDiv(chars, 4)))
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// split cuts text into at most n pieces at word boundaries; the pieces join back to text.
func split(text string, n int) []string {
	if text == "" {
		return nil
	}
	words := strings.SplitAfter(text, " ")
	n = min(n, len(words))
	pieces := make([]string, 0, n)
	for i := range n {
		from, to := i*len(words)/n, (i+1)*len(words)/n
		pieces = append(pieces, strings.Join(words[from:to], ""))
	}
	return pieces
}

// wait sleeps for d, on t when it is set, unless ctx is cancelled (its error) or closed is
// closed.
func wait(ctx context.Context, t *time.Timer, closed <-chan struct{}, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d <= 0 {
		return nil
	}
	if t == nil {
		t = time.NewTimer(d)
		defer t.Stop()
	} else {
		t.Reset(d)
	}
	select {
	case <-ctx.Done():
		t.Stop()
		return ctx.Err()
	case <-closed:
		t.Stop()
		return errClosed
	case <-t.C:
		return nil
	}
}

var errClosed = errors.New("stream closed")

// stream replays an answer's events at the configured pace.
type stream struct {
	name     string
	ctx      context.Context
	events   []providers.Event
	pos      int
	cur      providers.Event
	err      error
	latency  time.Duration
	interval time.Duration
	timer    *time.Timer

	closed    chan struct{}
	closeOnce sync.Once
}

// Next implements providers.Stream.
func (s *stream) Next() bool {
	if s.err != nil || s.pos >= len(s.events) {
		return false
	}
	select {
	case <-s.closed:
		s.err = fmt.Errorf("provider %s: %w", s.name, errClosed)
		return false
	default:
	}
	d := time.Duration(0)
	switch {
	case s.pos == 0:
		d = s.latency
	case s.events[s.pos].Type == providers.EventText:
		d = s.interval
	}
	if d > 0 && s.timer == nil {
		s.timer = time.NewTimer(d)
		s.timer.Stop()
	}
	if err := wait(s.ctx, s.timer, s.closed, d); err != nil {
		s.err = fmt.Errorf("provider %s: %w", s.name, err)
		return false
	}
	s.cur = s.events[s.pos]
	s.pos++
	return true
}

// Current implements providers.Stream.
func (s *stream) Current() providers.Event { return s.cur }

// Err implements providers.Stream.
func (s *stream) Err() error { return s.err }

// Close implements providers.Stream; it unblocks a Next that is waiting.
func (s *stream) Close() error {
	s.closeOnce.Do(func() { close(s.closed) })
	return nil
}

// Interface guards.
var (
	_ providers.Provider     = (*Provider)(nil)
	_ providers.ChatProvider = (*Provider)(nil)
)
