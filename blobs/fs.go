package blobs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// FS is a blob store in a directory: each blob is one file at its key's path under the
// root. The file begins with a fixed-size header (the size, content type and checksum)
// followed by the content, so that a blob and its description are replaced together by
// one rename: a reader sees the old blob or the new one, never one's content with the
// other's description, and a crash leaves no half-written blob (only a hidden temporary
// file, which no key can name).
type FS struct {
	root string
}

// fsHeaderSize is the length of a blob file's header: room for the longest content type,
// escaped, with the rest of the description.
const fsHeaderSize = 2048

// fsMagic begins every blob file, so that a file that is not one is refused rather than
// misread.
const fsMagic = "MGBLOB1\n"

// fsHeader is the description kept at the start of a blob file.
type fsHeader struct {
	Size        int64  `json:"size"`
	ContentType string `json:"content_type"`
	SHA256      string `json:"sha256"`
}

// NewFS returns a blob store in the directory root. It touches no file: the first Put
// creates the directory (so that `caddy validate` creates nothing).
func NewFS(root string) (*FS, error) {
	if root == "" {
		return nil, errors.New("blob store directory: none given")
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("blob store directory %q: %w", root, err)
	}
	return &FS{root: abs}, nil
}

// Root is the store's directory.
func (s *FS) Root() string { return s.root }

func (s *FS) path(key string) string { return filepath.Join(s.root, filepath.FromSlash(key)) }

// Put writes the blob to a temporary file beside its place, syncs it, and renames it
// into place.
func (s *FS) Put(ctx context.Context, key string, r io.Reader, size int64, contentType string) (Info, error) {
	contentType, err := checkPut(key, size, contentType)
	if err != nil {
		return Info{}, err
	}
	path := s.path(key)
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return Info{}, fmt.Errorf("blob %q: %w", key, err)
	}
	f, err := os.CreateTemp(dir, ".put-*")
	if err != nil {
		return Info{}, fmt.Errorf("blob %q: %w", key, err)
	}
	done := false
	defer func() {
		if !done {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}()
	if _, err := f.Seek(fsHeaderSize, io.SeekStart); err != nil {
		return Info{}, fmt.Errorf("blob %q: %w", key, err)
	}
	sum := sha256.New()
	src := &sizedReader{r: contextReader{ctx: ctx, r: r}, size: size}
	if _, err := io.Copy(io.MultiWriter(f, sum), src); err != nil {
		return Info{}, fmt.Errorf("blob %q: storing: %w", key, err)
	}
	h := fsHeader{Size: src.n, ContentType: contentType, SHA256: hex.EncodeToString(sum.Sum(nil))}
	head, err := encodeFSHeader(h)
	if err != nil {
		return Info{}, fmt.Errorf("blob %q: %w", key, err)
	}
	if _, err := f.WriteAt(head, 0); err != nil {
		return Info{}, fmt.Errorf("blob %q: %w", key, err)
	}
	if err := f.Sync(); err != nil {
		return Info{}, fmt.Errorf("blob %q: syncing: %w", key, err)
	}
	st, err := f.Stat()
	if err != nil {
		return Info{}, fmt.Errorf("blob %q: %w", key, err)
	}
	if err := f.Close(); err != nil {
		return Info{}, fmt.Errorf("blob %q: %w", key, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return Info{}, fmt.Errorf("blob %q: %w", key, err)
	}
	done = true
	// The rename is durable once the directory's entry is.
	if err := syncDir(dir); err != nil {
		return Info{}, fmt.Errorf("blob %q: syncing its directory: %w", key, err)
	}
	return Info{Key: key, Size: h.Size, ContentType: h.ContentType, SHA256: h.SHA256, ModTime: st.ModTime()}, nil
}

func encodeFSHeader(h fsHeader) ([]byte, error) {
	js, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	if len(fsMagic)+len(js)+1 > fsHeaderSize {
		return nil, errors.New("blob description too long")
	}
	head := bytes.Repeat([]byte{' '}, fsHeaderSize)
	copy(head, fsMagic)
	copy(head[len(fsMagic):], js)
	head[fsHeaderSize-1] = '\n'
	return head, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	return errors.Join(err, d.Close())
}

// open opens the blob file and reads its header.
func (s *FS) open(key string) (*os.File, Info, error) {
	if err := ValidateKey(key); err != nil {
		return nil, Info{}, err
	}
	f, err := os.Open(s.path(key))
	if err != nil {
		if isMissing(err) {
			return nil, Info{}, fmt.Errorf("blob %q: %w", key, ErrNotFound)
		}
		return nil, Info{}, fmt.Errorf("blob %q: %w", key, err)
	}
	info, err := readFSHeader(f, key)
	if err != nil {
		_ = f.Close()
		return nil, Info{}, err
	}
	return f, info, nil
}

func readFSHeader(f *os.File, key string) (Info, error) {
	st, err := f.Stat()
	if err != nil {
		return Info{}, fmt.Errorf("blob %q: %w", key, err)
	}
	if st.IsDir() {
		// A key that is a prefix of other keys names a directory, not a blob.
		return Info{}, fmt.Errorf("blob %q: %w", key, ErrNotFound)
	}
	head := make([]byte, fsHeaderSize)
	if _, err := io.ReadFull(f, head); err != nil || !bytes.HasPrefix(head, []byte(fsMagic)) {
		return Info{}, fmt.Errorf("blob %q: not a blob file", key)
	}
	var h fsHeader
	if err := json.Unmarshal(bytes.TrimRight(head[len(fsMagic):], " \n"), &h); err != nil {
		return Info{}, fmt.Errorf("blob %q: reading its description: %w", key, err)
	}
	if h.Size != st.Size()-fsHeaderSize {
		return Info{}, fmt.Errorf("blob %q: file of %d bytes for a blob of %d", key, st.Size(), h.Size)
	}
	return Info{Key: key, Size: h.Size, ContentType: h.ContentType, SHA256: h.SHA256, ModTime: st.ModTime()}, nil
}

// isMissing tells whether an error of opening a blob's path means there is none: a path
// through a file where a directory would be (ENOTDIR) names no blob either.
func isMissing(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)
}

// Open reads the blob's range from its file.
func (s *FS) Open(_ context.Context, key string, offset, length int64) (io.ReadCloser, Info, error) {
	if err := checkRange(offset, length); err != nil {
		return nil, Info{}, err
	}
	f, info, err := s.open(key)
	if err != nil {
		return nil, Info{}, err
	}
	if offset > info.Size {
		_ = f.Close()
		return nil, Info{}, fmt.Errorf("blob %q: %w: offset %d past its %d bytes", key, ErrInvalidRange, offset, info.Size)
	}
	n := info.Size - offset
	if length >= 0 && length < n {
		n = length
	}
	return sectionReadCloser{SectionReader: io.NewSectionReader(f, fsHeaderSize+offset, n), f: f}, info, nil
}

type sectionReadCloser struct {
	*io.SectionReader
	f *os.File
}

func (s sectionReadCloser) Close() error { return s.f.Close() }

// Stat reads the blob's header.
func (s *FS) Stat(_ context.Context, key string) (Info, error) {
	f, info, err := s.open(key)
	if err != nil {
		return Info{}, err
	}
	_ = f.Close()
	return info, nil
}

// Delete removes the blob's file. The directories of its key stay: another Put may be
// creating a blob in them at the same moment.
func (s *FS) Delete(_ context.Context, key string) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	path := s.path(key)
	st, err := os.Lstat(path)
	if err != nil {
		if isMissing(err) {
			return nil
		}
		return fmt.Errorf("blob %q: %w", key, err)
	}
	if st.IsDir() {
		return nil
	}
	if err := os.Remove(path); err != nil && !isMissing(err) {
		return fmt.Errorf("blob %q: %w", key, err)
	}
	return nil
}

var _ Store = (*FS)(nil)
