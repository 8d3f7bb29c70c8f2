package upstreamhttp

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/modelgateway/caddy-modelgateway/providers"
)

// Config is what configures every HTTP adapter, whatever its API: the operator's name for
// the provider, where the upstream is, its credential, and how long to wait for it. An
// adapter whose configuration is no more than this defines its Config on it
// (type Config upstreamhttp.Config); the others repeat these fields, so that a composite
// literal still names them, and copy them into one.
type Config struct {
	// Name is the operator's name for the provider; it defaults to the adapter's name
	// (Adapter.Name).
	Name string
	// BaseURL is the API root that the adapter's endpoints are appended to; it defaults to
	// the adapter's DefaultBaseURL.
	BaseURL string
	// APIKey is sent in the API's credential header (Adapter.KeyHeader); empty sends none,
	// for a local server or a proxy that adds credentials itself.
	APIKey string
	// RequireKey says the operator configured a credential: when APIKey is empty all the
	// same (the environment variable it named is unset) and no header carries one, every
	// call is refused at once with credentials_not_configured instead of reaching the
	// upstream.
	RequireKey bool
	// Headers are extra headers sent with every request (set before the credentials).
	Headers map[string]string
	// Transport makes the requests; nil means http.DefaultTransport.
	Transport http.RoundTripper
	// Timeout bounds one attempt from the request to the end of the response body, streams
	// (and audio) included; zero means no limit.
	Timeout time.Duration
	// StreamIdleTimeout is the longest silence allowed on a stream (for a speech, in its
	// audio) before it fails with a timeout; zero means the adapter's
	// DefaultStreamIdleTimeout, a negative value disables the check.
	StreamIdleTimeout time.Duration
}

// Adapter is what an adapter tells Config.NewUpstream about itself: its defaults, how its
// API takes a key, and how it reads the API's errors.
type Adapter struct {
	// Name is the adapter's name ("gemini"): the provider's Name by default, and the start
	// of the errors of its configuration ("gemini provider <name>: ...").
	Name string
	// BaseURL and StreamIdleTimeout are the defaults of the Config fields of those names.
	BaseURL           string
	StreamIdleTimeout time.Duration
	// KeyHeader is the header that carries Config.APIKey, after KeyPrefix ("Bearer ").
	// A request carries a credential when KeyHeader or Authorization is set, from APIKey or
	// Headers; Config.RequireKey refuses the calls that would carry none.
	KeyHeader, KeyPrefix string
	// RefuseQuery refuses a base URL with a query or a fragment, for an API that takes its
	// key in a header: a key in the URL would end up in error messages and logs.
	RefuseQuery bool
	// RedactHeaderKeys also keeps the credentials set through Headers (in KeyHeader or
	// Authorization: a proxy's key, an OAuth token) out of the bodies kept, and redacts
	// every credential as the token it holds: without a "Bearer " prefix and spaces, and
	// only when 4 bytes or longer, so that a stray short value does not mangle the bodies.
	// Without it, APIKey alone is redacted, as it is.
	RedactHeaderKeys bool
	// Forwarded lists the client headers (canonical keys) passed on (Client.Forwarded).
	Forwarded []string
	// ParseError classifies a non-2xx answer of the provider named provider
	// (Client.ParseError); keySent tells whether the requests carry a credential.
	ParseError func(provider string, status int, h http.Header, body []byte, keySent bool) *providers.UpstreamError
}

// Upstream is a Config checked and set up for an adapter: the Client that calls the
// upstream, and the settings the adapter keeps.
type Upstream struct {
	// Client sends the Config's headers and credential; its Provider is the Config's Name
	// or its default. The adapter may add headers of its own before the first call.
	Client *Client
	// URL is the parsed base URL, and Base the base URL as configured, without a trailing
	// slash: the endpoints' paths are appended to it.
	URL  *url.URL
	Base string
	// StreamIdleTimeout is the Config's, or its default.
	StreamIdleTimeout time.Duration
}

// NewUpstream fills c's defaults from a, checks the base URL and the timeout, and sets up
// the Client: the Headers, a JSON Content-Type, the credential in a.KeyHeader, the secrets
// to redact, and NoCredential when c.RequireKey finds no credential to send. Its errors
// start with a.Name and the provider's name.
func (c Config) NewUpstream(a Adapter) (Upstream, error) {
	if c.Name == "" {
		c.Name = a.Name
	}
	if c.BaseURL == "" {
		c.BaseURL = a.BaseURL
	}
	u, err := ParseBaseURL(c.BaseURL)
	if err != nil {
		return Upstream{}, fmt.Errorf("%s provider %s: %w", a.Name, c.Name, err)
	}
	if a.RefuseQuery && (u.RawQuery != "" || u.Fragment != "") {
		return Upstream{}, fmt.Errorf("%s provider %s: base URL must have no query or fragment (the key goes in APIKey)", a.Name, c.Name)
	}
	if c.Timeout < 0 {
		return Upstream{}, fmt.Errorf("%s provider %s: timeout must not be negative", a.Name, c.Name)
	}
	if c.StreamIdleTimeout == 0 {
		c.StreamIdleTimeout = a.StreamIdleTimeout
	}
	// Room for the adapter's own headers (a version, an organization).
	header := make(http.Header, len(c.Headers)+4)
	for k, v := range c.Headers {
		header.Set(k, v)
	}
	header.Set("Content-Type", "application/json")
	keyHeader := http.CanonicalHeaderKey(a.KeyHeader)
	if c.APIKey != "" {
		header.Set(keyHeader, a.KeyPrefix+c.APIKey)
	}
	keySent := header.Get(keyHeader) != "" || header.Get("Authorization") != ""
	name, parse := c.Name, a.ParseError
	up := &Client{
		Provider:  name,
		HTTP:      NewHTTPClient(c.Transport),
		Header:    header,
		Forwarded: a.Forwarded,
		Timeout:   c.Timeout,
		ParseError: func(status int, h http.Header, body []byte) *providers.UpstreamError {
			return parse(name, status, h, body, keySent)
		},
		NoCredential: c.RequireKey && !keySent,
	}
	if a.RedactHeaderKeys {
		for k, v := range c.Headers {
			if k = http.CanonicalHeaderKey(k); k == keyHeader || k == "Authorization" {
				up.Secrets.Add(token(v))
			}
		}
		up.Secrets.Add(token(c.APIKey))
	} else {
		up.Secrets.Add(c.APIKey)
	}
	return Upstream{Client: up, URL: u, Base: strings.TrimRight(c.BaseURL, "/"), StreamIdleTimeout: c.StreamIdleTimeout}, nil
}

// token is the secret a credential header's value holds: without a "Bearer " prefix and
// spaces, or "" (no secret) when shorter than 4 bytes.
func token(v string) string {
	if v = strings.TrimSpace(strings.TrimPrefix(v, "Bearer ")); len(v) < 4 {
		return ""
	}
	return v
}
