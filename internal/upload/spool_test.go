package upload

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"testing"
)

// spooledForm parses a form whose file (data) is spooled, in dir.
func spooledForm(t *testing.T, dir, data string) *Form {
	t.Helper()
	const b = "spool-test-boundary"
	body := build(t, b, []part{file("file", "a.bin", "application/octet-stream", data), field("model", "m")})
	f, err := Parse(bytes.NewReader(body), b, Options{TempDir: dir, Replay: true})
	if err != nil {
		t.Fatal(err)
	}
	if f.spool == nil {
		t.Fatal("the file was not spooled")
	}
	return f
}

func TestSpoolIsReusedAndHoldsOnlyItsForm(t *testing.T) {
	dir := t.TempDir()
	long := randomBytes(1, 1<<20)
	a := spooledForm(t, dir, long)
	fileA := a.spool.file
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	short := randomBytes(2, 100<<10)
	b := spooledForm(t, dir, short)
	defer func() { _ = b.Close() }()
	if b.spool.file != fileA {
		t.Fatal("the second form did not reuse the first one's spool file")
	}
	st, err := b.spool.file.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() < 1<<20 {
		t.Errorf("pooled spool size %d, want the 1 MiB and more written before", st.Size())
	}
	rd, err := b.Open(b.Files("file")[0])
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rd)
	if err != nil || string(got) != short {
		t.Fatalf("reading the reused spool: %d bytes (want %d), equal %v, err %v", len(got), len(short), string(got) == short, err)
	}
	body, err := b.Body(BodyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	parts, raw := readBack(t, body)
	if int64(len(raw)) != body.Len() {
		t.Errorf("body of %d bytes, Len %d", len(raw), body.Len())
	}
	sameParts(t, parts, []part{file("file", "a.bin", "application/octet-stream", short), field("model", "m")})
}

// A reader of a closed form's file, such as a transport still writing an upstream request
// body, must not read the next upload written over the same spool file.
func TestClosedFormReadsNothing(t *testing.T) {
	dir := t.TempDir()
	a := spooledForm(t, dir, randomBytes(3, 256<<10))
	body, err := a.Body(BodyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	head := make([]byte, 100)
	if _, err := io.ReadFull(body, head); err != nil {
		t.Fatal(err)
	}
	rd, err := a.Open(a.Files("file")[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	next := randomBytes(4, 256<<10)
	b := spooledForm(t, dir, next)
	defer func() { _ = b.Close() }()
	rest, err := io.ReadAll(body)
	if !errors.Is(err, errSpoolClosed) {
		t.Errorf("reading the body of a closed form: %v, want %v", err, errSpoolClosed)
	}
	if bytes.Contains(rest, []byte(next[:64])) {
		t.Error("the closed form's body read the next form's file")
	}
	if n, err := rd.Read(head); n != 0 || !errors.Is(err, errSpoolClosed) {
		t.Errorf("reading an opened file of a closed form: %d bytes, %v", n, err)
	}
}

func TestSpoolPoolIsBounded(t *testing.T) {
	dir := t.TempDir()
	var forms []*Form
	for i := range maxPooledSpools + 2 {
		data := "small"
		if i == 0 {
			data = randomBytes(5, maxPooledSpoolBytes+1<<20)
		}
		forms = append(forms, spooledForm(t, dir, data))
	}
	big := forms[0].spool.file
	for _, f := range forms {
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	spools.mu.Lock()
	pooled := len(spools.free[dir])
	spools.mu.Unlock()
	if pooled != maxPooledSpools {
		t.Errorf("%d files pooled, want %d", pooled, maxPooledSpools)
	}
	st, err := big.Stat()
	if err != nil {
		t.Fatalf("the largest file was not pooled: %v", err)
	}
	if st.Size() > maxPooledSpoolBytes {
		t.Errorf("a pooled file keeps %d bytes, want at most %d", st.Size(), maxPooledSpoolBytes)
	}
	if spoolFiles(t, dir) != 0 {
		t.Errorf("%d spool files in the directory or in use after every form was closed", spoolFiles(t, dir))
	}
}

// A spool closed while a send from it is under way is not pooled: the next upload must not be
// written where the send may still read.
func TestSpoolSentFromIsNotReused(t *testing.T) {
	dir := t.TempDir()
	a := spooledForm(t, dir, randomBytes(6, 64<<10))
	sp := a.spool
	if !sp.beginSend() {
		t.Fatal("an open form's spool refused a send")
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	sp.endSend()
	if sp.beginSend() {
		t.Error("a closed form's spool accepted a send")
	}
	spools.mu.Lock()
	pooled := slices.Contains(spools.free[dir], sp.file)
	spools.mu.Unlock()
	if pooled {
		t.Fatal("a spool released during a send was pooled")
	}
	b := spooledForm(t, dir, "next")
	defer func() { _ = b.Close() }()
	if b.spool.file == sp.file {
		t.Fatal("the next form got the file a send may still read")
	}
}
