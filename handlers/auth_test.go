package handlers

import (
	"strings"
	"testing"

	"github.com/modelgateway/caddy-modelgateway/store"
)

func TestParseKey(t *testing.T) {
	_, std, err := NewKey("ws_1", store.KeyStandard, "n")
	if err != nil {
		t.Fatal(err)
	}
	_, mgmt, _ := NewKey("ws_1", store.KeyManagement, "n")
	tests := []struct {
		name string
		in   string
		kind store.KeyKind
		ok   bool
	}{
		{"standard", std, store.KeyStandard, true},
		{"management", mgmt, store.KeyManagement, true},
		{"old format", "gateway_v1_k_abcd", "", false},
		{"other vendor", "sk-proj-abcdef", "", false},
		{"empty", "", "", false},
		{"upper case secret", "gateway_v1_sk_abcdabcdabcd_ABCDEFGHIJKLMNOPQRSTUVWXYZ", "", false},
		{"extra part", std + "_x", "", false},
		{"short secret", "gateway_v1_sk_abcdabcdabcd_abc", "", false},
		{"unknown kind", strings.Replace(std, "_sk_", "_xk_", 1), "", false},
		{"too long", "gateway_v1_sk_abcd_" + strings.Repeat("a", 300), "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pk, err := ParseKey(tc.in)
			if (err == nil) != tc.ok {
				t.Fatalf("ParseKey(%q) error %v", tc.in, err)
			}
			if tc.ok && (pk.Kind != tc.kind || len(pk.ID) != kidLen || len(pk.Secret) != secretLen) {
				t.Fatalf("parsed %+v", pk)
			}
		})
	}
}

func TestNewKeyHashOnly(t *testing.T) {
	k, plain, err := NewKey("ws_1", store.KeyStandard, "n")
	if err != nil {
		t.Fatal(err)
	}
	pk, _ := ParseKey(plain)
	if k.ID != pk.ID || string(k.SecretHash) != string(HashSecret(pk.Secret)) || strings.Contains(string(k.SecretHash), pk.Secret) {
		t.Fatal("stored key must carry the kid and only a hash of the secret")
	}
}

func FuzzParseKey(f *testing.F) {
	_, std, _ := NewKey("ws", store.KeyStandard, "")
	for _, s := range []string{std, "gateway_v1_mk_abcd_0123456789abcdef", "gateway_v1_", "gateway_v1_sk__", "", "Bearer x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		pk, err := ParseKey(s)
		if err != nil {
			return
		}
		marker := map[store.KeyKind]string{store.KeyStandard: "sk", store.KeyManagement: "mk"}[pk.Kind]
		if rebuilt := keyPrefix + marker + "_" + pk.ID + "_" + pk.Secret; rebuilt != s {
			t.Fatalf("parse of %q does not round trip: %q", s, rebuilt)
		}
		if !validToken(pk.ID, 4, 64) || !validToken(pk.Secret, 16, 128) {
			t.Fatalf("accepted invalid parts %+v", pk)
		}
	})
}
