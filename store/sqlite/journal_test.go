package sqlite

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/store"
)

// leaseFixture is a workspace with one lease reservation that a first, synchronous
// SettleLease has made known to the store, so that the next ones may be journaled.
func leaseFixture(t *testing.T, s *Store, ws, res string, hold int64) {
	t.Helper()
	ctx := context.Background()
	fundedWorkspace(t, s, ws, 100*usd)
	if _, err := s.Reserve(ctx, store.ReserveParams{ID: res, WorkspaceID: ws, AmountNanos: hold, ExpiresAt: hour()}); err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	if _, err := s.SettleLease(ctx, store.SettleLeaseParams{ReservationID: res, HeldNanos: usd, Generation: &store.Generation{
		ID: "gen_first", WorkspaceID: ws, KeyID: "key_1", CostNanos: usd / 2,
	}}); err != nil {
		t.Fatalf("first SettleLease: %v", err)
	}
}

func leaseSettle(ctx context.Context, s *Store, ws, res string, i int, release bool) (store.Generation, error) {
	return s.SettleLease(ctx, store.SettleLeaseParams{ReservationID: res, HeldNanos: usd, Release: release, Generation: &store.Generation{
		ID: fmt.Sprintf("gen_%03d", i), WorkspaceID: ws, KeyID: "key_1", Model: "m", Status: 200,
		CostNanos: usd / 10, CostLines: []store.CostLine{{Dimension: "output", Quantity: 10, UnitPriceNanos: 1, Nanos: usd / 10}},
	}})
}

// TestJournaledSettlementsDoNotWait holds the writer inside a transaction: settlements of
// a known lease still return at once (they are journaled, not committed), reads wait until
// they are applied, and then the database holds exactly what the callers were told.
func TestJournaledSettlementsDoNotWait(t *testing.T) {
	s := openTemp(t, filepath.Join(t.TempDir(), "gateway.db"))
	ctx := context.Background()
	leaseFixture(t, s, "ws_1", "res_1", 10*usd)

	p := holdWriter(t, s)
	const n = 20
	for i := range n {
		done := make(chan error, 1)
		go func() {
			g, err := leaseSettle(ctx, s, "ws_1", "res_1", i, i == n-1)
			if err == nil && (g.CostNanos != usd/10 || g.UnbilledNanos != 0) {
				err = fmt.Errorf("charged %d, unbilled %d", g.CostNanos, g.UnbilledNanos)
			}
			done <- err
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("SettleLease %d: %v", i, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("SettleLease %d waited for the held writer: it was not journaled", i)
		}
	}
	if got := s.pending.Load(); got != n {
		t.Fatalf("%d settlements pending, want %d", got, n)
	}
	// The release is acknowledged: the reservation is no longer one to journal for.
	if s.known.has("res_1", "ws_1") {
		t.Error("a released lease is still known")
	}
	read := make(chan store.Balance, 1)
	go func() {
		b, err := s.GetBalance(ctx, "ws_1")
		if err != nil {
			t.Errorf("GetBalance: %v", err)
		}
		read <- b
	}()
	select {
	case b := <-read:
		t.Fatalf("GetBalance answered %+v before the journaled settlements were applied", b)
	case <-time.After(100 * time.Millisecond):
	}
	p.release()
	b := <-read
	want := 100*usd - usd/2 - n*usd/10
	if b.BalanceNanos != want || b.ReservedNanos != 0 {
		t.Fatalf("balance %d reserved %d, want %d and 0 (the lease released)", b.BalanceNanos, b.ReservedNanos, want)
	}
	for i := range n {
		g, err := s.GetGeneration(ctx, "ws_1", fmt.Sprintf("gen_%03d", i))
		if err != nil || g.CostNanos != usd/10 || len(g.CostLines) != 1 {
			t.Fatalf("generation %d: %+v, %v", i, g, err)
		}
	}
	if got := s.pending.Load(); got != 0 {
		t.Errorf("%d settlements still pending", got)
	}
	// A settlement of the released lease is refused, as without the journal.
	if _, err := leaseSettle(ctx, s, "ws_1", "res_1", 99, false); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("SettleLease of a released lease: %v, want ErrNotFound", err)
	}
}

// TestJournalOnlyForKnownLeases: a cost above what the request held, an unknown
// reservation or another workspace's take the synchronous path with its usual answers.
func TestJournalOnlyForKnownLeases(t *testing.T) {
	s := openTemp(t, filepath.Join(t.TempDir(), "gateway.db"))
	ctx := context.Background()
	leaseFixture(t, s, "ws_1", "res_1", 10*usd)
	fundedWorkspace(t, s, "ws_2", usd)

	if _, err := s.SettleLease(ctx, store.SettleLeaseParams{ReservationID: "res_1", HeldNanos: usd, Generation: &store.Generation{
		WorkspaceID: "ws_2", CostNanos: 1}}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("another workspace's lease: %v, want ErrNotFound", err)
	}
	if _, err := s.SettleLease(ctx, store.SettleLeaseParams{ReservationID: "res_none", HeldNanos: usd, Generation: &store.Generation{
		WorkspaceID: "ws_1", CostNanos: 1}}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("unknown reservation: %v, want ErrNotFound", err)
	}
	p := holdWriter(t, s)
	done := make(chan error, 1)
	go func() {
		// Above HeldNanos: the charge depends on the balance, so it waits for its commit.
		_, err := s.SettleLease(ctx, store.SettleLeaseParams{ReservationID: "res_1", HeldNanos: usd, Generation: &store.Generation{
			WorkspaceID: "ws_1", CostNanos: 2 * usd}})
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("a settlement above what was held returned (%v) before its commit", err)
	case <-time.After(100 * time.Millisecond):
	}
	p.release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// copyStore copies a database that is open (its writer held inside an empty transaction,
// so the files are still) with its journal, as a kill -9 at that instant would leave them.
func copyStore(t *testing.T, from, to string) {
	t.Helper()
	for _, suffix := range []string{"", "-wal", "-shm"} {
		copyFile(t, from+suffix, to+suffix)
	}
	dir := from + "-settlements"
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(to+"-settlements", 0o700); err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".log") {
			copyFile(t, filepath.Join(dir, e.Name()), filepath.Join(to+"-settlements", e.Name()))
		}
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestJournalReplay: settlements acknowledged but not yet applied when the process died
// are applied when the store opens again, once each; a damaged tail is ignored.
func TestJournalReplay(t *testing.T) {
	dir := t.TempDir()
	live := filepath.Join(dir, "live.db")
	s := openTemp(t, live)
	ctx := context.Background()
	leaseFixture(t, s, "ws_1", "res_1", 10*usd)
	p := holdWriter(t, s)
	const n = 30
	for i := range n {
		if _, err := leaseSettle(ctx, s, "ws_1", "res_1", i, false); err != nil {
			t.Fatal(err)
		}
	}
	crashed := filepath.Join(dir, "crashed.db")
	copyStore(t, live, crashed)
	p.release()

	// A power cut could leave half a record at the end of the segment.
	segs, _ := filepath.Glob(crashed + "-settlements/*.log")
	if len(segs) != 1 {
		t.Fatalf("journal segments %v, want one", segs)
	}
	data, err := os.ReadFile(segs[0])
	if err != nil {
		t.Fatal(err)
	}
	end := 0
	for binary.LittleEndian.Uint32(data[end:]) != 0 {
		end += 8 + int(binary.LittleEndian.Uint32(data[end:]))
	}
	f, err := os.OpenFile(segs[0], os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{200, 0, 0, 0, 1, 2, 3, 4, '{', '"', 'r'}, int64(end)); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	kept := filepath.Join(dir, "kept.log")
	copyFile(t, segs[0], kept)

	check := func(s *Store) {
		t.Helper()
		b, err := s.GetBalance(ctx, "ws_1")
		if err != nil {
			t.Fatal(err)
		}
		want := 100*usd - usd/2 - n*usd/10
		if b.BalanceNanos != want || b.ReservedNanos != 10*usd-usd/2-n*usd/10 {
			t.Fatalf("after replay: balance %d reserved %d, want %d and %d", b.BalanceNanos, b.ReservedNanos, want, 10*usd-usd/2-n*usd/10)
		}
		var gens, charges int
		if err := s.r.QueryRow(`SELECT (SELECT COUNT(*) FROM generations), (SELECT COUNT(*) FROM ledger WHERE kind = 'charge')`).Scan(&gens, &charges); err != nil {
			t.Fatal(err)
		}
		if gens != n+1 || charges != n+1 {
			t.Fatalf("%d generations and %d charges, want %d of each", gens, charges, n+1)
		}
	}
	s2, err := Open(ctx, crashed)
	if err != nil {
		t.Fatalf("reopening: %v", err)
	}
	check(s2)
	if left, _ := filepath.Glob(crashed + "-settlements/*.log"); len(left) != 1 || left[0] == segs[0] {
		t.Errorf("segments after replay %v: want the replayed one deleted and a new one", left)
	}
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
	// The same records again (as if the process died after applying them but before
	// deleting the segment): nothing is applied twice.
	copyFile(t, kept, segs[0])
	s3, err := Open(ctx, crashed)
	if err != nil {
		t.Fatalf("reopening: %v", err)
	}
	defer s3.Close()
	check(s3)
}

// TestJournalLockedByAnotherStore: a second store on the same file cannot journal and
// settles synchronously, with the same results.
func TestJournalLockedByAnotherStore(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gateway.db")
	a := openTemp(t, path)
	b := openTemp(t, path)
	if a.jr == nil || b.jr != nil {
		t.Fatalf("journals: first %v, second %v; want only the first", a.jr != nil, b.jr != nil)
	}
	ctx := context.Background()
	leaseFixture(t, b, "ws_1", "res_1", 10*usd)
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Go(func() {
			if _, err := leaseSettle(ctx, b, "ws_1", "res_1", i, false); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	wantBalance(t, a, "ws_1", 100*usd-usd/2-usd, 10*usd-usd/2-usd)
}

// TestJournalSegments: with small segments, records spread over many files; a segment is
// deleted once its records are applied, and a crash with several segments pending
// replays all of them.
func TestJournalSegments(t *testing.T) {
	defer func(n int) { journalSegmentBytes = n }(journalSegmentBytes)
	journalSegmentBytes = 4096
	dir := t.TempDir()
	live := filepath.Join(dir, "live.db")
	s := openTemp(t, live)
	ctx := context.Background()
	leaseFixture(t, s, "ws_1", "res_1", 50*usd)
	p := holdWriter(t, s)
	const n = 100
	for i := range n {
		if _, err := leaseSettle(ctx, s, "ws_1", "res_1", i, false); err != nil {
			t.Fatal(err)
		}
	}
	segs, _ := filepath.Glob(live + "-settlements/*.log")
	if len(segs) < 5 {
		t.Fatalf("%d segments for %d records of 4 KiB segments", len(segs), n)
	}
	crashed := filepath.Join(dir, "crashed.db")
	copyStore(t, live, crashed)
	p.release()
	wantBalance(t, s, "ws_1", 100*usd-usd/2-n*usd/10, 50*usd-usd/2-n*usd/10)
	waitDrops(s)
	if left, _ := filepath.Glob(live + "-settlements/*.log"); len(left) != 1 {
		t.Errorf("%d segments left once every record is applied, want only the current one", len(left))
	}
	s2, err := Open(ctx, crashed)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if s2.replayed != n {
		t.Errorf("replayed %d records from %d segments, want %d", s2.replayed, len(segs), n)
	}
	wantBalance(t, s2, "ws_1", 100*usd-usd/2-n*usd/10, 50*usd-usd/2-n*usd/10)
}

// TestJournalBacklog: with maxPending settlements waiting for a held writer, the next one
// is not journaled but waits for its commit, as without the journal.
func TestJournalBacklog(t *testing.T) {
	s := openTemp(t, filepath.Join(t.TempDir(), "gateway.db"))
	ctx := context.Background()
	leaseFixture(t, s, "ws_1", "res_1", 50*usd)
	p := holdWriter(t, s)
	s.pending.Add(maxPending) // as if that many were queued
	done := make(chan error, 1)
	go func() {
		_, err := leaseSettle(ctx, s, "ws_1", "res_1", 1, false)
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("a settlement beyond the backlog returned (%v) before its commit", err)
	case <-time.After(100 * time.Millisecond):
	}
	s.pending.Add(-maxPending)
	p.release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	wantBalance(t, s, "ws_1", 100*usd-usd/2-usd/10, 50*usd-usd/2-usd/10)
}

// TestJournalReplaySkipsWhatCannotApply: a journaled settlement that can never be applied
// (its workspace has no wallet) is reported and dropped; the store opens and applies the
// others.
func TestJournalReplaySkipsWhatCannotApply(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gateway.db")
	s := openTemp(t, path)
	fundedWorkspace(t, s, "ws_1", 10*usd)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	var seg []byte
	for i, ws := range []string{"ws_1", "ws_gone", "ws_1"} {
		g := &store.Generation{ID: fmt.Sprintf("gen_%d", i), WorkspaceID: ws, Status: 200, CostNanos: usd,
			CreatedAt: time.Now().UTC().Truncate(time.Millisecond)}
		frame := appendJournalRecord(make([]byte, 8), &settleReq{g: g, cost: usd, reservationID: "res_expired", held: usd, now: time.Now()})
		binary.LittleEndian.PutUint32(frame[:4], uint32(len(frame)-8))
		binary.LittleEndian.PutUint32(frame[4:8], crc32.Checksum(frame[8:], crcTable))
		seg = append(seg, frame...)
	}
	if err := os.MkdirAll(path+"-settlements", 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(path+"-settlements", fmt.Sprintf("%020d.log", 7)), seg, 0o600); err != nil {
		t.Fatal(err)
	}
	var reported []error
	s2, err := Open(context.Background(), path, WithDeferredErrors(func(err error) { reported = append(reported, err) }))
	if err != nil {
		t.Fatalf("Open with an unappliable journal record: %v", err)
	}
	defer s2.Close()
	if s2.replayed != 2 || len(reported) != 1 || !errors.Is(reported[0], store.ErrNotFound) {
		t.Fatalf("replayed %d, reported %v; want 2 applied and the wallet-less one reported", s2.replayed, reported)
	}
	// The reservation had expired and was released: each settlement is charged from the
	// balance.
	wantBalance(t, s2, "ws_1", 8*usd, 0)
	if left, _ := filepath.Glob(path + "-settlements/00000000000000000007.log"); len(left) != 0 {
		t.Error("the replayed segment was kept")
	}
}

// TestCreditsFlushedToDisk: with DurableProcess, a credit is flushed to the disk before
// AddCredits returns (a checkpoint syncs the WAL), settlements are not; DurablePower
// commits every write with an fsync and needs no extra flush.
func TestCreditsFlushedToDisk(t *testing.T) {
	for _, tc := range []struct {
		d    Durability
		want int64 // flushes per credit
	}{{DurableProcess, 1}, {DurablePower, 0}} {
		s := openTemp(t, filepath.Join(t.TempDir(), "gateway.db"), WithDurability(tc.d))
		ctx := context.Background()
		fundedWorkspace(t, s, "ws_1", 10*usd)
		if got := s.wr.flushes.Load(); got != tc.want {
			t.Errorf("durability %d: %d flushes for the funding credit, want %d", tc.d, got, tc.want)
		}
		before := s.wr.flushes.Load()
		if _, err := s.Settle(ctx, store.SettleParams{Generation: &store.Generation{WorkspaceID: "ws_1", CostNanos: 1}}); err != nil {
			t.Fatal(err)
		}
		if got := s.wr.flushes.Load() - before; got != 0 {
			t.Errorf("durability %d: a settlement flushed %d times, want 0", tc.d, got)
		}
		if _, err := s.AddCredits(ctx, "ws_1", usd, "top-up"); err != nil {
			t.Fatal(err)
		}
		if got := s.wr.flushes.Load() - before; got != tc.want {
			t.Errorf("durability %d: a top-up flushed %d times, want %d", tc.d, got, tc.want)
		}
	}
}

// TestUrgentWritesEndTheGathering: journaled settlements wait to be gathered, but a write
// or read someone waits for ends the wait at once. With the gathering stretched to an
// hour, the read, the reservation and the credit below would hang without that.
func TestUrgentWritesEndTheGathering(t *testing.T) {
	s := openTemp(t, filepath.Join(t.TempDir(), "gateway.db"))
	ctx := context.Background()
	leaseFixture(t, s, "ws_1", "res_1", 10*usd)
	s.wr.mu.Lock()
	s.wr.gatherFor = time.Hour
	s.wr.mu.Unlock()
	for i := range 3 {
		if _, err := leaseSettle(ctx, s, "ws_1", "res_1", i, false); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 1)
	go func() {
		if _, err := s.GetBalance(ctx, "ws_1"); err != nil {
			done <- err
			return
		}
		if _, err := s.Reserve(ctx, store.ReserveParams{WorkspaceID: "ws_1", AmountNanos: usd, ExpiresAt: hour()}); err != nil {
			done <- err
			return
		}
		_, err := s.AddCredits(ctx, "ws_1", usd, "top-up")
		done <- err
	}()
	returnsWithin(t, done, 10*time.Second, nil, "a read or write someone waits for waited for the gathering of journaled settlements")
	wantBalance(t, s, "ws_1", 101*usd-usd/2-3*usd/10, 11*usd-usd/2-3*usd/10)
}

// TestFullBatchEndsTheGathering: journaled settlements that fill a batch are applied at
// once, not after the gathering delay, so that a busy gateway's queue stays one batch long.
// With the gathering stretched to an hour, they would wait that hour without it.
func TestFullBatchEndsTheGathering(t *testing.T) {
	const limit = 4
	s := openTemp(t, filepath.Join(t.TempDir(), "gateway.db"), withBatchLimit(limit))
	ctx := context.Background()
	leaseFixture(t, s, "ws_1", "res_1", 10*usd)
	s.wr.mu.Lock()
	s.wr.gatherFor = time.Hour
	s.wr.mu.Unlock()
	// leaseFixture made the first settlement, committed before it was answered (journal.go):
	// these are journaled. The first one alone sets the writer gathering; the others fill the
	// batch while it waits.
	for i := range limit {
		if _, err := leaseSettle(ctx, s, "ws_1", "res_1", i, false); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			time.Sleep(50 * time.Millisecond)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.pending.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d journaled settlements of a full batch still wait for the gathering", s.pending.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestJournalSpareSegment: the next segment is prepared in the background under a .spare
// name and renamed when the current one fills; a spare left by a crash is removed at Open
// and never replayed; Close removes the spare.
func TestJournalSpareSegment(t *testing.T) {
	defer func(n int) { journalSegmentBytes = n }(journalSegmentBytes)
	journalSegmentBytes = 4096
	dir := t.TempDir()
	path := filepath.Join(dir, "gateway.db")
	jdir := path + "-settlements"
	if err := os.MkdirAll(jdir, 0o700); err != nil {
		t.Fatal(err)
	}
	leftover := filepath.Join(jdir, fmt.Sprintf("%020d.spare", 7))
	if err := os.WriteFile(leftover, []byte("not a segment"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(leftover); !os.IsNotExist(err) {
		t.Fatalf("a crash's spare is still there: %v", err)
	}
	ctx := context.Background()
	leaseFixture(t, s, "ws_1", "res_1", 50*usd)
	const n = 40 // several segments of 4 KiB
	for i := range n {
		if _, err := leaseSettle(ctx, s, "ws_1", "res_1", i, false); err != nil {
			t.Fatal(err)
		}
	}
	wantBalance(t, s, "ws_1", 100*usd-usd/2-n*usd/10, 50*usd-usd/2-n*usd/10)
	s.jr.mu.Lock()
	cur, sp := s.jr.seg, s.jr.spare
	s.jr.mu.Unlock()
	if cur < 3 {
		t.Fatalf("still at segment %d after %d records", cur, n)
	}
	if sp == nil {
		t.Fatal("no spare segment is being prepared")
	}
	<-sp.done // its file is made in the background
	spares, _ := filepath.Glob(filepath.Join(jdir, "*.spare"))
	if want := filepath.Join(jdir, fmt.Sprintf("%020d.spare", cur+1)); len(spares) != 1 || spares[0] != want {
		t.Fatalf("spares %v, want only %s", spares, want)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if spares, _ := filepath.Glob(filepath.Join(jdir, "*.spare")); len(spares) != 0 {
		t.Fatalf("spares %v left after Close", spares)
	}
}

// TestJournaledSettlementAllocatesOnce: a journaled lease settlement takes the caller's
// generation as it is (store.SettleLeaseParams: the store owns it from the call on) and
// allocates only its settlement and op, together: no copy of the generation, no channel
// nobody waits on. The writer is held, so that only SettleLease's own allocations count.
func TestJournaledSettlementAllocatesOnce(t *testing.T) {
	s := openTemp(t, filepath.Join(t.TempDir(), "gateway.db"))
	ctx := context.Background()
	leaseFixture(t, s, "ws_1", "res_1", 50*usd)
	p := holdWriter(t, s)
	const runs = 100
	gens := make([]store.Generation, runs+1)
	for i := range gens {
		gens[i] = store.Generation{ID: fmt.Sprintf("gen_%03d", i), WorkspaceID: "ws_1", KeyID: "key_1", Model: "m", Status: 200,
			CreatedAt: time.Now(), CostNanos: usd / 10}
	}
	// The writer's queue grows by appending: room for every run up front.
	s.wr.mu.Lock()
	s.wr.queue = append(make([]*writeOp, 0, 4*runs), s.wr.queue...)
	s.wr.mu.Unlock()
	i := 0
	allocs := testing.AllocsPerRun(runs, func() {
		g, err := s.SettleLease(ctx, store.SettleLeaseParams{ReservationID: "res_1", HeldNanos: usd, Generation: &gens[i]})
		if err != nil || g.ID != gens[i].ID {
			t.Fatalf("SettleLease: %v, %q", err, g.ID)
		}
		i++
	})
	if allocs > 1 {
		t.Fatalf("%.1f allocations per journaled settlement, want 1", allocs)
	}
	p.release()
	if err := <-p.done; err != nil {
		t.Fatal(err)
	}
	if err := s.caughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetGeneration(ctx, "ws_1", gens[runs].ID)
	if err != nil || got.CostNanos != usd/10 {
		t.Fatalf("last settlement: %+v, %v", got, err)
	}
}

// waitDrops waits until the segments being dropped in the background are gone. Under the
// journal's lock, which every dropLater call holds: none starts meanwhile.
func waitDrops(s *Store) {
	s.jr.mu.Lock()
	defer s.jr.mu.Unlock()
	s.jr.drops.Wait()
}

// TestJournalDropsOffTheLock: a segment whose records are all applied is unmapped and
// deleted in the background, not under the journal's lock, so that settlements are
// journaled while it is; Close waits for it.
func TestJournalDropsOffTheLock(t *testing.T) {
	defer func(n int) { journalSegmentBytes = n }(journalSegmentBytes)
	journalSegmentBytes = 4096
	release := make(chan struct{})
	dropping := make(chan struct{}, 100)
	var dropped []string
	var mu sync.Mutex
	defer func(d func(*mappedSegment, string)) { dropSegment = d }(dropSegment)
	dropSegment = func(m *mappedSegment, path string) {
		dropping <- struct{}{}
		<-release
		m.drop(path)
		mu.Lock()
		dropped = append(dropped, path)
		mu.Unlock()
	}
	path := filepath.Join(t.TempDir(), "gateway.db")
	s := openTemp(t, path)
	ctx := context.Background()
	leaseFixture(t, s, "ws_1", "res_1", 50*usd)
	const n = 40 // several segments of 4 KiB
	// The writer is held while the first records are journaled, so that the segments they
	// fill are retired with records to apply, and dropped once applied.
	p := holdWriter(t, s)
	settled := make(chan error, 1)
	go func() {
		for i := range n {
			if _, err := leaseSettle(ctx, s, "ws_1", "res_1", i, false); err != nil {
				settled <- err
				return
			}
		}
		s.jr.mu.Lock()
		retired := len(s.jr.retired)
		s.jr.mu.Unlock()
		if retired < 2 {
			settled <- fmt.Errorf("%d segments retired after %d records", retired, n)
			return
		}
		p.release()
		if _, err := s.GetBalance(ctx, "ws_1"); err != nil { // waits for every record to apply
			settled <- err
			return
		}
		for range retired { // every retired segment's drop has started, and is held
			<-dropping
		}
		for i := n; i < 2*n; i++ {
			if _, err := leaseSettle(ctx, s, "ws_1", "res_1", i, false); err != nil {
				settled <- err
				return
			}
		}
		settled <- nil
	}()
	returnsWithin(t, settled, 20*time.Second, func() { close(release) }, "settlements and reads waited for a segment being dropped")
	wantBalance(t, s, "ws_1", 100*usd-usd/2-2*n*usd/10, 50*usd-usd/2-2*n*usd/10)

	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while segments were still being dropped", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(dropped) < 2 {
		t.Fatalf("%d segments dropped in the background", len(dropped))
	}
	if left, _ := filepath.Glob(path + "-settlements/*.log"); len(left) != 0 {
		t.Fatalf("segments %v left after Close with every record applied", left)
	}
}

// returnsWithin fails t unless done yields nil within d, with msg when it yields nothing;
// onTimeout, when set, runs first, to free what the test holds.
func returnsWithin(t *testing.T, done <-chan error, d time.Duration, onTimeout func(), msg string) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(d):
		if onTimeout != nil {
			onTimeout()
		}
		t.Fatal(msg)
	}
}
