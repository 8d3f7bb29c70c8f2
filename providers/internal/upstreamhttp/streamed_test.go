package upstreamhttp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/providers"
)

// TestSendWritten: a written body arrives whole and chunked; an upstream that refuses it
// before reading it all ends the writer instead of leaving it blocked, and its refusal is
// the error; the writer's own failure is returned as it is.
func TestSendWritten(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/refuse" {
			w.WriteHeader(http.StatusForbidden)
			_, _ = io.WriteString(w, "no uploads")
			return
		}
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"chunked":%v,"type":%q,"bytes":%d}`, slices.Contains(r.TransferEncoding, "chunked"), r.Header.Get("Content-Type"), len(b))
	}))
	defer srv.Close()
	var got parsed
	c := testClient(srv.Client().Transport, &got)
	ctx := context.Background()
	write := func(n int) func(io.Writer) error {
		return func(w io.Writer) error {
			line := bytes.Repeat([]byte("z"), 1024)
			for range n {
				if _, err := w.Write(line); err != nil {
					return err
				}
			}
			return nil
		}
	}

	resp, at, err := c.SendWritten(ctx, srv.URL+"/ok", "application/x-ndjson", write(3))
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.ReadBody(ctx, at, resp)
	if err != nil || string(b) != `{"chunked":true,"type":"application/x-ndjson","bytes":3072}` {
		t.Fatalf("answer %s %v", b, err)
	}

	// 64 MiB that the upstream never reads: the writer must be released by the refusal.
	_, _, err = c.SendWritten(ctx, srv.URL+"/refuse", "", write(64<<10))
	if ue, ok := providers.AsUpstreamError(err); !ok || ue.Status != http.StatusForbidden || got.body != "no uploads" {
		t.Fatalf("refusal: %v", err)
	}

	broken := errors.New("rows unreadable")
	_, _, err = c.SendWritten(ctx, srv.URL+"/ok", "", func(w io.Writer) error {
		_, _ = w.Write([]byte("partial"))
		return broken
	})
	if !errors.Is(err, broken) {
		t.Fatalf("writer's error: %v", err)
	}

	_, _, err = c.SendWritten(ctx, srv.URL+"/ok", "", func(io.Writer) error { panic("writer bug") })
	if err == nil || !strings.Contains(err.Error(), "writer bug") {
		t.Fatalf("writer's panic: %v", err)
	}
}

// TestEachLine: lines come one by one without the blank ones, an error of fn stops the
// reading, and a line past the limit is a malformed answer.
func TestEachLine(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "{\"a\":1}\n\n  {\"b\":2}  \r\n"+strings.Repeat("l", 100)+"\n")
	}))
	defer srv.Close()
	var got parsed
	c := testClient(srv.Client().Transport, &got)
	ctx := context.Background()
	read := func(maxLine int, fn func(int, []byte) error) error {
		resp, at, err := c.Fetch(ctx, Fetch{URL: srv.URL})
		if err != nil {
			t.Fatal(err)
		}
		return c.EachLine(ctx, at, resp, 0, maxLine, fn)
	}
	var lines []string
	var numbers []int
	if err := read(1000, func(n int, line []byte) error {
		lines, numbers = append(lines, string(line)), append(numbers, n)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(lines) != 3 || lines[1] != `{"b":2}` || numbers[1] != 3 {
		t.Fatalf("lines %q numbers %v", lines, numbers)
	}
	stop := errors.New("stop")
	calls := 0
	if err := read(1000, func(int, []byte) error { calls++; return stop }); !errors.Is(err, stop) || calls != 1 {
		t.Fatalf("fn's error: %v after %d calls", err, calls)
	}
	err := read(50, func(int, []byte) error { return nil })
	if _, ok := providers.AsUpstreamError(err); !ok || !errors.Is(err, ErrMalformedResponse) {
		t.Fatalf("long line: %v", err)
	}
}

// TestEachLineStreams: lines reach fn as the answer arrives: the upstream writes its
// 15,000th line only once fn has seen the 5,000th, which a reader that took the answer
// whole before reading its lines would never let happen.
func TestEachLineStreams(t *testing.T) {
	seen := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		line := `{"custom_id":"row","pad":"` + strings.Repeat("p", 1000) + `"}` + "\n"
		for i := range 20_000 {
			if i == 15_000 {
				w.(http.Flusher).Flush()
				select {
				case <-seen:
				case <-time.After(time.Minute):
					return // the reader fails on the short answer below
				}
			}
			_, _ = io.WriteString(w, line)
		}
	}))
	defer srv.Close()
	var got parsed
	c := testClient(srv.Client().Transport, &got)
	ctx := context.Background()
	resp, at, err := c.Fetch(ctx, Fetch{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	err = c.EachLine(ctx, at, resp, 0, 1<<20, func(int, []byte) error {
		if n++; n == 5_000 {
			close(seen)
		}
		return nil
	})
	if err != nil || n != 20_000 {
		t.Fatalf("%d lines, %v: the lines were not read as they came", n, err)
	}
}
