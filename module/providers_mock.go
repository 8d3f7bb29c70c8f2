package module

import (
	"errors"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/mock"
)

func init() {
	caddy.RegisterModule(new(MockProvider))
}

// MockProvider is the provider type of the built-in mock upstream, which answers without
// a network call: for trying the gateway offline and for tests.
type MockProvider struct {
	// Latency is the wait before the answer, or before a stream's first piece. Default: 0.
	Latency caddy.Duration `json:"latency,omitempty"`
	// Chunks is the number of pieces a streamed answer is cut into (fewer when the answer
	// has fewer words). Default: 8.
	Chunks int `json:"chunks,omitempty"`
	// ChunkInterval is the wait between two pieces of a stream. Default: 0.
	ChunkInterval caddy.Duration `json:"chunk_interval,omitempty"`
	// Text is the fixed reply. Default: a reply derived from the prompt.
	Text string `json:"text,omitempty"`
	// VideoRender is how long a video job takes to complete from its start. Default: 3s.
	VideoRender caddy.Duration `json:"video_render,omitempty"`
	// VideoBytesPerSecond is the size of a video's content per second of video, which
	// makes videos as large as a benchmark needs. Default: 65536 (64 KiB).
	VideoBytesPerSecond int64 `json:"video_bytes_per_second,omitempty"`
}

// CaddyModule returns the Caddy module information.
func (*MockProvider) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: ProvidersNamespace + ".mock", New: func() caddy.Module { return new(MockProvider) }}
}

// Validate refuses negative waits and counts.
func (p *MockProvider) Validate() error {
	if p.Latency < 0 || p.ChunkInterval < 0 || p.Chunks < 0 || p.VideoRender < 0 || p.VideoBytesPerSecond < 0 {
		return errors.New("latency, chunks, chunk_interval, video_render and video_bytes_per_second must not be negative")
	}
	return nil
}

// Build returns the adapter.
func (p *MockProvider) Build(name string) (providers.Provider, error) {
	return mock.New(mock.Config{
		Name: name, Latency: time.Duration(p.Latency), Chunks: p.Chunks, ChunkInterval: time.Duration(p.ChunkInterval), Text: p.Text,
		VideoRender: time.Duration(p.VideoRender), VideoBytesPerSecond: p.VideoBytesPerSecond,
	}), nil
}

// AcceptsPrefill is true: the mock continues a last assistant turn.
func (*MockProvider) AcceptsPrefill() bool { return true }

// Interface guards.
var (
	_ ProviderModule  = (*MockProvider)(nil)
	_ PrefillAccepter = (*MockProvider)(nil)
	_ caddy.Validator = (*MockProvider)(nil)
)
