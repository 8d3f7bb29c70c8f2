package jobs

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/store"
)

// piecewiseKind is a kind with live statuses of its own whose jobs are charged piecewise,
// as a batch's are; it reports what its script says, like scriptedKind.
type piecewiseKind struct{ scriptedKind }

func (*piecewiseKind) LiveStatuses() []string { return []string{"validating", "finalizing"} }
func (*piecewiseKind) SettlesPiecewise()      {}

var piecewiseTest = &piecewiseKind{scriptedKind{script: map[string][]step{}, polls: map[string]int{}}}

func init() { Register("piecewisetest", piecewiseTest) }

// A piecewise kind's job goes through its own live statuses, and at its end (here
// cancelled, with a result) the engine releases what the hold has left after the pieces
// settled against it, and charges nothing of its own; a status no kind knows is retried,
// not stored.
func TestPiecewiseJobReleasesTheRestOfItsHold(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	const id = "job_piecewise"
	piecewiseTest.mu.Lock()
	piecewiseTest.script[id] = []step{
		{rep: Report{Status: "validating", PollAfter: time.Millisecond}},
		{rep: Report{Status: "finalizing", Progress: 50, PollAfter: time.Millisecond, Result: json.RawMessage(`{"phase":1}`)}},
		{rep: Report{Status: "no_such_status", PollAfter: time.Millisecond}},
		{rep: Report{Status: StatusCancelled, Result: json.RawMessage(`{"output_file_id":"file-1"}`)}},
	}
	piecewiseTest.mu.Unlock()
	j, err := f.e.Submit(ctx, Submission{
		Job: store.Job{ID: id, WorkspaceID: f.ws, Kind: "piecewisetest", KeyID: f.kd, Model: "m", Provider: "up",
			UpstreamModel: "m-1", ExpiresAt: time.Now().Add(time.Hour)},
		Most: 2 * usd, Endpoint: "/batches",
		Start: func(context.Context) (string, Report, error) {
			return "", Report{Status: "validating", PollAfter: time.Millisecond}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	// A piece settles against the job's hold, as a batch row does.
	if _, err := f.s.SettleLease(ctx, store.SettleLeaseParams{ReservationID: j.ReservationID, HeldNanos: usd,
		Generation: &store.Generation{ID: "gen_piece", WorkspaceID: f.ws, KeyID: f.kd, Endpoint: "/chat/completions", Model: "m", Status: 200, CostNanos: usd / 4}}); err != nil {
		t.Fatal(err)
	}
	poll := func() store.Job {
		t.Helper()
		items, err := f.s.Claim(ctx, store.ClaimParams{Queue: store.JobQueue("piecewisetest"), Owner: "test", Lease: time.Minute, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range items {
			f.e.PollClaimed(ctx, it)
		}
		time.Sleep(5 * time.Millisecond)
		return f.job(id)
	}
	time.Sleep(5 * time.Millisecond)
	if got := poll(); got.Status != "validating" {
		t.Fatalf("after the first poll: %+v", got)
	}
	if got := poll(); got.Status != "finalizing" || got.Progress != 50 || string(got.Result) != `{"phase": 1}` && string(got.Result) != `{"phase":1}` {
		t.Fatalf("after the second poll: status %q progress %d result %s", got.Status, got.Progress, got.Result)
	}
	if got := poll(); got.Status != "finalizing" {
		t.Fatalf("an unknown status was stored: %+v", got)
	}
	var got store.Job
	for i := 0; i < 100; i++ {
		if got = poll(); Terminal(got.Status) {
			break
		}
	}
	if got.Status != StatusCancelled || got.Lifecycle != LifecycleSettled || got.CompletedAt.IsZero() {
		t.Fatalf("at the end: %+v", got)
	}
	var res map[string]string
	if json.Unmarshal(got.Result, &res) != nil || res["output_file_id"] != "file-1" {
		t.Fatalf("the end's result was not kept: %s", got.Result)
	}
	if b := f.wallet(); b.ReservedNanos != 0 || b.BalanceNanos != 10*usd-usd/4 {
		t.Fatalf("wallet %+v; want only the piece's 0.25 USD charged and nothing held", b)
	}
	if _, err := f.s.GetGeneration(ctx, f.ws, GenerationID(id)); err == nil {
		t.Fatal("a piecewise job recorded a generation of its own")
	}
}
