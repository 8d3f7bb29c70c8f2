package sse

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"sync"
)

// ErrInvalidName is returned when an event name contains a line break, which would break
// the framing.
var ErrInvalidName = errors.New("sse: event name contains a line break")

// AppendEvent appends one event frame to dst: an "event: name" line when name is set, a
// "data: " line per line of data (CR, LF and CRLF in data all start a new data line, so data
// can never break the framing) and the blank line that dispatches the event.
func AppendEvent(dst []byte, name string, data []byte) ([]byte, error) {
	if name != "" {
		if strings.ContainsAny(name, "\r\n") {
			return dst, ErrInvalidName
		}
		dst = append(dst, "event: "...)
		dst = append(dst, name...)
		dst = append(dst, '\n')
	}
	for {
		i := indexEOL(data)
		if i < 0 {
			break
		}
		dst = append(dst, "data: "...)
		dst = append(dst, data[:i]...)
		dst = append(dst, '\n')
		if data[i] == '\r' && i+1 < len(data) && data[i+1] == '\n' {
			i++
		}
		data = data[i+1:]
	}
	dst = append(dst, "data: "...)
	dst = append(dst, data...)
	dst = append(dst, '\n', '\n')
	return dst, nil
}

// framePool holds frame buffers so that writing an event costs no allocation.
var framePool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// maxPooledFrame keeps one huge event from pinning its buffer in the pool.
const maxPooledFrame = 64 << 10

// WriteEvent writes one event frame (see AppendEvent) with a single Write, so that a frame
// is never split across writes to the client.
func WriteEvent(w io.Writer, name string, data []byte) error {
	bp := framePool.Get().(*[]byte)
	frame, err := AppendEvent((*bp)[:0], name, data)
	if err == nil {
		_, err = w.Write(frame)
	}
	if cap(frame) <= maxPooledFrame {
		*bp = frame[:0]
		framePool.Put(bp)
	}
	return err
}

// WriteData writes "data: <data>\n\n", the unnamed event of OpenAI chat streams.
func WriteData(w io.Writer, data []byte) error { return WriteEvent(w, "", data) }

// WriteComment writes a comment line, ": text", followed by a blank line; clients ignore
// it, which makes it a keep-alive. Line breaks in text are replaced by spaces.
func WriteComment(w io.Writer, text string) error {
	if strings.ContainsAny(text, "\r\n") {
		text = strings.NewReplacer("\r\n", " ", "\r", " ", "\n", " ").Replace(text)
	}
	var b bytes.Buffer
	b.Grow(len(text) + 4)
	b.WriteString(": ")
	b.WriteString(text)
	b.WriteString("\n\n")
	_, err := w.Write(b.Bytes())
	return err
}
