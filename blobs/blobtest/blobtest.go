// Package blobtest is the conformance suite of blob stores: every implementation of
// blobs.Store runs it, so that the job families can rely on one behaviour whichever
// backend the operator picks.
package blobtest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/blobs"
)

// Config is what the suite needs of an implementation.
type Config struct {
	// New returns an empty store for one test.
	New func(t *testing.T) blobs.Store
	// NewIsolated returns an empty store for the test that measures this process's heap
	// during a large Put: a store whose server would otherwise run in this process (an
	// in-process fake) must keep the server's memory out of it. Default: New.
	NewIsolated func(t *testing.T) blobs.Store
}

// LargeSize is the size of the streamed Put whose heap growth the suite bounds.
const LargeSize = 64 << 20

// MaxHeapGrowth bounds the heap growth of a LargeSize Put: far below the blob's size,
// above a part buffer of an S3 multipart upload (blobs.DefaultPartSize).
const MaxHeapGrowth = LargeSize / 4

// Run runs the suite.
func Run(t *testing.T, cfg Config) {
	if cfg.NewIsolated == nil {
		cfg.NewIsolated = cfg.New
	}
	t.Run("PutOpenStatDelete", func(t *testing.T) { testLifecycle(t, cfg.New(t)) })
	t.Run("Ranges", func(t *testing.T) { testRanges(t, cfg.New(t)) })
	t.Run("Overwrite", func(t *testing.T) { testOverwrite(t, cfg.New(t)) })
	t.Run("Missing", func(t *testing.T) { testMissing(t, cfg.New(t)) })
	t.Run("InvalidKeys", func(t *testing.T) { testInvalidKeys(t, cfg.New(t)) })
	t.Run("SizeMismatch", func(t *testing.T) { testSizeMismatch(t, cfg.New(t)) })
	t.Run("UnknownAndEmpty", func(t *testing.T) { testUnknownAndEmpty(t, cfg.New(t)) })
	t.Run("Concurrent", func(t *testing.T) { testConcurrent(t, cfg.New(t)) })
	t.Run("LargeStreamed", func(t *testing.T) { testLarge(t, cfg.NewIsolated(t)) })
}

func checksum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// content returns n bytes that differ with seed.
func content(seed byte, n int) []byte {
	b := make([]byte, n)
	_, _ = io.ReadFull(&generator{state: uint64(seed) + 1, left: int64(n)}, b)
	return b
}

// generator yields left pseudo-random bytes without holding them.
type generator struct {
	state uint64
	left  int64
}

func (g *generator) Read(p []byte) (int, error) {
	if g.left == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > g.left {
		p = p[:g.left]
	}
	for i := range p {
		g.state ^= g.state << 13
		g.state ^= g.state >> 7
		g.state ^= g.state << 17
		p[i] = byte(g.state)
	}
	g.left -= int64(len(p))
	return len(p), nil
}

func put(t *testing.T, s blobs.Store, key string, b []byte, contentType string) blobs.Info {
	t.Helper()
	info, err := s.Put(context.Background(), key, bytes.NewReader(b), int64(len(b)), contentType)
	if err != nil {
		t.Fatalf("Put(%q): %v", key, err)
	}
	return info
}

func read(t *testing.T, s blobs.Store, key string, offset, length int64) ([]byte, blobs.Info) {
	t.Helper()
	rc, info, err := s.Open(context.Background(), key, offset, length)
	if err != nil {
		t.Fatalf("Open(%q, %d, %d): %v", key, offset, length, err)
	}
	defer func() { _ = rc.Close() }()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("reading %q: %v", key, err)
	}
	return b, info
}

func checkInfo(t *testing.T, what string, got blobs.Info, key string, b []byte, contentType string) {
	t.Helper()
	if got.Key != key || got.Size != int64(len(b)) || got.ContentType != contentType || got.SHA256 != checksum(b) {
		t.Errorf("%s: info %+v, want key %q, size %d, content type %q, sha256 %s", what, got, key, len(b), contentType, checksum(b))
	}
	if d := time.Since(got.ModTime); got.ModTime.IsZero() || d > time.Hour || d < -time.Hour {
		t.Errorf("%s: modification time %v, want about now", what, got.ModTime)
	}
}

func testLifecycle(t *testing.T, s blobs.Store) {
	ctx := context.Background()
	key := "music/ws_1/job_1.mp3"
	b := content(1, 300_000)
	checkInfo(t, "Put", put(t, s, key, b, "audio/mpeg"), key, b, "audio/mpeg")
	st, err := s.Stat(ctx, key)
	if err != nil {
		t.Fatalf("Stat: %v", err)
	}
	checkInfo(t, "Stat", st, key, b, "audio/mpeg")
	got, info := read(t, s, key, 0, -1)
	if !bytes.Equal(got, b) {
		t.Fatalf("Open: %d bytes, not the %d stored", len(got), len(b))
	}
	checkInfo(t, "Open", info, key, b, "audio/mpeg")
	if err := s.Delete(ctx, key); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := s.Stat(ctx, key); !errors.Is(err, blobs.ErrNotFound) {
		t.Errorf("Stat after Delete: %v, want ErrNotFound", err)
	}
	if _, _, err := s.Open(ctx, key, 0, -1); !errors.Is(err, blobs.ErrNotFound) {
		t.Errorf("Open after Delete: %v, want ErrNotFound", err)
	}
	if err := s.Delete(ctx, key); err != nil {
		t.Errorf("Delete again: %v, want nil", err)
	}
	// A key beside a deleted one and a key whose prefix is a blob's directory are
	// independent of it.
	put(t, s, "a/b", []byte("x"), "")
	if _, err := s.Stat(ctx, "a"); !errors.Is(err, blobs.ErrNotFound) {
		t.Errorf("Stat of a key's parent: %v, want ErrNotFound", err)
	}
	if err := s.Delete(ctx, "a"); err != nil {
		t.Errorf("Delete of a key's parent: %v, want nil", err)
	}
	if _, err := s.Stat(ctx, "a/b"); err != nil {
		t.Errorf("Stat after deleting its parent: %v", err)
	}
}

func testRanges(t *testing.T, s blobs.Store) {
	const size = 1000
	b := content(2, size)
	put(t, s, "r", b, "video/mp4")
	tests := []struct {
		name           string
		offset, length int64
		want           []byte
		wantErr        error
	}{
		{name: "whole", offset: 0, length: -1, want: b},
		{name: "start", offset: 0, length: 10, want: b[:10]},
		{name: "first byte", offset: 0, length: 1, want: b[:1]},
		{name: "middle", offset: 500, length: 100, want: b[500:600]},
		{name: "to the end", offset: 990, length: -1, want: b[990:]},
		{name: "last byte", offset: 999, length: 1, want: b[999:]},
		{name: "cut at the end", offset: 990, length: 100, want: b[990:]},
		{name: "empty in the middle", offset: 10, length: 0, want: []byte{}},
		{name: "at the end", offset: size, length: -1, want: []byte{}},
		{name: "at the end, some length", offset: size, length: 5, want: []byte{}},
		{name: "past the end", offset: size + 1, length: -1, wantErr: blobs.ErrInvalidRange},
		{name: "far past the end", offset: 5000, length: 10, wantErr: blobs.ErrInvalidRange},
		{name: "empty past the end", offset: 5000, length: 0, wantErr: blobs.ErrInvalidRange},
		{name: "negative offset", offset: -1, length: 10, wantErr: blobs.ErrInvalidRange},
		{name: "negative length", offset: 0, length: -2, wantErr: blobs.ErrInvalidRange},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.wantErr != nil {
				rc, _, err := s.Open(context.Background(), "r", tc.offset, tc.length)
				if !errors.Is(err, tc.wantErr) {
					if rc != nil {
						_ = rc.Close()
					}
					t.Fatalf("Open: %v, want %v", err, tc.wantErr)
				}
				return
			}
			got, info := read(t, s, "r", tc.offset, tc.length)
			if !bytes.Equal(got, tc.want) {
				t.Errorf("read %d bytes, want %d (equal: %v)", len(got), len(tc.want), bytes.Equal(got, tc.want))
			}
			checkInfo(t, "Open", info, "r", b, "video/mp4")
		})
	}
}

func testOverwrite(t *testing.T, s blobs.Store) {
	first, second := content(3, 50_000), content(4, 20_000)
	put(t, s, "o/k", first, "text/plain")
	put(t, s, "o/k", second, "audio/wav")
	st, err := s.Stat(context.Background(), "o/k")
	if err != nil {
		t.Fatal(err)
	}
	checkInfo(t, "Stat", st, "o/k", second, "audio/wav")
	if got, _ := read(t, s, "o/k", 0, -1); !bytes.Equal(got, second) {
		t.Errorf("read %d bytes, not the second blob", len(got))
	}
}

func testMissing(t *testing.T, s blobs.Store) {
	ctx := context.Background()
	if _, err := s.Stat(ctx, "no/such/blob"); !errors.Is(err, blobs.ErrNotFound) {
		t.Errorf("Stat: %v, want ErrNotFound", err)
	}
	if _, _, err := s.Open(ctx, "no/such/blob", 0, -1); !errors.Is(err, blobs.ErrNotFound) {
		t.Errorf("Open: %v, want ErrNotFound", err)
	}
	if _, _, err := s.Open(ctx, "no/such/blob", 10, 5); !errors.Is(err, blobs.ErrNotFound) {
		t.Errorf("Open of a range: %v, want ErrNotFound", err)
	}
	if err := s.Delete(ctx, "no/such/blob"); err != nil {
		t.Errorf("Delete: %v, want nil", err)
	}
}

func testInvalidKeys(t *testing.T, s blobs.Store) {
	ctx := context.Background()
	for _, key := range []string{
		"", "/abs", "a/../b", "..", "../escape", "a/..", ".", "./a", "a//b", "a/", ".hidden", "a/.x",
		"a b", `a\b`, "a\x00b", "ä", "a?b", "a%2e", strings.Repeat("a", blobs.MaxSegmentLength+1),
		strings.Repeat(strings.Repeat("a", 99)+"/", blobs.MaxKeyLength/100) + "aaaaaaaaaaaaa",
	} {
		t.Run(fmt.Sprintf("%q", key), func(t *testing.T) {
			if _, err := s.Put(ctx, key, strings.NewReader("x"), 1, ""); !errors.Is(err, blobs.ErrInvalidKey) {
				t.Errorf("Put: %v, want ErrInvalidKey", err)
			}
			if rc, _, err := s.Open(ctx, key, 0, -1); !errors.Is(err, blobs.ErrInvalidKey) {
				if rc != nil {
					_ = rc.Close()
				}
				t.Errorf("Open: %v, want ErrInvalidKey", err)
			}
			if _, err := s.Stat(ctx, key); !errors.Is(err, blobs.ErrInvalidKey) {
				t.Errorf("Stat: %v, want ErrInvalidKey", err)
			}
			if err := s.Delete(ctx, key); !errors.Is(err, blobs.ErrInvalidKey) {
				t.Errorf("Delete: %v, want ErrInvalidKey", err)
			}
		})
	}
	for _, key := range []string{"a", "music/ws_1/job_2.mp3", "A-Z_0.9/x..y", strings.Repeat("k", blobs.MaxSegmentLength),
		strings.Repeat(strings.Repeat("k", 99)+"/", blobs.MaxKeyLength/100) + "kkkkkkkkkkkk"} {
		put(t, s, key, []byte(key), "")
		if got, _ := read(t, s, key, 0, -1); string(got) != key {
			t.Errorf("key %q: read %q", key, got)
		}
	}
}

func testSizeMismatch(t *testing.T, s blobs.Store) {
	ctx := context.Background()
	old := content(5, 100)
	put(t, s, "m/kept", old, "text/plain")
	for _, tc := range []struct {
		name string
		size int64
		data []byte
	}{
		{"shorter", 100, content(6, 50)},
		{"longer", 100, content(6, 150)},
		{"longer than a part", 100, content(6, 9<<20)},
		{"shorter than announced large", 20 << 20, content(6, 9<<20)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, key := range []string{"m/kept", "m/new"} {
				_, err := s.Put(ctx, key, bytes.NewReader(tc.data), tc.size, "")
				if !errors.Is(err, blobs.ErrSizeMismatch) {
					t.Errorf("Put(%q) of %d bytes announced as %d: %v, want ErrSizeMismatch", key, len(tc.data), tc.size, err)
				}
			}
			if _, err := s.Stat(ctx, "m/new"); !errors.Is(err, blobs.ErrNotFound) {
				t.Errorf("a failed Put stored a blob: Stat %v", err)
			}
			st, err := s.Stat(ctx, "m/kept")
			if err != nil {
				t.Fatal(err)
			}
			checkInfo(t, "the blob a failed Put would have replaced", st, "m/kept", old, "text/plain")
		})
	}
}

func testUnknownAndEmpty(t *testing.T, s blobs.Store) {
	ctx := context.Background()
	b := content(7, 3)
	info, err := s.Put(ctx, "u/small", bytes.NewReader(b), -1, "")
	if err != nil {
		t.Fatal(err)
	}
	checkInfo(t, "Put of an unknown size", info, "u/small", b, blobs.DefaultContentType)
	if got, _ := read(t, s, "u/small", 0, -1); !bytes.Equal(got, b) {
		t.Errorf("read %v, want %v", got, b)
	}
	for _, size := range []int64{0, -1} {
		info, err := s.Put(ctx, "u/empty", bytes.NewReader(nil), size, "application/json")
		if err != nil {
			t.Fatalf("Put of an empty blob, size %d: %v", size, err)
		}
		checkInfo(t, "Put of an empty blob", info, "u/empty", nil, "application/json")
		if got, info := read(t, s, "u/empty", 0, -1); len(got) != 0 || info.Size != 0 {
			t.Errorf("read %d bytes of an empty blob (info size %d)", len(got), info.Size)
		}
	}
	for _, contentType := range []string{"text/plain\r\nX-Injected: 1", strings.Repeat("a", blobs.MaxContentTypeLength+1), "audio/\xff"} {
		if _, err := s.Put(ctx, "u/typed", bytes.NewReader(b), 3, contentType); err == nil {
			t.Errorf("Put with content type %q succeeded", contentType)
		}
	}
	if _, err := s.Stat(ctx, "u/typed"); !errors.Is(err, blobs.ErrNotFound) {
		t.Errorf("a Put with a refused content type stored a blob: Stat %v", err)
	}
	ctxDone, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Put(ctxDone, "u/cancelled", bytes.NewReader(b), 3, ""); err == nil {
		t.Error("Put with a cancelled context succeeded")
	}
	if _, err := s.Stat(ctx, "u/cancelled"); !errors.Is(err, blobs.ErrNotFound) {
		t.Errorf("a cancelled Put stored a blob: Stat %v", err)
	}
}

func testConcurrent(t *testing.T, s blobs.Store) {
	const n = 12
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			b := content(byte(10+i), 100_000+i)
			_, errs[i] = s.Put(context.Background(), fmt.Sprintf("c/%d/blob", i), bytes.NewReader(b), int64(len(b)), "")
		})
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("Put %d: %v", i, errs[i])
		}
		b := content(byte(10+i), 100_000+i)
		key := fmt.Sprintf("c/%d/blob", i)
		got, info := read(t, s, key, 0, -1)
		if !bytes.Equal(got, b) {
			t.Errorf("%s: read %d bytes, not the %d put", key, len(got), len(b))
		}
		checkInfo(t, "Open", info, key, b, blobs.DefaultContentType)
	}
}

// testLarge puts LargeSize bytes of unknown size from a reader that never holds them,
// and bounds the heap's peak growth meanwhile, sampled: a store that buffers the blob
// holds all of it for the whole upload.
func testLarge(t *testing.T, s blobs.Store) {
	sum := sha256.New()
	_, _ = io.Copy(sum, &generator{state: 99, left: LargeSize})
	want := hex.EncodeToString(sum.Sum(nil))

	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	var peak uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapAlloc)
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	info, err := s.Put(context.Background(), "large/blob", &generator{state: 99, left: LargeSize}, -1, "video/mp4")
	close(stop)
	<-sampled
	if err != nil {
		t.Fatalf("Put: %v", err)
	}
	growth := int64(peak) - int64(base)
	t.Logf("heap peak growth during a %d MiB put: %.1f MiB", LargeSize>>20, float64(growth)/(1<<20))
	if growth > MaxHeapGrowth {
		t.Errorf("the heap grew by %d MiB during a %d MiB put, want at most %d MiB", growth>>20, LargeSize>>20, MaxHeapGrowth>>20)
	}
	if info.Size != LargeSize || info.SHA256 != want {
		t.Errorf("Put: size %d, sha256 %s; want %d, %s", info.Size, info.SHA256, LargeSize, want)
	}
	rc, _, err := s.Open(context.Background(), "large/blob", LargeSize-1000, -1)
	if err != nil {
		t.Fatal(err)
	}
	tail, err := io.ReadAll(rc)
	_ = rc.Close()
	if err != nil || len(tail) != 1000 {
		t.Errorf("reading the last 1000 bytes: %d bytes, %v", len(tail), err)
	}
	if err := s.Delete(context.Background(), "large/blob"); err != nil {
		t.Error(err)
	}
}
