//go:build !linux

package sqlite

// prefault does nothing where MADV_POPULATE_WRITE does not exist: appends fault each page
// in as they reach it.
func prefault([]byte) {}
