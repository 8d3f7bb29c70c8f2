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
// can never break the framing, and a reader joins the lines back with LF) and the blank line
// that dispatches the event. It is the one encoder of every event the gateway writes.
func AppendEvent(dst []byte, name string, data []byte) ([]byte, error) {
	if name != "" {
		if strings.ContainsAny(name, "\r\n") {
			return dst, ErrInvalidName
		}
		dst = append(dst, "event: "...)
		dst = append(dst, name...)
		dst = append(dst, '\n')
	}
	dst = append(dst, "data: "...)
	dst = appendDataLines(dst, data)
	return append(dst, '\n', '\n'), nil
}

// AppendSplicedData appends an unnamed event, as AppendEvent does, whose data is data with
// data[start:end] replaced by value: a relay puts its own value in an upstream's frame as it
// writes it, without building the new data first. value must not begin with LF.
func AppendSplicedData(dst, data []byte, start, end int, value []byte) []byte {
	dst = append(dst, "data: "...)
	dst = appendDataLines(dst, data[:start])
	dst = appendDataLines(dst, value)
	dst = appendDataLines(dst, data[end:])
	return append(dst, '\n', '\n')
}

// appendDataLines appends data with every line break (CR, LF or CRLF) turned into the start
// of a new data line.
func appendDataLines(dst, data []byte) []byte {
	for {
		i := indexEOL(data)
		if i < 0 {
			return append(dst, data...)
		}
		dst = append(dst, data[:i]...)
		dst = append(dst, "\ndata: "...)
		if data[i] == '\r' && i+1 < len(data) && data[i+1] == '\n' {
			i++
		}
		data = data[i+1:]
	}
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
