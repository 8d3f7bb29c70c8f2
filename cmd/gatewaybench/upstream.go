package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The fake upstream runs in a process of its own ("gatewaybench upstream -addr ..."), so
// that its CPU and memory are neither the load generator's nor the proxies'. It speaks
// OpenAI chat completions (POST /v1/chat/completions) and Anthropic Messages
// (POST /v1/messages), streamed and not, and the media endpoints of the media tests
// (upstream_media.go). What it answers is set by a directive that the load generator
// writes into the prompt, "[bench n=<chunks> i=<interval> l=<latency> h=<hold id>]", because the prompt's text is the one thing every arm passes through
// unchanged, whether the gateway forwards the body as it is or translates it.
//
//   - l: wait before the answer (non-streamed) or before the first chunk (streamed).
//   - n: the answer's pieces; a stream sends one content chunk per piece, i apart.
//   - h: after the first chunk, wait until POST /bench/release?id=<h> (at most maxHold),
//     so that the load generator can hold thousands of streams open at once.
//
// Every content piece is "~t<k> ", which the load generator recognises on every surface;
// a streamed one is "~t<k>@<send time> " (see piece).

// maxHold bounds how long a held stream waits for its release.
const maxHold = 3 * time.Minute

// directive is what one request asks of the fake upstream.
type directive struct {
	n        int
	interval time.Duration
	latency  time.Duration
	hold     string
}

// String renders the directive for a prompt.
func (d directive) String() string {
	s := fmt.Sprintf("[bench n=%d i=%s l=%s", d.n, d.interval, d.latency)
	if d.hold != "" {
		s += " h=" + d.hold
	}
	return s + "]"
}

// parseDirective finds the directive in a raw request body; without one the answer is a
// single piece at once.
func parseDirective(body []byte) directive {
	d := directive{n: 1}
	for k, v := range benchFields(body) {
		switch k {
		case "n":
			if n, err := strconv.Atoi(v); err == nil && n > 0 && n <= 100000 {
				d.n = n
			}
		case "i":
			d.interval, _ = time.ParseDuration(v)
		case "l":
			d.latency, _ = time.ParseDuration(v)
		case "h":
			d.hold = v
		}
	}
	return d
}

// benchFields are the key=value fields of the first "[bench ...]" in body; nil without one.
func benchFields(body []byte) map[string]string {
	start := bytes.Index(body, []byte("[bench "))
	if start < 0 {
		return nil
	}
	rest := body[start+len("[bench "):]
	end := bytes.IndexByte(rest, ']')
	if end < 0 {
		return nil
	}
	fields := map[string]string{}
	for _, field := range strings.Fields(string(rest[:end])) {
		if k, v, ok := strings.Cut(field, "="); ok {
			fields[k] = v
		}
	}
	return fields
}

// jsonTrue reports whether the body has "key": true. It is a byte scan, not a parser, good
// for the bodies of this benchmark (whose prompts never contain the key).
func jsonTrue(body []byte, key string) bool {
	quoted := []byte(`"` + key + `"`)
	for off := 0; ; {
		i := bytes.Index(body[off:], quoted)
		if i < 0 {
			return false
		}
		j := off + i + len(quoted)
		for j < len(body) && (body[j] == ' ' || body[j] == '\t' || body[j] == '\n' || body[j] == '\r' || body[j] == ':') {
			j++
		}
		if bytes.HasPrefix(body[j:], []byte("true")) {
			return true
		}
		off = j
	}
}

// fakeUpstream serves both wire formats from answers rendered once per shape.
type fakeUpstream struct {
	mu    sync.Mutex
	holds map[string]chan struct{}
	cache sync.Map // answerKey -> [][]byte
	// videos counts the video traffic (upstream_videos.go).
	videos videoStats
}

type answerKey struct {
	format string // "chat" or "messages"
	stream bool
	usage  bool
	n      int
}

func (u *fakeUpstream) holdChan(id string) chan struct{} {
	u.mu.Lock()
	defer u.mu.Unlock()
	ch, ok := u.holds[id]
	if !ok {
		ch = make(chan struct{})
		u.holds[id] = ch
	}
	return ch
}

func (u *fakeUpstream) release(id string) {
	ch := u.holdChan(id)
	u.mu.Lock()
	defer u.mu.Unlock()
	select {
	case <-ch:
	default:
		close(ch)
	}
}

// piece is the text of content piece k. A streamed piece carries a stamp: "@" and
// stampDigits digits, zeros in the rendered frame, overwritten with the Unix time in
// nanoseconds as the chunk goes out. The load generator reads it back from the text the
// proxy passes on (both processes read the same host's clock), which tells the upstream's own
// pacing apart from what the proxy adds to a chunk's way.
func piece(k int, stamped bool) string {
	if stamped {
		return "~t" + strconv.Itoa(k) + "@" + strings.Repeat("0", stampDigits) + " "
	}
	return "~t" + strconv.Itoa(k) + " "
}

const stampDigits = 19

// putStamp writes t, in Unix nanoseconds, over the stampDigits digits at b[0:].
func putStamp(b []byte, t time.Time) {
	n := t.UnixNano()
	for j := stampDigits - 1; j >= 0; j-- {
		b[j] = byte('0' + n%10)
		n /= 10
	}
}

// readStamp returns the stamp of a content chunk's text ("~t", the piece's number, "@" and
// the digits), and false if it has none (a zero stamp, or a piece without one).
func readStamp(data []byte) (time.Time, bool) {
	i := bytes.Index(data, []byte("~t"))
	if i < 0 {
		return time.Time{}, false
	}
	j := i + 2
	for j < len(data) && data[j] >= '0' && data[j] <= '9' {
		j++
	}
	if j == i+2 || j >= len(data) || data[j] != '@' {
		return time.Time{}, false
	}
	return stampAt(data, j+1)
}

// A non-streamed answer carries two stamps after its pieces: when the upstream received the
// request (recvTag) and when it wrote the answer (writeTag). The load generator reads them
// back to split a request's latency into its way to the upstream and its way back.
const (
	recvTag  = "~r@"
	writeTag = "~w@"
)

// readTagged returns the stamp that follows tag in data, and false if there is none.
func readTagged(data []byte, tag string) (time.Time, bool) {
	i := bytes.Index(data, []byte(tag))
	if i < 0 {
		return time.Time{}, false
	}
	return stampAt(data, i+len(tag))
}

// stampAt reads the stampDigits digits at data[at:] as Unix nanoseconds; false if they are
// not all there, not all digits, or zero.
func stampAt(data []byte, at int) (time.Time, bool) {
	if len(data) < at+stampDigits {
		return time.Time{}, false
	}
	var n int64
	for _, c := range data[at : at+stampDigits] {
		if c < '0' || c > '9' {
			return time.Time{}, false
		}
		n = n*10 + int64(c-'0')
	}
	if n == 0 {
		return time.Time{}, false
	}
	return time.Unix(0, n), true
}

// rendered is an answer's frames and, for each, the offset of its stamp's digits (-1: none);
// for a non-streamed answer, recvAt and writeAt are the offsets of its two stamps' digits.
type rendered struct {
	frames          [][]byte
	stampAt         []int
	recvAt, writeAt int
}

// frames renders an answer: one element for a JSON body, one per SSE event for a stream,
// content chunk k being frames[k+skip] where skip is the number of frames before the first
// piece (0 for chat, 2 for messages).
func (u *fakeUpstream) frames(k answerKey) rendered {
	if v, ok := u.cache.Load(k); ok {
		return v.(rendered)
	}
	var out [][]byte
	var text strings.Builder
	for i := 0; i < k.n; i++ {
		text.WriteString(piece(i, false))
	}
	zeros := strings.Repeat("0", stampDigits)
	if !k.stream {
		text.WriteString(recvTag + zeros + " " + writeTag + zeros + " ")
	}
	const promptTokens = 24
	switch {
	case k.format == "chat" && !k.stream:
		out = append(out, fmt.Appendf(nil, `{"id":"chatcmpl-bench","object":"chat.completion","created":1700000000,"model":"up-model","choices":[{"index":0,"message":{"role":"assistant","content":%q,"refusal":null},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d},"system_fingerprint":"fp_bench"}`,
			text.String(), promptTokens, k.n, promptTokens+k.n))
	case k.format == "chat":
		const head = `data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,"model":"up-model","system_fingerprint":"fp_bench",`
		for i := 0; i < k.n; i++ {
			role := ""
			if i == 0 {
				role = `"role":"assistant",`
			}
			out = append(out, fmt.Appendf(nil, "%s\"choices\":[{\"index\":0,\"delta\":{%s\"content\":%q},\"logprobs\":null,\"finish_reason\":null}]}\n\n", head, role, piece(i, true)))
		}
		out = append(out, []byte(head+`"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]}`+"\n\n"))
		if k.usage {
			out = append(out, fmt.Appendf(nil, "%s\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d}}\n\n", head, promptTokens, k.n, promptTokens+k.n))
		}
		out = append(out, []byte("data: [DONE]\n\n"))
	case !k.stream:
		out = append(out, fmt.Appendf(nil, `{"id":"msg_bench","type":"message","role":"assistant","model":"up-model","content":[{"type":"text","text":%q}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":%d,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":%d}}`,
			text.String(), promptTokens, k.n))
	default:
		out = append(out,
			fmt.Appendf(nil, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_bench\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"up-model\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":%d,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":0,\"output_tokens\":1}}}\n\n", promptTokens),
			[]byte("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"))
		for i := 0; i < k.n; i++ {
			out = append(out, fmt.Appendf(nil, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":%q}}\n\n", piece(i, true)))
		}
		out = append(out,
			[]byte("event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n"),
			fmt.Appendf(nil, "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":%d}}\n\n", k.n),
			[]byte("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"))
	}
	r := rendered{frames: out, stampAt: make([]int, len(out)), recvAt: -1, writeAt: -1}
	if !k.stream {
		r.recvAt = bytes.Index(out[0], []byte(recvTag+zeros)) + len(recvTag)
		r.writeAt = bytes.Index(out[0], []byte(writeTag+zeros)) + len(writeTag)
	}
	for i, f := range out {
		r.stampAt[i] = -1
		if at := bytes.Index(f, []byte("@"+zeros)); at >= 0 && k.stream {
			r.stampAt[i] = at + 1
		}
	}
	u.cache.Store(k, r)
	return r
}

func (u *fakeUpstream) serve(format string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		received := time.Now()
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			http.Error(w, "reading the body", http.StatusBadRequest)
			return
		}
		d := parseDirective(body)
		k := answerKey{format: format, stream: jsonTrue(body, "stream"), n: d.n}
		k.usage = k.stream && format == "chat" && jsonTrue(body, "include_usage")
		frames := u.frames(k)
		if !sleepCtx(r.Context(), d.latency) {
			return
		}
		if !k.stream {
			h := w.Header()
			h.Set("Content-Type", "application/json")
			h.Set("Content-Length", strconv.Itoa(len(frames.frames[0])))
			b := answerBuf.Get().(*[]byte)
			*b = append((*b)[:0], frames.frames[0]...)
			putStamp((*b)[frames.recvAt:], received)
			putStamp((*b)[frames.writeAt:], time.Now())
			_, _ = w.Write(*b)
			answerBuf.Put(b)
			return
		}
		h := w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		rc := http.NewResponseController(w)
		skip := 0
		if format == "messages" {
			skip = 2
		}
		var hold chan struct{}
		if d.hold != "" {
			hold = u.holdChan(d.hold)
		}
		var stamped []byte
		for i, f := range frames.frames {
			piece := i - skip
			if piece > 0 && piece < d.n && !sleepCtx(r.Context(), d.interval) {
				return
			}
			if at := frames.stampAt[i]; at >= 0 {
				stamped = append(stamped[:0], f...)
				putStamp(stamped[at:], time.Now())
				f = stamped
			}
			if _, err := w.Write(f); err != nil {
				return
			}
			// Frames that follow one another at once go out together, as a real server's
			// would; a chunk that is followed by a wait is flushed alone.
			if piece >= 0 && piece < d.n {
				if err := rc.Flush(); err != nil {
					return
				}
			}
			if piece == 0 && hold != nil {
				t := time.NewTimer(maxHold)
				select {
				case <-hold:
				case <-t.C:
				case <-r.Context().Done():
					t.Stop()
					return
				}
				t.Stop()
			}
		}
	}
}

// answerBuf holds a non-streamed answer while its stamps are written.
var answerBuf = sync.Pool{New: func() any { return new([]byte) }}

// sleepCtx waits d unless ctx ends first; it reports whether the wait was complete.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// runUpstream is the child process's main: it serves until SIGTERM or SIGINT.
func runUpstream(args []string) error {
	fs := flag.NewFlagSet("upstream", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:0", "loopback address to listen on")
	if err := fs.Parse(args); err != nil {
		return err
	}
	host, _, err := net.SplitHostPort(*addr)
	if err != nil {
		return err
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("the fake upstream listens on loopback addresses only, not %q", host)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := newUpstreamServer(&fakeUpstream{holds: map[string]chan struct{}{}})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// newUpstreamServer is the fake upstream's server: the two APIs, the media endpoints and the
// load generator's controls.
func newUpstreamServer(u *fakeUpstream) *http.Server {
	mux := http.NewServeMux()
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 5 * time.Minute}
	mux.HandleFunc("POST /v1/chat/completions", u.serve("chat"))
	mux.HandleFunc("POST /v1/messages", u.serve("messages"))
	mux.HandleFunc("POST /v1/audio/speech", u.speech)
	mux.HandleFunc("POST /v1/audio/transcriptions", u.transcriptions)
	mux.HandleFunc("POST /v1/images/edits", u.imageEdits)
	mux.HandleFunc("POST /v1/videos", u.createVideo)
	mux.HandleFunc("GET /v1/videos/{id}", u.pollVideo)
	mux.HandleFunc("GET /v1/videos/{id}/content", u.videoContent)
	mux.HandleFunc("POST /bench/videos/end", u.endLiveVideos)
	mux.HandleFunc("GET /bench/videos/stats", u.videoStatsHandler)
	mux.HandleFunc("POST /bench/release", func(w http.ResponseWriter, r *http.Request) {
		u.release(r.URL.Query().Get("id"))
	})
	mux.HandleFunc("GET /bench/ping", func(w http.ResponseWriter, r *http.Request) {})
	// POST /bench/close-idle closes every idle keep-alive connection to the fake (turning
	// keep-alives off closes them; they are on again at once), so that the proxies drop
	// the upstream connections an earlier test left in their pools.
	mux.HandleFunc("POST /bench/close-idle", func(w http.ResponseWriter, r *http.Request) {
		srv.SetKeepAlivesEnabled(false)
		srv.SetKeepAlivesEnabled(true)
	})
	return srv
}
