// Package ids makes the gateway's identifiers: time-ordered ULIDs with a kind prefix
// (gen_01J..., ws_01J...) and random lowercase tokens for key ids and secrets.
package ids

import (
	"crypto/rand"
	"encoding/binary"
	"strings"
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
	var b [16]byte
	ms := uint64(t.UnixMilli())
	binary.BigEndian.PutUint16(b[0:2], uint16(ms>>32))
	binary.BigEndian.PutUint32(b[2:6], uint32(ms))
	_, _ = rand.Read(b[6:])
	// 128 bits as 26 base-32 digits, most significant first (the first digit holds 3 bits).
	hi := binary.BigEndian.Uint64(b[0:8])
	lo := binary.BigEndian.Uint64(b[8:16])
	for i := 25; i >= 0; i-- {
		out[i] = crockford[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
}

// New returns prefix + "_" + a ULID of now, in one allocation.
func New(prefix string) string {
	var u [26]byte
	ulid(&u, time.Now())
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
