//go:build unix

package module

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/modelgateway/caddy-modelgateway/jobs/batch"

	"github.com/modelgateway/caddy-modelgateway/store"
	"github.com/modelgateway/caddy-modelgateway/store/sqlite"
)

// seenCounts counts how often the upstream was sent each row, by its content.
func seenCounts(up *batchUpstream, into map[string]int) {
	for {
		select {
		case c := <-up.seen:
			into[c]++
		default:
			return
		}
	}
}

// TestBatchResumesAfterKillNine runs a gateway-run batch in a gateway in a child process
// and kills it with SIGKILL mid-batch. The gateway restarted on the same database and blob
// store finishes the batch: every row recorded before the kill is not sent upstream again,
// each row is in the output once with its answer, and each row is charged once (a row in
// flight at the kill may run again upstream, and settles under the same generation id).
func TestBatchResumesAfterKillNine(t *testing.T) {
	up := newBatchUpstream(t)
	up.delay.Store(int64(150 * time.Millisecond))
	dir := t.TempDir()
	block := batchGatewayBlock(up.URL, "\t\tblob_store file "+filepath.Join(dir, "blobs")+"\n\t\tbatches {\n\t\t\trows_per_chunk 4\n\t\t}")
	setup := startGatewayFiles(t, dir)
	tm := setup.team(10 * usd)
	if err := setup.store.Close(); err != nil { // the child's journal is its own
		t.Fatal(err)
	}

	port := freePort(t)
	child := startCrashChild(t, gatewayCaddyfileOn(port, "sqlite "+setup.dbPath, block, ""))
	childEnv := &gatewayEnv{t: t, baseURL: fmt.Sprintf("http://127.0.0.1:%d", port)}
	client := childEnv.openai(tm.std)
	const rows = 60
	b := newBatch(t, client, uploadBatchFile(t, client, batchRows(rows)))
	seen := map[string]int{}
	waitFor(t, "twenty rows answered", func() bool { seenCounts(up, seen); return len(seen) >= 20 })
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	time.Sleep(300 * time.Millisecond) // answers the upstream was writing as the child died
	seenCounts(up, seen)

	// What the killed gateway had recorded.
	s, err := sqlite.Open(context.Background(), setup.dbPath)
	if err != nil {
		t.Fatal(err)
	}
	recorded, err := s.ListBatchRows(context.Background(), b.ID, -1, store.MaxBatchRowPage)
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	if len(recorded) == 0 || len(recorded) >= rows {
		t.Fatalf("%d rows recorded at the kill; want some, not all", len(recorded))
	}

	env := startGatewayIn(t, dir, block, "")
	client = env.openai(tm.std)
	done := waitBatch(t, client, b.ID, "completed", "failed")
	seenCounts(up, seen)
	if done.Status != openai.BatchStatusCompleted || done.RequestCounts.Completed != rows {
		t.Fatalf("after the restart: %s", done.RawJSON())
	}
	for _, r := range recorded {
		if n := seen[fmt.Sprintf("say %d", r.Index)]; n != 1 {
			t.Errorf("row %d, recorded before the kill, was sent upstream %d times", r.Index, n)
		}
	}
	lines := outputLines(t, client, done.OutputFileID)
	if len(lines) != rows {
		t.Fatalf("%d output lines", len(lines))
	}
	for i, l := range lines {
		if l.CustomID != fmt.Sprintf("row-%d", i) || answerOf(t, l) != fmt.Sprintf("answer: say %d", i) {
			t.Fatalf("line %d: %+v", i, l)
		}
	}
	sum, charged := rowCharges(t, env.store, tm.ws, b.ID, rows)
	if charged != rows || sum != rows*rowCost {
		t.Fatalf("%d rows charged %d; want each of %d charged %d once", charged, sum, rows, rowCost)
	}
	if bal := env.balance(tm.ws); bal.ReservedNanos != 0 || bal.BalanceNanos != 10*usd-sum {
		t.Fatalf("wallet %+v; want 10 USD less %d, nothing held", bal, sum)
	}
}

// TestBatchTwoInstancesOnPostgres runs two gateways on one PostgreSQL database and one
// blob store, one in a child process, sharing one batch's chunks: both run rows of it
// (their claims of its chunks are seen), every row is sent upstream once, recorded once,
// counted once and charged once, and the output has every row once.
func TestBatchTwoInstancesOnPostgres(t *testing.T) {
	dsn := postgresSchema(t)
	t.Setenv("GATEWAY_TEST_PG_DSN", dsn)
	up := newBatchUpstream(t)
	up.delay.Store(int64(40 * time.Millisecond))
	dir := t.TempDir()
	block := batchGatewayBlock(up.URL, "\t\tblob_store file "+filepath.Join(dir, "blobs")+
		"\n\t\tinstance_heartbeat 100ms\n\t\tinstance_timeout 2s\n\t\tbatches {\n\t\t\tchunks 2\n\t\t\tchunk_rows 64\n\t\t\trows_per_chunk 4\n\t\t\tbatch_chunks 4\n\t\t}")
	s := openPostgres(t, dsn)
	startCrashChild(t, gatewayCaddyfileOn(freePort(t), "postgres {env.GATEWAY_TEST_PG_DSN}", block, ""))
	env := startPostgresGateway(t, dsn, block)
	env.store = s
	tm := env.team(10 * usd)
	client := env.openai(tm.std)

	owners := sampleClaimOwners(t, dsn, `SELECT DISTINCT owner FROM queue_items WHERE queue = $1 AND owner <> ''`, batch.RowQueue)

	const rows = 400
	b := newBatch(t, client, uploadBatchFile(t, client, batchRows(rows)))
	done := waitBatch(t, client, b.ID, "completed", "failed")
	if held := owners(); len(held) < 2 {
		t.Fatalf("chunks were claimed by %v: the other instance took no part", held)
	}
	seen := map[string]int{}
	seenCounts(up, seen)
	for i := range rows {
		if n := seen[fmt.Sprintf("say %d", i)]; n != 1 {
			t.Errorf("row %d was sent upstream %d times", i, n)
		}
	}
	if done.Status != openai.BatchStatusCompleted || done.RequestCounts.Completed != rows || done.RequestCounts.Total != rows {
		t.Fatalf("done: %s", done.RawJSON())
	}
	lines := outputLines(t, client, done.OutputFileID)
	if len(lines) != rows {
		t.Fatalf("%d output lines", len(lines))
	}
	for i, l := range lines {
		if l.CustomID != fmt.Sprintf("row-%d", i) || answerOf(t, l) != fmt.Sprintf("answer: say %d", i) {
			t.Fatalf("line %d: %+v", i, l)
		}
	}
	sum, charged := rowCharges(t, s, tm.ws, b.ID, rows)
	if charged != rows || sum != rows*rowCost {
		t.Fatalf("%d rows charged %d", charged, sum)
	}
	if bal := env.balance(tm.ws); bal.ReservedNanos != 0 || bal.BalanceNanos != 10*usd-sum {
		t.Fatalf("wallet %+v", bal)
	}
}
