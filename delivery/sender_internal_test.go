package delivery

import (
	"net/http"
	"testing"
	"time"
)

// TestSenderSchedule: the default schedule's waits, jittered within a fifth, then nothing
// after the fifth attempt; a Retry-After replaces the wait up to its bound.
func TestSenderSchedule(t *testing.T) {
	now := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	s := &Sender{Now: func() time.Time { return now }}
	if s.MaxAttempts() != 5 {
		t.Fatalf("MaxAttempts = %d, want 5", s.MaxAttempts())
	}
	for n, base := range []time.Duration{time.Minute, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour} {
		for range 50 {
			wait := s.next(n+1, outcome{retry: true}).Sub(now)
			if wait < base*8/10 || wait > base*12/10 {
				t.Fatalf("wait after attempt %d = %v, want %v ± 20%%", n+1, wait, base)
			}
		}
	}
	if next := s.next(5, outcome{retry: true}); !next.IsZero() {
		t.Fatalf("a sixth attempt at %v", next)
	}
	if next := s.next(1, outcome{}); !next.IsZero() {
		t.Fatalf("a failure not worth retrying retried at %v", next)
	}
	if wait := s.next(1, outcome{retry: true, retryAfter: 10 * time.Second}).Sub(now); wait != 10*time.Second {
		t.Fatalf("Retry-After 10 s waited %v", wait)
	}
	if wait := s.next(1, outcome{retry: true, retryAfter: 48 * time.Hour}).Sub(now); wait != DefaultMaxRetryAfter {
		t.Fatalf("Retry-After of two days waited %v, want the bound %v", wait, DefaultMaxRetryAfter)
	}
	for v, want := range map[string]time.Duration{
		"120": 2 * time.Minute, "": 0, "soon": 0, "-5": 0,
		now.Add(time.Hour).Format(http.TimeFormat): time.Hour,
	} {
		if got := retryAfter(http.Header{"Retry-After": {v}}, now); got != want {
			t.Errorf("Retry-After %q = %v, want %v", v, got, want)
		}
	}
}
