package upload

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
)

// A spool is the temporary file a form's files are written to. Spool files are kept for
// reuse: writing over pages a file already has costs a fraction of growing a new one (the
// kernel then allocates, zeroes and accounts no pages; about a quarter of the CPU for an
// 8 MB upload on ext4). A pooled file holds the bytes of an earlier upload past what the
// form wrote; nothing reads past a part's own section.
type spool struct {
	file *os.File
	// name is the file's path while it could not be removed (an open file cannot be on some
	// systems): such a file is removed on release, not pooled.
	name string

	// mu guards reads against release: a reader given out by a form (an upstream request's
	// body, which a transport may still read after the round trip) fails once the form is
	// closed, instead of reading the next upload's bytes.
	mu       sync.RWMutex
	released bool
	sending  atomic.Int32 // sends from the file under way (see beginSend)
	// position serialises the sends that use the file's position (sendfile(2) with no
	// offset): a send of one attempt may still be under way when the next attempt's
	// begins, as a transport writes the body after the round trip returned.
	position sync.Mutex
}

// Bounds of the pool: it holds at most maxPooledSpools files, each cut to maxPooledSpoolBytes,
// so the page cache kept for reuse stays below 64 MiB.
const (
	maxPooledSpools     = 4
	maxPooledSpoolBytes = 16 << 20
)

var spools struct {
	mu   sync.Mutex
	free map[string][]*os.File // by directory
}

// spoolsInUse counts the spools given to forms and not released yet.
var spoolsInUse atomic.Int64

// SpoolsInUse is the number of spool files held by forms not closed yet: one per upload
// being read or sent, and none once every form is closed.
func SpoolsInUse() int64 { return spoolsInUse.Load() }

// errSpoolClosed is what a reader of a closed form's spool gets.
var errSpoolClosed = errors.New("upload: the form was closed")

// newSpool returns a spool file in dir, a pooled one when there is one (holding an earlier
// upload's bytes, at any offset).
func newSpool(dir string) (*spool, error) {
	spools.mu.Lock()
	free := spools.free[dir]
	var f *os.File
	if n := len(free); n > 0 {
		f, spools.free[dir] = free[n-1], free[:n-1]
	}
	spools.mu.Unlock()
	if f != nil {
		spoolsInUse.Add(1)
		return &spool{file: f}, nil // the form sets its offset
	}
	f, err := os.CreateTemp(dir, "upload-*")
	if err != nil {
		return nil, err
	}
	spoolsInUse.Add(1)
	s := &spool{file: f}
	// Removed at once, the file leaves nothing behind when the process dies.
	if os.Remove(f.Name()) != nil {
		s.name = f.Name()
	}
	return s, nil
}

// ReadAt reads the file until the spool is released.
func (s *spool) ReadAt(p []byte, off int64) (int, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.released {
		return 0, errSpoolClosed
	}
	return s.file.ReadAt(p, off)
}

// release ends every reader and returns the file to the pool, or closes it.
func (s *spool) release(dir string) error {
	s.mu.Lock()
	s.released = true
	busy := s.sending.Load() > 0
	s.mu.Unlock()
	spoolsInUse.Add(-1)
	if !busy && s.name == "" && s.fitPool() {
		spools.mu.Lock()
		if len(spools.free[dir]) < maxPooledSpools {
			if spools.free == nil {
				spools.free = make(map[string][]*os.File)
			}
			spools.free[dir] = append(spools.free[dir], s.file)
			spools.mu.Unlock()
			return nil
		}
		spools.mu.Unlock()
	}
	err := s.file.Close()
	if s.name != "" {
		if rerr := os.Remove(s.name); err == nil {
			err = rerr
		}
	}
	return err
}

// cut writes tail at off and makes the file end after it.
func (s *spool) cut(tail []byte, off int64) error {
	if _, err := s.file.WriteAt(tail, off); err != nil {
		return fmt.Errorf("upload: writing spool file: %w", err)
	}
	if err := s.file.Truncate(off + int64(len(tail))); err != nil {
		return fmt.Errorf("upload: cutting spool file: %w", err)
	}
	return nil
}

// fitPool cuts the file to maxPooledSpoolBytes, and tells whether it may be pooled.
func (s *spool) fitPool() bool {
	st, err := s.file.Stat()
	return err == nil && (st.Size() <= maxPooledSpoolBytes || s.file.Truncate(maxPooledSpoolBytes) == nil)
}

// beginSend tells whether the file may be sent from (the form is not closed); endSend ends
// the send. A file released while it is sent from is closed, not pooled: the next upload
// must not be written where a send may still be reading.
func (s *spool) beginSend() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.released {
		return false
	}
	s.sending.Add(1)
	return true
}

func (s *spool) endSend() { s.sending.Add(-1) }
