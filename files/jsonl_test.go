package files

import (
	"errors"
	"strings"
	"testing"
)

func TestBatchChecker(t *testing.T) {
	good := `{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m"}}`
	line := func(id, method, url, body string) string {
		return `{"custom_id":"` + id + `","method":"` + method + `","url":"` + url + `","body":` + body + `}`
	}
	for _, tc := range []struct {
		name, file string
		line       int
		reason     string
	}{
		{"one line", good, -1, ""},
		{"crlf and a trailing blank line", good + "\r\n" + line("b", "POST", "/v1/embeddings", "{}") + "\r\n\n", -1, ""},
		{"empty", "", 0, "no request lines"},
		{"blank only", "\n  \n", 0, "no request lines"},
		{"not json", good + "\nnope\n", 2, "not a JSON object"},
		{"array", "[1]", 1, "not a JSON object"},
		{"no custom_id", `{"method":"POST","url":"/v1/responses","body":{}}`, 1, "no custom_id"},
		{"GET", line("a", "GET", "/v1/responses", "{}"), 1, `method "GET"`},
		{"unknown url", line("a", "POST", "/v1/images/generations", "{}"), 1, `url "/v1/images/generations"`},
		{"body not object", line("a", "POST", "/v1/messages", `"hi"`), 1, "no body object"},
		{"duplicate", good + "\n\n" + good, 3, `repeats custom_id "a" of line 1`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Fed a byte at a time and whole: lines split across writes read the same.
			for _, chunk := range []int{1, len(tc.file) + 1} {
				c := &BatchChecker{}
				for i := 0; i < len(tc.file); i += chunk {
					if _, err := c.Write([]byte(tc.file[i:min(i+chunk, len(tc.file))])); err != nil {
						t.Fatalf("Write without FailFast: %v", err)
					}
				}
				err := c.Close()
				if tc.line < 0 {
					if err != nil {
						t.Fatalf("good file refused: %v", err)
					}
					continue
				}
				var le *LineError
				if !errors.As(err, &le) || le.Line != tc.line || !strings.Contains(le.Error(), tc.reason) {
					t.Fatalf("error %v, want line %d with %q", err, tc.line, tc.reason)
				}
			}
			// ReadBatch, reading a stored file, judges it the same, and yields its rows.
			var got []int
			err := ReadBatch(strings.NewReader(tc.file), func(n int, l BatchLine) error {
				if l.Method != "POST" || l.CustomID == "" || len(l.Body) == 0 {
					t.Fatalf("line %d read as %+v", n, l)
				}
				got = append(got, n)
				return nil
			})
			var le *LineError
			switch {
			case tc.line < 0 && err != nil:
				t.Fatalf("ReadBatch refused a good file: %v", err)
			case tc.line < 0 && len(got) != strings.Count(strings.TrimSpace(tc.file), "custom_id"):
				t.Fatalf("ReadBatch yielded lines %v", got)
			case tc.line >= 0 && (!errors.As(err, &le) || le.Line != tc.line || !strings.Contains(le.Error(), tc.reason)):
				t.Fatalf("ReadBatch: %v, want line %d with %q", err, tc.line, tc.reason)
			}
		})
	}
}

func TestBatchCheckerFailFastStopsTheStream(t *testing.T) {
	c := &BatchChecker{FailFast: true}
	if _, err := c.Write([]byte("{\"custom_id\":1}\n")); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("Write of a bad line with FailFast: %v, want the line's error", err)
	}
}

func TestBatchCheckerBoundsALine(t *testing.T) {
	c := &BatchChecker{}
	_, _ = c.Write([]byte(`{"custom_id":"`))
	chunk := []byte(strings.Repeat("x", 1<<20))
	for i := 0; i <= MaxBatchLineBytes>>20; i++ {
		_, _ = c.Write(chunk)
	}
	var le *LineError
	if err := c.Close(); !errors.As(err, &le) || le.Line != 1 || !strings.Contains(le.Reason, "longer than") {
		t.Fatalf("a line past the bound: %v", err)
	}
	if cap(c.line) != 0 {
		t.Fatalf("the checker still holds %d bytes after refusing the line", cap(c.line))
	}
}

func TestBatchCheckerRefusesANonObjectAtItsFirstByte(t *testing.T) {
	c := &BatchChecker{}
	_, _ = c.Write([]byte("\x89PNG\r\n"))
	_, _ = c.Write([]byte(strings.Repeat("x", 1<<20)))
	var le *LineError
	if err := c.Close(); !errors.As(err, &le) || le.Line != 1 || !strings.Contains(le.Reason, "not a JSON object") {
		t.Fatalf("a PNG: %v", err)
	}
	if cap(c.line) != 0 {
		t.Fatalf("the checker held %d bytes of a file it refused at its first byte", cap(c.line))
	}
}

func TestReadBatchBoundsALine(t *testing.T) {
	long := `{"custom_id":"` + strings.Repeat("x", MaxBatchLineBytes) + "\n"
	var le *LineError
	if err := ReadBatch(strings.NewReader(long), func(int, BatchLine) error { return nil }); !errors.As(err, &le) || le.Line != 1 || !strings.Contains(le.Reason, "longer than") {
		t.Fatalf("a line past the bound: %v", err)
	}
}
