package handlers

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// countingWriter counts the writes and flushes that reach the client's connection.
type countingWriter struct {
	*httptest.ResponseRecorder
	writes, flushes int
}

func (w *countingWriter) Write(b []byte) (int, error) {
	w.writes++
	return w.ResponseRecorder.Write(b)
}

func (w *countingWriter) Flush() { w.flushes++ }

// TestSSEFramesOneWrite: the events one upstream event becomes reach the client in one
// write and one flush, byte for byte what writing them one by one gives.
func TestSSEFramesOneWrite(t *testing.T) {
	frames := []frame{
		{event: "message_start", data: []byte(`{"type":"message_start"}`)},
		{event: "content_block_start", data: []byte(`{"type":"content_block_start","index":0}`)},
		{event: "content_block_delta", data: []byte(`{"type":"content_block_delta","index":0}`)},
		doneFrame,
	}
	together := &countingWriter{ResponseRecorder: httptest.NewRecorder()}
	newSSEWriter(together).frames(frames)
	if together.writes != 1 || together.flushes != 1 {
		t.Fatalf("%d writes and %d flushes for %d events, want one of each", together.writes, together.flushes, len(frames))
	}
	apart := &countingWriter{ResponseRecorder: httptest.NewRecorder()}
	out := newSSEWriter(apart)
	for _, f := range frames {
		out.event(f.event, f.data)
	}
	if together.Body.String() != apart.Body.String() {
		t.Fatalf("together:\n%s\napart:\n%s", together.Body.String(), apart.Body.String())
	}
	if together.Code != http.StatusOK || together.Header().Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d, content type %q", together.Code, together.Header().Get("Content-Type"))
	}
	// Nothing to write writes nothing, not even the headers.
	idle := &countingWriter{ResponseRecorder: httptest.NewRecorder()}
	newSSEWriter(idle).frames(nil)
	if idle.writes != 0 || idle.flushes != 0 {
		t.Fatalf("no frames: %d writes, %d flushes", idle.writes, idle.flushes)
	}
}

// discardWriter is a client connection that takes everything and keeps nothing.
type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *discardWriter) WriteHeader(int)             {}
func (w *discardWriter) Flush()                      {}

// TestSSEWriterBufferIsPooled: a released writer's buffer serves the next stream, so
// writing a stream's events allocates well under the buffer's 2 KiB (even with -race, whose
// pools drop a quarter of what they are given); after release the writer holds none.
func TestSSEWriterBufferIsPooled(t *testing.T) {
	frames := []frame{
		{event: "message_start", data: []byte(`{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[]}}`)},
		{event: "content_block_delta", data: []byte(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hello"}}`)},
	}
	w := &discardWriter{h: http.Header{}}
	stream := func() {
		out := newSSEWriter(w)
		out.frames(frames)
		out.event("", []byte(`{"type":"ping"}`))
		out.release()
		if out.buf != nil || out.pooled != nil {
			t.Fatal("the writer kept its buffer after release")
		}
	}
	stream()
	if per := bytesPerCall(400, stream); per > 1024 {
		t.Errorf("%.0f bytes allocated per stream; the event buffer is not reused", per)
	}
}

// TestIdleTimer: events closer together than d keep the wait going however long the stream
// lasts; silence for d ends it once; Stop prevents it.
func TestIdleTimer(t *testing.T) {
	t.Parallel()
	// Kicks d/10 apart: a loaded machine oversleeping one of them by nine tenths of d is
	// what it would take to fire early.
	const d = 300 * time.Millisecond
	var stops atomic.Int32
	it := newIdleTimer(d, func() { stops.Add(1) })
	for end := time.Now().Add(3 * d); time.Now().Before(end); time.Sleep(d / 10) {
		it.kick()
	}
	if it.fired.Load() || stops.Load() != 0 {
		t.Fatal("fired while events kept coming")
	}
	deadline := time.Now().Add(10 * d)
	for !it.fired.Load() {
		if time.Now().After(deadline) {
			t.Fatal("did not fire after the events stopped")
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(2 * d)
	if n := stops.Load(); n != 1 {
		t.Fatalf("stop called %d times", n)
	}

	quiet := newIdleTimer(d, func() { stops.Add(1) })
	quiet.Stop()
	time.Sleep(2 * d)
	if quiet.fired.Load() || stops.Load() != 1 {
		t.Fatal("fired after Stop")
	}
}
