package ids

import (
	"strings"
	"testing"
	"time"
)

func TestULIDOrderAndShape(t *testing.T) {
	a := ULID(time.UnixMilli(1_700_000_000_000))
	b := ULID(time.UnixMilli(1_700_000_000_001))
	if len(a) != 26 || len(b) != 26 {
		t.Fatalf("lengths %d %d", len(a), len(b))
	}
	if a[:10] >= b[:10] {
		t.Fatalf("time prefix not ordered: %s %s", a, b)
	}
	if ULID(time.UnixMilli(0))[:10] != "0000000000" {
		t.Fatalf("zero time prefix: %s", ULID(time.UnixMilli(0)))
	}
	seen := map[string]bool{}
	for range 1000 {
		id := New("gen")
		if !strings.HasPrefix(id, "gen_") || seen[id] {
			t.Fatalf("bad or repeated id %s", id)
		}
		seen[id] = true
	}
}

func TestToken(t *testing.T) {
	tok := Token(40)
	if len(tok) != 40 {
		t.Fatalf("length %d", len(tok))
	}
	for _, c := range tok {
		if !strings.ContainsRune(lowerAlnum, c) {
			t.Fatalf("unexpected character %q", c)
		}
	}
	if Token(40) == tok {
		t.Fatal("tokens repeat")
	}
}

func TestNewShape(t *testing.T) {
	id := New("gen")
	if len(id) != len("gen_")+26 || !strings.HasPrefix(id, "gen_") || strings.Trim(id[4:], crockford) != "" {
		t.Fatalf("bad id %q", id)
	}
}
