package upstreamhttp

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/modelgateway/caddy-modelgateway/internal/background"
)

// errWriteAborted ends a streamed body's writer when the request ended before it read the
// whole body (the upstream answered early, or the caller left).
var errWriteAborted = errors.New("request body no longer read")

// SendWritten is Send with a body that write produces as the request sends it (a batch's
// rows, as many as there are): write runs on a goroutine of its own, into a pipe that the
// request reads, so that no more of the body is held than the buffers in between. The body
// is sent chunked, with contentType ("" for JSON).
//
// An error of write (or its panic) is returned as it is, before the upstream's answer or
// failure: it is why the body broke off.
func (c *Client) SendWritten(ctx context.Context, u, contentType string, write func(io.Writer) error) (*http.Response, *Attempt, error) {
	pr, pw := io.Pipe()
	var writeErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		var err error
		if p := background.Call("provider "+c.Provider+" request body", func() { err = write(pw) }); p != nil {
			err = p
		}
		writeErr = err
		_ = pw.CloseWithError(err)
	}()
	resp, at, err := c.SendBody(ctx, u, Body{Reader: pr, Length: -1, ContentType: contentType}, false, nil)
	_ = pr.CloseWithError(errWriteAborted)
	<-done
	// A writer stopped by the pipe's reader going away (the transport closes the request
	// body when the upstream answers before reading it all, or here once the call ended)
	// did not fail: the call's own outcome is the error.
	if writeErr != nil && !errors.Is(writeErr, errWriteAborted) && !errors.Is(writeErr, io.ErrClosedPipe) {
		if err == nil {
			_ = resp.Body.Close()
			at.Cancel()
		}
		return nil, nil, writeErr
	}
	return resp, at, err
}

// EachLine reads a 2xx answer of JSON lines (a batch's results) line by line into fn,
// with the line's number from 1, skipping blank lines: a line is valid only during its
// call, and an error of fn stops the reading and is returned. A line longer than maxLine is
// a malformed answer; a read error is classified like a transport error, and a silence
// longer than idle is an idle timeout. It ends the attempt.
func (c *Client) EachLine(ctx context.Context, at *Attempt, resp *http.Response, idle time.Duration, maxLine int, fn func(n int, line []byte) error) error {
	body := c.RawResponse(ctx, at, resp, true, idle).Body
	defer body.Close()
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 0, min(64<<10, maxLine)), maxLine)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		if err := fn(n, line); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return c.Malformed(resp.StatusCode, nil, fmt.Errorf("a line longer than %d bytes", maxLine))
		}
		return err
	}
	return nil
}
