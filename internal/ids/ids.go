// Package ids makes the gateway's identifiers: time-ordered ULIDs with a kind prefix
// (gen_01J..., ws_01J...) and random lowercase tokens for key ids and secrets.
package ids

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"strings"
	"sync"
	"time"
)

const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// ULID returns a 26-character ULID for time t: 48 bits of milliseconds, 80 random bits.
func ULID(t time.Time) string {
	var out [26]byte
	ulid(&out, t)
	return string(out[:])
}

func ulid(out *[26]byte, t time.Time) {
	b := random(t)
	encode(out, &b)
}

// random is the 128 bits of a ULID of t: its milliseconds, then 80 random bits.
func random(t time.Time) [16]byte {
	var b [16]byte
	ms := uint64(t.UnixMilli())
	binary.BigEndian.PutUint16(b[0:2], uint16(ms>>32))
	binary.BigEndian.PutUint32(b[2:6], uint32(ms))
	_, _ = rand.Read(b[6:])
	return b
}

// encode writes the 128 bits of b as 26 base-32 digits.
func encode(out *[26]byte, b *[16]byte) {
	// 128 bits as 26 base-32 digits, most significant first (the first digit holds 3 bits).
	hi := binary.BigEndian.Uint64(b[0:8])
	lo := binary.BigEndian.Uint64(b[8:16])
	for i := 25; i >= 0; i-- {
		out[i] = crockford[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
}

// last is the newest ULID New made: the ones it makes in the same millisecond count up
// from it, so that ids made one after the other in this process sort in that order (lists
// are ordered by creation time, then id, at millisecond precision).
var last struct {
	sync.Mutex
	b [16]byte
}

// monotonic fills out with a ULID of t greater than every one it made before.
func monotonic(out *[26]byte, t time.Time) {
	b := random(t)
	last.Lock()
	if bytes.Compare(b[:6], last.b[:6]) <= 0 {
		// The same millisecond (or a clock stepped back): one more than the last.
		b = last.b
		for i := 15; i >= 0; i-- {
			b[i]++
			if b[i] != 0 {
				break
			}
		}
	}
	last.b = b
	last.Unlock()
	encode(out, &b)
}

// New returns prefix + "_" + a ULID of now, in one allocation. Ids New makes in this
// process increase strictly in the order it makes them.
func New(prefix string) string {
	var u [26]byte
	monotonic(&u, time.Now())
	var sb strings.Builder
	sb.Grow(len(prefix) + 1 + len(u))
	sb.WriteString(prefix)
	sb.WriteByte('_')
	sb.Write(u[:])
	return sb.String()
}

const lowerAlnum = "abcdefghijklmnopqrstuvwxyz0123456789"

// Token returns n random characters from [a-z0-9], drawn without modulo bias.
func Token(n int) string {
	out := make([]byte, 0, n)
	var buf [64]byte
	for len(out) < n {
		_, _ = rand.Read(buf[:])
		for _, c := range buf {
			// 252 = 7*36: reject the top values so every character is equally likely.
			if c < 252 && len(out) < n {
				out = append(out, lowerAlnum[int(c)%36])
			}
		}
	}
	return string(out)
}
