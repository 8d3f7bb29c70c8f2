// Package blobs keeps the gateway's large objects (generated music, uploaded files, batch
// output and error files) out of the database, in a blob store: a directory (FS) for one
// instance, an S3-compatible object store (S3) for several instances sharing the blobs.
//
// A blob is written whole by one Put, streamed from its reader (never held in memory),
// and read back whole or by range. Keys are paths of safe characters that cannot escape
// the store's root, so that a key built from ids in a request cannot name another file.
// The package knows neither HTTP serving nor Caddy: module/ registers the backends as
// guest modules.
package blobs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
)

// Store is a blob store. Its methods are safe for concurrent use; concurrent Puts of one
// key leave one of them whole, never a mix.
type Store interface {
	// Put stores what r yields under key, replacing any blob there, and returns what was
	// stored. size is the length r yields, or -1 when unknown; a reader that yields
	// another length fails the Put and stores nothing. contentType is kept with the blob
	// ("" is application/octet-stream).
	Put(ctx context.Context, key string, r io.Reader, size int64, contentType string) (Info, error)
	// Open reads length bytes of the blob from offset (length -1: to its end; a range
	// past the end is cut at the end, as an HTTP range is). The Info is the whole
	// blob's. An offset past the end is ErrInvalidRange; a missing blob ErrNotFound.
	Open(ctx context.Context, key string, offset, length int64) (io.ReadCloser, Info, error)
	// Stat describes the blob, or returns ErrNotFound.
	Stat(ctx context.Context, key string) (Info, error)
	// Delete removes the blob; a missing blob is not an error, so that deleting again
	// after a crash is harmless.
	Delete(ctx context.Context, key string) error
}

// Info describes a stored blob.
type Info struct {
	// Key is the blob's key.
	Key string
	// Size is the blob's length in bytes.
	Size int64
	// ContentType is the media type given to Put.
	ContentType string
	// SHA256 is the hex SHA-256 of the content, computed while it was stored. It is ""
	// for an S3 object written by something else than this package, or whose Put did not
	// finish recording it.
	SHA256 string
	// ModTime is when the blob was stored.
	ModTime time.Time
}

var (
	// ErrNotFound is returned for a key that holds no blob.
	ErrNotFound = errors.New("blob not found")
	// ErrInvalidKey is returned for a key that is not a valid blob key (ValidateKey).
	ErrInvalidKey = errors.New("invalid blob key")
	// ErrInvalidRange is returned by Open for an offset past the blob's end, or negative.
	ErrInvalidRange = errors.New("invalid blob range")
	// ErrSizeMismatch is returned by Put when the reader yields another length than the
	// size it was given.
	ErrSizeMismatch = errors.New("blob size mismatch")
)

// DefaultContentType is the content type of a blob stored without one.
const DefaultContentType = "application/octet-stream"

// MaxKeyLength bounds keys, within what S3 (1024 bytes) and file systems (4096-byte
// paths) take.
const MaxKeyLength = 512

// MaxSegmentLength bounds each '/'-separated segment of a key, as file systems bound a
// file name.
const MaxSegmentLength = 255

// MaxContentTypeLength bounds the content type kept with a blob: it is stored in a fixed
// header (FS) or an HTTP header (S3).
const MaxContentTypeLength = 255

// ValidateKey tells whether key is a valid blob key: 1 to MaxKeyLength bytes of ASCII
// letters, digits, '-', '_', '.' and '/', made of '/'-separated segments that are not
// empty, do not begin with '.' and are at most MaxSegmentLength bytes. So no key is absolute, climbs out with "..", or names
// a hidden file, which FS keeps for its temporary files.
func ValidateKey(key string) error {
	if key == "" || len(key) > MaxKeyLength {
		return fmt.Errorf("%w: length %d, want 1 to %d bytes", ErrInvalidKey, len(key), MaxKeyLength)
	}
	segStart, segLen := true, 0
	for i := 0; i < len(key); i++ {
		c := key[i]
		switch {
		case c == '/':
			if segStart {
				return fmt.Errorf("%w %q: empty segment", ErrInvalidKey, key)
			}
			segStart, segLen = true, 0
			continue
		case c == '.':
			if segStart {
				return fmt.Errorf("%w %q: a segment begins with '.'", ErrInvalidKey, key)
			}
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_':
		default:
			return fmt.Errorf("%w %q: character %q (want letters, digits, '-', '_', '.', '/')", ErrInvalidKey, key, c)
		}
		segStart = false
		if segLen++; segLen > MaxSegmentLength {
			return fmt.Errorf("%w: a segment longer than %d bytes", ErrInvalidKey, MaxSegmentLength)
		}
	}
	if segStart {
		return fmt.Errorf("%w %q: ends with '/'", ErrInvalidKey, key)
	}
	return nil
}

// checkPut validates a Put's arguments and returns the content type to store.
func checkPut(key string, size int64, contentType string) (string, error) {
	if err := ValidateKey(key); err != nil {
		return "", err
	}
	if size < -1 {
		return "", fmt.Errorf("blob %q: size %d: want -1 (unknown) or more", key, size)
	}
	if contentType == "" {
		contentType = DefaultContentType
	}
	if len(contentType) > MaxContentTypeLength {
		return "", fmt.Errorf("blob %q: content type longer than %d bytes", key, MaxContentTypeLength)
	}
	for i := 0; i < len(contentType); i++ {
		// It travels as an HTTP header (S3, and to the clients that download the blob).
		if c := contentType[i]; c < ' ' || c > '~' {
			return "", fmt.Errorf("blob %q: content type with a byte that is not printable ASCII (%#x)", key, c)
		}
	}
	return contentType, nil
}

// checkRange validates an Open's range against nothing but itself.
func checkRange(offset, length int64) error {
	if offset < 0 || length < -1 {
		return fmt.Errorf("%w: offset %d, length %d", ErrInvalidRange, offset, length)
	}
	return nil
}

// contextReader fails a read once ctx is done, so that a Put whose caller gave up stops
// copying.
type contextReader struct {
	ctx context.Context
	r   io.Reader
}

func (c contextReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// sizedReader yields r's bytes and, at its end, fails with ErrSizeMismatch when r did not
// yield exactly size bytes (size -1 accepts any length). It counts what it yielded.
type sizedReader struct {
	r    io.Reader
	size int64
	n    int64
}

func (s *sizedReader) Read(p []byte) (int, error) {
	if s.size >= 0 && int64(len(p)) > s.size-s.n+1 {
		// Reading one byte past size is enough to tell a longer reader.
		p = p[:s.size-s.n+1]
	}
	n, err := s.r.Read(p)
	s.n += int64(n)
	if s.size >= 0 && s.n > s.size {
		return n, fmt.Errorf("%w: the reader yields more than %d bytes", ErrSizeMismatch, s.size)
	}
	if err == io.EOF && s.size >= 0 && s.n != s.size {
		return n, fmt.Errorf("%w: the reader yields %d bytes, not %d", ErrSizeMismatch, s.n, s.size)
	}
	return n, err
}
