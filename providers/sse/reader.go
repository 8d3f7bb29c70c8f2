// Package sse reads and writes Server-Sent Events, the framing every streaming upstream
// (OpenAI chat and responses, Anthropic messages, Gemini with alt=sse) and every streaming
// surface of the gateway speak.
//
// The Reader follows the WHATWG event-stream parsing rules (field/value split on the first
// colon, one optional space after it, multi-line data joined with "\n", comments, CR, LF and
// CRLF line endings, a leading BOM skipped) with one deliberate leniency: a final event that
// is not followed by a blank line before EOF is still dispatched, because several
// OpenAI-compatible servers end their stream with "data: [DONE]\n" only.
//
// It sits on the hot path of every streamed token, so it reuses its buffers: the Data of an
// Event is only valid until the next call to Next.
package sse

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"sync"
)

// DefaultMaxEventBytes is the limit on an event's data used when NewReader is given zero or
// less. Chat chunks are a few hundred bytes; the largest legitimate events are terminal
// events that carry a whole response (OpenAI responses' response.completed).
const DefaultMaxEventBytes = 8 << 20

// lineSlack is what a line may hold beyond the data limit: the field name and its colon.
const lineSlack = 64

// ErrEventTooLarge is returned by Err when an event's data, or a single line, is larger than
// the reader's limit.
var ErrEventTooLarge = errors.New("sse: event too large")

// Event is one dispatched event.
type Event struct {
	// Name is the value of the event's "event:" field, empty when it had none (the
	// specification's default type "message").
	Name string
	// Data is the event's data lines joined with "\n". It aliases the reader's buffer and is
	// only valid until the next call to Next; copy it to keep it.
	Data []byte
}

// Reader reads events from an event stream. It is not safe for concurrent use.
type Reader struct {
	// br is nil once the reader is done (Release): at the end of the stream, on an error,
	// or when its caller leaves it.
	br  *bufio.Reader
	max int

	line    []byte // a line that spanned more than one buffer fill
	data    []byte
	hasData bool
	name    string
	ev      Event

	skipLF  bool // the previous line ended with CR: a following LF belongs to it
	started bool // the first line was read (the BOM check is done)
	eof     bool
	err     error

	onWait func()
}

// NewReader returns a Reader of r that fails with ErrEventTooLarge on events whose data is
// larger than maxEventBytes (DefaultMaxEventBytes when zero or less).
func NewReader(r io.Reader, maxEventBytes int) *Reader {
	if maxEventBytes <= 0 {
		maxEventBytes = DefaultMaxEventBytes
	}
	br := readBufs.Get().(*bufio.Reader)
	br.Reset(r)
	return &Reader{br: br, max: maxEventBytes}
}

// readBufs holds the 4 KiB read buffers of readers that are done, for the next streams:
// every streamed answer has a reader, and its buffer was most of what relaying a stream
// allocated beyond plain Caddy's.
var readBufs = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 4096) }}

// Release gives the reader's buffer back for other readers; Next reports false after it,
// and Event and Err still return what they did. A reader releases its buffer by itself
// once the stream ends or fails; Release is for one left before that (after a [DONE], a
// failure of the caller's own). Call it from the goroutine that calls Next, or once that
// goroutine is done with the reader: never while a Next may be running.
func (r *Reader) Release() {
	if r.br != nil {
		r.br.Reset(nil)
		readBufs.Put(r.br)
		r.br = nil
	}
}

// OnWait sets f to be called each time the reader is about to wait for more of the stream:
// before every read from the underlying reader, which it makes only once what it holds is
// used up. A relay that writes events without flushing them flushes in f, so that events
// that arrived together leave together, in one write, and none is held while the reader
// waits.
func (r *Reader) OnWait(f func()) { r.onWait = f }

// Next reads up to the next event and reports whether there is one. It returns false at the
// end of the stream or on an error, which Err then returns.
func (r *Reader) Next() bool {
	if r.br == nil {
		return false
	}
	r.data = r.data[:0]
	r.hasData = false
	eventName := ""
	for {
		line, err := r.readLine()
		if err != nil {
			r.Release()
			if err != io.EOF {
				r.err = err
				return false
			}
			// Lenient: an event cut off by EOF before its blank line is still dispatched.
			if r.hasData {
				r.dispatch(eventName)
				return true
			}
			return false
		}
		if len(line) == 0 {
			if !r.hasData {
				// A blank line with no data resets the event name and dispatches nothing.
				eventName = ""
				continue
			}
			r.dispatch(eventName)
			return true
		}
		if line[0] == ':' {
			continue
		}
		field, value := line, []byte(nil)
		if i := bytes.IndexByte(line, ':'); i >= 0 {
			field, value = line[:i], line[i+1:]
			if len(value) > 0 && value[0] == ' ' {
				value = value[1:]
			}
		}
		switch string(field) {
		case "data":
			extra := len(value)
			if r.hasData {
				extra++
			}
			if len(r.data)+extra > r.max {
				r.Release()
				r.err = ErrEventTooLarge
				return false
			}
			if r.hasData {
				r.data = append(r.data, '\n')
			}
			r.data = append(r.data, value...)
			r.hasData = true
		case "event":
			// Comparing before converting keeps a repeated name from allocating, and the
			// names upstreams send take their constant.
			if string(value) != r.name {
				r.name = knownName(value)
			}
			eventName = r.name
		}
		// "id", "retry" and unknown fields are ignored: no upstream relies on them.
	}
}

// knownNames are the event names the upstreams send. Anthropic's and OpenAI Responses'
// change from one event to the next (message_start, content_block_start,
// content_block_delta...): each change made a new string, six or more a stream.
var knownNames = [...]string{
	"message_start", "content_block_start", "content_block_delta", "content_block_stop",
	"message_delta", "message_stop", "ping", "error",
	"response.created", "response.in_progress", "response.output_item.added",
	"response.content_part.added", "response.output_text.delta", "response.output_text.done",
	"response.content_part.done", "response.output_item.done", "response.completed",
	"response.incomplete", "response.failed", "response.reasoning_text.delta",
	"response.function_call_arguments.delta", "response.function_call_arguments.done",
	"response.reasoning_summary_text.delta", "response.reasoning_summary_part.added",
	"response.reasoning_summary_part.done", "response.reasoning_summary_text.done",
}

// knownName returns the name in value, the known name's constant when it is one.
func knownName(value []byte) string {
	for _, n := range knownNames {
		if string(value) == n {
			return n
		}
	}
	return string(value)
}

func (r *Reader) dispatch(name string) {
	r.ev = Event{Name: name, Data: r.data}
}

// Event returns the event Next read.
func (r *Reader) Event() Event { return r.ev }

// Err returns the error that stopped the reader, nil at a clean end of stream.
func (r *Reader) Err() error { return r.err }

// readLine returns the next line without its terminator, io.EOF when the stream ended
// before another line. The line is only valid until the next call.
func (r *Reader) readLine() ([]byte, error) {
	r.line = r.line[:0]
	limit := r.max + lineSlack
	for {
		if r.eof {
			if len(r.line) > 0 {
				return r.finishLine(r.line), nil
			}
			return nil, io.EOF
		}
		buf, err := r.fill()
		if err != nil {
			if err == io.EOF {
				r.eof = true
				continue
			}
			return nil, err
		}
		if r.skipLF {
			r.skipLF = false
			if buf[0] == '\n' {
				_, _ = r.br.Discard(1)
				continue
			}
		}
		i := indexEOL(buf)
		if i < 0 {
			if len(r.line)+len(buf) > limit {
				return nil, ErrEventTooLarge
			}
			r.line = append(r.line, buf...)
			_, _ = r.br.Discard(len(buf))
			continue
		}
		if len(r.line)+i > limit {
			return nil, ErrEventTooLarge
		}
		var line []byte
		if len(r.line) == 0 {
			// The common case: the whole line is in the buffer and is used before the next
			// fill moves it, so it needs no copy.
			line = buf[:i]
		} else {
			r.line = append(r.line, buf[:i]...)
			line = r.line
		}
		r.skipLF = buf[i] == '\r'
		_, _ = r.br.Discard(i + 1)
		return r.finishLine(line), nil
	}
}

// fill returns the buffered bytes, reading more when there are none.
func (r *Reader) fill() ([]byte, error) {
	n := r.br.Buffered()
	if n == 0 {
		if r.onWait != nil {
			r.onWait()
		}
		if _, err := r.br.Peek(1); err != nil {
			return nil, err
		}
		n = r.br.Buffered()
	}
	return r.br.Peek(n)
}

var bom = []byte("\xEF\xBB\xBF")

func (r *Reader) finishLine(line []byte) []byte {
	if !r.started {
		r.started = true
		line = bytes.TrimPrefix(line, bom)
	}
	return line
}

// indexEOL finds the first CR or LF; two vectorised byte searches beat a byte loop.
func indexEOL(b []byte) int {
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		return bytes.IndexByte(b, '\r')
	}
	if j := bytes.IndexByte(b[:i], '\r'); j >= 0 {
		return j
	}
	return i
}
