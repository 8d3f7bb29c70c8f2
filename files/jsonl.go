package files

import (
	"bytes"
	"encoding/json"
	"fmt"
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
	rows     int
	seen     map[string]int
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
	if c.err == nil && c.rows == 0 {
		c.fail(0, "has no request lines")
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
func (c *BatchChecker) Rows() int { return c.rows }

func (c *BatchChecker) endLine() {
	c.n++
	line := bytes.TrimSpace(c.line)
	c.line = c.line[:0]
	if len(line) == 0 {
		return
	}
	l, bad := ParseBatchLine(line)
	if bad != "" {
		c.fail(c.n, bad)
		return
	}
	if first, dup := c.seen[l.CustomID]; dup {
		c.fail(c.n, fmt.Sprintf("repeats custom_id %q of line %d: custom_ids must be unique", l.CustomID, first))
		return
	}
	if c.rows++; c.rows > MaxBatchRows {
		c.fail(c.n, fmt.Sprintf("is one request too many: a batch file holds at most %d", MaxBatchRows))
		return
	}
	if c.seen == nil {
		c.seen = map[string]int{}
	}
	c.seen[l.CustomID] = c.n
}

func (c *BatchChecker) fail(line int, reason string) {
	c.err = &LineError{Line: line, Reason: reason}
	c.line, c.seen = nil, nil
}
