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
