package jobs

import (
	"context"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/internal/ids"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// TestRunPollsPastTheGroupCap: with more polls due than a group's cap lets run at once, each
// poll's end has the engine claim the next at once, not after its idle wait (longKind's
// polls take longPoll, so that the cap is still full when the engine looks again).
func TestRunPollsPastTheGroupCap(t *testing.T) {
	f := newFixture(t)
	var jobs []string
	for i := 0; i < 4; i++ {
		j, err := f.e.Submit(context.Background(), Submission{
			Job: store.Job{ID: ids.New("job"), WorkspaceID: f.ws, Kind: "longtest", KeyID: f.kd, Model: "video", Provider: "up",
				UpstreamModel: "vid-1", ExpiresAt: time.Now().Add(time.Hour)},
			Most: usd, Endpoint: "/videos",
			Start: func(context.Context) (string, Report, error) {
				return "native", Report{Status: StatusQueued, PollAfter: time.Millisecond}, nil
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, j.ID)
	}
	f.e.GroupCap, f.e.Idle, f.e.Reconcile = 1, time.Hour, time.Hour
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.e.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	deadline := time.Now().Add(20 * longPoll)
	for _, id := range jobs {
		for !Terminal(f.job(id).Status) {
			if time.Now().After(deadline) {
				t.Fatalf("job %s still %s after %s: the polls waiting under the cap waited for the idle hour", id, f.job(id).Status, 20*longPoll)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// TestPollNowIsDueAtOnce: a report with PollNow makes the next poll due at once, whatever
// the engine's MinPoll; one without waits at least MinPoll.
func TestPollNowIsDueAtOnce(t *testing.T) {
	f := newFixture(t)
	f.e.MinPoll = time.Hour
	submit := func(first Report) {
		t.Helper()
		_, err := f.e.Submit(context.Background(), Submission{
			Job: store.Job{ID: ids.New("job"), WorkspaceID: f.ws, Kind: "longtest", KeyID: f.kd, Model: "video", Provider: "up",
				UpstreamModel: "vid-1", ExpiresAt: time.Now().Add(2 * time.Hour)},
			Most: usd, Endpoint: "/videos",
			Start: func(context.Context) (string, Report, error) { return "native", first, nil },
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	claim := func() int {
		t.Helper()
		items, err := f.s.Claim(context.Background(), store.ClaimParams{Queue: store.JobQueue("longtest"), Owner: "t", Lease: time.Minute, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		return len(items)
	}
	submit(Report{Status: StatusQueued, PollAfter: time.Millisecond})
	if n := claim(); n != 0 {
		t.Fatalf("a poll asked after 1ms was due before MinPoll (an hour): %d claimed", n)
	}
	submit(Report{Status: StatusQueued, PollNow: true})
	if n := claim(); n != 1 {
		t.Fatalf("a PollNow poll: %d claimed, want 1 due at once", n)
	}
}
