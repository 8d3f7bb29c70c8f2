package sqlite

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/store"
)

// threadNice reads the niceness of thread tid of this process from /proc (field 19 of its
// stat, counted after the command name, which may hold spaces).
func threadNice(t *testing.T, tid int64) (int, bool) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/stat", tid))
	if err != nil {
		return 0, false
	}
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	n, err := strconv.Atoi(fields[16])
	if err != nil {
		t.Fatalf("stat of thread %d: %q", tid, s)
	}
	return n, true
}

// TestWriterThreadIsNiced: with the settlement journal, the writer runs on a thread of its
// own at writerNice, which ends with the store; with DurablePower it is not set apart.
func TestWriterThreadIsNiced(t *testing.T) {
	s := openTemp(t, filepath.Join(t.TempDir(), "gateway.db"))
	deadline := time.Now().Add(5 * time.Second)
	for s.wr.tid.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	tid := s.wr.tid.Load()
	if tid == 0 {
		t.Fatal("the writer did not report its thread")
	}
	if nice, ok := threadNice(t, tid); !ok || nice != writerNice {
		t.Fatalf("writer thread %d: nice %d (found %v), want %d", tid, nice, ok, writerNice)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// The thread ends with the writer: no other goroutine inherits its priority.
	for {
		if _, ok := threadNice(t, tid); !ok {
			break
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/stat", tid))
			t.Fatalf("writer thread %d still alive after Close: %s", tid, b)
		}
		time.Sleep(time.Millisecond)
	}

	p := openTemp(t, filepath.Join(t.TempDir(), "power.db"), WithDurability(DurablePower))
	// A write: the writer has started once it returns.
	if err := p.CreateWorkspace(t.Context(), store.Workspace{ID: "ws_power", Name: "power"}); err != nil {
		t.Fatal(err)
	}
	if tid := p.wr.tid.Load(); tid != 0 {
		t.Fatalf("DurablePower writer set apart on thread %d", tid)
	}
}
