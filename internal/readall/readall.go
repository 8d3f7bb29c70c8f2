// Package readall reads a body whose length is usually announced, in one allocation.
package readall

import "io"

// ReadAll reads r to its end, like io.ReadAll. When hint (a Content-Length) is positive and
// at most limit, the buffer is made to hold hint bytes at once, and one more so that the end
// of r is seen without growing it; io.ReadAll would start at 512 bytes and grow step by step.
// A wrong hint only costs the growth io.ReadAll would have had.
func ReadAll(r io.Reader, hint, limit int64) ([]byte, error) {
	if hint <= 0 || hint > limit {
		return io.ReadAll(r)
	}
	b := make([]byte, 0, hint+1)
	for {
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)] // grow as append does
		}
	}
}
