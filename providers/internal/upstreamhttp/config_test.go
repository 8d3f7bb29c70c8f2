package upstreamhttp

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/providers"
)

// testAdapter is an adapter whose ParseError reports the keySent it was given.
func testAdapter(keySent *bool) Adapter {
	return Adapter{
		Name: "acme", BaseURL: "https://api.acme.test/v1/", StreamIdleTimeout: 30 * time.Second,
		KeyHeader: "x-acme-key", Forwarded: []string{"Traceparent"},
		ParseError: func(provider string, status int, _ http.Header, body []byte, sent bool) *providers.UpstreamError {
			*keySent = sent
			return &providers.UpstreamError{Provider: provider, Status: status, Message: string(body)}
		},
	}
}

func TestNewUpstreamDefaults(t *testing.T) {
	var keySent bool
	up, err := Config{}.NewUpstream(testAdapter(&keySent))
	if err != nil {
		t.Fatal(err)
	}
	c := up.Client
	if c.Provider != "acme" || up.Base != "https://api.acme.test/v1" || up.URL.Host != "api.acme.test" ||
		up.StreamIdleTimeout != 30*time.Second || c.Timeout != 0 || c.NoCredential || len(c.Secrets) != 0 {
		t.Fatalf("defaults: %+v, client %+v", up, c)
	}
	if !slices.Equal(c.Forwarded, []string{"Traceparent"}) || c.HTTP.CheckRedirect == nil {
		t.Fatalf("client %+v", c)
	}
	if want := (http.Header{"Content-Type": {"application/json"}}); !equalHeader(c.Header, want) {
		t.Fatalf("header %v", c.Header)
	}
	if e := c.ParseError(401, nil, []byte("no")); e.Provider != "acme" || e.Status != 401 || keySent {
		t.Fatalf("ParseError: %+v, keySent %v", e, keySent)
	}
	up, err = Config{StreamIdleTimeout: -1}.NewUpstream(testAdapter(&keySent))
	if err != nil || up.StreamIdleTimeout != -1 {
		t.Fatalf("a negative idle timeout (no check) was changed: %v, %v", up.StreamIdleTimeout, err)
	}
}

func TestNewUpstreamErrors(t *testing.T) {
	var keySent bool
	tests := []struct {
		name        string
		cfg         Config
		refuseQuery bool
		want        string
	}{
		{name: "relative", cfg: Config{Name: "a1", BaseURL: "/v1"}, want: "acme provider a1: base URL must be an absolute http or https URL"},
		{name: "unparsable", cfg: Config{BaseURL: "http://[::1"}, want: "acme provider acme: parsing base URL: "},
		{name: "negative timeout", cfg: Config{Name: "a1", Timeout: -time.Second}, want: "acme provider a1: timeout must not be negative"},
		{name: "query refused", cfg: Config{Name: "a1", BaseURL: "https://x.test/v1?key=k"}, refuseQuery: true,
			want: "acme provider a1: base URL must have no query or fragment (the key goes in APIKey)"},
		{name: "fragment refused", cfg: Config{Name: "a1", BaseURL: "https://x.test/v1#k"}, refuseQuery: true,
			want: "acme provider a1: base URL must have no query or fragment"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := testAdapter(&keySent)
			a.RefuseQuery = tc.refuseQuery
			if _, err := tc.cfg.NewUpstream(a); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
	if _, err := (Config{BaseURL: "https://x.test/v1?api-version=1"}).NewUpstream(testAdapter(&keySent)); err != nil {
		t.Fatalf("a query refused without RefuseQuery: %v", err)
	}
}

func TestNewUpstreamCredentials(t *testing.T) {
	tests := []struct {
		name         string
		cfg          Config
		prefix       string
		redact       bool
		header       http.Header // besides Content-Type
		keySent      bool
		noCredential bool
		secrets      []string
	}{
		{name: "no key", cfg: Config{}},
		{name: "no key required", cfg: Config{RequireKey: true}, noCredential: true},
		{name: "key", cfg: Config{APIKey: "sk-1", RequireKey: true},
			header: http.Header{"X-Acme-Key": {"sk-1"}}, keySent: true, secrets: []string{"sk-1"}},
		{name: "key with a prefix", cfg: Config{APIKey: "sk-1"}, prefix: "Bearer ",
			header: http.Header{"X-Acme-Key": {"Bearer sk-1"}}, keySent: true, secrets: []string{"sk-1"}},
		{name: "key over Headers", cfg: Config{APIKey: "sk-1", Headers: map[string]string{"x-acme-key": "h", "X-Other": "o", "content-type": "text/plain"}},
			header: http.Header{"X-Acme-Key": {"sk-1"}, "X-Other": {"o"}}, keySent: true, secrets: []string{"sk-1"}},
		{name: "Authorization in Headers", cfg: Config{RequireKey: true, Headers: map[string]string{"authorization": "Bearer tok-1"}},
			header: http.Header{"Authorization": {"Bearer tok-1"}}, keySent: true},
		{name: "Authorization in Headers redacted", cfg: Config{RequireKey: true, Headers: map[string]string{"authorization": "Bearer tok-1"}}, redact: true,
			header: http.Header{"Authorization": {"Bearer tok-1"}}, keySent: true, secrets: []string{"tok-1"}},
		{name: "key header in Headers redacted", cfg: Config{Headers: map[string]string{"X-Acme-Key": " hk-1 ", "X-Other": "o-secret"}}, redact: true,
			header: http.Header{"X-Acme-Key": {" hk-1 "}, "X-Other": {"o-secret"}}, keySent: true, secrets: []string{"hk-1"}},
		{name: "short values not redacted", cfg: Config{APIKey: "k", Headers: map[string]string{"Authorization": "Bearer abc"}}, redact: true,
			header: http.Header{"X-Acme-Key": {"k"}, "Authorization": {"Bearer abc"}}, keySent: true},
		{name: "short key redacted as it is", cfg: Config{APIKey: "k"},
			header: http.Header{"X-Acme-Key": {"k"}}, keySent: true, secrets: []string{"k"}},
		{name: "empty header is no credential", cfg: Config{RequireKey: true, Headers: map[string]string{"Authorization": ""}}, redact: true,
			header: http.Header{"Authorization": {""}}, noCredential: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var keySent bool
			a := testAdapter(&keySent)
			a.KeyPrefix, a.RedactHeaderKeys = tc.prefix, tc.redact
			up, err := tc.cfg.NewUpstream(a)
			if err != nil {
				t.Fatal(err)
			}
			c := up.Client
			want := http.Header{"Content-Type": {"application/json"}}
			for k, v := range tc.header {
				want[k] = v
			}
			if !equalHeader(c.Header, want) {
				t.Errorf("header %v, want %v", c.Header, want)
			}
			if c.NoCredential != tc.noCredential {
				t.Errorf("NoCredential %v", c.NoCredential)
			}
			if c.ParseError(401, nil, nil); keySent != tc.keySent {
				t.Errorf("keySent %v", keySent)
			}
			var secrets []string
			for _, s := range c.Secrets {
				secrets = append(secrets, string(s))
			}
			if !slices.Equal(secrets, tc.secrets) {
				t.Errorf("secrets %q, want %q", secrets, tc.secrets)
			}
		})
	}
}

func equalHeader(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}
