package handlers

import (
	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/openai"
)

// chatSurface writes neutral answers as chat completions.
type chatSurface struct {
	// includeUsage is the client's stream_options.include_usage.
	includeUsage bool
}

func (s chatSurface) response(dst []byte, c *call, resp *providers.Response, model string) ([]byte, error) {
	resp.Model = model
	return c.appendAnswer(dst, "id", openai.AppendChatUsage, func(dst []byte, add providers.Additions) ([]byte, bool, error) {
		return openai.AppendChatResponseWith(dst, resp, c.GenerationID, c.Start.Unix(), add)
	})
}

func (s chatSurface) sink(c *call, model string) streamSink {
	return &chatSink{c: c, enc: openai.NewChunkEncoder(c.GenerationID, model, c.Start.Unix()), includeUsage: s.includeUsage}
}

type chatSink struct {
	c            *call
	enc          *openai.ChunkEncoder
	includeUsage bool
	// frames is what event and finish return: each call's frames are written before the
	// next call.
	frames [2]frame
	// last holds the usage chunk, with cost and meta, until release.
	last lastFrame
}

func (s *chatSink) start() []frame { return nil }

func (s *chatSink) event(ev providers.Event) []frame {
	if chunk, ok := s.enc.Encode(ev); ok {
		s.frames[0] = frame{data: chunk}
		return s.frames[:1]
	}
	return nil
}

func (s *chatSink) finish(c *call) []frame {
	frames := s.frames[:0]
	if s.includeUsage || c.wantMeta {
		if chunk, ok := s.enc.Encode(providers.Event{Type: providers.EventUsage, Usage: c.tokens()}); ok {
			frames = append(frames, frame{data: s.last.decorate(c, chunk, "id", openai.AppendChatUsage)})
		}
	}
	return append(frames, doneFrame)
}

// release hands the encoder and the decorated chunk's buffer back once the stream's frames
// are written.
func (s *chatSink) release() {
	s.enc.Release()
	s.last.release()
}

func (s *chatSink) fail(ue *providers.UpstreamError) []frame {
	return []frame{{data: chatErrorFrame(ue)}}
}
