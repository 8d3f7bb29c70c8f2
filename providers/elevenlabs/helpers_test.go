package elevenlabs

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/modelgateway/caddy-modelgateway/providers/internal/upstreamtest"
)

const testKey = "sk_0123456789abcdef-elevenlabs-secret"

// fakeElevenLabs is an httptest upstream that counts the requests it is sent.
type fakeElevenLabs struct {
	srv       *httptest.Server
	transport *http.Transport
	requests  atomic.Int32
}

func newFake(t *testing.T, h http.HandlerFunc) *fakeElevenLabs {
	t.Helper()
	f := &fakeElevenLabs{}
	f.srv, f.transport = upstreamtest.NewServer(t, func(w http.ResponseWriter, r *http.Request) {
		f.requests.Add(1)
		h(w, r)
	})
	return f
}

func (f *fakeElevenLabs) provider(t *testing.T, mod ...func(*Config)) *Provider {
	t.Helper()
	return upstreamtest.NewProvider(t, New, Config{Name: "el", BaseURL: f.srv.URL, APIKey: testKey, Transport: f.transport}, mod...)
}

// writeError answers an ElevenLabs error.
func writeError(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(body))
}

// TestElevenLabsNew: the configuration is checked, and the defaults filled.
func TestElevenLabsNew(t *testing.T) {
	p, err := New(Config{})
	if err != nil || p.Name() != "elevenlabs" || p.base != DefaultBaseURL || p.idle != DefaultStreamIdleTimeout {
		t.Fatalf("defaults: %+v, %v", p, err)
	}
	if p, err := New(Config{BaseURL: "https://api.eu.residency.elevenlabs.io/"}); err != nil || p.base != "https://api.eu.residency.elevenlabs.io" {
		t.Fatalf("trailing slash: %+v, %v", p, err)
	}
	for _, cfg := range []Config{
		{BaseURL: "api.elevenlabs.io"},
		{BaseURL: "https://api.elevenlabs.io?xi-api-key=" + testKey},
		{Timeout: -1},
	} {
		if _, err := New(cfg); err == nil || strings.Contains(err.Error(), testKey) {
			t.Errorf("%+v: %v", cfg, err)
		}
	}
}
