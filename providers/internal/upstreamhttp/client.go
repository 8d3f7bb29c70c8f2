package upstreamhttp

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelgateway/caddy-modelgateway/internal/bufs"
	"github.com/modelgateway/caddy-modelgateway/internal/readall"
	"github.com/modelgateway/caddy-modelgateway/providers"
)

// NewHTTPClient returns the client an adapter calls its upstream with: transport, or
// http.DefaultTransport when nil, and no redirects followed.
func NewHTTPClient(transport http.RoundTripper) *http.Client {
	if transport == nil {
		transport = http.DefaultTransport
	}
	return &http.Client{
		Transport: transport,
		// An API has no business redirecting a POST; following it could carry the key
		// elsewhere. The 3xx comes back as an error instead.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// roundTrip sends req through the client's transport itself rather than http.Client.Do.
// The client follows no redirects and has no cookie jar or timeout (an attempt's context
// bounds it), so Do would only add its bookkeeping: a header copier for redirects, the
// request's cancellation plumbing and a url.Error around failures, 0.6 KB and 6 allocations
// a request (BenchmarkHotPathAdapters). A 3xx comes back as it is, as with
// ErrUseLastResponse, and credentials in the base URL still become basic authentication
// unless the adapter sent an Authorization header, as Do does.
func (c *Client) roundTrip(req *http.Request) (*http.Response, error) {
	if u := req.URL.User; u != nil && req.Header.Get("Authorization") == "" {
		pass, _ := u.Password()
		req.SetBasicAuth(u.Username(), pass)
	}
	t := c.HTTP.Transport
	if t == nil {
		t = http.DefaultTransport
	}
	return t.RoundTrip(req)
}

// ParseBaseURL checks that raw is an absolute http or https URL.
func ParseBaseURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("parsing base URL: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("base URL must be an absolute http or https URL")
	}
	return u, nil
}

// Client posts JSON bodies to one upstream and classifies what goes wrong. It is safe for
// concurrent use once set up.
type Client struct {
	// Provider is the operator's name for the provider, set in every error.
	Provider string
	HTTP     *http.Client
	// Header is sent with every request, over the forwarded client headers.
	Header http.Header
	// Forwarded lists the client headers (canonical keys) Send passes on.
	Forwarded []string
	// Timeout bounds one attempt, from the request to the end of the response body; zero
	// means no limit.
	Timeout time.Duration
	// Secrets are redacted from every upstream body kept.
	Secrets Secrets
	// NoCredential refuses every request at once, without a network call, with a
	// credentials_not_configured error: the operator configured a credential that resolved
	// empty (an unset environment variable), and the upstream would only refuse the call.
	NoCredential bool
	// ParseError classifies a non-2xx answer; the body it gets is already redacted.
	ParseError func(status int, h http.Header, body []byte) *providers.UpstreamError

	// urls holds the URLs Send has parsed (string → *url.URL, never modified), nurls how
	// many: an adapter posts to a handful, and a request copies its URL instead of parsing
	// it again.
	urls  sync.Map
	nurls atomic.Int32
}

// maxCachedURLs bounds Client.urls, give or take the requests parsing at the same moment:
// past it (a Gemini provider with many models has a URL per model), URLs are parsed per
// request.
const maxCachedURLs = 64

// parsedURL returns the URL http.NewRequest makes of u (it parses u and drops an empty
// port). The URL may be shared with other requests: callers copy it and never modify it.
func (c *Client) parsedURL(u string) (*url.URL, error) {
	if v, ok := c.urls.Load(u); ok {
		return v.(*url.URL), nil
	}
	r, err := http.NewRequest(http.MethodPost, u, nil)
	if err != nil {
		return nil, err
	}
	if c.nurls.Load() < maxCachedURLs {
		if _, loaded := c.urls.LoadOrStore(u, r.URL); !loaded {
			c.nurls.Add(1)
		}
	}
	return r.URL, nil
}

// Redact removes the client's secrets from an upstream body before it is kept anywhere.
func (c *Client) Redact(b []byte) []byte { return c.Secrets.Redact(b) }

// Send posts body to u within a new attempt and returns a 2xx response with its attempt,
// which the caller ends (Cancel) when done with the body. Any other status is classified by
// ParseError, a failure without a response by TransportError; the attempt is over then.
// in holds the client headers, of which those named in Forwarded are passed on.
func (c *Client) Send(ctx context.Context, u string, body []byte, stream bool, in http.Header) (*http.Response, *Attempt, error) {
	return c.send(ctx, u, Body{Reader: bytes.NewReader(body), Length: int64(len(body))}, stream, in)
}

// Body is a request body other than a complete JSON document: multipart streamed from the
// client, or a body whose answer is not JSON (audio).
type Body struct {
	// Reader is read once, as the request is sent; it is never held whole.
	Reader io.Reader
	// Length is the body's length, or -1 when unknown (sent chunked).
	Length int64
	// ContentType replaces the JSON Content-Type of Header when set.
	ContentType string
	// Accept replaces the Accept the request would have (JSON, or an event stream).
	Accept string
}

// SendBody is Send with a body of its own kind: the same attempt, headers and errors.
func (c *Client) SendBody(ctx context.Context, u string, body Body, stream bool, in http.Header) (*http.Response, *Attempt, error) {
	return c.send(ctx, u, body, stream, in)
}

// SendRaw posts a forwarded request: its Reader (an upload, of Length bytes) or its Body, with
// its ContentType and Accept; a plain JSON body goes through Send.
func (c *Client) SendRaw(ctx context.Context, u string, req *providers.RawRequest) (*http.Response, *Attempt, error) {
	if req.Reader == nil && req.Accept == "" && req.ContentType == "" {
		return c.Send(ctx, u, req.Body, req.Stream, req.Header)
	}
	body := Body{Reader: req.Reader, Length: req.Length, ContentType: req.ContentType, Accept: req.Accept}
	if body.Reader == nil {
		body.Reader, body.Length = bytes.NewReader(req.Body), int64(len(req.Body))
	}
	return c.SendBody(ctx, u, body, req.Stream, req.Header)
}

func (c *Client) send(ctx context.Context, u string, body Body, stream bool, in http.Header) (*http.Response, *Attempt, error) {
	if c.NoCredential {
		return nil, nil, c.noCredential()
	}
	target, err := c.parsedURL(u)
	if err != nil {
		return nil, nil, fmt.Errorf("provider %s: building request: %w", c.Provider, err)
	}
	at := NewAttempt(ctx, c.Timeout)
	// The URL is parsed once (parsedURL), not by NewRequest on every request: the empty one
	// NewRequest makes of "" becomes a copy of it, the request's own (a transport may set
	// its scheme).
	req, err := http.NewRequestWithContext(at.ctx, http.MethodPost, "", body.Reader)
	if err != nil {
		at.cancel()
		return nil, nil, fmt.Errorf("provider %s: building request: %w", c.Provider, err)
	}
	if body.Length >= 0 {
		req.ContentLength = body.Length
		if body.Length == 0 {
			req.Body = http.NoBody
		}
	} else {
		req.ContentLength = -1
	}
	*req.URL, req.Host = *target, target.Host
	for _, k := range c.Forwarded {
		if v := in.Values(k); len(v) > 0 {
			req.Header[k] = v
		}
	}
	for k, v := range c.Header {
		req.Header[k] = v
	}
	if body.ContentType != "" {
		req.Header.Set("Content-Type", body.ContentType)
	}
	switch {
	case body.Accept != "":
		req.Header.Set("Accept", body.Accept)
	case stream:
		req.Header.Set("Accept", "text/event-stream")
	default:
		req.Header.Set("Accept", "application/json")
	}
	return c.answer(ctx, at, req, false)
}

// answer sends req within at and returns a 2xx response, or a 3xx with a Location when
// redirects is set; any other answer or failure is classified and ends the attempt.
func (c *Client) answer(ctx context.Context, at *Attempt, req *http.Request, redirects bool) (*http.Response, *Attempt, error) {
	resp, err := c.roundTrip(req)
	if err != nil {
		at.cancel()
		return nil, nil, TransportError(c.Provider, ctx, at, err)
	}
	if resp.StatusCode >= 200 && resp.StatusCode <= 299 ||
		redirects && resp.StatusCode >= 300 && resp.StatusCode <= 399 && resp.Header.Get("Location") != "" {
		return resp, at, nil
	}
	// A partial body still classifies, so a read error here is not worth reporting.
	b, _ := io.ReadAll(io.LimitReader(resp.Body, MaxErrorBody))
	_ = resp.Body.Close()
	at.cancel()
	if ctx.Err() != nil {
		return nil, nil, TransportError(c.Provider, ctx, at, ctx.Err())
	}
	return nil, nil, c.ParseError(resp.StatusCode, resp.Header, c.Redact(b))
}

// Fetch is a request without a body (a GET or a DELETE): a job's status, a file's bytes.
type Fetch struct {
	// Method is the request's method; "" is GET.
	Method string
	// URL is where the request goes. It names one job or one file: it is parsed for this
	// request only, not kept among the client's URLs.
	URL string
	// Header is set over the client's headers (a Range, an Accept other than JSON).
	Header http.Header
	// Anonymous sends none of the client's headers, its credentials above all: for a
	// signed URL that the upstream redirected to, on a host of its own.
	Anonymous bool
	// Redirects answers a 3xx with a Location as it is, unread, for the caller to follow or
	// refuse; otherwise a 3xx is an error, as in Send.
	Redirects bool
}

// Fetch sends f within a new attempt and returns its answer like Send: a 2xx response (or
// a redirect, when f.Redirects) with its attempt, which the caller ends (Cancel, or closing
// a RawResponse's body) when done with the body.
func (c *Client) Fetch(ctx context.Context, f Fetch) (*http.Response, *Attempt, error) {
	if c.NoCredential && !f.Anonymous {
		return nil, nil, c.noCredential()
	}
	method := f.Method
	if method == "" {
		method = http.MethodGet
	}
	at := NewAttempt(ctx, c.Timeout)
	req, err := http.NewRequestWithContext(at.ctx, method, f.URL, nil)
	if err != nil {
		at.cancel()
		return nil, nil, fmt.Errorf("provider %s: building request: %w", c.Provider, err)
	}
	if !f.Anonymous {
		for k, v := range c.Header {
			req.Header[k] = v
		}
		// The client's JSON Content-Type describes a body this request does not have.
		req.Header.Del("Content-Type")
	}
	req.Header.Set("Accept", "application/json")
	for k, v := range f.Header {
		req.Header[http.CanonicalHeaderKey(k)] = v
	}
	return c.answer(ctx, at, req, f.Redirects)
}

// noCredential refuses a request that would carry no credential (Client.NoCredential).
func (c *Client) noCredential() *providers.UpstreamError {
	return &providers.UpstreamError{
		Provider: c.Provider, Category: providers.CategoryCredentialsNotConfigured,
		Message: "the provider's api_key is empty in the gateway's configuration (is the environment variable it names set?)",
	}
}

// ReadBody reads the whole body of a non-streamed answer, at most MaxResponseBody bytes,
// and ends the attempt.
func (c *Client) ReadBody(ctx context.Context, at *Attempt, resp *http.Response) ([]byte, error) {
	return c.readBody(ctx, at, resp, nil)
}

// readBody is ReadBody appending to dst.
func (c *Client) readBody(ctx context.Context, at *Attempt, resp *http.Response, dst []byte) ([]byte, error) {
	defer at.cancel()
	defer resp.Body.Close()
	b, err := readall.Append(dst, io.LimitReader(resp.Body, MaxResponseBody+1), resp.ContentLength, MaxResponseBody)
	if err != nil {
		return nil, TransportError(c.Provider, ctx, at, err)
	}
	if len(b) > MaxResponseBody {
		return nil, &providers.UpstreamError{
			Provider: c.Provider, Status: resp.StatusCode, Category: providers.CategoryServerError,
			Message: fmt.Sprintf("response larger than %d bytes", MaxResponseBody),
		}
	}
	return b, nil
}

// answerBufs hold the complete answers CallAnswer reads: most are a few KiB, read, decoded
// and dropped within the request.
var answerBufs = &bufs.Pool{Size: 4096, Max: 64 << 10}

// Answer is a complete 2xx answer read by CallAnswer: its status and body. The body is in a
// pooled buffer that Release gives back for the next answer; the caller calls it once what
// it decoded no longer refers to the body (the adapters' decoders copy what they keep), and
// may leave it uncalled (an error that quotes the body): the collector then takes the buffer.
type Answer struct {
	Status int
	Body   []byte
	buf    *[]byte
}

// ScribbleReleased makes Release overwrite a body before giving its buffer back, so that a
// test in which anything still refers to a released answer (a decoder that kept a slice of
// the body) sees it change. The adapters' tests set it as their package starts.
var ScribbleReleased bool

// Release gives the answer's buffer back; nothing may hold Body or a slice of it afterwards.
func (a *Answer) Release() {
	if a.buf == nil {
		return
	}
	if ScribbleReleased {
		for i := range a.Body {
			a.Body[i] = 'x'
		}
	}
	answerBufs.Put(a.buf, a.Body)
	a.buf, a.Body = nil, nil
}

// CallAnswer posts a non-streamed request and reads the whole 2xx answer, into a pooled
// buffer (Answer.Release): a translated answer's body was the largest allocation of its
// request the gateway makes itself.
func (c *Client) CallAnswer(ctx context.Context, u string, body []byte) (Answer, error) {
	resp, at, err := c.Send(ctx, u, body, false, nil)
	if err != nil {
		return Answer{}, err
	}
	buf := answerBufs.Get()
	b, err := c.readBody(ctx, at, resp, (*buf)[:0])
	if err != nil {
		answerBufs.Put(buf, nil)
		return Answer{}, err
	}
	return Answer{Status: resp.StatusCode, Body: b, buf: buf}, nil
}

// Malformed classifies a 2xx body that is not the answer expected: a retryable server error
// wrapping ErrMalformedResponse and err, with a redacted preview of the body.
func (c *Client) Malformed(status int, body []byte, err error) *providers.UpstreamError {
	return &providers.UpstreamError{
		Provider:  c.Provider,
		Status:    status,
		Category:  providers.CategoryServerError,
		Retryable: true,
		Message:   ErrMalformedResponse.Error(),
		Payload:   providers.Preview(c.Redact(body)),
		Err:       fmt.Errorf("%w: %w", ErrMalformedResponse, err),
	}
}

// RawResponse is a 2xx response handed on unread (Forwarder.Forward): a read error of its
// body is classified by TransportError, except the caller's own cancellation of ctx, and
// closing the body ends the attempt. A streamed body fails with an idle timeout when it
// stays silent longer than idle (see NewIdleBody).
func (c *Client) RawResponse(ctx context.Context, at *Attempt, resp *http.Response, stream bool, idle time.Duration) *providers.RawResponse {
	body := io.ReadCloser(resp.Body)
	if stream {
		body = NewIdleBody(body, idle, c.Provider)
	}
	return &providers.RawResponse{
		Status:        resp.StatusCode,
		Header:        resp.Header,
		Body:          &attemptBody{rc: body, provider: c.Provider, ctx: ctx, at: at},
		ContentLength: resp.ContentLength,
	}
}

// attemptBody is a forwarded body: read errors are classified like transport errors, and
// closing it ends the attempt.
type attemptBody struct {
	rc       io.ReadCloser
	provider string
	ctx      context.Context
	at       *Attempt
}

func (b *attemptBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	// io.EOF itself, as io.Reader returns it: anything else broke the body off.
	if err != nil && err != io.EOF {
		err = TransportError(b.provider, b.ctx, b.at, err)
	}
	return n, err
}

func (b *attemptBody) Close() error {
	err := b.rc.Close()
	b.at.cancel()
	return err
}
