package providers

import (
	"testing"

	"github.com/modelgateway/caddy-modelgateway/internal/meter"
)

// TestMetered: a text call's token counts are metered in the dimensions of the same name,
// cached reads as cached input, nothing else set.
func TestMetered(t *testing.T) {
	u := Usage{Input: 1, CacheRead: 2, CacheWrite: 3, Output: 4, Reasoning: 5}
	want := meter.Usage{Input: 1, CachedInput: 2, CacheWrite: 3, Output: 4, Reasoning: 5}
	if got := u.Metered(); got != want {
		t.Fatalf("Metered() = %+v, want %+v", got, want)
	}
}
