package upload

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"os"
	"path/filepath"
	"slices"
	"strconv"
)

// Options bound what Parse reads and say when it may stream a file.
type Options struct {
	// Limit is the largest request body read, in bytes, multipart framing included. The
	// default is DefaultLimit (25 MiB).
	Limit int64
	// Length is the request's announced Content-Length, or -1 (or 0) when unknown. A body announced
	// larger than Limit is refused before anything is read.
	Length int64
	// MaxFieldBytes is the largest value of one field (not file) read into memory. The default
	// is DefaultMaxFieldBytes (64 KiB).
	MaxFieldBytes int64
	// MaxFieldsBytes bounds the values of all fields together. The default is
	// DefaultMaxFieldsBytes (1 MiB).
	MaxFieldsBytes int64
	// MaxParts is the largest number of parts. The default is DefaultMaxParts.
	MaxParts int
	// Needed names the fields that must be read before a file is streamed; a file arriving
	// before them is spooled. Nil means "model"; an empty, non-nil list streams the first file.
	Needed []string
	// Replay spools every file, so that Form.Body can be written again for a fallback route.
	Replay bool
	// TempDir is where spool files are made. The default is os.TempDir().
	TempDir string
}

// Part describes one part of the form, in the order the client sent it.
type Part struct {
	// Name is the field's name with a list suffix removed: "image" for image, image[] and
	// image[3]. Nested names such as chunking_strategy[type] are kept whole.
	Name string
	// Sent is the name as the client sent it.
	Sent string
	// List is true when the name carried a list suffix ([] or [N]).
	List bool
	// File is true for a file part (one with a filename parameter, even empty).
	File bool
	// FileName is the file's name without directories; ContentType its Content-Type, or the
	// field's when the client gave one.
	FileName, ContentType string
	// Value is a field's value; empty for a file.
	Value string
	// Size is the value's length or the file's, or -1 while a streamed file is not read to its end.
	Size int64

	spooled bool
	off     int64 // where a spooled file's content starts in the spool
}

// Form is a multipart body being read; see the package doc.
type Form struct {
	opt      Options
	limit    *limitReader
	mr       *partReader
	parts    []Part
	live     *formPart // the file part left in the body, not read yet
	reader   *Body     // the Body that read from the request body
	complete bool      // the request body was read to its end
	fields   int64     // bytes of field values held
	spool    *spool
	spoolLen int64
	boundary string
}

// Parse reads a multipart/form-data body up to its first file that may be streamed, or to its
// end. The caller closes the Form; on error nothing is left to close.
func Parse(r io.Reader, boundary string, opt Options) (*Form, error) {
	if err := checkBoundary(boundary); err != nil {
		return nil, err
	}
	if opt.Limit <= 0 {
		opt.Limit = DefaultLimit
	}
	if opt.MaxFieldBytes <= 0 {
		opt.MaxFieldBytes = DefaultMaxFieldBytes
	}
	if opt.MaxFieldsBytes <= 0 {
		opt.MaxFieldsBytes = DefaultMaxFieldsBytes
	}
	if opt.MaxParts <= 0 {
		opt.MaxParts = DefaultMaxParts
	}
	if opt.Needed == nil {
		opt.Needed = []string{"model"}
	}
	if opt.Length > opt.Limit {
		return nil, &TooLargeError{Limit: opt.Limit}
	}
	f := &Form{opt: opt, limit: &limitReader{r: r, limit: opt.Limit}}
	f.mr = newPartReader(f.limit, boundary)
	f.limit.final = "--" + boundary + "--"
	f.boundary = multipart.NewWriter(io.Discard).Boundary()
	if err := f.read(); err != nil {
		_ = f.Close()
		f.mr.release()
		return nil, err
	}
	return f, nil
}

// read reads parts until a file may be streamed or the body ends.
func (f *Form) read() error {
	for {
		p, err := f.next()
		if err != nil || p == nil {
			return err
		}
		if !p.File {
			continue
		}
		if !f.opt.Replay && f.seenNeeded() {
			return nil
		}
		if err := f.spoolLive(); err != nil {
			return err
		}
	}
}

// next reads the next part's header, and a field's value; it returns nil at the end of the
// body. A file part is left in f.live for the caller to spool or stream.
func (f *Form) next() (*Part, error) {
	if f.complete {
		return nil, nil
	}
	mp, err := f.mr.NextPart()
	if err == io.EOF && !f.limit.ended() {
		// A header cut short by the end of the body is reported as io.EOF too.
		err = io.ErrUnexpectedEOF
	}
	if err == io.EOF {
		f.complete = true
		f.mr.release() // nothing reads the request body from now on
		return nil, nil
	}
	if err != nil {
		return nil, f.readErr("reading part header", err)
	}
	if len(f.parts) >= f.opt.MaxParts {
		return nil, &FormError{Reason: fmt.Sprintf("more than %d parts", f.opt.MaxParts)}
	}
	p, err := newPart(mp)
	if err != nil {
		return nil, err
	}
	if p.File {
		f.parts = append(f.parts, p)
		f.live = mp
		return &f.parts[len(f.parts)-1], nil
	}
	if p.Value, err = f.readField(mp, p.Sent); err != nil {
		return nil, err
	}
	p.Size = int64(len(p.Value))
	f.parts = append(f.parts, p)
	return &f.parts[len(f.parts)-1], nil
}

func newPart(mp *formPart) (Part, error) {
	disp, params, err := mime.ParseMediaType(mp.Header.Get("Content-Disposition"))
	if err != nil {
		return Part{}, &FormError{Reason: "part Content-Disposition", Err: err}
	}
	sent := params["name"]
	if disp != "form-data" || sent == "" {
		return Part{}, &FormError{Reason: "part without a form-data name"}
	}
	p := Part{Sent: sent, ContentType: mp.Header.Get("Content-Type"), Size: -1}
	p.Name, p.List = splitName(sent)
	if _, ok := params["filename"]; ok {
		// RFC 7578 (4.2): a filename's directories are not used.
		p.File = true
		if name := params["filename"]; name != "" {
			p.FileName = filepath.Base(name)
		}
		if p.FileName == "." || p.FileName == "/" {
			p.FileName = ""
		}
	}
	return p, nil
}

func (f *Form) readField(mp *formPart, name string) (string, error) {
	max := min(f.opt.MaxFieldBytes, f.opt.MaxFieldsBytes-f.fields)
	b, err := io.ReadAll(io.LimitReader(mp, max+1))
	if err != nil {
		return "", f.readErr("reading field "+strconv.Quote(name), err)
	}
	if int64(len(b)) > max {
		if max < f.opt.MaxFieldBytes {
			return "", &TooLargeError{Limit: f.opt.MaxFieldsBytes, Field: name}
		}
		return "", &TooLargeError{Limit: f.opt.MaxFieldBytes, Field: name}
	}
	f.fields += int64(len(b))
	return string(b), nil
}

// spoolLive copies the file part in f.live to the spool file.
func (f *Form) spoolLive() error {
	if f.spool == nil {
		s, err := newSpool(f.opt.TempDir)
		if err != nil {
			return &SpoolError{Op: "creating", Err: err}
		}
		f.spool, f.spoolLen = s, spooledLead
		if _, err := s.file.Seek(spooledLead, io.SeekStart); err != nil {
			return &SpoolError{Op: "seeking in", Err: err}
		}
	}
	p := &f.parts[len(f.parts)-1]
	// Room for the part's header (CRLF, boundary line, disposition, type) under the name the
	// client sent, so that a body's files and the headers between them can be one stretch of
	// the spool (Body.fileRest writes them there).
	room := int64(len(appendPartHeader([]byte("\r\n"), f.boundary, p.Sent, p)))
	if _, err := f.spool.file.Seek(room, io.SeekCurrent); err != nil {
		return &SpoolError{Op: "seeking in", Err: err}
	}
	f.spoolLen += room
	n, err := f.live.WriteTo(writerOnly{f.spool.file})
	f.live = nil
	if err != nil {
		var serr *SpoolError
		if errors.As(err, &serr) {
			return serr
		}
		return f.readErr("reading file "+strconv.Quote(p.Sent), err)
	}
	p.spooled, p.off, p.Size = true, f.spoolLen, n
	f.spoolLen += n
	return nil
}

// readErr tells a body past its limit and a failed read of the request from a malformed form.
func (f *Form) readErr(what string, err error) error {
	if f.limit.err != nil {
		var tl *TooLargeError
		if errors.As(f.limit.err, &tl) {
			return tl
		}
		return fmt.Errorf("upload: reading request body: %w", f.limit.err)
	}
	return &FormError{Reason: what, Err: err}
}

func (f *Form) seenNeeded() bool {
	for _, n := range f.opt.Needed {
		if _, ok := f.Value(n); !ok {
			return false
		}
	}
	return true
}

// Parts returns the parts read so far, in order. A file that Parse left to stream is last.
func (f *Form) Parts() []Part { return slices.Clone(f.parts) }

// Value returns the first value of the field name (see Part.Name), and whether there is one.
func (f *Form) Value(name string) (string, bool) {
	for i := range f.parts {
		if p := &f.parts[i]; !p.File && p.Name == name {
			return p.Value, true
		}
	}
	return "", false
}

// Values returns every value of the field name: image, image[] and image[N] alike.
func (f *Form) Values(name string) []string {
	var vs []string
	for i := range f.parts {
		if p := &f.parts[i]; !p.File && p.Name == name {
			vs = append(vs, p.Value)
		}
	}
	return vs
}

// Files returns the file parts named name, in order.
func (f *Form) Files(name string) []Part {
	var ps []Part
	for _, p := range f.parts {
		if p.File && p.Name == name {
			ps = append(ps, p)
		}
	}
	return ps
}

// Bool reads a boolean sent as text ("true", "false", "1", "0"); ok is false when absent.
func (f *Form) Bool(name string) (v, ok bool, err error) {
	s, ok := f.Value(name)
	if !ok {
		return false, false, nil
	}
	v, err = strconv.ParseBool(s)
	if err != nil {
		return false, true, fmt.Errorf("upload: field %q: %q is not a boolean", name, s)
	}
	return v, true, nil
}

// Int reads an integer sent as text; ok is false when absent.
func (f *Form) Int(name string) (v int64, ok bool, err error) {
	s, ok := f.Value(name)
	if !ok {
		return 0, false, nil
	}
	v, err = strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, true, fmt.Errorf("upload: field %q: %q is not an integer", name, s)
	}
	return v, true, nil
}

// Float reads a number sent as text; ok is false when absent.
func (f *Form) Float(name string) (v float64, ok bool, err error) {
	s, ok := f.Value(name)
	if !ok {
		return 0, false, nil
	}
	v, err = strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, true, fmt.Errorf("upload: field %q: %q is not a number", name, s)
	}
	return v, true, nil
}

// Open returns a reader of a spooled file part, such as one of Files' (to measure an audio
// file's duration); a streamed file cannot be opened.
func (f *Form) Open(p Part) (*io.SectionReader, error) {
	if !p.File || !p.spooled || f.spool == nil {
		return nil, errors.New("upload: part is not a spooled file")
	}
	return io.NewSectionReader(f.spool, p.off, p.Size), nil
}

// Spool reads the rest of the request body, spooling every file, so that the form is
// complete and Body can be written as many times as needed: for a route chosen after Parse
// streamed nothing yet, which must be retried or fall back, or whose file must be measured.
// It returns ErrConsumed once a Body read the request.
func (f *Form) Spool() error {
	if f.reader != nil {
		return ErrConsumed
	}
	f.opt.Replay = true
	if f.live != nil {
		if err := f.spoolLive(); err != nil {
			return err
		}
	}
	return f.read()
}

// Complete reports whether the request body was read to its end.
func (f *Form) Complete() bool { return f.complete }

// Replayable reports whether Body can still be called: no body has read the request past
// what Parse read. A form that Parse read whole (Complete before any Body), as one parsed
// with Replay, stays replayable.
func (f *Form) Replayable() bool { return f.reader == nil }

// Size is the number of request-body bytes read so far.
func (f *Form) Size() int64 { return f.limit.n }

// SetLimit lowers the body limit, for a route whose upload limit is below the one Parse was
// given; it returns a *TooLargeError when more than n bytes were read already.
func (f *Form) SetLimit(n int64) error {
	if n < f.limit.limit {
		f.limit.limit = n
	}
	if f.limit.n > n {
		return &TooLargeError{Limit: n}
	}
	return nil
}

// Close releases the spool file: readers of the form's files (Open's, a Body's) fail from
// then on. It does not close the request body.
func (f *Form) Close() error {
	if f.spool == nil {
		return nil
	}
	err := f.spool.release(f.opt.TempDir)
	f.spool = nil
	return err
}

// limitReader counts the bytes of the request body and fails once more than limit were read,
// handing out none past the limit.
type limitReader struct {
	r        io.Reader
	n, limit int64
	err      error // sticky: *TooLargeError or the request's read error
	eof      bool
	final    string    // the closing delimiter, --boundary--
	tail     [512]byte // the last bytes read, to find final in
	tailN    int
}

// ended reports whether a body whose parts have ended holds the closing delimiter: it is
// either not read to its end (the part reader stops reading at the delimiter) or
// its last bytes hold it (an epilogue after it is allowed, up to the tail's size).
func (l *limitReader) ended() bool {
	return !l.eof || bytes.Contains(l.tail[:l.tailN], []byte(l.final))
}

func (l *limitReader) keep(p []byte) {
	if len(p) >= len(l.tail) {
		l.tailN = copy(l.tail[:], p[len(p)-len(l.tail):])
		return
	}
	if drop := l.tailN + len(p) - len(l.tail); drop > 0 {
		copy(l.tail[:], l.tail[drop:l.tailN])
		l.tailN -= drop
	}
	l.tailN += copy(l.tail[l.tailN:], p)
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.err != nil {
		return 0, l.err
	}
	room := l.limit - l.n + 1 // one byte past the limit tells a body of exactly limit bytes
	if room <= 0 {
		l.err = &TooLargeError{Limit: l.limit}
		return 0, l.err
	}
	if int64(len(p)) > room {
		p = p[:room]
	}
	n, err := l.r.Read(p)
	l.n += int64(n)
	if l.n > l.limit {
		n -= int(l.n - l.limit)
		l.n = l.limit + 1
		l.err = &TooLargeError{Limit: l.limit}
		return max(n, 0), l.err
	}
	l.keep(p[:n])
	if err == io.EOF {
		l.eof = true
	} else if err != nil {
		l.err = err
	}
	return n, err
}

// spooledLead is the room left at the start of a spool, for the fields and header that come
// before the first file in a body sent from the spool (see Body.fileRest); a file system
// stores no blocks for it.
const spooledLead = 64 << 10

// readSize is how much of the request is read, and of a file spooled, at a time.
const readSize = 256 << 10

// writerOnly marks write errors so they are not taken for the request's.
type writerOnly struct{ f *os.File }

func (w writerOnly) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	if err != nil {
		return n, &SpoolError{Op: "writing", Err: err}
	}
	return n, nil
}
