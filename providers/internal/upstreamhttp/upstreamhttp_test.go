package upstreamhttp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/sse"
)

func TestRetryAfter(t *testing.T) {
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name   string
		header http.Header
		want   time.Duration
	}{
		{"none", nil, 0},
		{"empty", http.Header{}, 0},
		{"seconds", http.Header{"Retry-After": {"20"}}, 20 * time.Second},
		{"fractional seconds", http.Header{"Retry-After": {" 0.5 "}}, 500 * time.Millisecond},
		{"http date", http.Header{"Retry-After": {now.Add(90 * time.Second).Format(http.TimeFormat)}}, 90 * time.Second},
		{"date in the past", http.Header{"Retry-After": {now.Add(-time.Hour).Format(http.TimeFormat)}}, 0},
		{"date far away", http.Header{"Retry-After": {now.Add(100 * time.Hour).Format(http.TimeFormat)}}, MaxRetryWait},
		{"milliseconds win", http.Header{"Retry-After": {"20"}, "Retry-After-Ms": {"250"}}, 250 * time.Millisecond},
		{"milliseconds alone", http.Header{"Retry-After-Ms": {"1500.5"}}, 1500*time.Millisecond + 500*time.Microsecond},
		{"bad milliseconds fall back", http.Header{"Retry-After": {"3"}, "Retry-After-Ms": {"soon"}}, 3 * time.Second},
		{"negative milliseconds fall back", http.Header{"Retry-After": {"3"}, "Retry-After-Ms": {"-1"}}, 3 * time.Second},
		{"infinite milliseconds fall back", http.Header{"Retry-After-Ms": {"+Inf"}}, 0},
		{"huge milliseconds capped", http.Header{"Retry-After-Ms": {"1e300"}}, MaxRetryWait},
		{"garbage", http.Header{"Retry-After": {"later"}}, 0},
		{"negative", http.Header{"Retry-After": {"-4"}}, 0},
		{"not a number", http.Header{"Retry-After": {"NaN"}}, 0},
		{"capped", http.Header{"Retry-After": {"1e30"}}, MaxRetryWait},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := RetryAfter(tc.header, now); got != tc.want {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestRetryAfterHeaderIgnoresMilliseconds(t *testing.T) {
	now := time.Now()
	h := http.Header{"Retry-After": {"7"}, "Retry-After-Ms": {"250"}}
	if got := RetryAfterHeader(h, now); got != 7*time.Second {
		t.Fatalf("got %v, want 7s", got)
	}
	if got := RetryAfterHeader(http.Header{"Retry-After-Ms": {"250"}}, now); got != 0 {
		t.Fatalf("got %v, want 0", got)
	}
	if got := RetryAfterHeader(nil, now); got != 0 {
		t.Fatalf("nil header: got %v", got)
	}
}

func TestTruncate(t *testing.T) {
	tests := []struct {
		s    string
		n    int
		want string
	}{
		{"hello", 10, "hello"},
		{"hello", 5, "hello"},
		{"hello", 3, "hel"},
		{"héllo", 2, "h"}, // é is two bytes: not split
		{"héllo", 3, "hé"},
		{"日本", 1, ""},
		{"", 0, ""},
	}
	for _, tc := range tests {
		if got := Truncate(tc.s, tc.n); got != tc.want {
			t.Errorf("Truncate(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
	}
}

func TestSecrets(t *testing.T) {
	var s Secrets
	s.Add("")
	if len(s) != 0 {
		t.Fatalf("an empty secret was added: %q", s)
	}
	body := []byte(`{"error":"bad key"}`)
	if got := s.Redact(body); &got[0] != &body[0] {
		t.Fatal("a body without secrets was copied")
	}
	s.Add("sk-one")
	s.Add("tok-two")
	got := string(s.Redact([]byte(`key sk-one, token tok-two, again sk-one`)))
	if want := `key [redacted], token [redacted], again [redacted]`; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	clean := []byte("nothing to hide")
	if got := s.Redact(clean); &got[0] != &clean[0] {
		t.Fatal("a body without secrets was copied")
	}
}

func TestIsJSON(t *testing.T) {
	for ct, want := range map[string]bool{
		"application/json":                true,
		"application/json; charset=utf-8": true,
		"text/event-stream":               false,
		"":                                false,
		"application/jsonl":               false,
	} {
		if got := IsJSON(http.Header{"Content-Type": {ct}}); got != want {
			t.Errorf("IsJSON(%q) = %v", ct, got)
		}
	}
}

func TestParseBaseURL(t *testing.T) {
	if u, err := ParseBaseURL("https://api.example.com/v1"); err != nil || u.Host != "api.example.com" {
		t.Fatalf("valid URL: %v, %v", u, err)
	}
	for _, raw := range []string{"ftp://example.com", "/v1", "https://", "http://[::1"} {
		if _, err := ParseBaseURL(raw); err == nil {
			t.Errorf("%q accepted", raw)
		}
	}
	_, err := ParseBaseURL("http://[::1")
	if !strings.HasPrefix(err.Error(), "parsing base URL: ") {
		t.Errorf("parse error: %v", err)
	}
}

func TestNewAttempt(t *testing.T) {
	ctx := context.Background()
	at := NewAttempt(ctx, 0)
	if at.Context() != ctx {
		t.Fatal("an attempt without timeout has a context of its own")
	}
	at.Cancel()
	at.Cancel()

	at = NewAttempt(ctx, time.Millisecond)
	<-at.Context().Done()
	if !errors.Is(context.Cause(at.Context()), ErrAttemptTimeout) {
		t.Fatalf("cause %v", context.Cause(at.Context()))
	}

	at = NewAttempt(ctx, time.Hour)
	at.Cancel()
	if at.Context().Err() == nil {
		t.Fatal("Cancel did not end the attempt")
	}
}

// timeoutErr is a net.Error that timed out.
type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func TestTransportError(t *testing.T) {
	bg := context.Background()
	boom := errors.New("connection reset")

	t.Run("upstream error as it is", func(t *testing.T) {
		ue := &providers.UpstreamError{Provider: "x", Status: 429}
		if got := TransportError("p", bg, NewAttempt(bg, 0), fmt.Errorf("wrapped: %w", ue)); got != ue {
			t.Fatalf("got %v", got)
		}
	})
	t.Run("caller cancellation", func(t *testing.T) {
		ctx, cancel := context.WithCancel(bg)
		cancel()
		err := TransportError("p", ctx, NewAttempt(ctx, 0), boom)
		if _, ok := providers.AsUpstreamError(err); ok || !errors.Is(err, context.Canceled) || err.Error() != "provider p: context canceled" {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("plain failure", func(t *testing.T) {
		err := TransportError("p", bg, NewAttempt(bg, 0), boom)
		ue, ok := providers.AsUpstreamError(err)
		if !ok || ue.Provider != "p" || ue.Status != 0 || ue.Category != providers.CategoryServerError ||
			!ue.Retryable || ue.Timeout || !errors.Is(err, boom) {
			t.Fatalf("got %#v", err)
		}
	})
	t.Run("net timeout", func(t *testing.T) {
		ue, _ := providers.AsUpstreamError(TransportError("p", bg, NewAttempt(bg, 0), fmt.Errorf("read: %w", timeoutErr{})))
		if ue == nil || !ue.Timeout || errors.Is(ue, ErrAttemptTimeout) {
			t.Fatalf("got %#v", ue)
		}
	})
	t.Run("deadline exceeded", func(t *testing.T) {
		ue, _ := providers.AsUpstreamError(TransportError("p", bg, NewAttempt(bg, 0), context.DeadlineExceeded))
		if ue == nil || !ue.Timeout {
			t.Fatalf("got %#v", ue)
		}
	})

	expired := func() *Attempt {
		at := NewAttempt(bg, time.Nanosecond)
		<-at.Context().Done()
		return at
	}
	t.Run("attempt timeout", func(t *testing.T) {
		ue, _ := providers.AsUpstreamError(TransportError("p", bg, expired(), boom))
		if ue == nil || !ue.Timeout || !errors.Is(ue, ErrAttemptTimeout) || !errors.Is(ue, boom) {
			t.Fatalf("got %#v", ue)
		}
		if want := "provider p: upstream attempt timeout: connection reset"; ue.Error() != want {
			t.Fatalf("error %q, want %q", ue.Error(), want)
		}
	})
	// net/http reports the context's cause: the error may already carry ErrAttemptTimeout,
	// which is not named twice.
	cause := fmt.Errorf("Post %q: %w", "http://x", ErrAttemptTimeout)
	t.Run("attempt timeout, cause once", func(t *testing.T) {
		ue, _ := providers.AsUpstreamError(TransportError("p", bg, expired(), cause))
		if want := `provider p: Post "http://x": upstream attempt timeout`; ue == nil || ue.Error() != want || !ue.Timeout {
			t.Fatalf("got %v, want %q", ue, want)
		}
		ue, _ = providers.AsUpstreamError(TransportError("p", bg, expired(), boom))
		if ue == nil || !errors.Is(ue, ErrAttemptTimeout) || !errors.Is(ue, boom) {
			t.Fatalf("got %v", ue)
		}
	})
}

func TestFailure(t *testing.T) {
	cause := errors.New("stream ended early")
	e := Failure("p", cause, nil, nil)
	if e.Provider != "p" || e.Message != cause.Error() || e.Err != cause || !e.Retryable ||
		e.Category != providers.CategoryServerError || e.Status != 0 || e.Payload != "" {
		t.Fatalf("got %#v", e)
	}
	inner := errors.New("too large")
	e = Failure("p", ErrMalformedFrame, inner, bytes.Repeat([]byte("x"), 2*providers.PreviewLimit))
	if !errors.Is(e, ErrMalformedFrame) || !errors.Is(e, inner) || len(e.Payload) != providers.PreviewLimit {
		t.Fatalf("got %#v", e)
	}
}

// slowBody returns its chunks one at a time, waiting before each, then EOF; Close unblocks it.
type slowBody struct {
	chunks []string
	wait   time.Duration
	closed chan struct{}
	once   atomic.Bool
}

func newSlowBody(wait time.Duration, chunks ...string) *slowBody {
	return &slowBody{chunks: chunks, wait: wait, closed: make(chan struct{})}
}

func (b *slowBody) Read(p []byte) (int, error) {
	if len(b.chunks) == 0 {
		return 0, io.EOF
	}
	select {
	case <-time.After(b.wait):
	case <-b.closed:
		return 0, errors.New("read on closed body")
	}
	n := copy(p, b.chunks[0])
	b.chunks = b.chunks[1:]
	return n, nil
}

func (b *slowBody) Close() error {
	if b.once.CompareAndSwap(false, true) {
		close(b.closed)
	}
	return nil
}

func TestIdleBody(t *testing.T) {
	t.Run("silence fails the read", func(t *testing.T) {
		b := NewIdleBody(newSlowBody(time.Hour, "never"), 20*time.Millisecond, "p")
		defer b.Close()
		_, err := b.Read(make([]byte, 8))
		ue, ok := providers.AsUpstreamError(err)
		if !ok || !ue.Timeout || !ue.Retryable || ue.Provider != "p" || !errors.Is(err, ErrIdleTimeout) ||
			ue.Message != ErrIdleTimeout.Error() {
			t.Fatalf("got %#v", err)
		}
	})
	t.Run("data resets the watchdog", func(t *testing.T) {
		// Each chunk comes well within the idle timeout, all of them together do not.
		b := NewIdleBody(newSlowBody(30*time.Millisecond, "a", "b", "c", "d", "e"), 150*time.Millisecond, "p")
		defer b.Close()
		got, err := io.ReadAll(b)
		if err != nil || string(got) != "abcde" {
			t.Fatalf("got %q, %v", got, err)
		}
	})
	t.Run("disabled", func(t *testing.T) {
		b := NewIdleBody(newSlowBody(30*time.Millisecond, "a", "b"), 0, "p")
		if got, err := io.ReadAll(b); err != nil || string(got) != "ab" {
			t.Fatalf("got %q, %v", got, err)
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("stop disarms", func(t *testing.T) {
		b := NewIdleBody(newSlowBody(60*time.Millisecond, "a"), 20*time.Millisecond, "p")
		defer b.Close()
		b.Stop()
		if got, err := io.ReadAll(b); err != nil || string(got) != "a" {
			t.Fatalf("got %q, %v", got, err)
		}
	})
	t.Run("drain", func(t *testing.T) {
		src := newSlowBody(time.Millisecond, "rest", "of", "it")
		b := NewIdleBody(src, time.Hour, "p")
		b.Drain(time.Second)
		if len(src.chunks) != 0 {
			t.Fatalf("left %q", src.chunks)
		}
		// A body that does not end is cut off at the deadline.
		hang := newSlowBody(time.Hour, "x")
		start := time.Now()
		NewIdleBody(hang, time.Hour, "p").Drain(20 * time.Millisecond)
		if time.Since(start) > 5*time.Second {
			t.Fatal("Drain did not stop at its deadline")
		}
	})
}

// closeCounter counts Close calls.
type closeCounter struct {
	io.Reader
	closes atomic.Int32
}

func (c *closeCounter) Close() error { c.closes.Add(1); return nil }

func TestStreamConn(t *testing.T) {
	bg := context.Background()
	newConn := func(body string) (*StreamConn, *closeCounter, *Attempt) {
		rc := &closeCounter{Reader: strings.NewReader(body)}
		at := NewAttempt(bg, time.Hour)
		return NewStreamConn(bg, "p", at, NewIdleBody(rc, 0, "p")), rc, at
	}

	c, _, _ := newConn("")
	if err := c.ReadEnd(nil, ErrMalformedFrame); err != nil {
		t.Fatalf("clean end: %v", err)
	}
	tooLarge := fmt.Errorf("reading: %w", sse.ErrEventTooLarge)
	err := c.ReadEnd(tooLarge, ErrMalformedFrame)
	if ue, ok := providers.AsUpstreamError(err); !ok || !errors.Is(err, ErrMalformedFrame) || !errors.Is(err, sse.ErrEventTooLarge) || ue.Timeout {
		t.Fatalf("oversized event: %#v", err)
	}
	boom := errors.New("reset")
	if err := c.ReadEnd(boom, ErrMalformedFrame); !errors.Is(err, boom) {
		t.Fatalf("transport: %v", err)
	} else if _, ok := providers.AsUpstreamError(err); !ok {
		t.Fatalf("transport: %#v", err)
	}

	c, rc, at := newConn("")
	if c.Done() || c.Closed() {
		t.Fatal("new conn is done or closed")
	}
	c.Close(time.Second)
	c.Close(time.Second)
	if !c.Closed() || rc.closes.Load() != 1 || at.Context().Err() == nil {
		t.Fatalf("closed %v, closes %d, attempt %v", c.Closed(), rc.closes.Load(), at.Context().Err())
	}
	if err := c.ReadEnd(nil, ErrMalformedFrame); err != ErrClosed {
		t.Fatalf("after Close: %v", err)
	}

	// A stream whose terminal event was read is drained before it is closed.
	c, _, _ = newConn("trailing bytes")
	c.MarkDone()
	if !c.Done() {
		t.Fatal("MarkDone")
	}
	c.Close(time.Second)
	if n, _ := c.Body.rc.Read(make([]byte, 8)); n != 0 {
		t.Fatal("the body was not drained")
	}
	// One that was not is not.
	c, _, _ = newConn("trailing bytes")
	c.Close(time.Second)
	if n, _ := c.Body.rc.Read(make([]byte, 8)); n == 0 {
		t.Fatal("an unfinished body was drained")
	}
}

func TestEventStream(t *testing.T) {
	events := []providers.Event{{Type: providers.EventText, Text: "a"}, {Type: providers.EventFinish}}
	s := NewEventStream(events)
	var got []providers.Event
	for s.Next() {
		got = append(got, s.Current())
	}
	if len(got) != 2 || got[0].Text != "a" || s.Err() != nil {
		t.Fatalf("got %+v, %v", got, s.Err())
	}
	s = NewEventStream(events)
	_ = s.Close()
	if s.Next() {
		t.Fatal("an event after Close")
	}
}

// roundTripper is an http.RoundTripper made of a function.
type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// parsed records what ParseError was given.
type parsed struct {
	status int
	header http.Header
	body   string
}

func testClient(transport http.RoundTripper, got *parsed) *Client {
	c := &Client{
		Provider:  "p",
		HTTP:      NewHTTPClient(transport),
		Header:    http.Header{"Content-Type": {"application/json"}, "Authorization": {"Bearer sk-secret"}},
		Forwarded: []string{"X-Trace"},
		ParseError: func(status int, h http.Header, body []byte) *providers.UpstreamError {
			*got = parsed{status, h, string(body)}
			return &providers.UpstreamError{Provider: "p", Status: status, Message: string(body)}
		},
	}
	c.Secrets.Add("sk-secret")
	return c
}

func TestClientSend(t *testing.T) {
	var seen http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = r.Header.Clone()
		switch r.URL.Path {
		case "/ok":
			_, _ = io.WriteString(w, `{"ok":true}`)
		case "/redirect":
			http.Redirect(w, r, "/ok", http.StatusTemporaryRedirect)
		default:
			w.Header().Set("Retry-After", "3")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = io.WriteString(w, `{"error":"slow down, sk-secret"}`)
		}
	}))
	defer srv.Close()
	var got parsed
	c := testClient(nil, &got)
	c.Timeout = time.Hour // an attempt with a context of its own, which ReadBody ends
	in := http.Header{"X-Trace": {"t1"}, "Authorization": {"Bearer client-key"}, "Cookie": {"c"}}

	resp, at, err := c.Send(context.Background(), srv.URL+"/ok", []byte(`{}`), true, in)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.ReadBody(context.Background(), at, resp)
	if err != nil || string(b) != `{"ok":true}` {
		t.Fatalf("body %q, %v", b, err)
	}
	if at.Context().Err() == nil {
		t.Fatal("ReadBody did not end the attempt")
	}
	if seen.Get("X-Trace") != "t1" || seen.Get("Authorization") != "Bearer sk-secret" || seen.Get("Cookie") != "" ||
		seen.Get("Accept") != "text/event-stream" || seen.Get("Content-Type") != "application/json" {
		t.Fatalf("headers %v", seen)
	}

	_, _, err = c.Send(context.Background(), srv.URL+"/limited", nil, false, nil)
	if ue, ok := providers.AsUpstreamError(err); !ok || ue.Status != 429 {
		t.Fatalf("error answer: %v", err)
	}
	if got.status != 429 || got.header.Get("Retry-After") != "3" || got.body != `{"error":"slow down, [redacted]"}` {
		t.Fatalf("ParseError got %+v", got)
	}
	if seen.Get("Accept") != "application/json" {
		t.Fatalf("accept %q", seen.Get("Accept"))
	}

	_, _, err = c.Send(context.Background(), srv.URL+"/redirect", nil, false, nil)
	if ue, ok := providers.AsUpstreamError(err); !ok || ue.Status != http.StatusTemporaryRedirect {
		t.Fatalf("redirect: %v", err)
	}

	ans, err := c.CallAnswer(context.Background(), srv.URL+"/ok", []byte(`{}`))
	if err != nil || ans.Status != 200 || string(ans.Body) != `{"ok":true}` {
		t.Fatalf("CallAnswer: %d %q %v", ans.Status, ans.Body, err)
	}

	// Credentials in the base URL are basic authentication, unless the adapter sends its own
	// Authorization.
	withUser := strings.Replace(srv.URL, "http://", "http://proxy-user:proxy%20pass@", 1)
	if _, err := c.CallAnswer(context.Background(), withUser+"/ok", []byte(`{}`)); err != nil || seen.Get("Authorization") != "Bearer sk-secret" {
		t.Fatalf("adapter's own Authorization: %q, %v", seen.Get("Authorization"), err)
	}
	c.Header = http.Header{"Content-Type": {"application/json"}}
	if _, err := c.CallAnswer(context.Background(), withUser+"/ok", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if user, pass, ok := (&http.Request{Header: seen}).BasicAuth(); !ok || user != "proxy-user" || pass != "proxy pass" {
		t.Fatalf("basic authentication from the URL: %q %q %v", user, pass, ok)
	}
}

func TestClientSendFailures(t *testing.T) {
	var got parsed
	refused := roundTripper(func(*http.Request) (*http.Response, error) { return nil, errors.New("connection refused") })
	_, _, err := testClient(refused, &got).Send(context.Background(), "http://upstream.invalid/", nil, false, nil)
	if ue, ok := providers.AsUpstreamError(err); !ok || ue.Status != 0 || !ue.Retryable || ue.Timeout {
		t.Fatalf("transport failure: %#v", err)
	}

	// The caller's cancellation is not an upstream failure.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	blocking := roundTripper(func(r *http.Request) (*http.Response, error) { <-r.Context().Done(); return nil, r.Context().Err() })
	_, _, err = testClient(blocking, &got).Send(ctx, "http://upstream.invalid/", nil, false, nil)
	if _, ok := providers.AsUpstreamError(err); ok || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancellation: %#v", err)
	}

	// An error answer that arrives as the caller goes away is the caller's cancellation too.
	ctx, cancel = context.WithCancel(context.Background())
	late := roundTripper(func(r *http.Request) (*http.Response, error) {
		cancel()
		return &http.Response{StatusCode: 500, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("oops"))}, nil
	})
	got = parsed{}
	_, _, err = testClient(late, &got).Send(ctx, "http://upstream.invalid/", nil, false, nil)
	if _, ok := providers.AsUpstreamError(err); ok || !errors.Is(err, context.Canceled) || got.status != 0 {
		t.Fatalf("late cancellation: %#v, parsed %+v", err, got)
	}

	// The attempt's own timeout.
	c := testClient(blocking, &got)
	c.Timeout = 10 * time.Millisecond
	_, _, err = c.Send(context.Background(), "http://upstream.invalid/", nil, false, nil)
	if ue, ok := providers.AsUpstreamError(err); !ok || !ue.Timeout || !errors.Is(err, ErrAttemptTimeout) {
		t.Fatalf("attempt timeout: %#v", err)
	}

	// A request that cannot be built.
	_, _, err = testClient(refused, &got).Send(context.Background(), "http://bad host/", nil, false, nil)
	if err == nil || !strings.HasPrefix(err.Error(), "provider p: building request: ") {
		t.Fatalf("bad URL: %v", err)
	}
}

// zeros reads zero bytes forever.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

func TestReadBodyLimit(t *testing.T) {
	big := roundTripper(func(*http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(io.LimitReader(zeros{}, MaxResponseBody+1))}, nil
	})
	var got parsed
	_, err := testClient(big, &got).CallAnswer(context.Background(), "http://upstream.invalid/", nil)
	ue, ok := providers.AsUpstreamError(err)
	if !ok || ue.Status != 200 || ue.Category != providers.CategoryServerError || ue.Retryable ||
		ue.Message != fmt.Sprintf("response larger than %d bytes", MaxResponseBody) {
		t.Fatalf("got %#v", err)
	}
}

func TestMalformed(t *testing.T) {
	var got parsed
	c := testClient(nil, &got)
	inner := errors.New("unexpected end of JSON input")
	e := c.Malformed(200, []byte(`{"key":"sk-secret"`), inner)
	if e.Provider != "p" || e.Status != 200 || !e.Retryable || e.Category != providers.CategoryServerError ||
		e.Message != ErrMalformedResponse.Error() || !errors.Is(e, ErrMalformedResponse) || !errors.Is(e, inner) ||
		e.Payload != `{"key":"[redacted]"` {
		t.Fatalf("got %#v", e)
	}
}

// failingBody returns its data, then err.
type failingBody struct {
	data string
	err  error
}

func (b *failingBody) Read(p []byte) (int, error) {
	if b.data == "" {
		return 0, b.err
	}
	n := copy(p, b.data)
	b.data = b.data[n:]
	return n, nil
}

func (b *failingBody) Close() error { return nil }

func TestRawResponse(t *testing.T) {
	bg := context.Background()
	var got parsed
	c := testClient(nil, &got)
	resp := func(body io.ReadCloser) *http.Response {
		return &http.Response{StatusCode: 200, Header: http.Header{"X-Up": {"1"}}, Body: body, ContentLength: 4}
	}

	at := NewAttempt(bg, time.Hour)
	raw := c.RawResponse(bg, at, resp(&failingBody{data: "part", err: io.EOF}), false, 0)
	if raw.Status != 200 || raw.Header.Get("X-Up") != "1" || raw.ContentLength != 4 {
		t.Fatalf("got %+v", raw)
	}
	if b, err := io.ReadAll(raw.Body); err != nil || string(b) != "part" {
		t.Fatalf("read %q, %v", b, err)
	}
	if err := raw.Body.Close(); err != nil || at.Context().Err() == nil {
		t.Fatalf("Close: %v, attempt %v", err, at.Context().Err())
	}

	// A read error is an upstream failure, the caller's cancellation excepted.
	boom := errors.New("connection reset")
	raw = c.RawResponse(bg, NewAttempt(bg, 0), resp(&failingBody{err: boom}), false, 0)
	_, err := raw.Body.Read(make([]byte, 8))
	if ue, ok := providers.AsUpstreamError(err); !ok || !errors.Is(err, boom) || ue.Provider != "p" {
		t.Fatalf("read error: %#v", err)
	}
	ctx, cancel := context.WithCancel(bg)
	cancel()
	raw = c.RawResponse(ctx, NewAttempt(ctx, 0), resp(&failingBody{err: boom}), false, 0)
	if _, err := raw.Body.Read(make([]byte, 8)); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled read: %#v", err)
	}

	// A streamed body is watched for silence; a whole one is not.
	raw = c.RawResponse(bg, NewAttempt(bg, 0), resp(newSlowBody(time.Hour, "x")), true, 20*time.Millisecond)
	defer raw.Body.Close()
	if _, err := raw.Body.Read(make([]byte, 8)); !errors.Is(err, ErrIdleTimeout) {
		t.Fatalf("idle stream: %#v", err)
	}
	raw = c.RawResponse(bg, NewAttempt(bg, 0), resp(newSlowBody(50*time.Millisecond, "x")), false, 10*time.Millisecond)
	defer raw.Body.Close()
	if b, err := io.ReadAll(raw.Body); err != nil || string(b) != "x" {
		t.Fatalf("whole body: %q, %#v", b, err)
	}
}

// TestSendParsesEachURLOnce: the request Send builds has the URL and host http.NewRequest
// gives it, parsed once per URL: a transport that changes one request's URL (Caddy's sets its
// scheme) changes no other, and past maxCachedURLs distinct URLs they are parsed per request.
func TestSendParsesEachURLOnce(t *testing.T) {
	var reqs []*http.Request
	var asSent []url.URL
	rec := roundTripper(func(r *http.Request) (*http.Response, error) {
		reqs, asSent = append(reqs, r), append(asSent, *r.URL)
		r.URL.Scheme, r.URL.Path = "mutated", "/mutated"
		return &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(`{}`))}, nil
	})
	var got parsed
	c := testClient(rec, &got)
	for _, u := range []string{"http://upstream.test/v1/chat/completions", "https://upstream.test:/v1/messages?beta=true",
		"http://user:p%20w@[::1]:8080/v1", "http://[::1]:/x", "http://upstream.test/v1beta/models/m:streamGenerateContent?alt=sse"} {
		want, err := http.NewRequest(http.MethodPost, u, nil)
		if err != nil {
			t.Fatal(err)
		}
		for range 3 { // the first parses, the second takes it from the cache, the third too
			reqs, asSent = nil, nil
			if _, err := c.CallAnswer(context.Background(), u, []byte(`{}`)); err != nil {
				t.Fatal(err)
			}
			r := reqs[0]
			gotURL, wantURL := asSent[0], *want.URL
			sent := gotURL.String()
			gotURL.User, wantURL.User = nil, nil // pointers: compared by String
			if sent != want.URL.String() || r.Host != want.Host || gotURL != wantURL {
				t.Errorf("%s: URL %s host %q, want %s host %q", u, sent, r.Host, want.URL, want.Host)
			}
			if r.ContentLength != 2 || r.GetBody == nil {
				t.Errorf("%s: content length %d, GetBody %v", u, r.ContentLength, r.GetBody != nil)
			}
		}
	}
	for i := range maxCachedURLs + 10 {
		u := fmt.Sprintf("http://upstream.test/v1/models/m%d", i)
		reqs = nil
		if _, err := c.CallAnswer(context.Background(), u, []byte(`{}`)); err != nil || reqs[0].URL.Path != "/mutated" {
			t.Fatalf("%s: %v", u, err)
		}
	}
	n := 0
	c.urls.Range(func(any, any) bool { n++; return true })
	if n != maxCachedURLs || int(c.nurls.Load()) != n {
		t.Errorf("%d URLs kept (counted %d), want %d", n, c.nurls.Load(), maxCachedURLs)
	}
}

// TestCallAnswer: the answer is read whole into a pooled buffer, whatever Content-Length
// says; Release gives the buffer back once, overwriting the body when ScribbleReleased is
// set (which the adapters' tests rely on to catch a decoded answer still referring to it); a
// failed call hands out nothing.
func TestCallAnswer(t *testing.T) {
	ScribbleReleased = true
	defer func() { ScribbleReleased = false }()
	const answer = `{"id":"a1","text":"hello"}`
	for _, length := range []int64{int64(len(answer)), -1} {
		ok := roundTripper(func(r *http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: 200, Header: http.Header{}, ContentLength: length,
				Body: io.NopCloser(strings.NewReader(answer)), Request: r}, nil
		})
		var got parsed
		ans, err := testClient(ok, &got).CallAnswer(context.Background(), "http://upstream.invalid/", []byte(`{}`))
		if err != nil || ans.Status != 200 || string(ans.Body) != answer {
			t.Fatalf("length %d: %d %q %v", length, ans.Status, ans.Body, err)
		}
		body := ans.Body
		ans.Release()
		if ans.Body != nil || strings.Trim(string(body), "x") != "" {
			t.Fatalf("released: Body %q, the old body %q", ans.Body, body)
		}
		ans.Release() // a second release does nothing
	}
	failing := roundTripper(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 500, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(`{"error":"x"}`)), Request: r}, nil
	})
	var got parsed
	ans, err := testClient(failing, &got).CallAnswer(context.Background(), "http://upstream.invalid/", []byte(`{}`))
	if err == nil || ans.Body != nil {
		t.Fatalf("failed call: %q, %v", ans.Body, err)
	}
	ans.Release()
}
