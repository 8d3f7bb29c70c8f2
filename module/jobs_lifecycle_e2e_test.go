//go:build unix

package module

import (
	"context"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/modelgateway/caddy-modelgateway/jobs"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// TestJobSurvivesReloadAndStop: a job in flight goes on polling across `caddy reload` (the
// worker belongs to the store handle, which a reload keeps, and reads the newest
// configuration), stops being polled on `caddy stop` (a poll under way is cut), and is
// polled again at once when the gateway starts again (the stopped worker handed the cut
// poll back rather than leaving it claimed until its lease ran out, minutes later); then
// it ends settled once.
func TestJobSurvivesReloadAndStop(t *testing.T) {
	const pace = 100 * time.Millisecond
	up := newFakeJobUpstream(t, pace, 0)
	dir := t.TempDir()
	block := func(price string) string {
		return `
		provider vidup {
			type openai
			base_url ` + up.URL + `/v1
			api_key sk-upstream
		}
		model test-video {
			route vidup vid-1 {
				output_video_seconds ` + price + ` resolution 720p
			}
		}`
	}
	env := startGatewayIn(t, dir, block("0.50"), "")
	tm := env.team(10 * usd)
	job := submitTestJob(t, env.store, tm, up, "job_reloaded", 2*usd, pace)
	waitFor(t, "two polls", func() bool { return len(up.pollsSeen()) >= 2 })

	// A reload with a new price: the job goes on, and is priced by the newest configuration.
	port := portOf(env.baseURL)
	loadCaddyfile(t, gatewayCaddyfile(port, env.dbPath, block("0.10"), ""))
	n := len(up.pollsSeen())
	waitFor(t, "polls after the reload", func() bool { return len(up.pollsSeen()) >= n+2 })

	// Stopped while a poll is under way: the poll is cut, and no other follows.
	up.stall.Store(true)
	select {
	case <-up.stalled:
	case <-time.After(10 * time.Second):
		t.Fatal("no poll came to stall")
	}
	if err := caddy.Stop(); err != nil {
		t.Fatal(err)
	}
	up.stall.Store(false)
	stopped := len(up.pollsSeen())
	time.Sleep(5 * pace)
	if got := len(up.pollsSeen()); got != stopped {
		t.Fatalf("%d polls after caddy stop; want none", got-stopped)
	}

	// Started again: polled at once, not after the stopped worker's lease (minutes).
	restarted := time.Now()
	env2 := startGatewayIn(t, dir, block("0.10"), "")
	waitFor(t, "a poll after the restart", func() bool { return len(up.pollsSeen()) > stopped })
	if d := time.Since(restarted); d > 10*time.Second {
		t.Errorf("the restarted gateway polled after %v; want at once", d)
	}
	close(up.done)
	var j store.Job
	waitFor(t, "the job's end", func() bool {
		var err error
		j, err = env2.store.GetJob(context.Background(), tm.ws, job.ID)
		return err == nil && j.Lifecycle == jobs.LifecycleSettled
	})
	const cost = 4 * usd / 10 // four seconds of 720p at the reloaded 0.10 USD
	if b := env2.balance(tm.ws); b.BalanceNanos != 10*usd-cost || b.ReservedNanos != 0 {
		t.Errorf("wallet %+v; want %d charged once and nothing held", b, cost)
	}
}
