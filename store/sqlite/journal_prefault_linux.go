package sqlite

import "syscall"

// madvPopulateWrite is MADV_POPULATE_WRITE (Linux 5.14): fault the pages in writable, as
// writing to each would, without changing their contents.
const madvPopulateWrite = 23

// prefault makes mem's pages present and writable, so that appends do not fault on them.
// An older kernel refuses the advice; appends then fault as they would have.
func prefault(mem []byte) { _ = syscall.Madvise(mem, madvPopulateWrite) }
