package module

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
)

// readmeCaddyfile is one ```caddyfile block of the README.
type readmeCaddyfile struct {
	line     int
	fragment bool
	body     string
}

// readmeCaddyfiles finds the README's Caddyfile blocks. A block fenced ```caddyfile is a whole
// Caddyfile; one fenced ```caddyfile fragment holds lines of the model_gateway global option
// (a provider or model block, written at its own indentation), which the test wraps in
// "{ model_gateway { ... } }" before adapting. Fences must start at the beginning of a line,
// so that no Caddyfile of the README escapes the test.
func readmeCaddyfiles(t *testing.T, src []byte) []readmeCaddyfile {
	t.Helper()
	var (
		blocks []readmeCaddyfile
		cur    *readmeCaddyfile
		fenced bool // inside a fence of another language
		body   strings.Builder
	)
	sc := bufio.NewScanner(bytes.NewReader(src))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case cur != nil && trimmed == "```":
			cur.body = body.String()
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			body.WriteString(line)
			body.WriteByte('\n')
		case fenced:
			fenced = trimmed != "```"
		case strings.HasPrefix(trimmed, "```caddyfile"):
			if trimmed != line {
				t.Fatalf("README.md:%d: an indented caddyfile fence; start it at the beginning of the line", n)
			}
			switch info := strings.TrimSpace(strings.TrimPrefix(trimmed, "```caddyfile")); info {
			case "", "fragment":
				cur = &readmeCaddyfile{line: n, fragment: info == "fragment"}
				body.Reset()
			default:
				t.Fatalf("README.md:%d: unknown caddyfile fence %q (want ```caddyfile or ```caddyfile fragment)", n, trimmed)
			}
		case strings.HasPrefix(trimmed, "```"):
			fenced = true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if cur != nil {
		t.Fatalf("README.md:%d: the caddyfile block never ends", cur.line)
	}
	return blocks
}

// wrapFragment puts a fragment's lines inside the model_gateway global option, indented
// as caddy fmt would, so that the formatting check holds for the whole.
func wrapFragment(body string) string {
	var b strings.Builder
	b.WriteString("{\n\tmodel_gateway {\n")
	for _, line := range strings.Split(strings.TrimRight(body, "\n"), "\n") {
		if line != "" {
			b.WriteString("\t\t")
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	b.WriteString("\t}\n}\n")
	return b.String()
}

// TestReadmeCaddyfiles adapts every Caddyfile of the README with Caddy's caddyfile adapter,
// as "caddy adapt" does, so that what users copy from it loads: a parse error, an unknown
// directive or a formatting warning fails the test.
func TestReadmeCaddyfiles(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := readmeCaddyfiles(t, src)
	if len(blocks) == 0 {
		t.Fatal("README.md has no ```caddyfile block")
	}
	for _, b := range blocks {
		name := fmt.Sprintf("README.md:%d", b.line)
		t.Run(name, func(t *testing.T) {
			body := b.body
			if b.fragment {
				body = wrapFragment(body)
			}
			// Positions in errors are lines of the block (of the wrapped block for a fragment,
			// two more); the subtest's name is the README line of its fence.
			cfg, warnings, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(body), map[string]any{"filename": "block"})
			if err != nil {
				t.Fatalf("adapting:\n%s\n%v", body, err)
			}
			if len(warnings) > 0 {
				t.Fatalf("adapting:\n%s\nwarnings: %v", body, warnings)
			}
			if !bytes.Contains(cfg, []byte(`"model_gateway"`)) {
				t.Fatalf("the block configures no model_gateway: %s", cfg)
			}
		})
	}
}

func TestReadmeCaddyfilesFound(t *testing.T) {
	src := []byte("text\n```caddyfile\n:80 {\n}\n```\n```sh\n```caddyfile\n```\n```caddyfile fragment\nprovider m {\n\ttype mock\n}\n```\n")
	got := readmeCaddyfiles(t, src)
	if len(got) != 2 || got[0].fragment || got[0].body != ":80 {\n}\n" || !got[1].fragment || got[1].line != 9 {
		t.Fatalf("got %+v", got)
	}
	want := "{\n\tmodel_gateway {\n\t\tprovider m {\n\t\t\ttype mock\n\t\t}\n\t}\n}\n"
	if w := wrapFragment(got[1].body); w != want {
		t.Fatalf("wrapped %q, want %q", w, want)
	}
}
