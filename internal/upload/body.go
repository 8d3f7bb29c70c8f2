package upload

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"mime/multipart"
	"slices"
	"strconv"
	"strings"
)

// ListStyle is how Body writes the elements of a list field.
type ListStyle int

const (
	// Brackets writes name[] for every element, as the SDKs send lists.
	Brackets ListStyle = iota
	// Repeat writes the plain name for every element.
	Repeat
	// Indexed writes name[0], name[1]... in the order the parts arrived.
	Indexed
)

// BodyOptions are the changes a route makes to the form it forwards.
type BodyOptions struct {
	// Set replaces the value of the fields of these names (Part.Name), such as "model" by the
	// route's upstream model. A field the form lacks is written before the first part.
	Set map[string]string
	// Drop names fields and files not forwarded, by the name up to its first bracket: "meta"
	// drops meta and meta[user].
	Drop []string
	// Rename maps a name, up to its first bracket, to the upstream's: {"model": "model_id"}.
	Rename map[string]string
	// Lists names the fields written as lists even when the client sent one plain name, such as
	// "image" for an upstream that wants image[].
	Lists []string
	// ListStyle is how list elements are named; the default is Brackets.
	ListStyle ListStyle
}

// Body is the multipart body of a form for one upstream request, read once: an io.Reader
// and an io.WriterTo that stream the form's files without holding them in memory.
type Body struct {
	f        *Form
	spool    *spool // the form's, kept: Form.Close may run while a transport still reads
	opt      BodyOptions
	counting bool // Len walks the parts without reading them

	begun    bool
	missing  []string        // Set fields the form lacks, written first
	inserted map[string]bool // names written from missing: the client's own are dropped
	index    map[string]int  // the next index of each Indexed list
	i        int             // the next part of f.parts
	first    bool            // a part header was written
	ended    bool

	buf, pend []byte            // the header or closing boundary being written
	cur       io.Reader         // the part's content being written
	sec       *io.SectionReader // cur when it is a spooled file's content
	size      int64             // its size, when counting
	liveIdx   int               // the part index of a streamed file being written, or -1
	liveN     int64
	err       error
}

// Body returns the upstream body of the form with opt applied. It returns ErrConsumed when an
// earlier body already read the request past what Parse read (see Form.Replayable).
func (f *Form) Body(opt BodyOptions) (*Body, error) {
	if !f.Replayable() {
		return nil, ErrConsumed
	}
	return &Body{f: f, spool: f.spool, opt: opt, liveIdx: -1}, nil
}

// ContentType is the Content-Type of the body, with its boundary.
func (b *Body) ContentType() string {
	return "multipart/form-data; boundary=" + b.f.boundary
}

// Len returns the body's length in bytes when the request was read whole (every file spooled),
// or -1 while a file is to be streamed.
func (b *Body) Len() int64 {
	if !b.f.complete || b.f.reader != nil {
		return -1
	}
	c := &Body{f: b.f, opt: b.opt, counting: true, liveIdx: -1}
	var n int64
	for !c.ended {
		if err := c.advance(); err != nil {
			return -1
		}
		n += int64(len(c.pend)) + c.size
	}
	return n
}

// Read reads the body. A failed read of the request returns its error: a *TooLargeError, a
// *FormError, or the request's read error.
func (b *Body) Read(p []byte) (int, error) {
	for {
		if b.err != nil {
			return 0, b.err
		}
		if len(b.pend) > 0 {
			n := copy(p, b.pend)
			b.pend = b.pend[n:]
			return n, nil
		}
		if b.cur != nil {
			n, err := b.cur.Read(p)
			if b.liveIdx >= 0 {
				b.liveN += int64(n)
			}
			switch {
			case err == io.EOF:
				b.endContent()
			case err != nil:
				b.err = b.contentErr(err)
				return n, b.err
			}
			if n > 0 {
				return n, nil
			}
			continue
		}
		if b.ended {
			return 0, io.EOF
		}
		if b.err = b.advance(); b.err != nil {
			return 0, b.err
		}
	}
}

// Close does nothing: the form holds what the body reads, until Form.Close. The body is an
// io.ReadCloser so that http.NewRequest does not wrap it, and an HTTP transport reaches it
// (its SyscallConn) under its own wrappers; a transport may close it from another goroutine
// while it is read.
func (b *Body) Close() error { return nil }

// WriteTo writes the body to w.
func (b *Body) WriteTo(w io.Writer) (int64, error) {
	return io.CopyBuffer(w, struct{ io.Reader }{b}, make([]byte, 32<<10))
}

func (b *Body) endContent() {
	b.cur, b.sec = nil, nil
	if b.liveIdx >= 0 {
		b.f.parts[b.liveIdx].Size = b.liveN
		b.f.live = nil
		b.liveIdx, b.liveN = -1, 0
	}
}

func (b *Body) contentErr(err error) error {
	if b.liveIdx < 0 {
		return err // the spool file's
	}
	return b.f.readErr("reading file "+strconv.Quote(b.f.parts[b.liveIdx].Sent), err)
}

// advance sets pend to the next part's header and cur (or size) to its content, or pend to
// the closing boundary at the end.
func (b *Body) advance() error {
	if !b.begun {
		b.begun = true
		for name := range b.opt.Set {
			if _, ok := b.f.Value(name); !ok {
				b.missing = append(b.missing, name)
			}
		}
		slices.Sort(b.missing)
	}
	if len(b.missing) > 0 {
		name := b.missing[0]
		b.missing = b.missing[1:]
		if b.inserted == nil {
			b.inserted = make(map[string]bool)
		}
		b.inserted[name] = true
		b.field(&Part{Name: name, Sent: name}, b.opt.Set[name])
		return nil
	}
	for {
		if b.i == len(b.f.parts) {
			if b.f.complete {
				b.buf = append(append(append(b.buf[:0], "\r\n--"...), b.f.boundary...), "--\r\n"...)
				b.pend, b.size, b.ended = b.buf, 0, true
				return nil
			}
			if b.f.live != nil || (b.f.reader != nil && b.f.reader != b) {
				return ErrConsumed
			}
			b.f.reader = b
			p, err := b.f.next()
			if err != nil {
				return err
			}
			if p == nil {
				continue
			}
		}
		p := &b.f.parts[b.i]
		b.i++
		name, keep := b.upstreamName(p)
		if !p.File {
			if !keep || b.inserted[p.Name] {
				continue
			}
			v := p.Value
			if s, ok := b.opt.Set[p.Name]; ok {
				v = s
			}
			b.field(p, v)
			return nil
		}
		if p.spooled {
			if !keep {
				continue
			}
			b.header(name, p)
			b.size = p.Size
			if !b.counting {
				if b.spool == nil {
					b.spool = b.f.spool // spooled after the body was made
				}
				b.sec = io.NewSectionReader(b.spool, p.off, p.Size)
				b.cur = b.sec
			}
			return nil
		}
		// The file Parse left in the request body, or one after it.
		if b.f.live == nil || b.i != len(b.f.parts) || (b.f.reader != nil && b.f.reader != b) {
			return ErrConsumed
		}
		b.f.reader = b
		if !keep {
			if err := b.f.discardLive(); err != nil {
				return err
			}
			continue
		}
		b.header(name, p)
		b.cur, b.liveIdx, b.liveN = b.f.live, b.i-1, 0
		return nil
	}
}

func (b *Body) field(p *Part, v string) {
	name, _ := b.upstreamName(p)
	b.header(name, p)
	b.size = int64(len(v))
	if !b.counting {
		b.cur = strings.NewReader(v)
	}
}

// upstreamName is the name p is sent upstream under, and false when it is dropped.
func (b *Body) upstreamName(p *Part) (string, bool) {
	base := baseName(p.Name)
	if slices.Contains(b.opt.Drop, base) {
		return "", false
	}
	name := p.Name
	if r, ok := b.opt.Rename[base]; ok {
		name = r + p.Name[len(base):]
	}
	if !p.List && !slices.Contains(b.opt.Lists, p.Name) {
		return name, true
	}
	switch b.opt.ListStyle {
	case Repeat:
		return name, true
	case Indexed:
		if b.index == nil {
			b.index = make(map[string]int)
		}
		n := b.index[name]
		b.index[name] = n + 1
		return name + "[" + strconv.Itoa(n) + "]", true
	default:
		return name + "[]", true
	}
}

// header sets pend to a part's boundary and header, as mime/multipart.Writer writes them.
func (b *Body) header(name string, p *Part) {
	h := b.buf[:0]
	if b.first {
		h = append(h, "\r\n"...)
	}
	b.first = true
	b.buf = appendPartHeader(h, b.f.boundary, name, p)
	b.pend = b.buf
}

// appendPartHeader appends a part's boundary line and header, up to and with its empty line.
func appendPartHeader(h []byte, boundary, name string, p *Part) []byte {
	h = append(append(append(h, "--"...), boundary...), "\r\nContent-Disposition: "...)
	if p.File {
		h = append(h, multipart.FileContentDisposition(name, p.FileName)...)
	} else {
		h = append(append(append(h, `form-data; name="`...), quoteEscaper.Replace(name)...), '"')
	}
	h = append(h, "\r\n"...)
	ct := p.ContentType
	if p.File && ct == "" {
		ct = "application/octet-stream"
	}
	if ct != "" {
		h = append(append(append(h, "Content-Type: "...), ct...), "\r\n"...)
	}
	return append(h, "\r\n"...)
}

// quoteEscaper escapes a name as mime/multipart does.
var quoteEscaper = strings.NewReplacer("\\", "\\\\", `"`, "\\\"", "\r", "%0D", "\n", "%0A")

// discardLive reads a dropped streamed file to its end.
func (f *Form) discardLive() error {
	p := &f.parts[len(f.parts)-1]
	n, err := f.live.WriteTo(io.Discard)
	f.live = nil
	p.Size = n
	if err != nil {
		return f.readErr("reading file "+strconv.Quote(p.Sent), err)
	}
	return nil
}

// errNotOneStretch is fileRest's answer when the rest of the body must be read part by part.
var errNotOneStretch = errors.New("upload: the rest of the body is not one stretch of the spool")

// fileRest readies the rest of a body read whole to be sent straight from the spool file, in
// one stretch, and returns where it starts in the spool and its length. The spool holds each
// file's content after room for its header as the client named it (see spoolLive, and
// spooledLead for the room before the first); the rest of the body is one stretch when its
// files follow one another in the spool with exactly their headers' room between them (none
// dropped or renamed between them). Its other bytes are then written into the spool around
// the files: the fields and header before the first file into the room before it, each
// header into its gap, the fields and closing delimiter after the last file after it, where
// the spool is cut, so that nothing past the body's end can be sent.
func (b *Body) fileRest() (start, n int64, err error) {
	f := b.f
	if b.err != nil || b.counting || b.ended || !f.complete || b.spool == nil || (b.cur != nil && b.sec == nil) {
		return 0, 0, errNotOneStretch
	}
	// The rest of the body: memory between file sections, walked on a copy of the body.
	type section struct {
		mem      []byte // the bytes before the file
		off, len int64
	}
	var sections []section
	var mem []byte
	c := *b
	c.buf, c.index = nil, maps.Clone(b.index)
	mem = append(mem, c.pend...)
	if c.sec != nil {
		pos, _ := c.sec.Seek(0, io.SeekCurrent)
		_, off, size := c.sec.Outer()
		sections = append(sections, section{mem, off + pos, size - pos})
		mem = nil
	}
	c.pend = nil
	c.endContent()
	for !c.ended {
		if err := c.advance(); err != nil {
			return 0, 0, err
		}
		mem = append(mem, c.pend...)
		if c.sec != nil {
			_, off, size := c.sec.Outer()
			sections = append(sections, section{mem, off, size})
			mem = nil
		} else if c.cur != nil {
			v, err := io.ReadAll(c.cur) // a field's value
			if err != nil {
				return 0, 0, err
			}
			mem = append(mem, v...)
		}
		c.endContent()
	}
	if len(sections) == 0 {
		return 0, 0, errNotOneStretch
	}
	// The room before the first file reaches back to the content of the spooled file before it.
	first := sections[0]
	var floor int64
	for i := range f.parts {
		if p := &f.parts[i]; p.spooled && p.off < first.off {
			floor = max(floor, p.off+p.Size)
		}
	}
	start = first.off - int64(len(first.mem))
	if start < floor {
		return 0, 0, errNotOneStretch
	}
	end := first.off + first.len
	for _, s := range sections[1:] {
		if s.off-end != int64(len(s.mem)) {
			return 0, 0, errNotOneStretch
		}
		end = s.off + s.len
	}
	if end != f.spoolLen {
		return 0, 0, errNotOneStretch // a spooled file after the last one sent would be cut off
	}
	for _, s := range sections {
		if _, err := b.spool.file.WriteAt(s.mem, s.off-int64(len(s.mem))); err != nil {
			return 0, 0, fmt.Errorf("upload: writing spool file: %w", err)
		}
	}
	if err := b.spool.cut(mem, end); err != nil {
		return 0, 0, err
	}
	return start, end + int64(len(mem)) - start, nil
}

// sentFromSpool records that n bytes of the rest readied by fileRest were sent from the
// spool: the body has ended, or failed when it was sent part way.
func (b *Body) sentFromSpool(sent, n int64) {
	switch {
	case sent == n:
		b.endContent()
		b.pend, b.ended = nil, true
	case sent > 0:
		b.err = fmt.Errorf("upload: the body's last %d bytes were sent from the spool only up to %d", n, sent)
	}
}
