//go:build unix

package module

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/coder/websocket"
	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/modelgateway/caddy-modelgateway/billing"
	"github.com/modelgateway/caddy-modelgateway/jobs"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// testJobGateway is the gateway block of the test jobs' route (testJobKind) on upstream up.
func testJobGateway(upURL string) string {
	return `
		provider vidup {
			type openai
			base_url ` + upURL + `/v1
			api_key sk-upstream
		}
		model test-video {
			route vidup vid-1 {
				output_video_seconds 0.10 resolution 720p
			}
		}`
}

// liveMessage is a message of a job's live updates.
type liveMessage struct {
	Type string         `json:"type"`
	Data map[string]any `json:"data"`
}

// dialLive connects to the live updates of test job id through the gateway at baseURL.
func dialLive(t *testing.T, baseURL, id string, opts *websocket.DialOptions) *websocket.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	url := "ws" + strings.TrimPrefix(baseURL, "http") + "/v1/async/testjob/" + id + "/ws"
	c, _, err := websocket.Dial(ctx, url, opts)
	if err != nil {
		t.Fatalf("connecting to %s: %v", url, err)
	}
	t.Cleanup(func() { _ = c.CloseNow() })
	return c
}

// readLive reads the next message, or the connection's close (as a websocket.CloseError).
func readLive(c *websocket.Conn) (liveMessage, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, data, err := c.Read(ctx)
	var m liveMessage
	if err == nil {
		err = json.Unmarshal(data, &m)
	}
	return m, err
}

// followLive reads a job's live updates to their end: the snapshot, then updates whose
// progress never goes back, the last one completed, then the close 1000. onUpdate is told
// of each update as it comes; got are the messages already read. It may run on a
// goroutine of the test's: it fails nothing.
func followLive(c *websocket.Conn, got []liveMessage, onUpdate func(liveMessage)) ([]liveMessage, error) {
	for {
		m, err := readLive(c)
		var ce websocket.CloseError
		if errors.As(err, &ce) {
			if ce.Code != websocket.StatusNormalClosure || ce.Reason != "job completed" {
				return got, fmt.Errorf("closed with %d %q", ce.Code, ce.Reason)
			}
			break
		}
		if err != nil {
			return got, err
		}
		if want := map[bool]string{true: "snapshot", false: "update"}[len(got) == 0]; m.Type != want || m.Data["object"] != "testjob" {
			return got, fmt.Errorf("message %d %+v; want a %s of the test job", len(got), m, want)
		}
		if len(got) > 0 && m.Data["progress"].(float64) < got[len(got)-1].Data["progress"].(float64) {
			return got, fmt.Errorf("progress went back: %v then %v", got[len(got)-1].Data, m.Data)
		}
		got = append(got, m)
		if m.Type == "update" {
			onUpdate(m)
		}
	}
	if last := got[len(got)-1].Data; last["status"] != jobs.StatusCompleted || last["lifecycle_status"] != "completed" || last["progress"] != 100.0 {
		return got, fmt.Errorf("the last message %v; want the job completed", last)
	}
	return got, nil
}

// The live updates of a job reach a client through Caddy's handler chain, which lets the
// gateway take the connection over, its access log's recorder included: a test job polled
// by the gateway's own worker, watched by a client authenticated by its header and by a
// browser's, which offers the key as the bearer subprotocol. Both see the snapshot, the
// job's progress and its end. The access log, filtered as docs/live-updates.md says, shows
// the upgrades and no key.
func TestLiveUpdatesThroughCaddy(t *testing.T) {
	const pace = 150 * time.Millisecond
	up := newFakeJobUpstream(t, pace, 0)
	dir := t.TempDir()
	setDataDirs(t, dir)
	port := freePort(t)
	env := &gatewayEnv{t: t, baseURL: fmt.Sprintf("http://127.0.0.1:%d", port), dbPath: filepath.Join(dir, "gateway.db")}
	accessLog := filepath.Join(dir, "access.log")
	site := fmt.Sprintf("http://127.0.0.1:%d {\n", port)
	cf := strings.Replace(gatewayCaddyfile(port, env.dbPath, testJobGateway(up.URL), ""), site, site+`	log {
		output file `+accessLog+`
		format filter {
			request>headers>Sec-Websocket-Protocol delete
			request>headers>X-Api-Key delete
		}
	}
`, 1)
	loadCaddyfile(t, cf)
	t.Cleanup(func() { _ = caddy.Stop() })
	env.openStore()
	tm := env.team(10 * usd)
	job := submitTestJob(t, env.store, tm, up, "job_live_caddy", usd, pace)

	header := dialLive(t, env.baseURL, job.ID, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + tm.std}}})
	browser := dialLive(t, env.baseURL, job.ID, &websocket.DialOptions{Subprotocols: []string{"model-gateway.bearer", tm.std}})
	if browser.Subprotocol() != "model-gateway.bearer" {
		t.Fatalf("the server selected %q", browser.Subprotocol())
	}
	var once sync.Once
	var wg sync.WaitGroup
	results, errs := make([][]liveMessage, 2), make([]error, 2)
	for i, c := range []*websocket.Conn{header, browser} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = followLive(c, nil, func(m liveMessage) {
				// Let the job end once it has been seen under way.
				if m.Data["progress"].(float64) >= 30 {
					once.Do(func() { close(up.done) })
				}
			})
		}()
	}
	wg.Wait()
	underWay := false
	for i, got := range results {
		if errs[i] != nil {
			t.Errorf("client %d, after %v: %v", i, got, errs[i])
		}
		for i, m := range got {
			underWay = underWay || (i > 0 && m.Data["status"] == jobs.StatusInProgress)
		}
	}
	if !underWay {
		t.Error("no client saw the job under way")
	}

	// The log's lines are written as each connection's handler returns.
	var upgrades int
	waitFor(t, "the access log of both connections", func() bool {
		data, _ := os.ReadFile(accessLog)
		upgrades = strings.Count(string(data), `"status":101`)
		if strings.Contains(string(data), tm.std) {
			t.Fatalf("the access log holds the key:\n%s", data)
		}
		return upgrades == 2
	})
}

// withoutJobsWorker keeps the gateways the test starts from polling jobs: another
// instance, the test's own engine, is then the only one that advances them. Call it before
// starting them, so that they are stopped before it is undone.
func withoutJobsWorker(t *testing.T) {
	saved := backgroundWorkers
	var kept []worker
	for _, w := range saved {
		if w.Name != "jobs" {
			kept = append(kept, w)
		}
	}
	backgroundWorkers = kept
	t.Cleanup(func() { backgroundWorkers = saved })
}

// A websocket client connected to one gateway sees the changes a worker of another
// instance makes to a job, on PostgreSQL: gateway A (in-process Caddy, polling no job)
// serves the client, instance B (a second store and jobs engine on the same schema) polls
// the job to its end. The client gets each state B committed, in order, then the close;
// nothing reaches it but through the database's notifications.
func TestLiveUpdatesAcrossInstances(t *testing.T) {
	const pace = 200 * time.Millisecond
	dsn := postgresSchema(t)
	withoutJobsWorker(t)
	up := newFakeJobUpstream(t, pace, 0)
	a := startPostgresGateway(t, dsn, "\t\tcredit_lease_linger 0\n"+testJobGateway(up.URL))
	b := openPostgres(t, dsn)
	ws, key := fundedKey(t, b, 10*usd)
	job := submitTestJob(t, b, team{ws: ws, std: key}, up, "job_live_across", usd, pace)

	c := dialLive(t, a.baseURL, job.ID, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + key}}})
	snapshot, err := readLive(c)
	if err != nil || snapshot.Type != "snapshot" || snapshot.Data["status"] != jobs.StatusQueued {
		t.Fatalf("snapshot %+v, %v", snapshot, err)
	}
	// Gateway A listens for the schema's notifications from its first watch on; what is
	// notified before its LISTEN would reach it only at its next ping.
	waitListening(t, dsn)

	var mu sync.Mutex
	var committed []map[string]any
	ledger := billing.NewLedger(&billing.Config{
		Store: b, Logger: zap.NewNop(), Now: time.Now, ReservationTTL: time.Minute,
		StoreTimeout: 5 * time.Second, SettleTimeout: 5 * time.Second,
	})
	t.Cleanup(func() { _ = ledger.Close() })
	// No Env: the job is charged what it holds, which this test does not look at.
	engineB := &jobs.Engine{Store: b, Ledger: ledger, Logger: zap.NewNop(), Owner: "instance-b", Idle: 50 * time.Millisecond,
		Changed: func(j store.Job) {
			mu.Lock()
			defer mu.Unlock()
			committed = append(committed, map[string]any{"status": j.Status, "lifecycle_status": jobs.LifecycleStatus(j.Status), "progress": float64(j.Progress)})
		}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = engineB.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	var once sync.Once
	got, err := followLive(c, []liveMessage{snapshot}, func(m liveMessage) {
		if m.Data["progress"].(float64) >= 30 {
			once.Do(func() { close(up.done) })
		}
	})
	if err != nil {
		t.Fatalf("after %v: %v", got, err)
	}
	cancel()
	<-done
	// Each state B committed after the snapshot, as the job's object shows it (a poll
	// that changed nothing of it shows as nothing), is an update the client got.
	var want []map[string]any
	last := map[string]any{"status": snapshot.Data["status"], "lifecycle_status": snapshot.Data["lifecycle_status"], "progress": snapshot.Data["progress"]}
	for _, s := range committed {
		if s["status"] != last["status"] || s["lifecycle_status"] != last["lifecycle_status"] || s["progress"] != last["progress"] {
			want = append(want, s)
			last = s
		}
	}
	updates := got[1:]
	if len(updates) != len(want) || len(want) < 4 {
		t.Fatalf("the client got %d updates, B committed %d states: %v", len(updates), len(want), want)
	}
	for i, u := range updates {
		w := want[i]
		if u.Data["status"] != w["status"] || u.Data["lifecycle_status"] != w["lifecycle_status"] || u.Data["progress"] != w["progress"] {
			t.Fatalf("update %d is %v; B committed %v", i, u.Data, w)
		}
	}
}

// waitListening waits until a connection listens for the job changes of the schema dsn
// names, as the PostgreSQL store's change feed does.
func waitListening(t *testing.T, dsn string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	waitFor(t, "gateway A's LISTEN", func() bool {
		var n int
		err := conn.QueryRow(ctx, `SELECT COUNT(*) FROM pg_stat_activity
			WHERE query = 'LISTEN "mgw_jobs_' || md5(current_schema()) || '"'`).Scan(&n)
		return err == nil && n > 0
	})
}
