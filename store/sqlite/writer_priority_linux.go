package sqlite

import (
	"runtime"
	"sync/atomic"
	"syscall"
)

// runLowered calls run on an OS thread of its own at writerNice, storing that thread's id
// in tid (left 0 should the kernel refuse the priority; run then runs at the usual one).
// The goroutine that runs run never unlocks its thread, so the thread ends with it instead
// of carrying its priority to other goroutines. Not the process's main thread: Go never
// ends that one, and its niceness is what ps and top show for the whole process. Raising
// one's own niceness needs no privilege.
func runLowered(tid *atomic.Int64, run func()) {
	runtime.LockOSThread()
	if id := syscall.Gettid(); id != syscall.Getpid() {
		if syscall.Setpriority(syscall.PRIO_PROCESS, id, writerNice) == nil {
			tid.Store(int64(id))
		}
		run()
		return
	}
	// On the main thread: while this goroutine holds it, a new one starts on another.
	done := make(chan struct{})
	go func() {
		defer close(done)
		runLowered(tid, run)
	}()
	<-done
	runtime.UnlockOSThread()
}
