// Package alloctest checks allocation counts in tests. They are not checked under the race
// detector, which allocates of its own (and drops sync.Pool items at random).
package alloctest

import "testing"

// AtMost fails t when fn, run once to warm up and then 100 times, allocates more than max
// times a run; under the race detector it skips t.
func AtMost(t testing.TB, name string, max float64, fn func() error) {
	t.Helper()
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	if err := fn(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if n := testing.AllocsPerRun(100, func() { _ = fn() }); n > max {
		t.Errorf("%s: %.0f allocations, want at most %.0f", name, n, max)
	}
}
