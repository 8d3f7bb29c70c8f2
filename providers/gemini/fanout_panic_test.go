package gemini

import (
	"context"
	"testing"

	"github.com/modelgateway/caddy-modelgateway/internal/background"
)

// A call of a fan-out that panics fails the request with the panic, stack included, rather
// than ending the process from a goroutine no one recovers.
func TestFanOutCallPanicFailsTheRequest(t *testing.T) {
	_, err := fanOut(context.Background(), "gemini", 3, func(_ context.Context, i int) (int, error) {
		if i == 1 {
			panic("adapter bug")
		}
		return i, nil
	})
	if p := background.AsPanic(err); p == nil || p.Value != "adapter bug" || len(p.Stack) == 0 {
		t.Fatalf("fanOut returned %v, want the call's panic", err)
	}
}
