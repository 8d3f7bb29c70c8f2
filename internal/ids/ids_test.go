package ids

import (
	"strings"
	"sync"
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

func TestNewIncreasesWithinAMillisecond(t *testing.T) {
	// Thousands of ids fall in the same millisecond: each must sort after the one before,
	// from every goroutine's point of view.
	const goroutines, each = 4, 2000
	var wg sync.WaitGroup
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			prev := New("ws")
			for range each {
				id := New("ws")
				if id <= prev {
					t.Errorf("%s after %s", id, prev)
					return
				}
				prev = id
			}
		}()
	}
	wg.Wait()
}

func TestMonotonicCarriesAndSurvivesAClockStepBack(t *testing.T) {
	now := time.UnixMilli(1_800_000_000_000)
	var a, b, c [26]byte
	monotonic(&a, now)
	// The random part at its maximum: the next id carries into the time part.
	last.Lock()
	for i := 6; i < 16; i++ {
		last.b[i] = 0xff
	}
	last.Unlock()
	var maxed [26]byte
	encode(&maxed, &last.b)
	monotonic(&b, now)
	monotonic(&c, now.Add(-time.Hour))
	if string(b[:]) <= string(maxed[:]) || string(c[:]) <= string(b[:]) {
		t.Fatalf("%s, %s, %s after %s", a, b, c, maxed)
	}
}
