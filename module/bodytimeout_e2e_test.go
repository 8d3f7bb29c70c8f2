package module

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/internal/upload"
)

// slowRequest sends a chunked request whose body starts with head and then comes one byte
// a second, and returns the answer the gateway sent meanwhile and how long it took.
func slowRequest(t *testing.T, baseURL, key, path, contentType, head string, sent func()) (*http.Response, []byte, time.Duration) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(baseURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	began := time.Now()
	fmt.Fprintf(conn, "POST /v1%s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: %s\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n",
		path, strings.TrimPrefix(baseURL, "http://"), key, contentType, len(head), head)
	if sent != nil {
		sent()
	}
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	go func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if _, err := io.WriteString(conn, "1\r\nx\r\n"); err != nil {
					return
				}
			}
		}
	}()
	// Far beyond the body timeout the test configures: an answer this late is no answer.
	_ = conn.SetReadDeadline(time.Now().Add(15 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a body sent at a byte a second after %s: %v", time.Since(began), err)
	}
	body, _ := io.ReadAll(resp.Body)
	return resp, body, time.Since(began)
}

// A client that sends its body at a byte a second is answered 408 within the configured
// body timeout, and its spooled upload is freed: it cannot hold a request, a spool file and
// a goroutine for as long as it keeps sending.
func TestSlowBodiesAreCut(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "spool")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	up := newFakeAudio(t, wavFile(time.Second))
	const timeout = 500 * time.Millisecond
	env := startGateway(t, "\t\tupload_dir "+dir+"\n"+providerBlock("oa", up.URL)+
		embeddingModel("whisper", embeddingRoute("oa", "whisper-1", "input_audio_seconds 0.0001"))+
		pricedModel("m", pricedRoute("oa", "gpt-4o")),
		fmt.Sprintf("\t\t\tbody_timeout %s\n\t\t\tbody_min_rate 1KiB", timeout))
	wsID, key := env.workspace(5 * usd)
	before := env.balance(wsID)

	const boundary = "slowboundary"
	cases := []struct {
		name, path, contentType, head string
		spooled                       bool
	}{
		// The file comes before the model, as openai-go sends it: it is spooled as it arrives.
		{"upload", "/audio/transcriptions", "multipart/form-data; boundary=" + boundary,
			"--" + boundary + "\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\nContent-Type: audio/wav\r\n\r\nRIFF", true},
		{"json", "/chat/completions", "application/json", `{"model":"m","messages":[{"role":"user","content":"`, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, body, took := slowRequest(t, env.baseURL, key, tc.path, tc.contentType, tc.head, func() {
				if !tc.spooled {
					return
				}
				// The upload is being spooled before it is cut.
				for deadline := time.Now().Add(5 * time.Second); upload.SpoolsInUse() == 0; time.Sleep(5 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatal("the upload was never spooled")
					}
				}
			})
			var v map[string]any
			_ = json.Unmarshal(body, &v)
			e, _ := v["error"].(map[string]any)
			if resp.StatusCode != http.StatusRequestTimeout || e["code"] != "request_timeout" || v["ok"] != false || v["status_code"] != float64(408) || v["error_origin"] != "user" {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
			// The body timeout plus the credit of the bytes sent, and a margin for a busy machine.
			if limit := timeout + 4*time.Second; took > limit {
				t.Fatalf("answered after %s, beyond the body timeout of %s", took, timeout)
			}
			if n := upload.SpoolsInUse(); n != 0 {
				t.Fatalf("%d spool files still held", n)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Fatalf("the spool directory holds %d files", len(entries))
			}
		})
	}
	if up.calls.Load() != 0 || env.balance(wsID) != before {
		t.Fatal("a request cut while its body arrived reached the upstream or was charged")
	}
}
