//go:build unix

package module

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/modelgateway/caddy-modelgateway/billing"
	"github.com/modelgateway/caddy-modelgateway/internal/meter"
	"github.com/modelgateway/caddy-modelgateway/jobs"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// testJobKind is a job kind of the tests: its upstream (fakeJobUpstream) makes a job
// whose polls say how far it is, and what it made once complete. The request the job was
// created with names the upstream, so that a gateway in a child process polls the test's.
type testJobKind struct{}

func init() { jobs.Register("testjob", testJobKind{}) }

// testJobStatus is what the fake upstream answers a poll with.
type testJobStatus struct {
	Status      string `json:"status"`
	Progress    int    `json:"progress"`
	PollAfterMs int64  `json:"poll_after_ms"`
	Seconds     int64  `json:"seconds"`
	Resolution  string `json:"resolution"`
	// Panic makes the poll panic: the engine recovers and polls again.
	Panic bool `json:"panic"`
}

func (testJobKind) Poll(ctx context.Context, _ jobs.Env, j store.Job) (jobs.Report, error) {
	var req struct {
		Upstream string `json:"upstream"`
	}
	if err := json.Unmarshal(j.Request, &req); err != nil {
		return jobs.Report{}, err
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodGet, req.Upstream+"/jobs/"+j.NativeID, nil)
	if err != nil {
		return jobs.Report{}, err
	}
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		return jobs.Report{}, err
	}
	defer resp.Body.Close()
	var st testJobStatus
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return jobs.Report{}, err
	}
	if st.Panic {
		panic("the test upstream asked for a panic")
	}
	return jobs.Report{
		Status: st.Status, Progress: st.Progress, PollAfter: time.Duration(st.PollAfterMs) * time.Millisecond,
		Usage: meter.Usage{OutputVideo: time.Duration(st.Seconds) * time.Second, VideoResolution: st.Resolution},
	}, nil
}

// fakeJobUpstream makes jobs that run until done is closed, asking to be polled every
// pollAfter, and whose panicAt-th poll panics.
type fakeJobUpstream struct {
	*httptest.Server
	pollAfter time.Duration
	panicAt   int
	done      chan struct{}

	// stall, while set, makes a poll wait for its request to be cut (the gateway stopping),
	// telling stalled that it waits.
	stall   atomic.Bool
	stalled chan struct{}

	mu    sync.Mutex
	polls []testJobPoll
}

type testJobPoll struct {
	at       time.Time
	panicked bool
}

func newFakeJobUpstream(t *testing.T, pollAfter time.Duration, panicAt int) *fakeJobUpstream {
	f := &fakeJobUpstream{pollAfter: pollAfter, panicAt: panicAt, done: make(chan struct{}), stalled: make(chan struct{}, 1)}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/jobs" {
			_, _ = w.Write([]byte(`{"id":"native_1"}`))
			return
		}
		if r.Method != http.MethodGet || r.URL.Path != "/jobs/native_1" {
			http.NotFound(w, r)
			return
		}
		if f.stall.Load() {
			select {
			case f.stalled <- struct{}{}:
			default:
			}
			<-r.Context().Done()
			return
		}
		f.mu.Lock()
		n := len(f.polls) + 1
		p := testJobPoll{at: time.Now(), panicked: n == f.panicAt}
		f.polls = append(f.polls, p)
		f.mu.Unlock()
		st := testJobStatus{Status: jobs.StatusInProgress, Progress: min(10*n, 90), PollAfterMs: pollAfter.Milliseconds(), Panic: p.panicked}
		select {
		case <-f.done:
			st = testJobStatus{Status: jobs.StatusCompleted, Progress: 100, Seconds: 4, Resolution: "720p"}
		default:
		}
		_ = json.NewEncoder(w).Encode(st)
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeJobUpstream) pollsSeen() []testJobPoll {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]testJobPoll(nil), f.polls...)
}

// TestJobSurvivesKillNine runs a test job through the jobs engine end to end: created
// under a durable hold, polled by a gateway in a child process at the pace its upstream
// asks, one poll panicking (recovered, and the job polled again), the gateway killed with
// SIGKILL mid-job. The hold outlives the dead instance, including the sweep of its holds
// by the next gateway on the database, which then finishes the job: settled once, at the
// price of what it made.
func TestJobSurvivesKillNine(t *testing.T) {
	const pace = 300 * time.Millisecond
	up := newFakeJobUpstream(t, pace, 2)
	dir := t.TempDir()
	setup := startGatewayFiles(t, dir)
	tm := setup.team(10 * usd)
	const most = 2 * usd
	gatewayBlock := `
		provider vidup {
			type openai
			base_url ` + up.URL + `/v1
			api_key sk-upstream
		}
		model test-video {
			route vidup vid-1 {
				output_video_seconds 0.10 resolution 720p
			}
		}`

	job := submitTestJob(t, setup.store, tm, up, "job_survivor", most, pace)
	wallet := func(s store.Store) store.Balance {
		t.Helper()
		b, err := s.GetBalance(context.Background(), tm.ws)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	held := func(what string, s store.Store) {
		t.Helper()
		if b := wallet(s); b.BalanceNanos != 10*usd || b.ReservedNanos != most {
			t.Fatalf("%s: wallet %+v; want 10 USD with the job's %d held", what, b, most)
		}
	}
	held("created", setup.store)
	if err := setup.store.Close(); err != nil { // the child's journal is its own
		t.Fatal(err)
	}

	port := freePort(t)
	child := startCrashChild(t, gatewayCaddyfileOn(port, "sqlite "+setup.dbPath, gatewayBlock, ""))
	waitFor(t, "four polls", func() bool { return len(up.pollsSeen()) >= 4 })
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	polls := up.pollsSeen()
	for i := 1; i < len(polls); i++ {
		// The poll after a panic is a retry, paced by the engine's backoff; every other one
		// waits as long as the upstream asked.
		if gap := polls[i].at.Sub(polls[i-1].at); !polls[i-1].panicked && gap < pace-20*time.Millisecond {
			t.Errorf("poll %d came %v after the one before; the upstream asked for %v", i+1, gap, pace)
		}
	}
	if !polls[1].panicked {
		t.Fatalf("the second poll did not panic: %+v", polls)
	}

	// The next gateway on the database sweeps the dead instance's holds: not the job's.
	env := startGatewayIn(t, dir, gatewayBlock, "")
	waitFor(t, "a poll by the restarted gateway", func() bool { return len(up.pollsSeen()) > len(polls) })
	held("after the restart", env.store)
	if j, err := env.store.GetJob(context.Background(), tm.ws, job.ID); err != nil || jobs.Terminal(j.Status) || j.Progress == 0 {
		t.Fatalf("job %+v, %v; want it in progress", j, err)
	}

	close(up.done)
	var j store.Job
	var err error
	waitFor(t, "the job's end", func() bool {
		j, err = env.store.GetJob(context.Background(), tm.ws, job.ID)
		return err == nil && jobs.Terminal(j.Status) && j.Lifecycle == jobs.LifecycleSettled
	})
	const cost = 4 * usd / 10 // four seconds of 720p at 0.10 USD
	if j.Status != jobs.StatusCompleted || j.Progress != 100 || j.CompletedAt.IsZero() {
		t.Errorf("job %+v; want completed", j)
	}
	if b := wallet(env.store); b.BalanceNanos != 10*usd-cost || b.ReservedNanos != 0 {
		t.Errorf("wallet %+v; want %d charged once and nothing held", b, cost)
	}
	g, err := env.store.GetGeneration(context.Background(), tm.ws, jobs.GenerationID(job.ID))
	if err != nil {
		t.Fatal(err)
	}
	if g.CostNanos != cost || g.OutputVideoMs != 4000 || g.Model != "test-video" || g.Provider != "vidup" || len(g.CostLines) != 1 ||
		g.CostLines[0].Key != "720p" || g.CostLines[0].Quantity != 4 {
		t.Errorf("generation %+v; want 4 s of 720p at %d", g, cost)
	}
	if ids := sqliteGenerationIDs(t, setup.dbPath, tm.ws); len(ids) != 1 {
		t.Errorf("generations %v; want the job's one", ids)
	}
}

// submitTestJob creates test job id on s as a family's handler would: held for (most, with
// a durable hold), started upstream, stored with its first poll, paced as up asks.
func submitTestJob(t *testing.T, s store.Store, tm team, up *fakeJobUpstream, id string, most int64, pace time.Duration) store.Job {
	t.Helper()
	return submitTestJobTo(t, s, tm, up.URL, store.Job{ID: id}, most, pace, nil)
}

// submitTestJobTo is submitTestJob on the upstream at upURL, of job j (its id and webhook),
// its events made by events (nil: none), as the gateway's job engines make them.
func submitTestJobTo(t *testing.T, s store.Store, tm team, upURL string, j store.Job, most int64, pace time.Duration,
	events func(store.Job, string) []store.Event) store.Job {
	t.Helper()
	ledger := billing.NewLedger(&billing.Config{
		Store: s, Logger: zap.NewNop(), Now: time.Now, ReservationTTL: time.Minute,
		StoreTimeout: 5 * time.Second, SettleTimeout: 5 * time.Second,
	})
	t.Cleanup(func() { _ = ledger.Close() })
	engine := &jobs.Engine{Store: s, Ledger: ledger, Logger: zap.NewNop(), Owner: "test", Events: events}
	job, err := engine.Submit(context.Background(), jobs.Submission{
		Job: store.Job{
			ID: j.ID, WorkspaceID: tm.ws, Kind: "testjob", KeyID: kidOf(t, tm.std), Model: "test-video",
			Provider: "vidup", UpstreamModel: "vid-1", Request: json.RawMessage(`{"upstream":"` + upURL + `"}`),
			ExpiresAt: time.Now().Add(time.Hour), Webhook: j.Webhook,
		},
		Most: most, Endpoint: "/videos",
		Start: func(ctx context.Context) (string, jobs.Report, error) {
			resp, err := http.Post(upURL+"/jobs", "application/json", strings.NewReader(`{}`))
			if err != nil {
				return "", jobs.Report{}, err
			}
			defer resp.Body.Close()
			var created struct{ ID string }
			return created.ID, jobs.Report{Status: jobs.StatusQueued, PollAfter: pace}, json.NewDecoder(resp.Body).Decode(&created)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return job
}

// TestJobChangesAreCaddyEvents: each change the gateway's jobs worker commits to a job is
// emitted as the Caddy event JobChangedEvent, for an operator's subscribers: the polls
// that move it along, then its end, settled.
func TestJobChangesAreCaddyEvents(t *testing.T) {
	const pace = 100 * time.Millisecond
	up := newFakeJobUpstream(t, pace, 0)
	dir := t.TempDir()
	setDataDirs(t, dir)
	port := freePort(t)
	env := &gatewayEnv{t: t, baseURL: fmt.Sprintf("http://127.0.0.1:%d", port), dbPath: filepath.Join(dir, "gateway.db")}
	cf := gatewayCaddyfile(port, env.dbPath, `
		provider vidup {
			type openai
			base_url `+up.URL+`/v1
			api_key sk-upstream
		}
		model test-video {
			route vidup vid-1 {
				output_video_seconds 0.10 resolution 720p
			}
		}`, "")
	loadRecordingEvents(t, cf, JobChangedEvent)
	env.openStore()
	tm := env.team(10 * usd)
	job := submitTestJob(t, env.store, tm, up, "job_evented", usd, pace)

	next := func(what string) map[string]any {
		t.Helper()
		select {
		case e := <-recordedEvents:
			if e.Name() != JobChangedEvent || e.Data["job_id"] != job.ID || e.Data["workspace_id"] != tm.ws ||
				e.Data["kind"] != "testjob" || e.Data["model"] != "test-video" {
				t.Fatalf("%s: event %s %v", what, e.Name(), e.Data)
			}
			return e.Data
		case <-time.After(10 * time.Second):
			t.Fatalf("no event for %s", what)
		}
		return nil
	}
	if d := next("the first poll"); d["status"] != jobs.StatusInProgress || d["lifecycle_status"] != "running" || d["stage"] != jobs.LifecyclePolling || d["progress"] != 10 {
		t.Fatalf("the first poll's event: %v", d)
	}
	close(up.done)
	for {
		d := next("the job's end")
		if d["status"] == jobs.StatusCompleted {
			if d["lifecycle_status"] != jobs.StatusCompleted || d["stage"] != jobs.LifecycleSettled || d["progress"] != 100 {
				t.Fatalf("the end's event: %v", d)
			}
			break
		}
		if d["status"] != jobs.StatusInProgress {
			t.Fatalf("an event between: %v", d)
		}
	}
}
