// Package readall reads a body whose length is usually announced, in one allocation.
package readall

import (
	"io"

	"github.com/modelgateway/caddy-modelgateway/internal/bufs"
)

// ReadAll reads r to its end, like io.ReadAll. When hint (a Content-Length) is positive and
// at most limit, the buffer is made to hold hint bytes at once, and one more so that the end
// of r is seen without growing it; io.ReadAll would start at 512 bytes and grow step by step.
// A wrong hint only costs the growth io.ReadAll would have had.
func ReadAll(r io.Reader, hint, limit int64) ([]byte, error) {
	if hint <= 0 || hint > limit {
		return io.ReadAll(r)
	}
	return Append(nil, r, hint, limit)
}

// Append reads r to its end, appending to dst, and returns the extended slice: ReadAll into
// a buffer the caller reuses. With a positive hint of at most limit, dst grows once to hold
// hint bytes and one more.
func Append(dst []byte, r io.Reader, hint, limit int64) ([]byte, error) {
	if hint > 0 && hint <= limit {
		dst = bufs.Grow(dst, int(hint)+1)
	} else {
		dst = bufs.Grow(dst, 512)
	}
	for {
		n, err := r.Read(dst[len(dst):cap(dst)])
		dst = dst[:len(dst)+n]
		if err == io.EOF {
			return dst, nil
		}
		if err != nil {
			return dst, err
		}
		if len(dst) == cap(dst) {
			dst = append(dst, 0)[:len(dst)] // grow as append does
		}
	}
}
