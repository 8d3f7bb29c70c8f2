package sse

import (
	"bytes"
	"errors"
	"io"
	"math"
	"runtime"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
)

type ev struct {
	name, data string
}

func readAll(t testing.TB, r io.Reader, max int) ([]ev, error) {
	t.Helper()
	rd := NewReader(r, max)
	var out []ev
	for rd.Next() {
		e := rd.Event()
		out = append(out, ev{e.Name, string(e.Data)})
	}
	return out, rd.Err()
}

func TestReader(t *testing.T) {
	tests := []struct {
		name  string
		in    string
		want  []ev
		err   error
		limit int
	}{
		{name: "empty", in: "", want: nil},
		{name: "single", in: "data: hello\n\n", want: []ev{{"", "hello"}}},
		{name: "no space after colon", in: "data:hello\n\n", want: []ev{{"", "hello"}}},
		{name: "only one space stripped", in: "data:  hello\n\n", want: []ev{{"", " hello"}}},
		{name: "multi-line data", in: "data: a\ndata: b\ndata:\n\n", want: []ev{{"", "a\nb\n"}}},
		{name: "event name", in: "event: ping\ndata: {}\n\n", want: []ev{{"ping", "{}"}}},
		{name: "name resets after dispatch", in: "event: a\ndata: 1\n\ndata: 2\n\n", want: []ev{{"a", "1"}, {"", "2"}}},
		{name: "comments ignored", in: ": keep-alive\n\n:x\ndata: 1\n: mid\n\n", want: []ev{{"", "1"}}},
		{name: "CRLF", in: "data: a\r\ndata: b\r\n\r\ndata: c\r\n\r\n", want: []ev{{"", "a\nb"}, {"", "c"}}},
		{name: "CR", in: "data: a\rdata: b\r\rdata: c\r\r", want: []ev{{"", "a\nb"}, {"", "c"}}},
		{name: "mixed endings", in: "data: a\r\n\ndata: b\r\r\ndata: c\n\r", want: []ev{{"", "a"}, {"", "b"}, {"", "c"}}},
		{name: "final event without blank line", in: "data: 1\n\ndata: [DONE]\n", want: []ev{{"", "1"}, {"", "[DONE]"}}},
		{name: "final event without newline", in: "data: [DONE]", want: []ev{{"", "[DONE]"}}},
		{name: "event without data not dispatched", in: "event: x\n\ndata: y\n\n", want: []ev{{"", "y"}}},
		{name: "empty data dispatched", in: "data:\n\n", want: []ev{{"", ""}}},
		{name: "field without colon", in: "data\n\n", want: []ev{{"", ""}}},
		{name: "unknown fields ignored", in: "id: 7\nretry: 10\nfoo: bar\ndata: x\n\n", want: []ev{{"", "x"}}},
		{name: "colon in value kept", in: "data: {\"a\":\"b:c\"}\n\n", want: []ev{{"", `{"a":"b:c"}`}}},
		{name: "BOM skipped", in: "\xEF\xBB\xBFdata: x\n\n", want: []ev{{"", "x"}}},
		{name: "blank lines only", in: "\n\n\r\n\r", want: nil},
		{name: "data at limit", in: "data: 12345\n\n", limit: 5, want: []ev{{"", "12345"}}},
		{name: "data over limit", in: "data: 123456\n\n", limit: 5, err: ErrEventTooLarge},
		{name: "joined data over limit", in: "data: 123\ndata: 45\n\n", limit: 5, err: ErrEventTooLarge},
		{name: "huge comment line", in: ":" + strings.Repeat("x", 200) + "\n\ndata: 1\n\n", limit: 5, err: ErrEventTooLarge},
		{name: "events before the oversized one", in: "data: 1\n\ndata: 123456\n\n", limit: 5, want: []ev{{"", "1"}}, err: ErrEventTooLarge},
	}
	readers := []struct {
		name string
		wrap func(io.Reader) io.Reader
	}{
		{"whole", func(r io.Reader) io.Reader { return r }},
		{"one byte", iotest.OneByteReader},
		{"half", iotest.HalfReader},
	}
	for _, tc := range tests {
		for _, rw := range readers {
			t.Run(tc.name+"/"+rw.name, func(t *testing.T) {
				got, err := readAll(t, rw.wrap(strings.NewReader(tc.in)), tc.limit)
				if !errors.Is(err, tc.err) {
					t.Fatalf("err = %v, want %v", err, tc.err)
				}
				if !equalEvents(got, tc.want) {
					t.Fatalf("events = %q, want %q", got, tc.want)
				}
			})
		}
	}
}

func equalEvents(a, b []ev) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestReaderLongLinesAcrossBuffers(t *testing.T) {
	long := strings.Repeat("abcdefgh", 2000) // larger than the 4 KiB buffer
	in := "data: " + long + "\r\ndata: " + long + "\r\n\r\n"
	got, err := readAll(t, strings.NewReader(in), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].data != long+"\n"+long {
		t.Fatalf("got %d events, data length %d", len(got), len(got[0].data))
	}
}

func TestReaderReadError(t *testing.T) {
	boom := errors.New("boom")
	r := io.MultiReader(strings.NewReader("data: 1\n\ndata: 2"), iotest.ErrReader(boom))
	got, err := readAll(t, r, 0)
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want boom", err)
	}
	if !equalEvents(got, []ev{{"", "1"}}) {
		t.Fatalf("events = %q", got)
	}
}

func TestReaderStopsAfterEnd(t *testing.T) {
	rd := NewReader(strings.NewReader("data: 1\n\n"), 0)
	if !rd.Next() || rd.Next() || rd.Next() {
		t.Fatal("want exactly one event")
	}
	if rd.Err() != nil {
		t.Fatal(rd.Err())
	}
}

// chunkReader gives its chunks one per Read, counting the reads.
type chunkReader struct {
	chunks []string
	reads  int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	c.reads++
	if len(c.chunks) == 0 {
		return 0, io.EOF
	}
	n := copy(p, c.chunks[0])
	if c.chunks[0] = c.chunks[0][n:]; c.chunks[0] == "" {
		c.chunks = c.chunks[1:]
	}
	return n, nil
}

// OnWait is called before every read of the underlying reader and at no other time: the
// events one read brought are given out without a call, and a line split across two reads
// calls it before the second.
func TestReaderOnWait(t *testing.T) {
	src := &chunkReader{chunks: []string{"data: 1\n\nevent: e\ndata: 2\n\n", "data: 3\n\ndata: 4", "\n\n"}}
	rd := NewReader(src, 0)
	waits := 0
	rd.OnWait(func() {
		waits++
		if waits != src.reads+1 {
			t.Fatalf("wait %d before read %d", waits, src.reads+1)
		}
	})
	var got []string
	var waitsAt []int
	for rd.Next() {
		got = append(got, string(rd.Event().Data))
		waitsAt = append(waitsAt, waits)
	}
	if rd.Err() != nil {
		t.Fatal(rd.Err())
	}
	if strings.Join(got, ",") != "1,2,3,4" {
		t.Fatalf("events %q", got)
	}
	// 1 and 2 came with the first read, 3 with the second, 4 needed the third; the fourth
	// read found the end.
	if want := []int{1, 1, 2, 3}; !slices.Equal(waitsAt, want) || waits != 4 || src.reads != 4 {
		t.Fatalf("waits before each event %v (want %v), %d waits, %d reads", waitsAt, want, waits, src.reads)
	}
}

// The CR of a CR-terminated line must not make the reader wait for the next byte: over a
// network that byte may only come with the next event.
func TestReaderCRDoesNotBlock(t *testing.T) {
	pr, pw := io.Pipe()
	defer pw.Close()
	rd := NewReader(pr, 0)
	go func() { _, _ = pw.Write([]byte("data: 1\r\r")) }()
	if !rd.Next() || string(rd.Event().Data) != "1" {
		t.Fatalf("want event 1, err %v", rd.Err())
	}
}

func TestAppendEvent(t *testing.T) {
	tests := []struct {
		name, event, data, want string
		err                     error
	}{
		{name: "data", data: `{"a":1}`, want: "data: {\"a\":1}\n\n"},
		{name: "named", event: "message_start", data: "{}", want: "event: message_start\ndata: {}\n\n"},
		{name: "empty", data: "", want: "data: \n\n"},
		{name: "multi-line", data: "a\nb\r\nc\rd", want: "data: a\ndata: b\ndata: c\ndata: d\n\n"},
		{name: "bad name", event: "a\nb", data: "x", err: ErrInvalidName},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			err := WriteEvent(&buf, tc.event, []byte(tc.data))
			if !errors.Is(err, tc.err) {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			if err != nil {
				return
			}
			if buf.String() != tc.want {
				t.Fatalf("frame = %q, want %q", buf.String(), tc.want)
			}
			got, err := readAll(t, &buf, 0)
			if err != nil || len(got) != 1 || got[0].name != tc.event {
				t.Fatalf("read back %q, %v", got, err)
			}
		})
	}
}

func TestWriteDataAndComment(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteComment(&buf, "keep\nalive"); err != nil {
		t.Fatal(err)
	}
	if err := WriteData(&buf, []byte("[DONE]")); err != nil {
		t.Fatal(err)
	}
	if got, want := buf.String(), ": keep alive\n\ndata: [DONE]\n\n"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestWriteEventError(t *testing.T) {
	boom := errors.New("boom")
	if err := WriteData(errWriter{boom}, []byte("x")); !errors.Is(err, boom) {
		t.Fatalf("err = %v", err)
	}
}

type errWriter struct{ err error }

func (w errWriter) Write([]byte) (int, error) { return 0, w.err }

// readAllocs is the allocations of reading stream to its end, on average over 10 readings.
func readAllocs(stream []byte) float64 {
	r := bytes.NewReader(stream)
	return testing.AllocsPerRun(10, func() {
		r.Reset(stream)
		rd := NewReader(r, 0)
		for rd.Next() {
		}
	})
}

// allocSlack is how far two counts of readAllocs may differ: under the race detector the
// pooled read buffer is dropped now and then, one more allocation in some runs, whatever
// the number of events.
func allocSlack() float64 {
	if raceEnabled {
		return 1
	}
	return 0
}

// Reading an event costs no allocation: only setting the reader up and growing its
// buffers once do, so the count does not depend on the number of events.
func TestReaderAllocations(t *testing.T) {
	frame := []byte("data: {\"choices\":[{\"delta\":{\"content\":\"hello\"}}]}\n\n")
	allocs := func(events int) float64 { return readAllocs(bytes.Repeat(frame, events)) }
	if few, many := allocs(1000), allocs(20000); math.Abs(many-few) > allocSlack() {
		t.Fatalf("%.0f allocations for 1000 events, %.0f for 20000", few, many)
	}
}

// TestReaderEventNames: names that change from one event to the next, as Anthropic's do,
// are read right and, when an upstream's known ones, cost no allocation however many
// events there are; unknown ones are read as they are.
func TestReaderEventNames(t *testing.T) {
	cycle := "event: content_block_start\ndata: {}\n\nevent: content_block_delta\ndata: {}\n\n" +
		"event: content_block_stop\ndata: {}\n\nevent: message_delta\ndata: {}\n\n"
	allocs := func(cycles int) float64 { return readAllocs([]byte(strings.Repeat(cycle, cycles))) }
	// Both long enough for lines to span the read buffer's fills (what that costs, once).
	if few, many := allocs(200), allocs(2000); math.Abs(many-few) > allocSlack() {
		t.Fatalf("%.0f allocations for 800 events, %.0f for 8,000", few, many)
	}

	rd := NewReader(strings.NewReader(cycle+"event: custom\ndata: 1\n\nevent: other\ndata: 2\n\ndata: 3\n\n"), 0)
	var names []string
	for rd.Next() {
		names = append(names, rd.Event().Name)
	}
	want := []string{"content_block_start", "content_block_delta", "content_block_stop", "message_delta", "custom", "other", ""}
	if strings.Join(names, ",") != strings.Join(want, ",") {
		t.Fatalf("names %q, want %q", names, want)
	}
}

// TestReaderReleasesItsBuffer: a reader gives its read buffer back at the end of the stream,
// on an error and on Release, after which Next reports false and the last event and error
// stay readable; so a stream read to its end costs well under the 4 KiB buffer (even with
// -race, whose pools drop a quarter of what they are given).
func TestReaderReleasesItsBuffer(t *testing.T) {
	rd := NewReader(strings.NewReader("data: a\n\ndata: b\n\n"), 0)
	for rd.Next() {
	}
	if rd.br != nil || string(rd.Event().Data) != "b" || rd.Err() != nil {
		t.Fatalf("at the end: buffer kept %v, event %q, err %v", rd.br != nil, rd.Event().Data, rd.Err())
	}

	rd = NewReader(strings.NewReader("data: a\n\ndata: b\n\n"), 0)
	if !rd.Next() {
		t.Fatal("no first event")
	}
	rd.Release()
	rd.Release() // twice is harmless
	if rd.Next() || rd.br != nil || string(rd.Event().Data) != "a" || rd.Err() != nil {
		t.Fatalf("after Release: buffer kept %v, event %q, err %v", rd.br != nil, rd.Event().Data, rd.Err())
	}

	rd = NewReader(iotest.ErrReader(errors.New("boom")), 0)
	if rd.Next() || rd.br != nil || rd.Err() == nil {
		t.Fatalf("after a read error: buffer kept %v, err %v", rd.br != nil, rd.Err())
	}
	rd = NewReader(strings.NewReader("data: 0123456789\n\n"), 4)
	if rd.Next() || rd.br != nil || !errors.Is(rd.Err(), ErrEventTooLarge) {
		t.Fatalf("after an oversized event: buffer kept %v, err %v", rd.br != nil, rd.Err())
	}

	stream := []byte("data: {\"choices\":[{\"delta\":{\"content\":\"hello\"}}]}\n\ndata: [DONE]\n\n")
	const runs = 400
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		rd := NewReader(bytes.NewReader(stream), 0)
		for rd.Next() {
		}
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / runs; per > 2048 {
		t.Errorf("%d bytes allocated per stream read to its end; its 4 KiB buffer is not reused", per)
	}
}

func FuzzReader(f *testing.F) {
	seeds := []string{
		"",
		"data: x\n\n",
		"data: {\"id\":\"1\"}\n\ndata: [DONE]\n\n",
		"event: message_start\ndata: {}\n\n",
		": comment\r\ndata: a\r\ndata: b\r\n\r\n",
		"data: a\rdata: b\r\r",
		"\xEF\xBB\xBFdata: bom\n\n",
		"data:no-space\ndata",
		"event: x\n\n\n\r\r\n",
		strings.Repeat("data: long\n", 50) + "\n",
	}
	for _, s := range seeds {
		f.Add([]byte(s), 16)
	}
	f.Fuzz(func(t *testing.T, in []byte, max int) {
		if max > 1<<16 {
			max = 1 << 16
		}
		rd := NewReader(iotest.HalfReader(bytes.NewReader(in)), max)
		n := 0
		for rd.Next() {
			n++
			// Every event needs at least one line, so more events than bytes means a loop.
			if n > len(in)+1 {
				t.Fatalf("%d events from %d bytes", n, len(in))
			}
			e := rd.Event()
			limit := max
			if limit <= 0 {
				limit = DefaultMaxEventBytes
			}
			if len(e.Data) > limit {
				t.Fatalf("event of %d bytes over the limit %d", len(e.Data), limit)
			}
		}
		if err := rd.Err(); err != nil && !errors.Is(err, ErrEventTooLarge) {
			t.Fatalf("unexpected error %v", err)
		}
	})
}

// FuzzRoundTrip checks that whatever AppendEvent writes, the Reader reads back unchanged
// (line breaks in data come back as "\n").
func FuzzRoundTrip(f *testing.F) {
	f.Add("", "hello")
	f.Add("ping", "a\nb")
	f.Add("x", "a\r\nb\rc")
	f.Add("", "")
	f.Fuzz(func(t *testing.T, name, data string) {
		frame, err := AppendEvent(nil, name, []byte(data))
		if err != nil {
			if !strings.ContainsAny(name, "\r\n") {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		got, err := readAll(t, bytes.NewReader(frame), len(data)+len(name)+1)
		if err != nil {
			t.Fatal(err)
		}
		want := strings.NewReplacer("\r\n", "\n", "\r", "\n").Replace(data)
		if len(got) != 1 || got[0].data != want || got[0].name != name {
			t.Fatalf("read back %q, want name %q data %q", got, name, want)
		}
	})
}

// TestRelayKeepsEvents: an upstream stream with multi-line data, comments and retry fields,
// read and written back with the encoder, reads as the same events, each data whole.
func TestRelayKeepsEvents(t *testing.T) {
	upstream := ": keep-alive\n" +
		"retry: 3000\n" +
		"event: message_start\n" +
		"data: {\"type\":\"message_start\",\n" +
		"data:  \"message\": {\"id\": \"m1\"}}\n\n" +
		": another comment\r\n" +
		"data: {\r\n" +
		"data:   \"choices\": [\r\n" +
		"data:     {\"delta\": {\"content\": \"line\\nbreak\"}}\r\n" +
		"data:   ]\r\n" +
		"data: }\r\n\r\n" +
		"id: 7\n" +
		"data: single\n\n"
	in, err := readAll(t, strings.NewReader(upstream), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(in) != 3 {
		t.Fatalf("read %d events, want 3: %q", len(in), in)
	}
	var relayed []byte
	for i, e := range in {
		if i == 1 {
			// The relay's splice of its own value into an unnamed event.
			at := strings.Index(e.data, `"choices"`)
			relayed = AppendSplicedData(relayed, []byte(e.data), at, at, []byte("\"id\":\n\"gen_1\",\r\n"))
			in[i].data = e.data[:at] + "\"id\":\n\"gen_1\",\n" + e.data[at:]
			continue
		}
		if relayed, err = AppendEvent(relayed, e.name, []byte(e.data)); err != nil {
			t.Fatal(err)
		}
	}
	out, err := readAll(t, bytes.NewReader(relayed), 0)
	if err != nil {
		t.Fatal(err)
	}
	if !equalEvents(in, out) {
		t.Fatalf("relayed\n%q\nreads as\n%q\nwant\n%q", relayed, out, in)
	}
	for _, line := range strings.Split(string(relayed), "\n") {
		if line != "" && !strings.HasPrefix(line, "data: ") && !strings.HasPrefix(line, "event: ") {
			t.Errorf("relayed line %q is neither a data nor an event line", line)
		}
	}
}
