//go:build !unix

package sqlite

import (
	"errors"
	"os"
)

// Without flock and mmap there is no settlement journal: every settlement is committed
// before it is acknowledged, as with DurablePower (at synchronous=NORMAL).

func lockDir(string) (*os.File, bool, error) { return nil, false, nil }

func unlockDir(*os.File) {}

// Without flock, instances are known dead by their heartbeats alone (instances.go).
const locksWork = false

func tryLock(string, bool) (*os.File, bool, error) {
	return nil, false, errors.New("no file locks on this platform")
}

func unlock(*os.File) {}

func mapSegment(string, int) (*os.File, []byte, error) {
	return nil, nil, errors.New("no settlement journal on this platform")
}

func unmapSegment([]byte) error { return nil }
