// Package bufs holds the byte-slice helpers that the encoders and readers appending into a
// caller's buffer, and the pooled encoders, share.
package bufs

// Grow returns dst with room for at least n more bytes, exactly n more when it must grow, in
// one allocation. slices.Grow makes a second, temporary one under the race detector, and
// the encoders' tests count allocations.
func Grow(dst []byte, n int) []byte {
	if cap(dst)-len(dst) >= n {
		return dst
	}
	b := make([]byte, len(dst), len(dst)+n)
	copy(b, dst)
	return b
}

// KeptRoom is the largest buffer a pooled encoder keeps between streams: a stream that
// wrote a long text or tool argument in one event grew its encoder's buffers to fit, and
// the pooled encoder would hold that memory for whichever stream took it next.
const KeptRoom = 16 << 10

// Reuse returns b emptied for its next user, or, when it grew past KeptRoom, a new buffer
// of size bytes (nil for size 0), leaving the large one to the collector.
func Reuse(b []byte, size int) []byte {
	if cap(b) > KeptRoom {
		if size == 0 {
			return nil
		}
		return make([]byte, 0, size)
	}
	return b[:0]
}
