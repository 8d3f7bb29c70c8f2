//go:build race

package sse

// raceEnabled tells allocation tests that sync.Pool drops items at random under the race
// detector.
const raceEnabled = true
