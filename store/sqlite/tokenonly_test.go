package sqlite

import (
	"context"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/internal/ids"
	"github.com/modelgateway/caddy-modelgateway/internal/meter"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// TestJournaledGenerationsKeepTheirDimensions writes lease settlements through the
// journal's batched inserts, text calls alone (the inserts that leave the dimension
// columns to their default) and text calls mixed with media calls, and reads every record
// back as it was given.
func TestJournaledGenerationsKeepTheirDimensions(t *testing.T) {
	s := openTemp(t, filepath.Join(t.TempDir(), "gateway.db"))
	ctx := context.Background()
	leaseFixture(t, s, "ws_1", "res_1", 10*usd)
	now := time.Now().UTC().Truncate(time.Millisecond)
	var want []store.Generation
	for i := range 40 {
		g := store.Generation{ID: ids.New("gen"), WorkspaceID: "ws_1", KeyID: "key_1", Endpoint: "/chat/completions",
			Model: "m", Status: 200, InputTokens: int64(i), OutputTokens: 7, CostNanos: 1000, CreatedAt: now}
		if i >= 20 && i%3 == 0 {
			g.Endpoint, g.InputCharacters, g.Images, g.Pages = "/audio/speech", int64(100+i), 2, 3
			g.InputAudioMs, g.OutputAudioMs, g.OutputVideoMs = 1500, 2500, 4000
		}
		want = append(want, g)
		in := g
		if _, err := s.SettleLease(ctx, store.SettleLeaseParams{ReservationID: "res_1", HeldNanos: usd, Generation: &in}); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.ContainsFunc(want, func(g store.Generation) bool { return g.HasDimensions() }) {
		t.Fatal("no generation of the test has dimensions")
	}
	for _, w := range want {
		got, err := s.GetGeneration(ctx, "ws_1", w.ID)
		if err != nil {
			t.Fatal(err)
		}
		got.CostLines, got.Attempts, got.ReservationID = nil, nil, ""
		if !reflect.DeepEqual(got, w) {
			t.Errorf("read back %+v\nwant %+v", got, w)
		}
	}
}

// TestTokenOnlyFieldsLeaveOutTheDimensions: the columns a text call's insert leaves out
// are exactly those RecordDimensions fills.
func TestTokenOnlyFieldsLeaveOutTheDimensions(t *testing.T) {
	var g store.Generation
	g.RecordDimensions(&meter.Usage{InputCharacters: 1, Images: 1, Pages: 1, InputAudio: time.Second, OutputAudio: time.Second, OutputVideo: time.Second})
	var zero store.Generation
	for _, f := range store.GenerationFields {
		kept := slices.ContainsFunc(store.TokenOnlyFields, func(k store.GenerationField) bool { return k.Column == f.Column })
		set := !reflect.DeepEqual(reflect.ValueOf(f.Addr(&g)).Elem().Interface(), reflect.ValueOf(f.Addr(&zero)).Elem().Interface())
		if kept == set {
			t.Errorf("column %s: kept by the token-only insert %v, set by RecordDimensions %v", f.Column, kept, set)
		}
	}
}
