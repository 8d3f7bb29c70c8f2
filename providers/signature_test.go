package providers

import "testing"

func TestTagUntag(t *testing.T) {
	tok := Tag(SigAnthropic, "EqQB:x")
	if tok != "gw1:anthropic:EqQB:x" {
		t.Fatalf("Tag = %q", tok)
	}
	if o, raw, ok := Untag(tok); !ok || o != SigAnthropic || raw != "EqQB:x" {
		t.Errorf("Untag(%q) = %q %q %v", tok, o, raw, ok)
	}
	if Tag(SigGemini, tok) != tok {
		t.Error("Tag of a tagged token must not tag it again")
	}
	if Tag(SigOpenAI, "") != "" {
		t.Error("Tag of an empty signature must stay empty")
	}
	for _, s := range []string{"", "c2lnbmVk", "gw1:", "gw1:anthropic", "gw1::x", "gw1:Bad Origin:x", "gw2:anthropic:x", "GW1:anthropic:x"} {
		if o, raw, ok := Untag(s); ok || o != "" || raw != s {
			t.Errorf("Untag(%q) = %q %q %v, want untagged", s, o, raw, ok)
		}
	}
}

func TestReplayAndNativeSignature(t *testing.T) {
	tests := []struct {
		origin, sig, raw string
		ok               bool
		native           string
	}{
		{SigAnthropic, "", "", true, ""},
		{SigAnthropic, "raw", "raw", true, "raw"},
		{SigAnthropic, Tag(SigAnthropic, "raw"), "raw", true, "raw"},
		{SigAnthropic, Tag(SigOpenAI, "raw"), "", false, Tag(SigOpenAI, "raw")},
		{SigGemini, Tag(SigAnthropic, "raw"), "", false, Tag(SigAnthropic, "raw")},
		{SigOpenAI, Tag(SigOpenAI, "raw"), "raw", true, "raw"},
	}
	for _, tt := range tests {
		raw, ok := ReplaySignature(tt.origin, tt.sig)
		if raw != tt.raw || ok != tt.ok {
			t.Errorf("ReplaySignature(%q, %q) = %q %v, want %q %v", tt.origin, tt.sig, raw, ok, tt.raw, tt.ok)
		}
		if got := NativeSignature(tt.origin, tt.sig); got != tt.native {
			t.Errorf("NativeSignature(%q, %q) = %q, want %q", tt.origin, tt.sig, got, tt.native)
		}
	}
}
