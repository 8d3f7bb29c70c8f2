package upload

import (
	"errors"
	"io"
	"sync/atomic"
	"syscall"
)

// SyscallConn offers the spool file to the net package's sendfile(2) path. An HTTP/1
// transport sends a body of known length by handing it, under an io.LimitedReader, to the
// connection's ReadFrom; a TCP connection asks the body for its descriptor there and, when it
// gets one, sends the rest of the body from it without copying it through the process. It gets
// one when the rest of the body is one stretch of the spool (see fileRest): the common case
// of a form read whole, whose files come last or are followed only by fields. Otherwise (and
// over TLS, where nothing asks) the body is read part by part, as before.
func (b *Body) SyscallConn() (syscall.RawConn, error) {
	if b.spool == nil || !b.spool.beginSend() {
		return nil, errNotOneStretch
	}
	defer b.spool.endSend()
	start, n, err := b.fileRest()
	if err != nil {
		return nil, err
	}
	return &spoolSender{b: b, start: start, n: n}, nil
}

// sentBySendfile counts the bytes sent from spool files, for tests.
var sentBySendfile atomic.Int64

// spoolSender is the spool's descriptor for one send of the rest of a body.
type spoolSender struct {
	b        *Body
	start, n int64
}

var errSpoolSenderOnlyReads = errors.New("upload: a spool is only sent from")

func (s *spoolSender) Control(func(fd uintptr)) error    { return errSpoolSenderOnlyReads }
func (s *spoolSender) Write(func(fd uintptr) bool) error { return errSpoolSenderOnlyReads }

// Read gives f the spool's descriptor at the start of the rest of the body; f sends from its
// position (as sendfile(2) with no offset does) and moves it: the distance is what was sent.
func (s *spoolSender) Read(f func(fd uintptr) bool) error {
	sp := s.b.spool
	if sp == nil || !sp.beginSend() {
		return errSpoolClosed
	}
	defer sp.endSend()
	rc, err := sp.file.SyscallConn()
	if err != nil {
		return err
	}
	var sent int64
	var serr error
	sp.position.Lock()
	defer sp.position.Unlock()
	err = rc.Control(func(fd uintptr) {
		if _, serr = syscall.Seek(int(fd), s.start, io.SeekStart); serr != nil {
			return
		}
		f(fd)
		var pos int64
		if pos, serr = syscall.Seek(int(fd), 0, io.SeekCurrent); serr != nil {
			s.b.err = serr // what was sent is unknown: the body cannot go on
			return
		}
		sent = pos - s.start
	})
	if serr == nil && err == nil {
		s.b.sentFromSpool(sent, s.n)
		sentBySendfile.Add(sent)
	}
	if err == nil {
		err = serr
	}
	return err
}
