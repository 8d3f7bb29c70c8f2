package sqlite

import "syscall"

// yieldCPU gives the writer's core to the threads waiting for it, if any (sched_yield; at
// once when none waits). It goes through syscall.Syscall, so that the processor the
// writer's goroutine holds is free for the runtime to hand over meanwhile.
func yieldCPU() { _, _, _ = syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }
