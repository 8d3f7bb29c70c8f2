// Package bufs holds the byte-slice helper that the encoders and readers appending into a
// caller's buffer share.
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
