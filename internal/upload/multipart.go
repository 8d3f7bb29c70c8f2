package upload

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime/quotedprintable"
	"net/textproto"
	"strings"
	"sync"
)

// partReader reads a multipart body as mime/multipart.Reader does (NextPart: the same parts,
// headers, contents and failures; TestPartReaderMatchesMimeMultipart holds it to that), through
// one buffer of readSize bytes instead of mime/multipart's 4 KiB: a file's content is handed
// out in pieces as large as the buffer, and written to the spool or an upstream straight from
// it (WriteTo), where mime/multipart copies it out 4 KiB at a time. Its one difference: a
// part's header must fit the buffer (mime/multipart takes up to 10 MiB).
type partReader struct {
	br *bufio.Reader

	nl               []byte // "\r\n", or "\n" once the first boundary line ended in a bare LF
	nlDashBoundary   []byte // nl + "--boundary"
	dashBoundary     []byte // "--boundary"
	dashBoundaryDash []byte // "--boundary--"

	partsRead int
	cur       *formPart

	// skip is the Horspool shift table of nlDashBoundary, made for a delimiter of skipLen
	// bytes (it loses its CR in LF mode).
	skip    [256]uint8
	skipLen int
}

// Bounds of what NextPart reads outside a part's content, as mime/multipart's.
const (
	// maxBoundaryLine is the longest line read while looking for a boundary line (the size of
	// mime/multipart's buffer).
	maxBoundaryLine = 4096
	// maxPartHeaders is the most header values of one part.
	maxPartHeaders = 10000
	// skipSearchLen is the shortest delimiter searched for with a shift table: a long
	// delimiter lets the search skip nearly its whole length at each step, where
	// bytes.Index stops at every byte that matches its first (its CR: every 256th byte of
	// an image or audio file).
	skipSearchLen = 24
)

// errPartHeaderTooLarge is a part header larger than the buffer.
var errPartHeaderTooLarge = errors.New("multipart: part header larger than " + fmt.Sprint(readSize) + " bytes")

// readBuffers are the partReaders' buffers, reused once a form is read to its end.
var readBuffers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, readSize) }}

func newPartReader(r io.Reader, boundary string) *partReader {
	b := []byte("\r\n--" + boundary + "--")
	br := readBuffers.Get().(*bufio.Reader)
	br.Reset(r)
	return &partReader{
		br:               br,
		nl:               b[:2],
		nlDashBoundary:   b[:len(b)-2],
		dashBoundaryDash: b[2:],
		dashBoundary:     b[2 : len(b)-2],
	}
}

// release returns the buffer for reuse; the reader is not used again.
func (r *partReader) release() {
	if r.br != nil {
		r.br.Reset(nil)
		readBuffers.Put(r.br)
		r.br, r.cur = nil, nil
	}
}

// formPart is one part: its header, then its content through Read or WriteTo.
type formPart struct {
	Header textproto.MIMEHeader

	r     *partReader
	n     int   // bytes of content found in the buffer and not handed out yet
	total int64 // bytes of content handed out
	err   error // what follows the n bytes: io.EOF at the part's end, or the read error
	// readErr is the read error that followed the buffered bytes (io.ErrUnexpectedEOF for
	// the body's end).
	readErr error
	qp      io.Reader // the decoder of a quoted-printable part
}

// NextPart returns the next part, or io.EOF after the last one. The content of the part
// before it is skipped.
func (r *partReader) NextPart() (*formPart, error) {
	if r.cur != nil {
		_, _ = r.cur.WriteTo(io.Discard)
	}
	expectNewPart := false
	for {
		line, err := r.br.ReadSlice('\n')
		if len(line) > maxBoundaryLine || errors.Is(err, bufio.ErrBufferFull) {
			return nil, fmt.Errorf("multipart: NextPart: %w", bufio.ErrBufferFull)
		}
		if err == io.EOF && r.isFinalBoundary(line) {
			return nil, io.EOF
		}
		if err != nil {
			return nil, fmt.Errorf("multipart: NextPart: %w", err)
		}
		if r.isBoundaryDelimiterLine(line) {
			r.partsRead++
			p := &formPart{r: r}
			if p.Header, err = r.readHeader(); err != nil {
				return nil, err
			}
			const cte = "Content-Transfer-Encoding"
			if strings.EqualFold(p.Header.Get(cte), "quoted-printable") {
				p.Header.Del(cte)
				p.qp = quotedprintable.NewReader(rawContent{p})
			}
			r.cur = p
			return p, nil
		}
		if r.isFinalBoundary(line) {
			return nil, io.EOF
		}
		if expectNewPart {
			return nil, fmt.Errorf("multipart: expecting a new Part; got line %q", string(line))
		}
		if r.partsRead == 0 {
			continue // the preamble
		}
		// The line break between the previous part's content and the boundary line.
		if bytes.Equal(line, r.nl) {
			expectNewPart = true
			continue
		}
		return nil, fmt.Errorf("multipart: unexpected line in Next(): %q", line)
	}
}

// readHeader reads a part's header, up to and with its empty line. The header is found whole
// in the buffer and read from there by textproto, as mime/multipart reads it from its own.
func (r *partReader) readHeader() (textproto.MIMEHeader, error) {
	start := 0 // the start of the line not yet looked at
	for {
		buf, _ := r.br.Peek(r.br.Buffered())
		for {
			i := bytes.IndexByte(buf[start:], '\n')
			if i < 0 {
				break
			}
			line := buf[start : start+i+1]
			start += i + 1
			if len(line) == 1 || (len(line) == 2 && line[0] == '\r') {
				return r.parseHeader(buf[:start], true)
			}
		}
		if len(buf) == r.br.Size() {
			return nil, errPartHeaderTooLarge
		}
		if _, err := r.br.Peek(len(buf) + 1); err != nil {
			// The body ends inside the header: textproto reports it as it would.
			buf, _ = r.br.Peek(r.br.Buffered())
			return r.parseHeader(buf, false)
		}
	}
}

func (r *partReader) parseHeader(block []byte, whole bool) (textproto.MIMEHeader, error) {
	tr := textproto.NewReader(bufio.NewReaderSize(bytes.NewReader(block), len(block)+16))
	h, err := tr.ReadMIMEHeader()
	_, _ = r.br.Discard(len(block))
	if err == nil && !whole {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		return nil, err
	}
	values := 0
	for _, vs := range h {
		values += len(vs)
	}
	if values > maxPartHeaders {
		return nil, errors.New("multipart: message too large")
	}
	return h, nil
}

func (r *partReader) isFinalBoundary(line []byte) bool {
	rest, ok := bytes.CutPrefix(line, r.dashBoundaryDash)
	if !ok {
		return false
	}
	rest = skipLWSP(rest)
	return len(rest) == 0 || bytes.Equal(rest, r.nl)
}

func (r *partReader) isBoundaryDelimiterLine(line []byte) bool {
	rest, ok := bytes.CutPrefix(line, r.dashBoundary)
	if !ok {
		return false
	}
	rest = skipLWSP(rest)
	// A body whose first boundary line ends in a bare LF uses LF throughout (not what RFC
	// 2046 says, but what some clients send).
	if r.partsRead == 0 && len(rest) == 1 && rest[0] == '\n' {
		r.nl = r.nl[1:]
		r.nlDashBoundary = r.nlDashBoundary[1:]
	}
	return bytes.Equal(rest, r.nl)
}

func skipLWSP(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	return b
}

// Read reads the part's content.
func (p *formPart) Read(d []byte) (int, error) {
	if p.qp != nil {
		return p.qp.Read(d)
	}
	return p.readRaw(d)
}

// WriteTo writes the rest of the part's content to w, straight from the buffer.
func (p *formPart) WriteTo(w io.Writer) (int64, error) {
	if p.qp != nil {
		return io.Copy(w, struct{ io.Reader }{p.qp})
	}
	var written int64
	for {
		if !p.fill() {
			if p.err == io.EOF {
				return written, nil
			}
			return written, p.err
		}
		buf, _ := p.r.br.Peek(p.n)
		n, err := w.Write(buf)
		_, _ = p.r.br.Discard(n)
		p.total += int64(n)
		p.n -= n
		written += int64(n)
		if err != nil {
			return written, err
		}
	}
}

func (p *formPart) readRaw(d []byte) (int, error) {
	if !p.fill() {
		return 0, p.err
	}
	n, _ := p.r.br.Read(d[:min(len(d), p.n)])
	p.total += int64(n)
	p.n -= n
	if p.n == 0 {
		return n, p.err
	}
	return n, nil
}

// fill finds content in the buffer, reading more when it must; false means none is left
// before p.err.
func (p *formPart) fill() bool {
	br := p.r.br
	for p.n == 0 && p.err == nil {
		peek, _ := br.Peek(br.Buffered())
		p.n, p.err = p.r.scan(peek, p.total, p.readErr)
		if p.n == 0 && p.err == nil {
			_, p.readErr = br.Peek(len(peek) + 1)
			if p.readErr == io.EOF {
				p.readErr = io.ErrUnexpectedEOF
			}
		}
	}
	return p.n > 0
}

// scan returns how many bytes at the start of buf are the part's content, and what follows
// them: nil (more content may), io.EOF (the part's delimiter) or readErr. total is the
// content handed out before buf: at the very start a part may end at "--boundary" alone.
func (r *partReader) scan(buf []byte, total int64, readErr error) (int, error) {
	if total == 0 {
		if bytes.HasPrefix(buf, r.dashBoundary) {
			switch matchAfterDelimiter(buf, r.dashBoundary, readErr) {
			case -1:
				return len(r.dashBoundary), nil
			case 0:
				return 0, nil
			default:
				return 0, io.EOF
			}
		}
		if bytes.HasPrefix(r.dashBoundary, buf) {
			return 0, readErr
		}
	}
	if i := r.indexDelimiter(buf); i >= 0 {
		switch matchAfterDelimiter(buf[i:], r.nlDashBoundary, readErr) {
		case -1:
			return i + len(r.nlDashBoundary), nil
		case 0:
			return i, nil
		default:
			return i, io.EOF
		}
	}
	if bytes.HasPrefix(r.nlDashBoundary, buf) {
		return 0, readErr
	}
	// The content runs to the end of buf, except a tail that may begin the delimiter.
	if i := bytes.LastIndexByte(buf, r.nlDashBoundary[0]); i >= 0 && bytes.HasPrefix(r.nlDashBoundary, buf[i:]) {
		return i, nil
	}
	return len(buf), readErr
}

// indexDelimiter is bytes.Index(buf, r.nlDashBoundary).
func (r *partReader) indexDelimiter(buf []byte) int {
	d := r.nlDashBoundary
	n := len(d)
	if n < skipSearchLen {
		return bytes.Index(buf, d)
	}
	if r.skipLen != n {
		for c := range r.skip {
			r.skip[c] = uint8(n)
		}
		for j, c := range d[:n-1] {
			r.skip[c] = uint8(n - 1 - j)
		}
		r.skipLen = n
	}
	last := d[n-1]
	for i := n - 1; i < len(buf); i += int(r.skip[buf[i]]) {
		if buf[i] == last && bytes.Equal(buf[i-n+1:i+1], d) {
			return i - n + 1
		}
	}
	return -1
}

// matchAfterDelimiter tells whether buf, which starts with the delimiter prefix, holds a
// boundary: +1 when the prefix is followed by "--", a space, a tab, CR, LF or the body's end;
// -1 when by anything else ("--foobar" is not the boundary "foo"); 0 when more must be read.
func matchAfterDelimiter(buf, prefix []byte, readErr error) int {
	if len(buf) == len(prefix) {
		if readErr != nil {
			return +1
		}
		return 0
	}
	switch c := buf[len(prefix)]; c {
	case ' ', '\t', '\r', '\n':
		return +1
	case '-':
		if len(buf) == len(prefix)+1 {
			if readErr != nil {
				return -1
			}
			return 0
		}
		if buf[len(prefix)+1] == '-' {
			return +1
		}
	}
	return -1
}

// rawContent reads a part's content undecoded, under its quoted-printable decoder.
type rawContent struct{ p *formPart }

func (c rawContent) Read(d []byte) (int, error) { return c.p.readRaw(d) }
