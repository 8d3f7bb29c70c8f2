//go:build unix

package module

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/modelgateway/caddy-modelgateway/store"
	"github.com/modelgateway/caddy-modelgateway/store/sqlite"
)

// crashCaddyfileEnv hands TestCrashedGatewayChild, re-executed by TestKillNineLeavesARecord,
// the Caddyfile to serve.
const crashCaddyfileEnv = "MODELGATEWAY_CRASH_CADDYFILE"

// TestCrashedGatewayChild is the gateway TestKillNineLeavesARecord kills, and is skipped
// otherwise: it serves the Caddyfile it is given until the kill.
func TestCrashedGatewayChild(t *testing.T) {
	cf := os.Getenv(crashCaddyfileEnv)
	if cf == "" {
		t.Skip("the child process of TestKillNineLeavesARecord")
	}
	loadCaddyfile(t, cf)
	fmt.Println("ready")
	select {}
}

// crashedRequest is one request the killed gateway had in flight.
type crashedRequest struct {
	name   string
	stream bool
	// lease: the workspace's wallet is large enough for a credit lease; otherwise the request
	// reserves for itself.
	lease bool
	model string
	team  team
	// genID is what the client was told (streams only: a non-streamed answer never began).
	genID string
}

// crashBackend is the store a killed gateway runs on, as TestKillNineLeavesARecord uses it.
type crashBackend struct {
	// storeArgs is the Caddyfile's store; options are added to the gateway's options.
	storeArgs, options string
	// setup holds the store workspaces are funded through; started is called once they are,
	// before the gateway starts.
	setup   *gatewayEnv
	started func()
	// tracesWritten returns once n requests admitted from leases have a durable trace.
	tracesWritten func(n int)
	// restart starts the gateway again, in this process.
	restart func(gatewayBlock string) *gatewayEnv
	// generationIDs lists a workspace's generation ids: a non-streamed request cut before
	// its answer began never told its client its id.
	generationIDs func(ws string) []string
}

// TestKillNineLeavesARecord runs the gateway as a child process, starts streamed and
// non-streamed requests with and without a credit lease, and kills it with SIGKILL while
// they are in flight (the streams have had three chunks). The gateway restarted on the
// same database finds every request recorded as interrupted, with its model and key,
// origin gateway and no charge, shows them in /activity, and holds nothing: every
// wallet is whole.
func TestKillNineLeavesARecord(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		dir := t.TempDir()
		setup := startGatewayFiles(t, dir)
		testKillNine(t, crashBackend{
			storeArgs: "sqlite " + setup.dbPath,
			setup:     setup,
			// The journal is the gateway's alone: the test's handle goes first.
			started: func() {
				if err := setup.store.Close(); err != nil {
					t.Fatal(err)
				}
			},
			tracesWritten: func(int) {}, // journaled as each request is admitted
			restart:       func(block string) *gatewayEnv { return startGatewayIn(t, dir, block, "") },
			generationIDs: func(ws string) []string { return sqliteGenerationIDs(t, setup.dbPath, ws) },
		})
	})
	t.Run("postgres", func(t *testing.T) {
		dsn := postgresSchema(t)
		t.Setenv("GATEWAY_TEST_PG_DSN", dsn)
		setup := &gatewayEnv{t: t, store: openPostgres(t, dsn)}
		query := func(q string, args ...any) []string { return postgresStrings(t, dsn, q, args...) }
		testKillNine(t, crashBackend{
			storeArgs: "postgres {env.GATEWAY_TEST_PG_DSN}",
			// Without lock files, a dead instance is known by its silence.
			options: "\t\tinstance_heartbeat 100ms\n\t\tinstance_timeout 500ms\n",
			setup:   setup,
			started: func() {},
			tracesWritten: func(n int) {
				waitFor(t, fmt.Sprintf("%d in-flight rows", n), func() bool {
					return len(query(`SELECT generation_id FROM inflight`)) >= n
				})
			},
			restart: func(block string) *gatewayEnv {
				env := startPostgresGateway(t, dsn, block)
				env.store = setup.store
				return env
			},
			generationIDs: func(ws string) []string {
				return query(`SELECT id FROM generations WHERE workspace_id = $1`, ws)
			},
		})
	})
}

func testKillNine(t *testing.T, b crashBackend) {
	inFlight := make(chan string, 8)
	release := make(chan struct{})
	up := newFakeOpenAI(t, func(w http.ResponseWriter, r *http.Request, req map[string]any) {
		if req["stream"] == true {
			streamThreeAndHang(w, req["model"])
		}
		inFlight <- fmt.Sprint(req["model"])
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	defer close(release)
	gatewayBlock := b.options + `
		provider slow {
			type openai
			base_url ` + up.URL + `/v1
			api_key sk-upstream-secret
			stream_idle_timeout 60s
			retries 0
			circuit_breaker off
		}` + pricedModel("gpt-cheap", `
			route slow gpt-4o-mini {
				input 1.00
				output 2.00
				max_output_tokens 1000
			}`) + pricedModel("gpt-dear", `
			route slow gpt-4o {
				input 1.00
				output 100.00
				max_output_tokens 1000
			}`)

	reqs := []*crashedRequest{
		{name: "lease stream", stream: true, lease: true, model: "gpt-cheap"},
		{name: "lease", lease: true, model: "gpt-cheap"},
		{name: "own reservation stream", stream: true, model: "gpt-dear"},
		{name: "own reservation", model: "gpt-dear"},
	}
	const smallWallet = 13 * usd / 10 // below a lease for gpt-dear's worst case of 0.1 USD
	credits := func(rq *crashedRequest) int64 {
		if rq.lease {
			return 100 * usd
		}
		return smallWallet
	}
	for _, rq := range reqs {
		rq.team = b.setup.team(credits(rq))
	}
	b.started()

	port := freePort(t)
	child := startCrashChild(t, gatewayCaddyfileOn(port, b.storeArgs, gatewayBlock, ""))
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	clientErrs := make(chan error, len(reqs))
	for _, rq := range reqs {
		client := openai.NewClient(option.WithBaseURL(base+"/v1/"), option.WithAPIKey(rq.team.std), option.WithMaxRetries(0),
			option.WithHTTPClient(testClient))
		params := openai.ChatCompletionNewParams{Model: rq.model, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}}
		if !rq.stream {
			go func() {
				_, err := client.Chat.Completions.New(context.Background(), params)
				clientErrs <- err
			}()
			if got := <-inFlight; got != upstreamModel(rq.model) {
				t.Fatalf("%s: the upstream got %s", rq.name, got)
			}
			continue
		}
		var resp *http.Response
		stream := client.Chat.Completions.NewStreaming(context.Background(), params, option.WithResponseInto(&resp))
		for chunks := 0; chunks < 3; {
			if !stream.Next() {
				t.Fatalf("%s: the stream ended before its third chunk: %v", rq.name, stream.Err())
			}
			if len(stream.Current().Choices) > 0 && stream.Current().Choices[0].Delta.Content != "" {
				chunks++
			}
		}
		<-inFlight
		rq.genID = resp.Header.Get("X-Generation-Id")
		go func() {
			for stream.Next() {
			}
			clientErrs <- stream.Err()
			_ = stream.Close()
		}()
	}
	// Each request holds what the test means it to: a lease of at least 1 USD, or its own
	// worst case.
	running := &gatewayEnv{t: t, baseURL: base}
	for _, rq := range reqs {
		held := running.expect(http.StatusOK, http.MethodGet, rq.team.mgmt, "/credits", "")["data"].(map[string]any)["reserved_nanos"].(float64)
		if leased := held >= float64(usd); leased != rq.lease || held == 0 {
			t.Fatalf("%s: %v nanos held in flight; a lease: %v", rq.name, held, rq.lease)
		}
	}
	b.tracesWritten(2)

	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	for range reqs {
		if err := <-clientErrs; err == nil {
			t.Error("a request in flight when the gateway was killed ended without an error")
		}
	}

	env := b.restart(gatewayBlock)
	for _, rq := range reqs {
		var ids []string
		waitFor(t, rq.name+"'s record", func() bool { ids = b.generationIDs(rq.team.ws); return len(ids) > 0 })
		if len(ids) != 1 || (rq.genID != "" && ids[0] != rq.genID) {
			t.Fatalf("%s: generations %v, want one (the client was told %q)", rq.name, ids, rq.genID)
		}
		rec := env.expect(http.StatusOK, http.MethodGet, rq.team.mgmt, "/generations?id="+ids[0], "")["data"].(map[string]any)
		if rec["error_code"] != store.InterruptedCode || rec["error_origin"] != "gateway" || rec["finish_reason"] != store.InterruptedCode ||
			rec["model"] != rq.model || rec["key_id"] != kidOf(t, rq.team.std) || rec["endpoint"] == "" || rec["cost_nanos"] != float64(0) {
			t.Errorf("%s: record %v; want interrupted, origin gateway, model %s, the key, no charge", rq.name, rec, rq.model)
		}
		if b := env.balance(rq.team.ws); b.BalanceNanos != credits(rq) || b.ReservedNanos != 0 {
			t.Errorf("%s: wallet %+v; want %d and nothing held", rq.name, b, credits(rq))
		}
		act := env.expect(http.StatusOK, http.MethodGet, rq.team.mgmt, "/activity", "")
		totals := act["totals"].(map[string]any)
		rows := act["data"].([]any)
		if totals["requests"] != float64(1) || totals["cost_nanos"] != float64(0) || len(rows) != 1 || rows[0].(map[string]any)["model"] != rq.model {
			t.Errorf("%s: activity %v; want the one interrupted request of %s", rq.name, act, rq.model)
		}
	}
}

// waitFor polls cond until it holds, failing t after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10 s for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startGatewayFiles opens the database under dir, as startGatewayIn will find it, for
// setting up workspaces before any gateway runs; the caller closes env.store.
func startGatewayFiles(t *testing.T, dir string) *gatewayEnv {
	t.Helper()
	env := &gatewayEnv{t: t, dbPath: dir + "/gateway.db"}
	s, err := sqlite.Open(context.Background(), env.dbPath)
	if err != nil {
		t.Fatal(err)
	}
	env.store = s
	return env
}

// startCrashChild runs the test binary as a gateway serving cf, and returns once it serves.
func startCrashChild(t *testing.T, cf string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashedGatewayChild$", "-test.count=1")
	dir := t.TempDir()
	cmd.Env = append(os.Environ(), crashCaddyfileEnv+"="+cf, "XDG_DATA_HOME="+dir+"/data", "XDG_CONFIG_HOME="+dir+"/config")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.TrimSpace(sc.Text()) == "ready" {
				ready <- true
				break
			}
		}
		ready <- false
		for sc.Scan() {
		}
	}()
	if !<-ready {
		t.Fatal("the gateway child process ended before it served")
	}
	return cmd
}

// streamThreeAndHang writes the start of an OpenAI chat stream, three chunks of text, and
// sends nothing more: the gateway is killed in the middle of it.
func streamThreeAndHang(w http.ResponseWriter, model any) {
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	for i, text := range []string{"", "one ", "two ", "three "} {
		delta := fmt.Sprintf(`{"content":%q}`, text)
		if i == 0 {
			delta = `{"role":"assistant","content":""}`
		}
		fmt.Fprintf(w, "data: {\"id\":\"chatcmpl-up\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":%q,\"choices\":[{\"index\":0,\"delta\":%s,\"logprobs\":null,\"finish_reason\":null}]}\n\n", fmt.Sprint(model), delta)
	}
	fl.Flush()
}

func upstreamModel(model string) string {
	if model == "gpt-dear" {
		return "gpt-4o"
	}
	return "gpt-4o-mini"
}

// sqliteGenerationIDs reads the ids of a workspace's generations from the database file.
func sqliteGenerationIDs(t *testing.T, dbPath, ws string) []string {
	t.Helper()
	db, err := sql.Open("sqlite3", "file:"+dbPath+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT id FROM generations WHERE workspace_id = ?`, ws)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := scanStrings(rows)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func scanStrings(rows *sql.Rows) ([]string, error) {
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// postgresStrings runs a query of one text column on the database at dsn.
func postgresStrings(t *testing.T, dsn, query string, args ...any) []string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, query, args...)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}
