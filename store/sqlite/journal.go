package sqlite

import (
	"context"
	"database/sql"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"hash/maphash"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/modelgateway/caddy-modelgateway/internal/background"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// The settlement journal.
//
// With DurableProcess (the default), a lease settlement that cannot fail is acknowledged
// as soon as it is appended to the journal, a file next to the database, with one write(2):
// from then on it survives the process being killed, exactly as a commit at
// synchronous=NORMAL does. The writer applies it to the database later, in its queue order,
// together with whatever else is queued (a run of settlements costs a few statements, see
// settlebatch.go). A request therefore never waits for a database transaction after its
// lease was taken.
//
// Which settlements: SettleLease of a reservation this store has already settled from
// (so it is known to exist and to be the workspace's), for a cost within HeldNanos. The
// caller's lease guarantees that the reservation holds HeldNanos for the request, so the
// balance covers the cost: the charge is the cost, known without reading the wallet.
// Anything else (first settlement of a lease, a cost above what was held, no journal)
// takes the synchronous path.
//
// Reads: every read whose answer a settlement can change (balances, generations,
// activity, key spending) first waits until the writer has applied every settlement
// acknowledged before it, so what a client was told is what it reads back.
//
// Crash: at Open, the journal's records are replayed; a record whose generation is in the
// database was applied and is skipped. A segment file is deleted once every record in it
// is applied. A record cut short (only a power cut can do that) ends its segment.
//
// Requests in flight: a request admitted from a lease appends an in-flight record (its
// generation id, workspace, key, endpoint, model and start) when it is admitted
// (BeginInFlight), one more copy into the mapped segment and no system call, and counts
// in its segment until its settlement returned (EndInFlight), so the segment outlives
// the request. Its settlement, journaled or committed, supersedes it. At Open, an
// in-flight record whose generation has no settlement in the journal and none in the
// database becomes an interrupted record (store/interrupted.go): the lock on the journal
// proves that the run that wrote it is dead. Without a journal (DurablePower, or another
// process holds it) nothing is kept: a crash then leaves no record of the requests a lease
// admitted, while those with a reservation of their own are recorded by the sweep.
//
// Several processes on one database file: the journal directory is locked (flock); a
// process that cannot lock it settles synchronously.
//
// Repeats: a settlement is idempotent by generation id (store.Wallet), and a journaled
// one is acknowledged before the database is read, so a repeat could only be found once
// applied. So what may be a repeat is settled synchronously, and answered with the stored
// record: a generation whose id was made before the journal was opened (a ULID of an
// earlier time, journal.fresh: a worker restarted after a crash settles what the dead run
// may have settled), and one whose id this run settled recently (journal.seen: a caller
// settling twice). A repeat journaled all the same (one this run settled thousands of
// settlements ago) is found when applied: it rolls back, charging nothing again, and is
// not reported as a lost record; its caller was answered with the generation it gave,
// charged its cost.

// Durability says what an acknowledged write survives.
type Durability int

const (
	// DurableProcess acknowledges a write once the kernel has it: it survives the gateway
	// being killed or crashing, not a power cut or a kernel crash (synchronous=NORMAL, the
	// settlement journal without fsync).
	DurableProcess Durability = iota
	// DurablePower acknowledges a write once it is on the disk (synchronous=FULL, one fsync
	// per group commit, no journal): it also survives a power cut, at the price of a disk
	// flush in every request's latency.
	DurablePower
)

// WithDurability sets what an acknowledged write survives (default DurableProcess).
func WithDurability(d Durability) Option {
	return func(s *Store) { s.durability = d }
}

// WithDeferredErrors sets a function told about a journaled settlement that could not be
// applied (a workspace without a wallet, a duplicate generation id): the answer was given
// but the record is lost. It must not block.
func WithDeferredErrors(fn func(error)) Option {
	return func(s *Store) { s.deferredErr = fn }
}

// WithBackgroundErrors sets a function told about a panic in the store's background
// goroutines (a *background.Panic, whose %+v shows its stack): the writer's, after which
// the store's writes fail until it is opened again (Store.failWriter), and the journal's
// segment preparation or removal, which the journal does without. It must not block.
func WithBackgroundErrors(fn func(error)) Option {
	return func(s *Store) { s.backgroundErr = fn }
}

// journalSegmentBytes is the size of a journal segment file (tests make it smaller).
var journalSegmentBytes = 4 << 20

// journalRecord is one acknowledged settlement, as the journal holds it (journal_encode.go
// writes it without reflection).
type journalRecord struct {
	// InFlight marks the trace of a request admitted from a lease (BeginInFlight), which its
	// settlement supersedes: its generation holds only what the request began with.
	InFlight    bool        `json:"i,omitempty"`
	Reservation string      `json:"r"`
	Held        int64       `json:"h"`
	Release     bool        `json:"x"`
	Cost        int64       `json:"c"`
	Now         int64       `json:"n"`
	Generation  *journalGen `json:"g"`
}

// journal appends records to memory-mapped segment files: an append is a copy into the
// page cache, which the kernel owns from then on, so a record survives the process as a
// write(2) would, without a system call per record. Records are framed (length, CRC-32C,
// payload); a segment ends at the first frame that is zero, cut short or damaged.
type journal struct {
	dir  string
	lock *os.File
	// report is told about a panic in the journal's background goroutines (nil: the
	// standard error).
	report func(error)
	// opened is when the journal was opened, in Unix milliseconds (see fresh).
	opened int64
	// recent holds the generation ids of the latest lease settlements, one a slot by hash
	// (see seen).
	recentMu sync.Mutex
	recent   [recentSlots]string

	mu  sync.Mutex
	seg uint64
	f   *os.File
	mem []byte // the current segment, mapped
	off int    // bytes of mem used
	// open counts, per segment, records appended and not yet applied (or given up).
	open map[uint64]int
	// retired are full segments still mapped until their records are applied.
	retired map[uint64]*mappedSegment
	// drops are the segments being dropped in the background (dropLater).
	drops sync.WaitGroup
	// spare is the next segment, created and prefaulted in the background while the current
	// one fills, so that neither the file's creation nor a page fault per 4 KiB of records
	// (tens of microseconds each on a busy machine) falls on a request.
	spare *spareSegment
}

// spareSegment is a segment being prepared; the mapping and err are set once done is
// closed.
type spareSegment struct {
	mappedSegment
	seg  uint64
	done chan struct{}
	err  error
}

// prepare starts creating segment seg in the background.
func (j *journal) prepare(seg uint64) *spareSegment {
	sp := &spareSegment{seg: seg, done: make(chan struct{})}
	path, size := j.sparePath(seg), journalSegmentBytes
	go func() {
		defer close(sp.done)
		// A panic leaves no spare: the segment is then made when it is needed, as
		// without one (a mapping made before the panic is left to the process's end).
		if p := background.Call("preparing a journal segment", func() {
			if sp.f, sp.mem, sp.err = mapSegment(path, size); sp.err == nil {
				prefault(sp.mem)
			}
		}); p != nil {
			sp.err = p
			background.Report(j.report, p)
		}
	}()
	return sp
}

// takeSpare waits for the spare segment, if any, and returns it when it is seg; a spare
// for another segment (none is made so) is dropped. Callers hold j.mu (or own j).
func (j *journal) takeSpare(seg uint64) (*os.File, []byte, bool) {
	sp := j.spare
	if sp == nil {
		return nil, nil, false
	}
	j.spare = nil
	<-sp.done
	if sp.err != nil {
		return nil, nil, false
	}
	// Under its own name until now, so that a crash leaves no empty segment to replay.
	if sp.seg != seg || os.Rename(j.sparePath(sp.seg), j.path(seg)) != nil {
		sp.drop(j.sparePath(sp.seg))
		return nil, nil, false
	}
	return sp.f, sp.mem, true
}

func (j *journal) sparePath(seg uint64) string {
	return filepath.Join(j.dir, fmt.Sprintf("%020d.spare", seg))
}

type mappedSegment struct {
	f   *os.File
	mem []byte
}

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// openJournal locks dir (creating it) and returns the journal and the records its
// segments hold, oldest first. It returns nil, nil, nil when another process holds the
// lock, or where this platform has no journal.
func openJournal(dir string) (*journal, []journalRecord, []uint64, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, nil, fmt.Errorf("settlement journal: %w", err)
	}
	lock, ok, err := lockDir(dir)
	if err != nil || !ok {
		return nil, nil, nil, err
	}
	j := &journal{dir: dir, lock: lock, opened: time.Now().UnixMilli(), open: map[uint64]int{}, retired: map[uint64]*mappedSegment{}}
	// A spare segment left by a crash holds no record.
	if spares, err := filepath.Glob(filepath.Join(dir, "*.spare")); err == nil {
		for _, p := range spares {
			_ = os.Remove(p)
		}
	}
	segs, err := j.segments()
	if err != nil {
		j.close()
		return nil, nil, nil, err
	}
	var recs []journalRecord
	for _, seg := range segs {
		r, err := readSegment(j.path(seg))
		if err != nil {
			j.close()
			return nil, nil, nil, err
		}
		recs = append(recs, r...)
	}
	next := uint64(1)
	if len(segs) > 0 {
		next = segs[len(segs)-1] + 1
	}
	if err := j.startSegment(next); err != nil {
		j.close()
		return nil, nil, nil, err
	}
	return j, recs, segs, nil
}

func (j *journal) path(seg uint64) string {
	return filepath.Join(j.dir, fmt.Sprintf("%020d.log", seg))
}

// segments lists the segment files, oldest first.
func (j *journal) segments() ([]uint64, error) {
	entries, err := os.ReadDir(j.dir)
	if err != nil {
		return nil, fmt.Errorf("settlement journal: %w", err)
	}
	var segs []uint64
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".log")
		if !ok {
			continue
		}
		if n, err := strconv.ParseUint(name, 10, 64); err == nil {
			segs = append(segs, n)
		}
	}
	slices.Sort(segs)
	return segs, nil
}

// readSegment returns the whole records of a segment; a zero frame (the unused rest of a
// segment), a record cut short or a damaged one ends it.
func readSegment(path string) ([]journalRecord, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("settlement journal: %w", err)
	}
	var recs []journalRecord
	for len(data) >= 8 {
		n := binary.LittleEndian.Uint32(data[:4])
		if n == 0 || int64(n) > int64(len(data)-8) {
			break
		}
		payload := data[8 : 8+n]
		if crc32.Checksum(payload, crcTable) != binary.LittleEndian.Uint32(data[4:8]) {
			break
		}
		var rec journalRecord
		if err := json.Unmarshal(payload, &rec); err != nil || rec.Generation == nil {
			break
		}
		recs = append(recs, rec)
		data = data[8+n:]
	}
	return recs, nil
}

// startSegment maps a new segment seg and appends to it from now on; the previous one
// is kept mapped until its records are applied. Callers hold j.mu (or own j).
func (j *journal) startSegment(seg uint64) error {
	f, mem, ok := j.takeSpare(seg)
	if !ok {
		var err error
		if f, mem, err = mapSegment(j.path(seg), journalSegmentBytes); err != nil {
			return fmt.Errorf("settlement journal: %w", err)
		}
	}
	if j.mem != nil {
		old := &mappedSegment{f: j.f, mem: j.mem}
		if j.open[j.seg] <= 0 {
			delete(j.open, j.seg)
			j.dropLater(old, j.path(j.seg))
		} else {
			j.retired[j.seg] = old
		}
	}
	j.f, j.mem, j.seg, j.off = f, mem, seg, 0
	j.spare = j.prepare(seg + 1)
	return nil
}

func (m *mappedSegment) drop(path string) {
	_ = unmapSegment(m.mem)
	_ = m.f.Close()
	_ = os.Remove(path)
}

// dropSegment drops a segment none of whose records is left to apply (tests hold it).
var dropSegment = (*mappedSegment).drop

// dropLater drops m in the background. Unmapping a full segment and deleting its file took
// 1.3-3.1 ms on a busy machine (gatewaybench, a segment every 17 s at 1,000 requests a
// second), and was done holding j.mu: every request's settlement waited that long to be
// journaled. The records are all applied, so the file can outlive this call: a crash
// before it is deleted replays them as already applied. close waits for the drops.
// Callers hold j.mu.
func (j *journal) dropLater(m *mappedSegment, path string) {
	j.drops.Go(func() {
		// A segment whose drop panicked stays on the disk, replayed as applied at the next
		// Open.
		if p := background.Call("dropping a journal segment", func() { dropSegment(m, path) }); p != nil {
			background.Report(j.report, p)
		}
	})
}

// append journals the settlement r and returns its segment.
func (j *journal) append(r *settleReq) (uint64, error) {
	// The frame is built outside the lock; only the copy into the segment is serial.
	bp := framePool.Get().(*[]byte)
	defer framePool.Put(bp)
	*bp = appendJournalRecord(append((*bp)[:0], 0, 0, 0, 0, 0, 0, 0, 0), r)
	return j.put(*bp)
}

// appendInFlight journals the trace of a request in flight and returns its segment, which
// keeps it until done is called for it.
func (j *journal) appendInFlight(f *store.InFlight) (uint64, error) {
	bp := framePool.Get().(*[]byte)
	defer framePool.Put(bp)
	*bp = appendInFlightRecord(append((*bp)[:0], 0, 0, 0, 0, 0, 0, 0, 0), f)
	return j.put(*bp)
}

// put frames the record that follows frame's 8 free bytes and copies it into the segment.
func (j *journal) put(frame []byte) (uint64, error) {
	if len(frame) > journalSegmentBytes-8 {
		return 0, errors.New("settlement journal: record too large")
	}
	binary.LittleEndian.PutUint32(frame[:4], uint32(len(frame)-8))
	binary.LittleEndian.PutUint32(frame[4:8], crc32.Checksum(frame[8:], crcTable))

	j.mu.Lock()
	defer j.mu.Unlock()
	if j.mem == nil {
		return 0, errors.New("settlement journal: closed")
	}
	// A segment always ends with a zero frame header (8 bytes) or its end.
	if j.off+len(frame) > len(j.mem) {
		if err := j.startSegment(j.seg + 1); err != nil {
			return 0, err
		}
	}
	copy(j.mem[j.off:], frame)
	j.off += len(frame)
	j.open[j.seg]++
	return j.seg, nil
}

var framePool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// done marks a record of seg applied (or given up) and deletes seg once it is finished.
func (j *journal) done(seg uint64) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.open[seg]--
	if j.open[seg] <= 0 && seg != j.seg {
		delete(j.open, seg)
		if m := j.retired[seg]; m != nil {
			delete(j.retired, seg)
			j.dropLater(m, j.path(seg))
		}
	}
}

// forget deletes segments whose records were all replayed.
func (j *journal) forget(segs []uint64) {
	for _, seg := range segs {
		_ = os.Remove(j.path(seg))
	}
}

// close unmaps the journal; segments with no record left to apply are deleted, the
// others stay for the next Open to replay.
func (j *journal) close() {
	j.mu.Lock()
	defer j.mu.Unlock()
	if sp := j.spare; sp != nil {
		// The spare holds no record: it goes.
		j.spare = nil
		<-sp.done
		if sp.err == nil {
			sp.drop(j.sparePath(sp.seg))
		}
	}
	if j.mem != nil {
		cur := &mappedSegment{f: j.f, mem: j.mem}
		if j.open[j.seg] <= 0 {
			cur.drop(j.path(j.seg))
		} else {
			_ = unmapSegment(cur.mem)
			_ = cur.f.Close()
		}
		j.mem, j.f = nil, nil
	}
	for seg, m := range j.retired {
		_ = unmapSegment(m.mem)
		_ = m.f.Close()
		delete(j.retired, seg)
	}
	// Before the directory is unlocked: another process may open it next.
	j.drops.Wait()
	if j.lock != nil {
		unlockDir(j.lock)
		j.lock = nil
	}
}

// replay applies the records of an earlier run that are not in the database yet, then
// records as interrupted the requests in flight that run never settled: the journal's
// lock, which this store holds, was that run's until it died.
func (s *Store) replay(ctx context.Context, recs []journalRecord) error {
	settled := make(map[string]bool, len(recs))
	for i := range recs {
		if !recs[i].InFlight {
			settled[recs[i].Generation.ID] = true
		}
	}
	for i := range recs {
		rec := &recs[i]
		if rec.InFlight && settled[rec.Generation.ID] {
			continue
		}
		exists, err := s.generationExists(ctx, rec.Generation.ID)
		if err != nil {
			return fmt.Errorf("replaying the settlement journal: %w", err)
		}
		if exists {
			continue
		}
		if rec.InFlight {
			if err := s.replayInterrupted(ctx, rec); err != nil {
				return err
			}
			continue
		}
		req := rec.request()
		err = s.write(ctx, &writeOp{settle: req})
		switch {
		case errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrConflict):
			// This record can never be applied (its workspace has no wallet): it is reported
			// like a journaled settlement that fails while running, and dropped with its
			// segment, rather than refusing to open the store at every start.
			if s.deferredErr != nil {
				s.deferredErr(fmt.Errorf("replaying journaled settlement of generation %q: %w", rec.Generation.ID, err))
			}
			continue
		case err != nil:
			return fmt.Errorf("replaying the settlement journal: generation %q: %w", rec.Generation.ID, err)
		}
		s.replayed++
	}
	return nil
}

func (s *Store) generationExists(ctx context.Context, id string) (bool, error) {
	var n int
	err := s.r.QueryRowContext(ctx, `SELECT COUNT(*) FROM generations WHERE id = ?`, id).Scan(&n)
	return n > 0, err
}

// replayInterrupted records the request of the in-flight record rec as interrupted.
func (s *Store) replayInterrupted(ctx context.Context, rec *journalRecord) error {
	g := rec.Generation
	f := store.InFlight{GenerationID: g.ID, WorkspaceID: g.WorkspaceID, KeyID: g.KeyID, Endpoint: g.Endpoint,
		Model: g.Model, ReservationID: rec.Reservation, StartedAt: g.CreatedAt}
	err := s.tx(ctx, func(ctx context.Context, tx *sql.Tx) error { return recordInterrupted(ctx, tx, f) })
	if err != nil {
		if s.deferredErr != nil {
			// Like a settlement that can never be applied: reported, not a reason to refuse
			// to open the store at every start.
			s.deferredErr(fmt.Errorf("recording interrupted generation %q: %w", g.ID, err))
		}
		return nil
	}
	s.interrupted++
	return nil
}

// BeginInFlight journals the trace of a request admitted from a lease: a copy into the
// journal's mapped segment, no system call. Without a journal (DurablePower, or another
// process holds it) nothing is kept and a crash leaves no record of the request.
func (s *Store) BeginInFlight(f store.InFlight) uint64 {
	if s.jr == nil {
		return 0
	}
	seg, err := s.jr.appendInFlight(&f)
	if err != nil {
		return 0
	}
	return seg
}

// EndInFlight lets the trace's segment go once its other records are applied too.
func (s *Store) EndInFlight(token uint64) {
	if token != 0 && s.jr != nil {
		s.jr.done(token)
	}
}

func (rec *journalRecord) request() *settleReq {
	g := rec.Generation.generation()
	return &settleReq{
		g: &g, cost: rec.Cost, reservationID: rec.Reservation, lease: true,
		held: rec.Held, release: rec.Release, now: fromMillis(rec.Now), deferred: true,
	}
}

// openJournal opens the journal at dir and applies what an earlier run left in it.
func (s *Store) openJournal(ctx context.Context, dir string) error {
	j, recs, segs, err := openJournal(dir)
	if err != nil || j == nil {
		return err
	}
	if err := s.replay(ctx, recs); err != nil {
		j.close()
		return err
	}
	j.forget(segs)
	j.report = s.backgroundErr
	s.jr = j
	return nil
}

// maxPending bounds the journaled settlements waiting for the writer: beyond it (a disk
// slower than the traffic) settlements are committed before they are acknowledged again,
// so callers slow down with the database instead of the queue growing without bound.
const maxPending = 8192

var errJournalBacklog = errors.New("settlement journal: backlog full")

// settleOp is a settlement and the writer's op for it, in one allocation: a lease's
// settlement, journaled (deferSettle) or, when the journal cannot take it, written while
// its caller waits.
type settleOp struct {
	op  writeOp
	req settleReq
}

// deferSettle journals so's settlement and queues it for the writer without waiting for
// it. It is marked deferred only once the journal holds it: when deferSettle fails, the
// caller settles the same so synchronously.
func (s *Store) deferSettle(so *settleOp) error {
	if s.pending.Load() >= maxPending {
		return errJournalBacklog
	}
	seg, err := s.jr.append(&so.req)
	if err != nil {
		return err
	}
	so.req.deferred = true
	o := &so.op
	o.ctx, o.settle, o.async, o.seg = context.Background(), &so.req, true, seg
	s.pending.Add(1)
	if err := s.wr.enqueue(o); err != nil {
		// Closed: the record stays in the journal for the next Open.
		s.pending.Add(-1)
	}
	return nil
}

// finishAsync ends a journaled settlement the writer ran: applied or failed on its own,
// it is done; in a transaction that failed, it is queued again (or left to the journal
// when the store is closing).
func (s *Store) finishAsync(o *writeOp, txFailed bool) {
	if txFailed && o.panicked == nil {
		o.err = nil
		o.state.Store(opQueued)
		if s.wr.enqueue(o) == nil {
			return
		}
		s.pending.Add(-1)
		return
	}
	if err := o.err; err == nil && o.panicked != nil {
		o.err = o.panicked
	}
	if o.err != nil && s.deferredErr != nil && !errors.Is(o.err, errSettledAlready) {
		s.deferredErr(fmt.Errorf("applying journaled settlement of generation %q: %w", o.settle.g.ID, o.err))
	}
	s.jr.done(o.seg)
	s.pending.Add(-1)
}

// caughtUp returns once every settlement journaled before the call is applied (journal.go).
func (s *Store) caughtUp(ctx context.Context) error {
	if s.pending.Load() == 0 {
		return nil
	}
	return s.write(ctx, &writeOp{})
}

// knownReservations are lease reservations this store has settled from and not released.
type knownReservations struct {
	mu sync.Mutex
	m  map[string]string // reservation id → workspace id
}

func (k *knownReservations) add(id, workspaceID string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.m == nil {
		k.m = map[string]string{}
	}
	k.m[id] = workspaceID
}

func (k *knownReservations) has(id, workspaceID string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	ws, ok := k.m[id]
	return ok && ws == workspaceID
}

func (k *knownReservations) forget(ids ...string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, id := range ids {
		delete(k.m, id)
	}
}

// fresh tells whether a generation id may be journaled: not a ULID id (internal/ids: a
// prefix, "_" and 26 digits, the first ten its time in milliseconds) made before the
// journal was opened, which an earlier run may have settled. An id of another shape
// (tests', a caller's own) is taken as the caller's promise that it is new.
func (j *journal) fresh(id string) bool {
	_, u, ok := strings.Cut(id, "_")
	if !ok || len(u) != 26 {
		return true
	}
	var ms int64
	for i := range 10 {
		d := strings.IndexByte(crockford, u[i])
		if d < 0 {
			return true
		}
		ms = ms<<5 | int64(d)
	}
	return ms >= j.opened
}

// crockford is the alphabet of a ULID's digits, by value.
const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// recentSlots bounds what seen remembers: a slot by hash, 16 bytes each, the id's string
// shared with its generation.
const recentSlots = 4096

var recentSeed = maphash.MakeSeed()

// seen tells whether id is in its slot of the recent lease settlements, and puts it there:
// a settlement of an id seen is a repeat. An id is forgotten when another takes its slot,
// so seen may miss a repeat, never invent one.
func (j *journal) seen(id string) bool {
	i := maphash.String(recentSeed, id) % recentSlots
	j.recentMu.Lock()
	defer j.recentMu.Unlock()
	if j.recent[i] == id {
		return true
	}
	j.recent[i] = id
	return false
}
