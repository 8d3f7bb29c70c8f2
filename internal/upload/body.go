package upload

import (
	"io"
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
	opt      BodyOptions
	counting bool // Len walks the parts without reading them

	begun    bool
	missing  []string        // Set fields the form lacks, written first
	inserted map[string]bool // names written from missing: the client's own are dropped
	index    map[string]int  // the next index of each Indexed list
	i        int             // the next part of f.parts
	first    bool            // a part header was written
	ended    bool

	buf, pend []byte    // the header or closing boundary being written
	cur       io.Reader // the part's content being written
	size      int64     // its size, when counting
	liveIdx   int       // the part index of a streamed file being written, or -1
	liveN     int64
	err       error
}

// Body returns the upstream body of the form with opt applied. It returns ErrConsumed when an
// earlier body already read the request past what Parse read (see Form.Replayable).
func (f *Form) Body(opt BodyOptions) (*Body, error) {
	if !f.Replayable() {
		return nil, ErrConsumed
	}
	return &Body{f: f, opt: opt, liveIdx: -1}, nil
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

// WriteTo writes the body to w.
func (b *Body) WriteTo(w io.Writer) (int64, error) {
	return io.CopyBuffer(w, struct{ io.Reader }{b}, make([]byte, 32<<10))
}

func (b *Body) endContent() {
	b.cur = nil
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
				b.cur = io.NewSectionReader(b.f.spool, p.off, p.Size)
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
	h = append(append(append(h, "--"...), b.f.boundary...), "\r\nContent-Disposition: "...)
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
	b.buf = append(h, "\r\n"...)
	b.pend = b.buf
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
