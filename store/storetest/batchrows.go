package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/store"
	"github.com/modelgateway/caddy-modelgateway/store/internal/migrate"
)

// testBatchRows checks the batch rows role: a row is recorded once (a second record of
// its index, even a different one, changes nothing and says so), even when many writers
// race for it; done indexes, counts and the ordered scan see exactly what was recorded;
// batches do not see each other's rows; deletion removes a batch's rows only.
func testBatchRows(t *testing.T, s store.Store, c *Clock) {
	ctx := context.Background()
	row := func(batch string, i, status int, cost int64) store.BatchRow {
		r := store.BatchRow{BatchID: batch, Index: i, CustomID: fmt.Sprintf("req-%d", i), StatusCode: status,
			RequestID: fmt.Sprintf("gen_%s_%d", batch, i), CostNanos: cost}
		if status == 0 {
			r.ErrorCode, r.ErrorMessage = "batch_expired", "the row was not run"
		} else {
			r.Body = json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))
		}
		return r
	}
	first := row("batch_a", 3, 200, 7)
	ok, err := s.RecordBatchRow(ctx, first)
	if err != nil || !ok {
		t.Fatalf("RecordBatchRow: %v, %v", ok, err)
	}
	again := row("batch_a", 3, 500, 99)
	if ok, err := s.RecordBatchRow(ctx, again); err != nil || ok {
		t.Fatalf("recording row 3 again: %v, %v; want false, nil", ok, err)
	}
	for _, r := range []store.BatchRow{row("batch_a", 0, 200, 5), row("batch_a", 1, 429, 0), row("batch_a", 7, 0, 0), row("batch_b", 0, 200, 1000)} {
		if ok, err := s.RecordBatchRow(ctx, r); err != nil || !ok {
			t.Fatalf("RecordBatchRow %d of %s: %v, %v", r.Index, r.BatchID, ok, err)
		}
	}
	done, err := s.BatchRowsDone(ctx, "batch_a", 1, 7)
	if err != nil || !reflect.DeepEqual(done, []int{1, 3}) {
		t.Fatalf("BatchRowsDone [1,7): %v, %v", done, err)
	}
	counts, err := s.CountBatchRows(ctx, "batch_a")
	want := store.BatchRowCounts{Done: 4, Completed: 2, Failed: 2, CostNanos: 12}
	if err != nil || counts != want {
		t.Fatalf("CountBatchRows: %+v, %v; want %+v", counts, err, want)
	}
	if counts, err := s.CountBatchRows(ctx, "batch_none"); err != nil || counts != (store.BatchRowCounts{}) {
		t.Fatalf("CountBatchRows of no rows: %+v, %v", counts, err)
	}
	page, err := s.ListBatchRows(ctx, "batch_a", -1, 2)
	if err != nil || len(page) != 2 || page[0].Index != 0 || page[1].Index != 1 {
		t.Fatalf("ListBatchRows first page: %+v, %v", page, err)
	}
	page, err = s.ListBatchRows(ctx, "batch_a", 1, 10)
	if err != nil || len(page) != 2 {
		t.Fatalf("ListBatchRows after 1: %+v, %v", page, err)
	}
	wantFirst := first
	wantFirst.CreatedAt = c.Now()
	if !reflect.DeepEqual(page[0], wantFirst) {
		t.Fatalf("row 3 read back:\n got %+v\nwant %+v (the first record)", page[0], wantFirst)
	}
	if page[1].Index != 7 || page[1].Body != nil || page[1].ErrorCode != "batch_expired" || page[1].Succeeded() {
		t.Fatalf("row 7 read back: %+v", page[1])
	}

	// Writers racing for the same rows record each once.
	var wg sync.WaitGroup
	var recorded atomic.Int64
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				ok, err := s.RecordBatchRow(ctx, row("batch_race", i, 200, 1))
				if err != nil {
					t.Errorf("RecordBatchRow in a race: %v", err)
					return
				}
				if ok {
					recorded.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if n := recorded.Load(); n != 20 {
		t.Fatalf("racing writers recorded %d rows, want 20", n)
	}
	if counts, err := s.CountBatchRows(ctx, "batch_race"); err != nil || counts.Done != 20 || counts.CostNanos != 20 {
		t.Fatalf("counts after the race: %+v, %v", counts, err)
	}

	if at, err := s.BatchCancelRequested(ctx, "batch_a"); err != nil || !at.IsZero() {
		t.Fatalf("BatchCancelRequested before any: %v, %v", at, err)
	}
	asked := c.Now()
	if at, err := s.RequestBatchCancel(ctx, "batch_a"); err != nil || !at.Equal(asked) {
		t.Fatalf("RequestBatchCancel: %v, %v; want %v", at, err, asked)
	}
	c.Set(asked.Add(time.Minute))
	if at, err := s.RequestBatchCancel(ctx, "batch_a"); err != nil || !at.Equal(asked) {
		t.Fatalf("RequestBatchCancel again: %v, %v; want the first time, %v", at, err, asked)
	}
	if at, err := s.BatchCancelRequested(ctx, "batch_a"); err != nil || !at.Equal(asked) {
		t.Fatalf("BatchCancelRequested: %v, %v; want %v", at, err, asked)
	}
	if at, err := s.BatchCancelRequested(ctx, "batch_b"); err != nil || !at.IsZero() {
		t.Fatalf("BatchCancelRequested of another batch: %v, %v", at, err)
	}

	if err := s.DeleteBatchRows(ctx, "batch_a"); err != nil {
		t.Fatalf("DeleteBatchRows: %v", err)
	}
	if counts, err := s.CountBatchRows(ctx, "batch_a"); err != nil || counts.Done != 0 {
		t.Fatalf("after DeleteBatchRows: %+v, %v", counts, err)
	}
	if counts, err := s.CountBatchRows(ctx, "batch_b"); err != nil || counts.Done != 1 {
		t.Fatalf("another batch after DeleteBatchRows: %+v, %v", counts, err)
	}
	if _, err := s.RecordBatchRow(ctx, store.BatchRow{BatchID: "batch_a", Index: -1}); err == nil {
		t.Fatal("a negative index was recorded")
	}
}

// testBatchRowsGathered holds RecordBatchRows to RecordBatchRow: the same rows, with
// repeats within the call and of rows recorded before it, recorded in one call on one
// batch and one by one on another, leave the same records, counts and number recorded
// anew; a call with a row that does not check records none of its rows.
func testBatchRowsGathered(t *testing.T, s store.Store, c *Clock) {
	ctx := context.Background()
	row := func(batch string, i, status int, cost int64) store.BatchRow {
		r := store.BatchRow{BatchID: batch, Index: i, CustomID: fmt.Sprintf("req-%d", i), StatusCode: status,
			RequestID: fmt.Sprintf("gen_%d", i), CostNanos: cost}
		if status == 0 {
			r.ErrorCode, r.ErrorMessage = "row_failed", "no answer"
		} else {
			r.Body = json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))
		}
		return r
	}
	rowsOf := func(batch string) (before, rows []store.BatchRow) {
		before = []store.BatchRow{row(batch, 4, 200, 40)}
		rows = []store.BatchRow{row(batch, 0, 200, 1), row(batch, 2, 500, 0), row(batch, 4, 429, 99),
			row(batch, 1, 0, 0), row(batch, 2, 200, 77), row(batch, 9, 200, 9)}
		return before, rows
	}
	read := func(batch string) ([]store.BatchRow, store.BatchRowCounts) {
		rows, err := s.ListBatchRows(ctx, batch, -1, store.MaxBatchRowPage)
		if err != nil {
			t.Fatalf("ListBatchRows of %s: %v", batch, err)
		}
		for i := range rows {
			rows[i].BatchID = ""
		}
		counts, err := s.CountBatchRows(ctx, batch)
		if err != nil {
			t.Fatalf("CountBatchRows of %s: %v", batch, err)
		}
		return rows, counts
	}

	before, rows := rowsOf("batch_plain")
	plain := 0
	for _, r := range append(before, rows...) {
		ok, err := s.RecordBatchRow(ctx, r)
		if err != nil {
			t.Fatalf("RecordBatchRow: %v", err)
		}
		if ok {
			plain++
		}
	}
	plain -= len(before)

	before, rows = rowsOf("batch_gathered")
	if _, err := s.RecordBatchRows(ctx, before); err != nil {
		t.Fatalf("RecordBatchRows before: %v", err)
	}
	gathered, err := s.RecordBatchRows(ctx, rows)
	if err != nil {
		t.Fatalf("RecordBatchRows: %v", err)
	}
	if gathered != plain || plain != 4 {
		t.Fatalf("RecordBatchRows recorded %d anew, one by one %d; want 4 both", gathered, plain)
	}
	wantRows, wantCounts := read("batch_plain")
	gotRows, gotCounts := read("batch_gathered")
	if !reflect.DeepEqual(gotRows, wantRows) || gotCounts != wantCounts {
		t.Fatalf("gathered rows:\n got %+v %+v\nwant %+v %+v (one by one)", gotRows, gotCounts, wantRows, wantCounts)
	}

	bad := []store.BatchRow{row("batch_gathered", 20, 200, 1), {BatchID: "batch_gathered", Index: -1}}
	if _, err := s.RecordBatchRows(ctx, bad); err == nil {
		t.Fatal("RecordBatchRows took a row with a negative index")
	}
	if done, err := s.BatchRowsDone(ctx, "batch_gathered", 20, 21); err != nil || len(done) != 0 {
		t.Fatalf("a row of a refused RecordBatchRows was recorded: %v, %v", done, err)
	}
	if n, err := s.RecordBatchRows(ctx, nil); n != 0 || err != nil {
		t.Fatalf("RecordBatchRows of none: %d, %v", n, err)
	}
}

// sumBatchRows counts a batch's rows and sums their costs from the rows themselves, a
// page at a time: what its counts must say.
func sumBatchRows(t *testing.T, s store.BatchRows, batchID string) store.BatchRowCounts {
	t.Helper()
	var c store.BatchRowCounts
	after := -1
	for {
		page, err := s.ListBatchRows(context.Background(), batchID, after, store.MaxBatchRowPage)
		if err != nil {
			t.Fatalf("ListBatchRows of %s: %v", batchID, err)
		}
		for _, r := range page {
			addCount(&c, r)
		}
		if len(page) < store.MaxBatchRowPage {
			return c
		}
		after = page[len(page)-1].Index
	}
}

// CheckBatchRowCounts fails t unless each batch's counts are what its rows add up to.
// Backends' own tests call it too (after a write they make fail, after an upgrade).
func CheckBatchRowCounts(t *testing.T, s store.BatchRows, what string, batchIDs ...string) {
	t.Helper()
	for _, id := range batchIDs {
		got, err := s.CountBatchRows(context.Background(), id)
		if want := sumBatchRows(t, s, id); err != nil || got != want {
			t.Fatalf("%s: counts of %s = %+v, %v; the rows add up to %+v", what, id, got, err, want)
		}
	}
}

// testBatchRowCounts holds the counts to the rows they count: after a long run of
// RecordBatchRow and RecordBatchRows calls, over several batches at once, repeating rows
// within a call and of earlier calls (a call of repeats only among them), each batch's
// counts are its rows' count and sums, and each call said how many it recorded anew; a
// deletion of a batch larger than a deletion page leaves it no row, no counts and no
// cancellation, and the other batches as they were.
func testBatchRowCounts(t *testing.T, s store.Store, c *Clock) {
	ctx := context.Background()
	batches := []string{"batch_c0", "batch_c1", "batch_c2"}
	rng := rand.New(rand.NewPCG(15, 2026))
	row := func() store.BatchRow {
		r := store.BatchRow{BatchID: batches[rng.IntN(len(batches))], Index: rng.IntN(60), CustomID: "req",
			StatusCode: []int{0, 200, 201, 299, 300, 429, 500}[rng.IntN(7)], CostNanos: rng.Int64N(1_000_000)}
		if r.StatusCode == 0 {
			r.ErrorCode, r.ErrorMessage = "row_failed", "no answer"
		}
		return r
	}
	recorded := map[string]map[int]bool{}
	fresh := func(rows []store.BatchRow) int {
		n := 0
		for _, r := range rows {
			if recorded[r.BatchID] == nil {
				recorded[r.BatchID] = map[int]bool{}
			}
			if !recorded[r.BatchID][r.Index] {
				recorded[r.BatchID][r.Index] = true
				n++
			}
		}
		return n
	}
	for step := range 200 {
		if step%3 == 0 {
			r := row()
			want := fresh([]store.BatchRow{r}) == 1
			if ok, err := s.RecordBatchRow(ctx, r); err != nil || ok != want {
				t.Fatalf("step %d: RecordBatchRow %d of %s = %v, %v; want %v", step, r.Index, r.BatchID, ok, err, want)
			}
		} else {
			rows := make([]store.BatchRow, 1+rng.IntN(8))
			for i := range rows {
				rows[i] = row()
			}
			if step%7 == 0 {
				rows = append(rows, rows[0]) // a repeat within the call
			}
			want := fresh(rows)
			if n, err := s.RecordBatchRows(ctx, rows); err != nil || n != want {
				t.Fatalf("step %d: RecordBatchRows of %d rows = %d, %v; want %d anew", step, len(rows), n, err, want)
			}
		}
		CheckBatchRowCounts(t, s, fmt.Sprintf("step %d", step), batches...)
	}
	for _, b := range batches {
		if len(recorded[b]) < 30 {
			t.Fatalf("batch %s got only %d rows: the run checked little", b, len(recorded[b]))
		}
	}
	before := map[string]store.BatchRowCounts{}
	var repeats []store.BatchRow
	for _, b := range batches {
		before[b], _ = s.CountBatchRows(ctx, b)
		for i := range recorded[b] {
			repeats = append(repeats, store.BatchRow{BatchID: b, Index: i, StatusCode: 200, CostNanos: 5})
		}
	}
	if n, err := s.RecordBatchRows(ctx, repeats); err != nil || n != 0 {
		t.Fatalf("RecordBatchRows of repeats only = %d, %v; want 0", n, err)
	}
	for _, b := range batches {
		if got, err := s.CountBatchRows(ctx, b); err != nil || got != before[b] {
			t.Fatalf("counts of %s after repeats only = %+v, %v; want %+v as before", b, got, err, before[b])
		}
	}

	// A batch of more rows than a deletion page, cancelled.
	large := make([]store.BatchRow, store.BatchRowDeletePage*2+17)
	for i := range large {
		large[i] = store.BatchRow{BatchID: "batch_large", Index: i, CustomID: "req", StatusCode: 200 + i%2*300, CostNanos: int64(i)}
	}
	for from := 0; from < len(large); from += 500 {
		if _, err := s.RecordBatchRows(ctx, large[from:min(from+500, len(large))]); err != nil {
			t.Fatalf("RecordBatchRows of the large batch: %v", err)
		}
	}
	n := len(large)
	want := store.BatchRowCounts{Done: n, Completed: (n + 1) / 2, Failed: n / 2, CostNanos: int64(n * (n - 1) / 2)}
	if got, err := s.CountBatchRows(ctx, "batch_large"); err != nil || got != want {
		t.Fatalf("counts of the large batch = %+v, %v; want %+v", got, err, want)
	}
	if _, err := s.RequestBatchCancel(ctx, "batch_large"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteBatchRows(ctx, "batch_large"); err != nil {
		t.Fatalf("DeleteBatchRows of the large batch: %v", err)
	}
	if rows, err := s.ListBatchRows(ctx, "batch_large", -1, store.MaxBatchRowPage); err != nil || len(rows) != 0 {
		t.Fatalf("the large batch's rows after DeleteBatchRows: %d, %v", len(rows), err)
	}
	if got, err := s.CountBatchRows(ctx, "batch_large"); err != nil || got != (store.BatchRowCounts{}) {
		t.Fatalf("the large batch's counts after DeleteBatchRows: %+v, %v", got, err)
	}
	if at, err := s.BatchCancelRequested(ctx, "batch_large"); err != nil || !at.IsZero() {
		t.Fatalf("the large batch's cancellation after DeleteBatchRows: %v, %v", at, err)
	}
	CheckBatchRowCounts(t, s, "the others after a deletion", batches...)
	for _, b := range batches {
		if got, _ := s.CountBatchRows(ctx, b); got != before[b] {
			t.Fatalf("counts of %s after another's deletion = %+v; want %+v", b, got, before[b])
		}
	}
	// Recorded again after its deletion, a batch counts from nothing.
	if _, err := s.RecordBatchRows(ctx, large[:3]); err != nil {
		t.Fatal(err)
	}
	CheckBatchRowCounts(t, s, "a batch recorded again after its deletion", "batch_large")
}

// testEndedBatchesWithRows: the batches listed are those whose job ended before the time
// asked and that still have rows or a cancellation, those that ended first first, a page
// at a time; a live batch, one that ended since, one with nothing recorded, a job of
// another kind and a batch deleted are not.
func testEndedBatchesWithRows(t *testing.T, s store.Store, c *Clock) {
	ctx := context.Background()
	ws := newWorkspace(t, s, 0)
	t0 := c.Now()
	job := func(id, kind string, ended time.Duration) {
		j := testJob(ws, id, t0.Add(-time.Hour))
		j.Kind, j.Status = kind, "completed"
		if ended < 0 {
			j.Status = "in_progress"
		} else {
			j.CompletedAt = t0.Add(-ended)
		}
		createJob(t, s, j, time.Time{})
	}
	rowOf := func(id string) {
		if _, err := s.RecordBatchRow(ctx, store.BatchRow{BatchID: id, Index: 0, StatusCode: 200, CostNanos: 1}); err != nil {
			t.Fatal(err)
		}
	}
	job("batch_live", store.JobBatch, -1)
	rowOf("batch_live")
	job("batch_old", store.JobBatch, 3*time.Minute)
	rowOf("batch_old")
	job("batch_older", store.JobBatch, 5*time.Minute)
	rowOf("batch_older")
	job("batch_cancelled", store.JobBatch, 2*time.Minute)
	if _, err := s.RequestBatchCancel(ctx, "batch_cancelled"); err != nil {
		t.Fatal(err)
	}
	job("batch_recent", store.JobBatch, 10*time.Second)
	rowOf("batch_recent")
	job("batch_empty", store.JobBatch, 10*time.Minute)
	job("video_rows", store.JobVideo, 10*time.Minute)
	rowOf("video_rows")

	list := func(before time.Time, limit int) []string {
		t.Helper()
		ids, err := s.EndedBatchesWithRows(ctx, before, limit)
		if err != nil {
			t.Fatalf("EndedBatchesWithRows: %v", err)
		}
		return ids
	}
	graceEnd := t0.Add(-time.Minute)
	if got, want := list(graceEnd, 10), []string{"batch_older", "batch_old", "batch_cancelled"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("ended over a minute ago: %v; want %v", got, want)
	}
	if got, want := list(graceEnd, 2), []string{"batch_older", "batch_old"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("a page of 2: %v; want %v", got, want)
	}
	if got, want := list(t0.Add(-4*time.Minute), 10), []string{"batch_older"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("ended over 4 minutes ago: %v; want %v", got, want)
	}
	if got := list(t0.Add(time.Second), 10); len(got) != 4 || got[3] != "batch_recent" {
		t.Fatalf("ended before now: %v; want the 4 ended batches with rows, the recent one last", got)
	}
	for _, id := range []string{"batch_older", "batch_cancelled"} {
		if err := s.DeleteBatchRows(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := list(graceEnd, 10), []string{"batch_old"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("after two deletions: %v; want %v", got, want)
	}
}

// RefusedBatchRow is the index of the rows a backend's test makes its database refuse
// (CheckFailedBatchRowWrite).
const RefusedBatchRow = 99

// CheckFailedBatchRowWrite holds a write that fails halfway to all or none: refuse makes
// the backend's database fail the insert of any row of index RefusedBatchRow (a trigger),
// after the write's other rows went in; RecordBatchRows and RecordBatchRow that reach
// such a row fail and leave neither rows nor counts, and once allow lifts it, the same
// rows are recorded and counted once.
func CheckFailedBatchRowWrite(t *testing.T, s store.BatchRows, refuse, allow func()) {
	t.Helper()
	ctx := context.Background()
	const batchID = "batch_refused"
	row := func(i, status int) store.BatchRow {
		return store.BatchRow{BatchID: batchID, Index: i, CustomID: "req", StatusCode: status, CostNanos: int64(1000 + i)}
	}
	if n, err := s.RecordBatchRows(ctx, []store.BatchRow{row(0, 200), row(1, 500)}); err != nil || n != 2 {
		t.Fatalf("RecordBatchRows before: %d, %v", n, err)
	}
	before, err := s.CountBatchRows(ctx, batchID)
	if err != nil || before.Done != 2 {
		t.Fatalf("counts before: %+v, %v", before, err)
	}
	refuse()
	failing := []store.BatchRow{row(2, 200), row(0, 200), row(3, 0), row(RefusedBatchRow, 200), row(4, 200)}
	if n, err := s.RecordBatchRows(ctx, failing); err == nil {
		t.Fatalf("RecordBatchRows through a refused row recorded %d and no error", n)
	}
	if _, err := s.RecordBatchRow(ctx, row(RefusedBatchRow, 200)); err == nil {
		t.Fatal("RecordBatchRow of a refused row: no error")
	}
	if got, err := s.CountBatchRows(ctx, batchID); err != nil || got != before {
		t.Fatalf("counts after the failed writes: %+v, %v; want %+v as before", got, err, before)
	}
	CheckBatchRowCounts(t, s, "after the failed writes", batchID)
	allow()
	if n, err := s.RecordBatchRows(ctx, failing); err != nil || n != 4 {
		t.Fatalf("RecordBatchRows once allowed: %d, %v; want 4 anew", n, err)
	}
	want := before
	for _, r := range []store.BatchRow{failing[0], failing[2], failing[3], failing[4]} { // row 0 was recorded before
		addCount(&want, r)
	}
	if got, err := s.CountBatchRows(ctx, batchID); err != nil || got != want {
		t.Fatalf("counts once allowed: %+v, %v; want %+v", got, err, want)
	}
	CheckBatchRowCounts(t, s, "once allowed", batchID)
}

// MigrationsUpTo returns a backend's migrations (files, its embedded files, holds them in
// folder migrations) up to version, for a test that builds a schema as that version left
// it.
func MigrationsUpTo(t *testing.T, files fs.FS, version int) []migrate.Migration {
	t.Helper()
	sub, err := fs.Sub(files, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	migrations, err := migrate.Load(sub)
	if err != nil || len(migrations) < version {
		t.Fatalf("loading the migrations: %d, %v; want at least %d", len(migrations), err, version)
	}
	return migrations[:version]
}

// BatchRowsBeforeCounts are the rows a backend's upgrade test records before migration
// 15 (the batches' counts), as the VALUES of an INSERT into batch_rows with the columns
// in order, created_at the backend's own time expression (its one argument, %[1]s).
const BatchRowsBeforeCounts = `('batch_a', 0, 'r0', 200, 'g0', '{}', '', '', 1500, %[1]s),
	('batch_a', 1, 'r1', 500, 'g1', '{}', '', '', 20, %[1]s),
	('batch_a', 2, 'r2', 0, '', NULL, 'batch_expired', 'not run', 0, %[1]s),
	('batch_a', 7, 'r7', 201, 'g7', '{}', '', '', 3000000000, %[1]s),
	('batch_b', 0, 'r0', 200, 'g0', '{}', '', '', 9, %[1]s)`

// CheckUpgradedBatchRowCounts checks the counts of the batches of BatchRowsBeforeCounts
// after the upgrade: they are what the rows add up to, and rows recorded after the
// upgrade add to them.
func CheckUpgradedBatchRowCounts(t *testing.T, s store.BatchRows) {
	t.Helper()
	ctx := context.Background()
	want := map[string]store.BatchRowCounts{
		"batch_a": {Done: 4, Completed: 2, Failed: 2, CostNanos: 3_000_001_520},
		"batch_b": {Done: 1, Completed: 1, CostNanos: 9},
		"batch_c": {},
	}
	for id, w := range want {
		if got, err := s.CountBatchRows(ctx, id); err != nil || got != w {
			t.Fatalf("counts of %s after the upgrade: %+v, %v; want %+v", id, got, err, w)
		}
	}
	rows := []store.BatchRow{{BatchID: "batch_a", Index: 1, StatusCode: 200}, {BatchID: "batch_a", Index: 3, StatusCode: 200, CostNanos: 5}}
	if n, err := s.RecordBatchRows(ctx, rows); err != nil || n != 1 {
		t.Fatalf("RecordBatchRows after the upgrade: %d, %v; want 1 anew", n, err)
	}
	CheckBatchRowCounts(t, s, "after the upgrade", "batch_a", "batch_b")
}

// plainBatchRowWrites are writes of batch_rows as a gateway of before migration 15 makes
// them, beside the store (a row at a time, ON CONFLICT DO NOTHING), and as a person or a
// tool might (several rows in one statement, an update, a deletion), for
// CheckPlainBatchRowWrites; %[1]s, where there is one, is the backend's time expression.
var plainBatchRowWrites = []string{
	`INSERT INTO batch_rows (` + batchRowColumns + `) VALUES ('batch_p', 0, 'r0', 200, 'g0', '{}', '', '', 1500, %[1]s)
		ON CONFLICT (batch_id, idx) DO NOTHING`,
	`INSERT INTO batch_rows (` + batchRowColumns + `) VALUES ('batch_p', 0, 'r0', 500, 'g0', '{}', '', '', 99, %[1]s)
		ON CONFLICT (batch_id, idx) DO NOTHING`,
	`INSERT INTO batch_rows (` + batchRowColumns + `) VALUES ('batch_p', 1, 'r1', 500, 'g1', '{}', '', '', 20, %[1]s),
		('batch_p', 2, 'r2', 0, '', NULL, 'batch_expired', 'not run', 0, %[1]s),
		('batch_p', 3, 'r3', 201, 'g3', '{}', '', '', 3000000000, %[1]s),
		('batch_q', 0, 'r0', 299, 'g0', '{}', '', '', 9, %[1]s)`,
	`UPDATE batch_rows SET status_code = 200, cost_nanos = 7 WHERE batch_id = 'batch_p' AND idx = 2`,
	`DELETE FROM batch_rows WHERE batch_id = 'batch_p' AND idx = 1`,
}

// batchRowColumns are batch_rows's columns in the order of plainBatchRowWrites's values.
const batchRowColumns = `batch_id, idx, custom_id, status_code, request_id, body, error_code, error_message, cost_nanos, created_at`

// CheckPlainBatchRowWrites holds the counts to the rows whoever writes them: exec runs
// each of plainBatchRowWrites (made with the backend's time expression) on the store's
// database through a connection of its own, not through s, as an instance not yet
// upgraded would; the counts are then what the rows add up to, a row skipped as already
// recorded counted nowhere, and rows the store records afterwards add to them.
func CheckPlainBatchRowWrites(t *testing.T, s store.BatchRows, exec func(stmt string), now string) {
	t.Helper()
	ctx := context.Background()
	for _, q := range plainBatchRowWrites {
		if strings.Contains(q, "%[1]s") {
			q = fmt.Sprintf(q, now)
		}
		exec(q)
	}
	want := map[string]store.BatchRowCounts{
		"batch_p": {Done: 3, Completed: 3, CostNanos: 3_000_001_507},
		"batch_q": {Done: 1, Completed: 1, CostNanos: 9},
	}
	for id, w := range want {
		if got, err := s.CountBatchRows(ctx, id); err != nil || got != w {
			t.Fatalf("counts of %s after plain writes: %+v, %v; want %+v", id, got, err, w)
		}
	}
	CheckBatchRowCounts(t, s, "after plain writes", "batch_p", "batch_q")
	rows := []store.BatchRow{{BatchID: "batch_p", Index: 0, StatusCode: 500, CostNanos: 1}, {BatchID: "batch_p", Index: 1, StatusCode: 404, CostNanos: 5}}
	if n, err := s.RecordBatchRows(ctx, rows); err != nil || n != 1 {
		t.Fatalf("RecordBatchRows after plain writes: %d, %v; want 1 anew", n, err)
	}
	CheckBatchRowCounts(t, s, "the store's writes after plain writes", "batch_p", "batch_q")
	if err := s.DeleteBatchRows(ctx, "batch_p"); err != nil {
		t.Fatal(err)
	}
	CheckBatchRowCounts(t, s, "after DeleteBatchRows", "batch_p", "batch_q")
	exec(fmt.Sprintf(plainBatchRowWrites[0], now))
	CheckBatchRowCounts(t, s, "a plain write after DeleteBatchRows", "batch_p")
}

// testBatchRowCountsRace holds the counts to the rows while writers record rows of a
// batch and its deletion runs at the same time, again and again: once all are done, the
// counts are what the rows left add up to (none lost to, or counted twice by, a deletion
// page between a write's rows and its counts).
func testBatchRowCountsRace(t *testing.T, s store.Store) {
	ctx := context.Background()
	const batchID = "batch_raced"
	var wg sync.WaitGroup
	var writing atomic.Int32
	for w := range 4 {
		writing.Add(1)
		wg.Go(func() {
			defer writing.Add(-1)
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for range 40 {
				rows := make([]store.BatchRow, 50)
				for i := range rows {
					rows[i] = store.BatchRow{BatchID: batchID, Index: rng.IntN(3000), CustomID: "req",
						StatusCode: []int{200, 500}[rng.IntN(2)], CostNanos: rng.Int64N(1000)}
				}
				// In index order, as a chunk's rows are: writers taking rows in another
				// order would wait for each other (PostgreSQL breaks the deadlock).
				slices.SortFunc(rows, func(a, b store.BatchRow) int { return a.Index - b.Index })
				if _, err := s.RecordBatchRows(ctx, rows); err != nil {
					t.Errorf("RecordBatchRows: %v", err)
					return
				}
			}
		})
	}
	deletions := 0
	wg.Go(func() {
		for writing.Load() > 0 {
			if err := s.DeleteBatchRows(ctx, batchID); err != nil {
				t.Errorf("DeleteBatchRows: %v", err)
				return
			}
			deletions++
		}
	})
	wg.Wait()
	if deletions < 2 {
		t.Logf("only %d deletions ran beside the writers", deletions)
	}
	CheckBatchRowCounts(t, s, "after writers and deletions raced", batchID)
	if err := s.DeleteBatchRows(ctx, batchID); err != nil {
		t.Fatal(err)
	}
	if got, err := s.CountBatchRows(ctx, batchID); err != nil || got != (store.BatchRowCounts{}) {
		t.Fatalf("counts after the last deletion: %+v, %v", got, err)
	}
}

// BenchRecordBatchRows records a batch's rows in s in writes of 100 new rows, as a
// batch's chunks do; ns/row is one row's share of a write.
func BenchRecordBatchRows(b *testing.B, s store.BatchRows) {
	ctx := context.Background()
	const perWrite = 100
	rows := make([]store.BatchRow, perWrite)
	next := 0
	for b.Loop() {
		for i := range rows {
			rows[i] = store.BatchRow{BatchID: "batch_bench", Index: next, CustomID: "req", StatusCode: 200, RequestID: "gen",
				Body: []byte(`{"id":"chatcmpl","choices":[{"message":{"content":"an answer of some length"}}]}`), CostNanos: 25}
			next++
		}
		if n, err := s.RecordBatchRows(ctx, rows); err != nil || n != perWrite {
			b.Fatal(n, err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*perWrite), "ns/row")
}

// addCount counts row r in c, as the counts the store keeps would: the sum of the rows
// the conformance tests compare CountBatchRows with.
func addCount(c *store.BatchRowCounts, r store.BatchRow) {
	c.Done++
	if r.Succeeded() {
		c.Completed++
	} else {
		c.Failed++
	}
	c.CostNanos += r.CostNanos
}
