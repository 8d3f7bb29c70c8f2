package audioprobe

import (
	"io"
	"runtime"
	"testing"
	"time"
)

// generator serves head, body repeated, then tail, size bytes in all, without holding more
// than one copy of each: an upload far larger than anything Duration may keep.
type generator struct {
	head, body, tail []byte
	size, off        int64
}

func (g *generator) Read(p []byte) (int, error) {
	if g.off >= g.size {
		return 0, io.EOF
	}
	n := 0
	for n < len(p) && g.off < g.size {
		var src []byte
		switch tailAt := g.size - int64(len(g.tail)); {
		case g.off < int64(len(g.head)):
			src = g.head[g.off:]
		case g.off >= tailAt:
			src = g.tail[g.off-tailAt:]
		default:
			src = g.body[(g.off-int64(len(g.head)))%int64(len(g.body)):]
			src = src[:min(int64(len(src)), tailAt-g.off)]
		}
		c := copy(p[n:], src)
		n += c
		g.off += int64(c)
	}
	return n, nil
}

// bytesAllocated is how many bytes fn allocates on the heap.
func bytesAllocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// A 30 MB upload is measured reading it through, with a few kilobytes of memory: the buffer
// and the reader around it, never the file.
func TestMemoryBounded(t *testing.T) {
	const size = 30 << 20
	frame := mpegFrames([4]byte{0xFF, 0xFB, 0x90, 0x00}, 417, 1)
	for _, tc := range []struct {
		name string
		gen  func() *generator
		want time.Duration
	}{
		{"wav placeholder size", func() *generator {
			// The data size is a placeholder, so the whole file is read to count it.
			head := cat([]byte("RIFF"), u32le(0xFFFFFFFF), []byte("WAVE"), fmtPCM(1, 2, 48000, 16), []byte("data"), u32le(0xFFFFFFFF))
			return &generator{head: head, body: make([]byte, 4096), size: size + int64(len(head))}
		}, seconds(size/4, 48000)},
		{"wav declared size", func() *generator {
			head := cat(wavFile(fmtPCM(1, 2, 48000, 16)), []byte("data"), u32le(size))
			return &generator{head: head, body: make([]byte, 4096), size: size + int64(len(head))}
		}, seconds(size/4, 48000)},
		{"mp3 frame walk", func() *generator {
			return &generator{body: frame, size: 417 * 75000}
		}, seconds(75000*1152, 44100)},
		{"m4a moov after 30 MB of mdat", func() *generator {
			moov := box("moov", timeBox("mvhd", 0, 1000, 2500), trak("soun", 44100, 110250))
			head := cat(ftypM4A, u32be(size+8), []byte("mdat"))
			return &generator{head: head, body: make([]byte, 4096), tail: moov, size: int64(len(head) + size + len(moov))}
		}, 2500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The least of three runs: the runtime and the test framework allocate now and
			// then on other goroutines, which TotalAlloc counts too.
			least := uint64(1 << 62)
			for range 3 {
				g := tc.gen()
				var (
					d   time.Duration
					err error
				)
				least = min(least, bytesAllocated(func() { d, _, err = Duration(g) }))
				if err != nil || d != tc.want {
					t.Fatalf("got %v, %v; want %v", d, err, tc.want)
				}
				if g.off < g.size {
					t.Errorf("read %d of %d bytes", g.off, g.size)
				}
			}
			if least > 8<<10 {
				t.Errorf("allocated %d bytes for a %d-byte file", least, tc.gen().size)
			}
		})
	}
}
