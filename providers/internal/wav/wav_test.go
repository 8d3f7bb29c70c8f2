package wav

import (
	"bytes"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/internal/audioprobe"
)

// The header is read back by the gateway's own probe: a file of known length lasts what its
// bytes hold, and a streamed one has the placeholder sizes.
func TestAppendHeader(t *testing.T) {
	pcm := make([]byte, 48_000) // one second of 24 kHz mono
	file := append(AppendHeader(nil, 24_000, 1, int64(len(pcm))), pcm...)
	if len(file) != HeaderSize+len(pcm) {
		t.Fatalf("header of %d bytes", len(file)-len(pcm))
	}
	d, _, err := audioprobe.Duration(bytes.NewReader(file))
	if err != nil || d != time.Second {
		t.Fatalf("probed %v, %v; want 1s", d, err)
	}
	streamed := AppendHeader(nil, 22_050, 2, -1)
	if string(streamed[4:8]) != "\xff\xff\xff\xff" || string(streamed[40:44]) != "\xff\xff\xff\xff" {
		t.Fatalf("streamed header %x", streamed)
	}
}
