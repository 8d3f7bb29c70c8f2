//go:build !linux

package sqlite

// yieldCPU does nothing where the writer does not yield its core (see yield_linux.go).
func yieldCPU() {}
