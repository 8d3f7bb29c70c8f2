package module

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/caddyserver/caddy/v2"

	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/mock"
)

// A provider type whose upstream runs batches natively, for the native hook's tests:
// batch_fake answers chat as the mock does, and runs a batch in memory, completing it
// after completeAfter polls (or ending it cancelled once cancelled). Its results answer
// each row "native: <custom_id>" with 10 input and 5 output tokens, except rows whose
// custom_id is in failRows, which expired.

func init() { caddy.RegisterModule(new(BatchFake)) }

// BatchFake is the type batch_fake.
type BatchFake struct{}

// CaddyModule returns the Caddy module information.
func (*BatchFake) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: ProvidersNamespace + ".batch_fake", New: func() caddy.Module { return new(BatchFake) }}
}

// Build returns the adapter.
func (*BatchFake) Build(name string) (providers.Provider, error) {
	return &batchFakeAdapter{Provider: mock.New(mock.Config{Name: name})}, nil
}

// batchFakeState is what every batch_fake adapter shares with the test.
var batchFakeState = struct {
	sync.Mutex
	completeAfter int
	failRows      map[string]bool
	batches       map[string]*fakeNativeBatch
	started       int
}{batches: map[string]*fakeNativeBatch{}}

type fakeNativeBatch struct {
	endpoint, model string
	rows            []providers.BatchRow
	polls           int
	cancelled       bool
}

// batchFakeMaxRows is the most rows a batch_fake batch holds: a larger one is refused as
// unsupported, before anything is made, as the real adapters refuse a batch beyond their
// upstream's limits.
const batchFakeMaxRows = 8

type batchFakeAdapter struct{ *mock.Provider }

func (a *batchFakeAdapter) SupportsBatch(endpoint string) bool {
	return endpoint == "/v1/chat/completions"
}

func (a *batchFakeAdapter) StartBatch(_ context.Context, req *providers.BatchRequest) (*providers.BatchStatus, error) {
	b := &fakeNativeBatch{endpoint: req.Endpoint, model: req.Model}
	if err := req.Rows(func(r providers.BatchRow) error { b.rows = append(b.rows, r); return nil }); err != nil {
		return nil, err
	}
	if len(b.rows) > batchFakeMaxRows {
		return nil, providers.Unsupported(a.Name(), "input_file_id", fmt.Sprintf("a batch holds at most %d rows", batchFakeMaxRows), errors.ErrUnsupported)
	}
	s := &batchFakeState
	s.Lock()
	defer s.Unlock()
	s.started++
	id := fmt.Sprintf("native_%d", s.started)
	s.batches[id] = b
	return &providers.BatchStatus{NativeID: id, Status: providers.BatchValidating, Total: len(b.rows), State: []byte(`{"upstream_file":"f-` + id + `"}`)}, nil
}

func (a *batchFakeAdapter) status(id string, b *fakeNativeBatch) *providers.BatchStatus {
	st := &providers.BatchStatus{NativeID: id, Status: providers.BatchInProgress, Total: len(b.rows)}
	switch {
	case b.cancelled:
		st.Status = providers.BatchCancelled
	case b.polls >= batchFakeState.completeAfter:
		st.Status = providers.BatchCompleted
		for _, r := range b.rows {
			if batchFakeState.failRows[r.CustomID] {
				st.Failed++
			} else {
				st.Completed++
			}
		}
	}
	return st
}

func (a *batchFakeAdapter) PollBatch(_ context.Context, id string, state []byte) (*providers.BatchStatus, error) {
	s := &batchFakeState
	s.Lock()
	defer s.Unlock()
	b, ok := s.batches[id]
	if !ok || string(state) != `{"upstream_file":"f-`+id+`"}` {
		return nil, fmt.Errorf("no batch %s with state %s", id, state)
	}
	b.polls++
	return a.status(id, b), nil
}

func (a *batchFakeAdapter) CancelBatch(_ context.Context, id string, _ []byte) (*providers.BatchStatus, error) {
	s := &batchFakeState
	s.Lock()
	defer s.Unlock()
	b := s.batches[id]
	b.cancelled = true
	st := a.status(id, b)
	st.Status = providers.BatchCancelling
	return st, nil
}

func (a *batchFakeAdapter) BatchResults(_ context.Context, id string, _ []byte, fn func(providers.BatchResult) error) error {
	s := &batchFakeState
	s.Lock()
	b := s.batches[id]
	rows := append([]providers.BatchRow(nil), b.rows...)
	fail, cancelled := s.failRows, b.cancelled
	s.Unlock()
	// In no promised order: last row first.
	for i := len(rows) - 1; i >= 0; i-- {
		r := rows[i]
		if cancelled && i%2 == 1 {
			continue // never run
		}
		res := providers.BatchResult{CustomID: r.CustomID}
		if fail[r.CustomID] {
			res.ErrorCode, res.ErrorMessage = "batch_expired", "the row expired"
		} else {
			body, _ := json.Marshal(map[string]any{"id": "chatcmpl-" + r.CustomID, "object": "chat.completion", "model": b.model,
				"choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": "native: " + r.CustomID}, "finish_reason": "stop"}},
				"usage":   map[string]any{"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})
			res.StatusCode, res.RequestID, res.Body = 200, "req_"+r.CustomID, body
			res.Usage, res.UsageKnown = providers.Usage{Input: 10, Output: 5}, true
		}
		if err := fn(res); err != nil {
			return err
		}
	}
	return nil
}

var _ providers.BatchRunner = (*batchFakeAdapter)(nil)
