//go:build unix

package sqlite

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockDir takes the journal directory's lock; ok is false when another process holds it.
func lockDir(dir string) (lock *os.File, ok bool, err error) {
	lock, ok, err = tryLock(filepath.Join(dir, "lock"), true)
	if err != nil {
		return nil, false, fmt.Errorf("settlement journal: %w", err)
	}
	return lock, ok, nil
}

func unlockDir(lock *os.File) { unlock(lock) }

// locksWork tells whether this platform has the file locks tryLock takes.
const locksWork = true

// tryLock takes an exclusive lock on the file at path (created if create is set), held
// until unlock or the end of the process, however it ends. ok is false when someone else
// holds it (another process, or another open file of this one); a missing file is
// fs.ErrNotExist unless create is set.
func tryLock(path string, create bool) (f *os.File, ok bool, err error) {
	flags := os.O_RDWR
	if create {
		flags |= os.O_CREATE
	}
	f, err = os.OpenFile(path, flags, 0o600)
	if err != nil {
		return nil, false, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("locking %s: %w", path, err)
	}
	return f, true, nil
}

func unlock(f *os.File) {
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	_ = f.Close()
}

// mapSegment creates the segment file at path, size bytes of zeros, and maps it shared.
func mapSegment(path string, size int) (*os.File, []byte, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, nil, err
	}
	if err := f.Truncate(int64(size)); err != nil {
		_ = f.Close()
		_ = os.Remove(path)
		return nil, nil, err
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		_ = f.Close()
		_ = os.Remove(path)
		return nil, nil, fmt.Errorf("mapping %s: %w", path, err)
	}
	return f, mem, nil
}

func unmapSegment(mem []byte) error { return syscall.Munmap(mem) }
