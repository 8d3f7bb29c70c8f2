package files

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
)

// BatchEndpoints are the urls a batch file's line may name.
var BatchEndpoints = []string{"/v1/chat/completions", "/v1/responses", "/v1/messages", "/v1/embeddings"}

// Bounds of a batch file's lines.
const (
	// MaxBatchLineBytes bounds one line, the only part of a batch file held in memory
	// while it is checked (a request with images inline can be tens of megabytes).
	MaxBatchLineBytes = 32 << 20
	// MaxBatchRows is the most request lines a batch file holds (OpenAI's 50,000); it
	// also bounds the custom_ids kept to tell duplicates.
	MaxBatchRows = 50_000
	// MaxCustomIDBytes bounds a custom_id.
	MaxCustomIDBytes = 512
)

// BatchLine is one request line of a batch file.
type BatchLine struct {
	CustomID string          `json:"custom_id"`
	Method   string          `json:"method"`
	URL      string          `json:"url"`
	Body     json.RawMessage `json:"body"`
}

// LineError names the first bad line of a batch file.
type LineError struct {
	// Line is its number, from 1; 0 for a fault of the whole file (it has no line).
	Line   int
	Reason string
}

func (e *LineError) Error() string {
	if e.Line == 0 {
		return "the batch file " + e.Reason
	}
	return fmt.Sprintf("line %d of the batch file %s", e.Line, e.Reason)
}

const notAnObject = "is not a JSON object: each line must be {\"custom_id\", \"method\", \"url\", \"body\"}"

// ParseBatchLine reads one non-blank line of a batch file, or says what is wrong with it.
// Blank lines are skipped by the caller.
func ParseBatchLine(line []byte) (BatchLine, string) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(line, &fields); err != nil || fields == nil {
		return BatchLine{}, notAnObject
	}
	var l BatchLine
	for _, name := range []string{"custom_id", "method", "url"} {
		raw, ok := fields[name]
		var s string
		if !ok || json.Unmarshal(raw, &s) != nil || s == "" {
			return BatchLine{}, fmt.Sprintf("has no %s: it must be a non-empty string", name)
		}
		switch name {
		case "custom_id":
			l.CustomID = s
		case "method":
			l.Method = s
		case "url":
			l.URL = s
		}
	}
	switch {
	case len(l.CustomID) > MaxCustomIDBytes:
		return BatchLine{}, fmt.Sprintf("has a custom_id longer than %d bytes", MaxCustomIDBytes)
	case l.Method != "POST":
		return BatchLine{}, fmt.Sprintf("has method %q: it must be \"POST\"", l.Method)
	case !slices.Contains(BatchEndpoints, l.URL):
		return BatchLine{}, fmt.Sprintf("has url %q: it must be one of %s", l.URL, strings.Join(BatchEndpoints, ", "))
	}
	body, ok := fields["body"]
	if !ok || !bytes.HasPrefix(bytes.TrimSpace(body), []byte("{")) {
		return BatchLine{}, "has no body object: body must be the request's JSON object"
	}
	l.Body = body
	return l, ""
}

// BatchChecker checks a batch file as it streams through it (an io.Writer beside the blob
// store's Put): each line a request (ParseBatchLine), custom_ids unique, at least one line,
// at most MaxBatchRows. It keeps only the line being read and the custom_ids. Err is the
// first bad line's; once there is one, the rest is not looked at. With FailFast, Write
// returns that error, so that a Put reading through it stops and stores nothing.
type BatchChecker struct {
	FailFast bool
	line     []byte
	n        int // lines read
	lines    batchLines
	err      *LineError
}

// Write reads more of the file.
func (c *BatchChecker) Write(p []byte) (int, error) {
	total := len(p)
	for len(p) > 0 && c.err == nil {
		i := bytes.IndexByte(p, '\n')
		chunk := p
		if i >= 0 {
			chunk = p[:i]
		}
		if t := bytes.TrimLeft(c.line, " \t\r"); len(t) == 0 {
			// A line that does not begin as an object is refused at once, so that a file
			// that is no batch file (an image, a PDF) is not read a line at a time.
			if rest := bytes.TrimLeft(chunk, " \t\r"); len(rest) > 0 && rest[0] != '{' {
				c.fail(c.n+1, notAnObject)
				break
			}
		}
		if len(c.line)+len(chunk) > MaxBatchLineBytes {
			c.fail(c.n+1, fmt.Sprintf("is longer than %d bytes", MaxBatchLineBytes))
			break
		}
		c.line = append(c.line, chunk...)
		if i < 0 {
			break
		}
		c.endLine()
		p = p[i+1:]
	}
	if c.err != nil && c.FailFast {
		return 0, c.err
	}
	return total, nil
}

// Close ends the file: its last line need not end with a newline. It returns Err.
func (c *BatchChecker) Close() error {
	if c.err == nil && len(c.line) > 0 {
		c.endLine()
	}
	if c.err == nil {
		c.err = c.lines.end()
	}
	return c.Err()
}

// Err is the first fault found, a *LineError, or nil.
func (c *BatchChecker) Err() error {
	if c.err == nil {
		return nil
	}
	return c.err
}

// Rows is the number of request lines read.
func (c *BatchChecker) Rows() int { return c.lines.rows }

func (c *BatchChecker) endLine() {
	c.n++
	_, _, err := c.lines.add(c.n, c.line)
	c.line = c.line[:0]
	if err != nil {
		c.err = err
		c.line, c.lines = nil, batchLines{}
	}
}

func (c *BatchChecker) fail(line int, reason string) {
	c.err = &LineError{Line: line, Reason: reason}
	c.line, c.lines = nil, batchLines{}
}

// ReadBatch reads a batch file from r, calling fn with each request line and its line
// number, in order, holding one line at a time. A bad line (as BatchChecker finds them) is
// a *LineError; fn's error stops the read and is returned as is.
func ReadBatch(r io.Reader, fn func(line int, l BatchLine) error) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var lines batchLines
	for n := 1; ; n++ {
		raw, err := ReadLine(br)
		if err != nil && err != io.EOF {
			if errors.Is(err, ErrLineTooLong) {
				return &LineError{Line: n, Reason: fmt.Sprintf("is longer than %d bytes", MaxBatchLineBytes)}
			}
			return err
		}
		l, blank, bad := lines.add(n, raw)
		if bad != nil {
			return bad
		}
		if !blank {
			if err := fn(n, l); err != nil {
				return err
			}
		}
		if err == io.EOF {
			break
		}
	}
	if bad := lines.end(); bad != nil {
		return bad
	}
	return nil
}

// batchLines counts a batch file's request lines and tells duplicates, for BatchChecker
// and ReadBatch alike.
type batchLines struct {
	seen map[string]int
	rows int
}

// add reads line n; blank is true for a line with nothing on it.
func (b *batchLines) add(n int, raw []byte) (l BatchLine, blank bool, err *LineError) {
	line := bytes.TrimSpace(raw)
	if len(line) == 0 {
		return BatchLine{}, true, nil
	}
	l, bad := ParseBatchLine(line)
	if bad != "" {
		return BatchLine{}, false, &LineError{Line: n, Reason: bad}
	}
	if first, dup := b.seen[l.CustomID]; dup {
		return BatchLine{}, false, &LineError{Line: n, Reason: fmt.Sprintf("repeats custom_id %q of line %d: custom_ids must be unique", l.CustomID, first)}
	}
	if b.rows++; b.rows > MaxBatchRows {
		return BatchLine{}, false, &LineError{Line: n, Reason: fmt.Sprintf("is one request too many: a batch file holds at most %d", MaxBatchRows)}
	}
	if b.seen == nil {
		b.seen = map[string]int{}
	}
	b.seen[l.CustomID] = n
	return l, false, nil
}

// end is the fault of a file that ended with no request line.
func (b *batchLines) end() *LineError {
	if b.rows == 0 {
		return &LineError{Reason: "has no request lines"}
	}
	return nil
}

// ErrLineTooLong refuses a line of a batch file longer than MaxBatchLineBytes.
var ErrLineTooLong = errors.New("a line of the batch file is longer than the most a line may be")

// ReadLine reads the next line of a batch file from br with its newline (none on the
// file's last line), at most MaxBatchLineBytes of it, holding one line at a time; io.EOF
// comes with the last line, which may be empty. Its length is the line's length in the
// file: readers of byte offsets (a batch's chunks) count it.
func ReadLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(line)+len(chunk) > MaxBatchLineBytes+1 {
			return nil, ErrLineTooLong
		}
		line = append(line, chunk...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return line, err
	}
}
