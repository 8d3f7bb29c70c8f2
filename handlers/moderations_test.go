package handlers

import (
	"net/http"
	"runtime"
	"strings"
	"testing"

	"github.com/modelgateway/caddy-modelgateway/providers/mock"
)

// A moderation request of more inputs than the limit is refused before anything is
// decoded or asked of a provider: what it costs the gateway is a few times its own size,
// whatever the answer to that many inputs would have been.
func TestModerationInputsAreBounded(t *testing.T) {
	a := newAdminGateway(t, []*Model{
		{Name: "mod:free", Routes: []Route{{ProviderName: "mk", Provider: mock.New(mock.Config{Name: "mk"}), UpstreamModel: "mock-moderation"}}},
	}, nil)
	_, std, _ := a.workspace(0)

	input := func(n int) string {
		return `{"model":"mod:free","input":[` + strings.TrimSuffix(strings.Repeat(`"ab",`, n), ",") + `]}`
	}
	if status, v := a.do(http.MethodPost, "/moderations", std, input(maxModerationInputs)); status != 200 || len(v["results"].([]any)) != maxModerationInputs {
		t.Fatalf("%d inputs: %d", maxModerationInputs, status)
	}

	body := input(300_000)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	status, v := a.do(http.MethodPost, "/moderations", std, body)
	runtime.ReadMemStats(&after)
	wantError(t, "300,000 inputs", status, v, http.StatusBadRequest, CodeValidation, "input")
	if allocated := after.TotalAlloc - before.TotalAlloc; allocated > uint64(4*len(body)) {
		t.Fatalf("refusing a %d-byte request allocated %d bytes", len(body), allocated)
	}
}
