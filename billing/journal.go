package billing

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/modelgateway/caddy-modelgateway/internal/background"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// The settlement journal.
//
// An answer the client already has (a stream that ran to its end, the audio of a binary
// answer) is billed even when the store cannot take its charge at that moment: the
// settlement is written to a file in Config.JournalDir, fsynced, and applied by a loop that
// retries until the store takes it. The store's own journals do not cover this: SQLite's
// journals settlements it acknowledged, not ones it failed, and PostgreSQL has only the
// in-flight trace, which turns a request never settled into an interrupted record that
// charges nothing. So the journal is the Ledger's, one file per settlement, on the local
// disk, whatever the backend: a rare path, kept simple.
//
// Applying an entry is safe to repeat: the generation id is the record's key, so a second
// application is refused as a conflict and dropped. An entry whose hold is gone (its
// reservation expired or was released with a dead instance) charges the balance without a
// hold, as a settlement above its hold does. An entry the store refuses for good (its
// workspace is unknown to it) is moved aside to JournalDir/failed and logged.
const (
	journalRetry    = time.Second
	journalRetryMax = 30 * time.Second
	journalFailed   = "failed"
)

// journalEntry is a settlement to apply later: the hold it was for and the generation.
type journalEntry struct {
	// ReservationID is the hold's reservation ("" for none); HeldNanos, when Lease is set,
	// is what the call held on a lease or batch budget (SettleLease).
	ReservationID string           `json:"reservation_id,omitempty"`
	Lease         bool             `json:"lease,omitempty"`
	HeldNanos     int64            `json:"held_nanos,omitempty"`
	Generation    store.Generation `json:"generation"`
}

// ErrNoJournal refuses to journal a settlement when Config.JournalDir is empty.
var ErrNoJournal = errors.New("no settlement journal is configured")

// settleLater writes e durably and makes sure the loop applies it.
func (lg *Ledger) settleLater(e journalEntry) error {
	dir := lg.cfg.JournalDir
	if dir == "" {
		return ErrNoJournal
	}
	if e.Generation.ID == "" {
		return errors.New("journaling a settlement: the generation has no id")
	}
	if err := writeDurably(dir, e.Generation.ID+".json", e); err != nil {
		return fmt.Errorf("journaling the settlement of %s: %w", e.Generation.ID, err)
	}
	lg.startJournal()
	return nil
}

// writeDurably writes v as JSON to dir/name: a temporary file, fsynced, renamed into place,
// and the directory fsynced, so that a crash leaves the whole entry or none.
func writeDurably(dir, name string, v any) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return err
	}
	_, werr := tmp.Write(b)
	if werr == nil {
		werr = tmp.Sync()
	}
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp.Name(), filepath.Join(dir, name))
	}
	if werr != nil {
		_ = os.Remove(tmp.Name())
		return werr
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	serr := d.Sync()
	if cerr := d.Close(); serr == nil {
		serr = cerr
	}
	return serr
}

// ApplyJournal starts applying what the journal holds (entries a previous run left), in the
// background; Close stops it.
func (lg *Ledger) ApplyJournal() {
	if lg.cfg.JournalDir == "" {
		return
	}
	if names, _ := journalNames(lg.cfg.JournalDir); len(names) > 0 {
		lg.startJournal()
	}
}

// JournalPending counts the settlements the journal holds, not applied yet.
func (lg *Ledger) JournalPending() int {
	names, _ := journalNames(lg.cfg.JournalDir)
	return len(names)
}

func journalNames(dir string) ([]string, error) {
	if dir == "" {
		return nil, nil
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range ents {
		if n := e.Name(); !e.IsDir() && strings.HasSuffix(n, ".json") && !strings.HasPrefix(n, ".") {
			names = append(names, n)
		}
	}
	return names, nil
}

func (lg *Ledger) startJournal() {
	j := &lg.journal
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed || j.running {
		return
	}
	j.running = true
	j.done = make(chan struct{})
	stop := j.stop
	background.Loop{Name: "settlement journal", Report: lg.reportPanic, Stop: stop, Done: j.done}.Go(func() { lg.journalLoop(stop) })
}

// journalLoop applies the journal's entries until none is left, backing off while the
// store refuses them. It runs again after a panic (a background.Loop): the entries stay
// on disk, and are applied by the next run.
func (lg *Ledger) journalLoop(stop chan struct{}) {
	wait := journalRetry
	for {
		select {
		case <-stop:
			return
		case <-time.After(wait):
		}
		left, progressed := lg.applyJournal()
		lg.journal.mu.Lock()
		if left == 0 {
			lg.journal.running = false
			lg.journal.mu.Unlock()
			return
		}
		lg.journal.mu.Unlock()
		if progressed {
			wait = journalRetry
		} else {
			wait = min(2*wait, journalRetryMax)
		}
	}
}

// applyJournal applies every entry it can; it returns how many are left and whether any
// was applied.
func (lg *Ledger) applyJournal() (left int, progressed bool) {
	dir := lg.cfg.JournalDir
	names, err := journalNames(dir)
	if err != nil {
		lg.cfg.Logger.Error("reading the settlement journal failed", zap.String("dir", dir), zap.Error(err))
		return 1, false
	}
	for _, name := range names {
		path := filepath.Join(dir, name)
		b, err := os.ReadFile(path)
		if errors.Is(err, os.ErrNotExist) {
			continue // applied by another Ledger over the same directory
		}
		var e journalEntry
		if err == nil {
			err = json.Unmarshal(b, &e)
		}
		if err == nil {
			err = lg.applyEntry(e)
		}
		switch {
		case err == nil:
			_ = os.Remove(path)
			progressed = true
		case maybeApplied(err):
			left++
		default:
			lg.cfg.Logger.Error("a journaled settlement cannot be applied; moved aside", zap.String("file", name), zap.Error(err))
			if merr := os.MkdirAll(filepath.Join(dir, journalFailed), 0o700); merr == nil {
				_ = os.Rename(path, filepath.Join(dir, journalFailed, name))
			}
		}
	}
	return left, progressed
}

// applyEntry applies one journaled settlement.
func (lg *Ledger) applyEntry(e journalEntry) error {
	ctx, cancel := context.WithTimeout(context.Background(), lg.cfg.StoreTimeout)
	defer cancel()
	g := e.Generation
	var err error
	if e.Lease {
		_, err = lg.cfg.Store.SettleLease(ctx, store.SettleLeaseParams{ReservationID: e.ReservationID, HeldNanos: e.HeldNanos, Generation: &g})
	} else {
		_, err = lg.cfg.Store.Settle(ctx, store.SettleParams{ReservationID: e.ReservationID, Generation: &g})
	}
	if errors.Is(err, store.ErrNotFound) && e.ReservationID != "" {
		// The hold is gone: the charge is taken from the balance, without one.
		g = e.Generation
		_, err = lg.cfg.Store.Settle(ctx, store.SettleParams{Generation: &g})
	}
	if err != nil && (errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound)) {
		// Recorded already: an earlier application whose answer was lost, or the settlement
		// that failed had landed after all; or an interrupted record, whose charge is lost.
		got, gerr := lg.cfg.Store.GetGeneration(ctx, e.Generation.WorkspaceID, e.Generation.ID)
		if gerr == nil {
			if got.ErrorCode == store.InterruptedCode {
				lg.cfg.Logger.Error("a journaled settlement found its generation recorded as interrupted; its charge is lost",
					zap.String("generation_id", g.ID), zap.Int64("cost_nanos", e.Generation.CostNanos))
			}
			return nil
		}
	}
	return err
}

// closeJournal stops the journal loop: what it has not applied stays on disk, for the next
// Ledger over the directory.
func (lg *Ledger) closeJournal() {
	j := &lg.journal
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return
	}
	j.closed = true
	close(j.stop)
	done, running := j.done, j.running
	j.mu.Unlock()
	if running {
		<-done
	}
}
