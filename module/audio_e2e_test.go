package module

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared/constant"
)

// wavFile is a 16 kHz 16-bit mono WAV of d, its samples a deterministic noise (so that a
// byte out of place shows).
func wavFile(d time.Duration) []byte {
	const rate = 16000
	n := int(d.Seconds() * rate)
	var b bytes.Buffer
	b.WriteString("RIFF")
	_ = binary.Write(&b, binary.LittleEndian, uint32(36+2*n))
	b.WriteString("WAVEfmt ")
	for _, v := range []any{uint32(16), uint16(1), uint16(1), uint32(rate), uint32(2 * rate), uint16(2), uint16(16)} {
		_ = binary.Write(&b, binary.LittleEndian, v)
	}
	b.WriteString("data")
	_ = binary.Write(&b, binary.LittleEndian, uint32(2*n))
	x := uint32(2463534242)
	for range n {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		_ = binary.Write(&b, binary.LittleEndian, int16(x))
	}
	return b.Bytes()
}

// speechClip is what the fake upstream speaks: bytes that are not valid UTF-8 or base64 text.
var speechClip = func() []byte {
	b := make([]byte, 48<<10)
	for i := range b {
		b[i] = byte(i*7 + i/251)
	}
	return b
}()

// fakeAudio is an OpenAI-wire audio upstream: speech as bytes (the first piece at once,
// the rest after slowSpeech when the model is "slow-tts") or as events, transcriptions and
// translations from a multipart form that it checks against the file it expects.
type fakeAudio struct {
	*httptest.Server
	calls    atomic.Int64
	mu       sync.Mutex
	forms    []receivedForm
	wantFile []byte
}

type receivedForm struct {
	path     string
	fields   map[string][]string
	fileName string
	fileType string
	fileSum  [32]byte
	fileLen  int
}

const slowSpeech = 1500 * time.Millisecond

func newFakeAudio(t *testing.T, wantFile []byte) *fakeAudio {
	f := &fakeAudio{wantFile: wantFile}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.calls.Add(1)
		switch r.URL.Path {
		case "/v1/audio/speech":
			f.speech(w, r)
		case "/v1/audio/transcriptions", "/v1/audio/translations":
			f.transcribe(w, r)
		default:
			http.Error(w, `{"error":{"message":"unknown path","type":"invalid_request_error"}}`, 404)
		}
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeAudio) speech(w http.ResponseWriter, r *http.Request) {
	var req map[string]any
	_ = json.NewDecoder(r.Body).Decode(&req)
	fl := w.(http.Flusher)
	if req["stream_format"] == "sse" {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; i < len(speechClip); i += 16 << 10 {
			fmt.Fprintf(w, "data: {\"type\":\"speech.audio.delta\",\"audio\":%q}\n\n", base64.StdEncoding.EncodeToString(speechClip[i:min(i+16<<10, len(speechClip))]))
			fl.Flush()
		}
		if req["model"] == "cut-tts" {
			return // ends before speech.audio.done
		}
		fmt.Fprint(w, "data: {\"type\":\"speech.audio.done\",\"usage\":{\"input_tokens\":11,\"output_tokens\":300,\"total_tokens\":311}}\n\n")
		return
	}
	if r.Header.Get("Accept") != "application/octet-stream" {
		http.Error(w, `{"error":{"message":"speech wants Accept: application/octet-stream","type":"invalid_request_error"}}`, 400)
		return
	}
	w.Header().Set("Content-Type", "audio/mpeg")
	w.Header().Set("Content-Disposition", `attachment; filename="speech.mp3"`)
	_, _ = w.Write(speechClip[:1024])
	fl.Flush()
	if req["model"] == "slow-tts" {
		time.Sleep(slowSpeech)
	}
	if req["model"] == "broken-tts" {
		// The connection drops mid-clip.
		conn, _, _ := http.NewResponseController(w).Hijack()
		_ = conn.Close()
		return
	}
	_, _ = w.Write(speechClip[1024:])
}

func (f *fakeAudio) transcribe(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseMultipartForm(1 << 20); err != nil {
		http.Error(w, `{"error":{"message":"not multipart","type":"invalid_request_error"}}`, 400)
		return
	}
	defer func() { _ = r.MultipartForm.RemoveAll() }()
	got := receivedForm{path: r.URL.Path, fields: r.MultipartForm.Value}
	if fh := r.MultipartForm.File["file"]; len(fh) == 1 {
		got.fileName, got.fileType = fh[0].Filename, fh[0].Header.Get("Content-Type")
		file, _ := fh[0].Open()
		data, _ := io.ReadAll(file)
		got.fileSum, got.fileLen = sha256.Sum256(data), len(data)
	}
	f.mu.Lock()
	f.forms = append(f.forms, got)
	f.mu.Unlock()
	if got.fileSum != sha256.Sum256(f.wantFile) {
		http.Error(w, `{"error":{"message":"the file arrived damaged","type":"invalid_request_error"}}`, 400)
		return
	}
	model, format := r.FormValue("model"), r.FormValue("response_format")
	tokens := strings.Contains(model, "gpt-4o")
	usage := `{"type":"duration","seconds":3.2}`
	if tokens {
		usage = `{"type":"tokens","input_tokens":70,"input_token_details":{"audio_tokens":60,"text_tokens":10},"output_tokens":9,"total_tokens":79}`
	}
	if r.FormValue("stream") == "true" {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, d := range []string{"Hello", " there", "."} {
			fmt.Fprintf(w, "data: {\"type\":\"transcript.text.delta\",\"delta\":%q}\n\n", d)
		}
		if strings.HasPrefix(model, "cut-") {
			return // ends before transcript.text.done
		}
		if strings.Contains(model, "nousage") { // a compatible server that reports none
			fmt.Fprint(w, "data: {\"type\":\"transcript.text.done\",\"text\":\"Hello there.\"}\n\n")
			return
		}
		fmt.Fprintf(w, "data: {\"type\":\"transcript.text.done\",\"text\":\"Hello there.\",\"usage\":%s}\n\n", usage)
		return
	}
	if strings.Contains(model, "textonly") {
		format = "text" // a server that answers text whatever it is asked
	}
	switch format {
	case "text":
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprint(w, "Hello there.\n")
	case "srt":
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprint(w, "1\n00:00:00,000 --> 00:00:03,200\nHello there.\n\n")
	case "vtt":
		w.Header().Set("Content-Type", "text/vtt; charset=utf-8")
		fmt.Fprint(w, "WEBVTT\n\n00:00:00.000 --> 00:00:03.200\nHello there.\n\n")
	case "verbose_json":
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"task":"transcribe","language":"english","duration":3.2,"text":"Hello there.","segments":[{"id":0,"seek":0,"start":0,"end":3.2,"text":"Hello there.","tokens":[1,2],"temperature":0,"avg_logprob":-0.2,"compression_ratio":1,"no_speech_prob":0.01}]}`)
	case "diarized_json":
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"task":"transcribe","duration":3.2,"text":"Hello there.","segments":[{"type":"transcript.text.segment","id":"seg_0","start":0,"end":3.2,"speaker":"A","text":"Hello there."}],"usage":%s}`, usage)
	default:
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"text":"Hello there.","usage":%s}`, usage)
	}
}

func (f *fakeAudio) lastForm(t *testing.T) receivedForm {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.forms) == 0 {
		t.Fatal("the upstream received no form")
	}
	return f.forms[len(f.forms)-1]
}

// readCutClip reads a speech answer that must end in a read error after a prefix of
// speechClip: a clip cut off must not look whole.
func readCutClip(t *testing.T, resp *http.Response) {
	t.Helper()
	got, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err == nil || !bytes.Equal(got, speechClip[:len(got)]) {
		t.Fatalf("read %d bytes, error %v: a cut clip must not end cleanly", len(got), err)
	}
}

// chargedLines checks that generation id was charged exactly lines ("dimension:quantity") and
// nanos, and that the wallet moved by as much.
func (e *gatewayEnv) chargedLines(t *testing.T, wsID, genID string, before int64, nanos int64, lines ...string) {
	t.Helper()
	gen := e.generation(wsID, genID)
	var got []string
	for _, l := range gen.CostLines {
		got = append(got, fmt.Sprintf("%s:%d", l.Dimension, l.Quantity))
	}
	if gen.CostNanos != nanos || strings.Join(got, " ") != strings.Join(lines, " ") {
		t.Fatalf("generation %s charged %d nanos for %v, want %d for %v", genID, gen.CostNanos, got, nanos, lines)
	}
	if after := e.balance(wsID).BalanceNanos; before-after != nanos {
		t.Fatalf("the wallet moved by %d nanos, the charge is %d", before-after, nanos)
	}
}

func TestAudioEndToEnd(t *testing.T) {
	clip := wavFile(3200 * time.Millisecond)
	up := newFakeAudio(t, clip)
	down := newScripted(t, func(int) behaviour { return upstreamError(500, "server_error", "", "the first route is down", nil) })
	cfg := providerBlock("oa", up.URL) + resilientProvider("down", down.URL, "retries 0") +
		embeddingModel("tts", embeddingRoute("oa", "tts-1", "input_characters 15")) +
		embeddingModel("slow-tts", embeddingRoute("oa", "slow-tts", "input_characters 15")) +
		embeddingModel("broken-tts", embeddingRoute("oa", "broken-tts", "input_characters 15")) +
		embeddingModel("mini-tts", embeddingRoute("oa", "gpt-4o-mini-tts", "input 0.6\n\t\t\t\toutput_audio_tokens 12")) +
		embeddingModel("whisper", embeddingRoute("oa", "whisper-1", "input_audio_seconds 0.0001")) +
		embeddingModel("cut-transcribe", embeddingRoute("oa", "cut-gpt-4o-transcribe", "input 2.5\n\t\t\t\tinput_audio_tokens 6\n\t\t\t\toutput 10")) +
		embeddingModel("cut-tts", embeddingRoute("oa", "cut-tts", "input 0.6\n\t\t\t\toutput_audio_tokens 12")) +
		embeddingModel("gpt-transcribe", embeddingRoute("oa", "gpt-4o-transcribe", "input 2.5\n\t\t\t\tinput_audio_tokens 6\n\t\t\t\toutput 10")) +
		embeddingModel("whisper-nousage", embeddingRoute("oa", "whisper-nousage", "input_audio_seconds 0.0001")) +
		embeddingModel("gpt-transcribe-textonly", embeddingRoute("oa", "gpt-4o-transcribe-textonly", "input 2.5\n\t\t\t\tinput_audio_tokens 6\n\t\t\t\toutput 10")) +
		embeddingModel("tts-fallback", embeddingRoute("down", "tts-1", "input_characters 15")+embeddingRoute("oa", "tts-1", "input_characters 15")) +
		embeddingModel("whisper-fallback", embeddingRoute("down", "whisper-1", "input_audio_seconds 0.0001")+embeddingRoute("oa", "whisper-1", "input_audio_seconds 0.0001"))
	env := startGateway(t, cfg, "")
	wsID, key := env.workspace(5 * usd)
	ctx := context.Background()
	oc := env.openai(key)
	const text = "The quick brown fox jumps over the lazy dog."

	t.Run("speech bytes", func(t *testing.T) {
		before := env.balance(wsID).BalanceNanos
		resp, err := oc.Audio.Speech.New(ctx, openai.AudioSpeechNewParams{Model: "tts", Input: text, Voice: openai.AudioSpeechNewParamsVoiceUnion{OfString: openai.String("alloy")}})
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil || !bytes.Equal(got, speechClip) {
			t.Fatalf("speech: %d bytes (%v), want the upstream's %d", len(got), err, len(speechClip))
		}
		if ct := resp.Header.Get("Content-Type"); ct != "audio/mpeg" || resp.Header.Get("Content-Disposition") == "" {
			t.Fatalf("headers %v", resp.Header)
		}
		env.chargedLines(t, wsID, resp.Header.Get("X-Generation-Id"), before, int64(len(text))*15_000, fmt.Sprintf("input_characters:%d", len(text)))
	})

	t.Run("speech falls back before the first byte", func(t *testing.T) {
		before := env.balance(wsID).BalanceNanos
		downCalls := down.calls.Load()
		resp, err := oc.Audio.Speech.New(ctx, openai.AudioSpeechNewParams{Model: "tts-fallback", Input: text, Voice: openai.AudioSpeechNewParamsVoiceUnion{OfString: openai.String("alloy")}})
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil || !bytes.Equal(got, speechClip) || down.calls.Load() != downCalls+1 {
			t.Fatalf("speech: %d bytes (%v) after %d calls to the failing route", len(got), err, down.calls.Load()-downCalls)
		}
		env.chargedLines(t, wsID, resp.Header.Get("X-Generation-Id"), before, int64(len(text))*15_000, fmt.Sprintf("input_characters:%d", len(text)))
	})

	t.Run("a transcription model asked for speech", func(t *testing.T) {
		n := up.calls.Load()
		_, err := oc.Audio.Speech.New(ctx, openai.AudioSpeechNewParams{Model: "whisper", Input: text, Voice: openai.AudioSpeechNewParamsVoiceUnion{OfString: openai.String("alloy")}})
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Code != "unsupported_model_or_endpoint" || apiErr.Param != "model" {
			t.Fatalf("got %v", err)
		}
		if up.calls.Load() != n {
			t.Fatal("the upstream was called")
		}
	})

	t.Run("speech first bytes before the upstream ends", func(t *testing.T) {
		start := time.Now()
		resp, err := oc.Audio.Speech.New(ctx, openai.AudioSpeechNewParams{Model: "slow-tts", Input: text, Voice: openai.AudioSpeechNewParamsVoiceUnion{OfString: openai.String("alloy")}})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		first := make([]byte, 1024)
		if _, err := io.ReadFull(resp.Body, first); err != nil {
			t.Fatal(err)
		}
		firstAt := time.Since(start)
		rest, _ := io.ReadAll(resp.Body)
		total := time.Since(start)
		if firstAt >= slowSpeech || total < slowSpeech || !bytes.Equal(append(first, rest...), speechClip) {
			t.Fatalf("first bytes after %v, all after %v (upstream pauses %v)", firstAt, total, slowSpeech)
		}
	})

	t.Run("speech billed when the client leaves mid-clip", func(t *testing.T) {
		before := env.balance(wsID).BalanceNanos
		resp, err := oc.Audio.Speech.New(ctx, openai.AudioSpeechNewParams{Model: "slow-tts", Input: text, Voice: openai.AudioSpeechNewParamsVoiceUnion{OfString: openai.String("alloy")}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(resp.Body, make([]byte, 512)); err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		genID := resp.Header.Get("X-Generation-Id")
		deadline := time.Now().Add(5 * time.Second)
		for env.balance(wsID).BalanceNanos == before && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		env.chargedLines(t, wsID, genID, before, int64(len(text))*15_000, fmt.Sprintf("input_characters:%d", len(text)))
		if gen := env.generation(wsID, genID); !gen.Cancelled {
			t.Fatalf("the generation is not marked cancelled: %+v", gen)
		}
	})

	t.Run("speech broken mid-clip is cut off, not ended", func(t *testing.T) {
		before := env.balance(wsID).BalanceNanos
		resp, err := oc.Audio.Speech.New(ctx, openai.AudioSpeechNewParams{Model: "broken-tts", Input: text, Voice: openai.AudioSpeechNewParamsVoiceUnion{OfString: openai.String("alloy")}})
		if err != nil {
			t.Fatal(err)
		}
		readCutClip(t, resp)
		genID := resp.Header.Get("X-Generation-Id")
		env.chargedLines(t, wsID, genID, before, int64(len(text))*15_000, fmt.Sprintf("input_characters:%d", len(text)))
		if gen := env.generation(wsID, genID); gen.ErrorCode != "upstream_error" {
			t.Fatalf("generation %+v", gen)
		}
	})

	t.Run("speech events and tokens", func(t *testing.T) {
		before := env.balance(wsID).BalanceNanos
		resp, err := oc.Audio.Speech.New(ctx, openai.AudioSpeechNewParams{Model: "mini-tts", Input: text, Voice: openai.AudioSpeechNewParamsVoiceUnion{OfString: openai.String("coral")},
			StreamFormat: openai.AudioSpeechNewParamsStreamFormatSSE})
		if err != nil {
			t.Fatal(err)
		}
		var audio []byte
		var done map[string]any
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			line, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var ev map[string]any
			if err := json.Unmarshal([]byte(line), &ev); err != nil {
				t.Fatal(err)
			}
			switch ev["type"] {
			case "speech.audio.delta":
				b, _ := base64.StdEncoding.DecodeString(ev["audio"].(string))
				audio = append(audio, b...)
			case "speech.audio.done":
				done = ev
			}
		}
		_ = resp.Body.Close()
		// 11 input tokens at 0.6 USD/M, 300 audio tokens at 12 USD/M.
		const nanos = 11*600 + 300*12_000
		usage, _ := done["usage"].(map[string]any)
		if !bytes.Equal(audio, speechClip) || usage == nil || usage["cost_nanos"] != float64(nanos) {
			t.Fatalf("events carried %d bytes of audio, done %v", len(audio), done)
		}
		env.chargedLines(t, wsID, resp.Header.Get("X-Generation-Id"), before, nanos, "input:11", "output_audio_tokens:300")

		// Asked for bytes, a token-priced route is read as events for its usage.
		before = env.balance(wsID).BalanceNanos
		resp, err = oc.Audio.Speech.New(ctx, openai.AudioSpeechNewParams{Model: "mini-tts", Input: text, Voice: openai.AudioSpeechNewParamsVoiceUnion{OfString: openai.String("coral")}})
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if !bytes.Equal(got, speechClip) || resp.Header.Get("Content-Type") != "audio/mpeg" {
			t.Fatalf("bytes from events: %d, %s", len(got), resp.Header.Get("Content-Type"))
		}
		env.chargedLines(t, wsID, resp.Header.Get("X-Generation-Id"), before, nanos, "input:11", "output_audio_tokens:300")
	})

	t.Run("discovery lists the audio models", func(t *testing.T) {
		status, body := env.get(key, "/gateway/models?endpoints=audio")
		var list struct {
			Data []struct {
				ID        string   `json:"id"`
				Endpoints []string `json:"endpoints"`
			} `json:"data"`
		}
		if err := json.Unmarshal(body, &list); status != 200 || err != nil || len(list.Data) != 12 {
			t.Fatalf("%d %s", status, body)
		}
		status, body = env.get(key, "/endpoints")
		var eps struct {
			Data []struct {
				ID         string `json:"id"`
				Available  bool   `json:"available"`
				ModelCount int    `json:"model_count"`
			} `json:"data"`
		}
		if err := json.Unmarshal(body, &eps); status != 200 || err != nil {
			t.Fatalf("%d %s", status, body)
		}
		for _, e := range eps.Data {
			if e.ID == "audio" && (!e.Available || e.ModelCount != 12) {
				t.Fatalf("audio endpoint %+v", e)
			}
		}
	})

	upload := func() openai.AudioTranscriptionNewParams {
		return openai.AudioTranscriptionNewParams{Model: "whisper", File: openai.File(bytes.NewReader(clip), "meeting.wav", "audio/wav")}
	}
	t.Run("transcriptions in every format", func(t *testing.T) {
		for _, format := range []openai.AudioResponseFormat{"", "json", "verbose_json", "diarized_json", "text", "srt", "vtt"} {
			t.Run(string(format), func(t *testing.T) {
				before := env.balance(wsID).BalanceNanos
				params := upload()
				params.ResponseFormat = format
				var httpResp *http.Response
				var text string
				opts := []option.RequestOption{option.WithResponseInto(&httpResp)}
				plain := format == "text" || format == "srt" || format == "vtt"
				if plain {
					opts = append(opts, option.WithResponseBodyInto(&text))
				}
				res, err := oc.Audio.Transcriptions.New(ctx, params, opts...)
				if err != nil {
					t.Fatal(err)
				}
				if plain {
					if !strings.Contains(text, "Hello there.") {
						t.Fatalf("answer %q", text)
					}
				} else {
					if res.Text != "Hello there." {
						t.Fatalf("answer %s", res.RawJSON())
					}
					var v struct {
						Usage map[string]any `json:"usage"`
					}
					_ = json.Unmarshal([]byte(res.RawJSON()), &v)
					if v.Usage["cost_nanos"] != float64(400_000) || v.Usage["seconds"] == nil {
						t.Fatalf("usage %v", v.Usage)
					}
				}
				form := up.lastForm(t)
				if form.fileName != "meeting.wav" || form.fileType != "audio/wav" || form.fields["model"][0] != "whisper-1" {
					t.Fatalf("upstream got %+v", form)
				}
				// 3.2 s (reported, or measured when the answer is plain text) is 4 started seconds.
				env.chargedLines(t, wsID, httpResp.Header.Get("X-Generation-Id"), before, 400_000, "input_audio_seconds:4")
			})
		}
	})

	t.Run("transcription by tokens, streamed", func(t *testing.T) {
		before := env.balance(wsID).BalanceNanos
		params := upload()
		params.Model = "gpt-transcribe"
		text, done, genID := streamTranscript(t, oc, params)
		// 10 text tokens at 2.5, 60 audio tokens at 6, 9 output tokens at 10 USD/M.
		const nanos = 10*2500 + 60*6000 + 9*10_000
		if text != "Hello there." || !strings.Contains(done.RawJSON(), fmt.Sprintf(`"cost_nanos":%d`, nanos)) {
			t.Fatalf("text %q, done %s", text, done.RawJSON())
		}
		env.chargedLines(t, wsID, genID, before, nanos, "input:10", "output:9", "input_audio_tokens:60")
	})

	// A text answer carries no usage: a route billed by token asks the upstream for JSON and
	// bills its tokens, and the client still gets plain text.
	t.Run("transcription by tokens, as text", func(t *testing.T) {
		before := env.balance(wsID).BalanceNanos
		params := upload()
		params.Model = "gpt-transcribe"
		params.ResponseFormat = "text"
		var httpResp *http.Response
		var text string
		if _, err := oc.Audio.Transcriptions.New(ctx, params, option.WithResponseInto(&httpResp), option.WithResponseBodyInto(&text)); err != nil {
			t.Fatal(err)
		}
		if text != "Hello there.\n" || !strings.HasPrefix(httpResp.Header.Get("Content-Type"), "text/plain") {
			t.Fatalf("%s answer %q", httpResp.Header.Get("Content-Type"), text)
		}
		if form := up.lastForm(t); fmt.Sprint(form.fields["response_format"]) != "[json]" {
			t.Fatalf("upstream asked %v", form.fields["response_format"])
		}
		env.chargedLines(t, wsID, httpResp.Header.Get("X-Generation-Id"), before, 10*2500+60*6000+9*10_000, "input:10", "output:9", "input_audio_tokens:60")

		// A server that answers text all the same: its text, billed the estimate from the
		// 3.2 s measured (4 started seconds: 68 audio and 16 output tokens).
		before = env.balance(wsID).BalanceNanos
		params = upload()
		params.Model, params.ResponseFormat = "gpt-transcribe-textonly", "text"
		if _, err := oc.Audio.Transcriptions.New(ctx, params, option.WithResponseInto(&httpResp), option.WithResponseBodyInto(&text)); err != nil {
			t.Fatal(err)
		}
		if text != "Hello there.\n" {
			t.Fatalf("answer %q", text)
		}
		env.chargedLines(t, wsID, httpResp.Header.Get("X-Generation-Id"), before, 68*6000+16*10_000, "output:16", "input_audio_tokens:68")
	})

	// A stream whose final event reports no usage shows the usage billed: the measured
	// seconds on a route billed by the second.
	t.Run("streamed without usage, billed by the second", func(t *testing.T) {
		before := env.balance(wsID).BalanceNanos
		params := upload()
		params.Model = "whisper-nousage"
		_, done, genID := streamTranscript(t, oc, params)
		showsSeconds(t, done)
		env.chargedLines(t, wsID, genID, before, 400_000, "input_audio_seconds:4")
	})

	t.Run("streams cut before their final event end in an error", func(t *testing.T) {
		params := upload()
		params.Model = "cut-transcribe"
		stream := oc.Audio.Transcriptions.NewStreaming(ctx, params)
		deltas := 0
		for stream.Next() {
			if stream.Current().Type == "transcript.text.delta" {
				deltas++
			}
		}
		if err := stream.Err(); err == nil || deltas != 3 || !strings.Contains(err.Error(), "before its final event") {
			t.Fatalf("%d deltas, then %v: a cut stream must not end cleanly", deltas, err)
		}
		// Asked for bytes, a token-priced route's events cut short give a cut-off body.
		resp, err := oc.Audio.Speech.New(ctx, openai.AudioSpeechNewParams{Model: "cut-tts", Input: text, Voice: openai.AudioSpeechNewParamsVoiceUnion{OfString: openai.String("coral")}})
		if err != nil {
			t.Fatal(err)
		}
		readCutClip(t, resp)
	})

	t.Run("translation", func(t *testing.T) {
		before := env.balance(wsID).BalanceNanos
		var httpResp *http.Response
		res, err := oc.Audio.Translations.New(ctx, openai.AudioTranslationNewParams{Model: "whisper", File: openai.File(bytes.NewReader(clip), "talk.wav", "audio/wav")},
			option.WithResponseInto(&httpResp))
		if err != nil || res.Text != "Hello there." {
			t.Fatalf("%v %+v", err, res)
		}
		if up.lastForm(t).path != "/v1/audio/translations" {
			t.Fatal("not sent to translations")
		}
		env.chargedLines(t, wsID, httpResp.Header.Get("X-Generation-Id"), before, 400_000, "input_audio_seconds:4")
	})

	t.Run("unmeasurable audio as plain text is refused", func(t *testing.T) {
		n := up.calls.Load()
		before := env.balance(wsID).BalanceNanos
		params := upload()
		params.File = openai.File(strings.NewReader("not audio at all, just some text"), "notes.wav", "audio/wav")
		params.ResponseFormat = "text"
		var text string
		_, err := oc.Audio.Transcriptions.New(ctx, params, option.WithResponseBodyInto(&text))
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || apiErr.Param != "response_format" ||
			!strings.Contains(apiErr.Message, "could not be measured") {
			t.Fatalf("got %v", err)
		}
		if up.calls.Load() != n || env.balance(wsID).BalanceNanos != before {
			t.Fatalf("the upstream was called (%d calls) or the wallet moved", up.calls.Load()-n)
		}
	})

	t.Run("fallback sends the whole upload again", func(t *testing.T) {
		n := up.calls.Load()
		params := upload()
		params.Model = "whisper-fallback"
		params.Language = openai.String("en")
		params.ChunkingStrategy = openai.AudioTranscriptionNewParamsChunkingStrategyUnion{OfAuto: constant.ValueOf[constant.Auto]()}
		params.Include = []openai.TranscriptionInclude{openai.TranscriptionIncludeLogprobs}
		res, err := oc.Audio.Transcriptions.New(ctx, params)
		if err != nil || res.Text != "Hello there." {
			t.Fatalf("%v %+v", err, res)
		}
		form := up.lastForm(t)
		if down.calls.Load() == 0 || up.calls.Load() != n+1 || form.fileLen != len(clip) || form.fields["language"][0] != "en" ||
			fmt.Sprint(form.fields["chunking_strategy"]) != "[auto]" || fmt.Sprint(form.fields["include[]"]) != "[logprobs]" {
			t.Fatalf("down %d calls, second route got %+v", down.calls.Load(), form)
		}
	})
}

// endlessReader yields n bytes of filler without holding them, counting what was read.
type endlessReader struct {
	n    int64
	read atomic.Int64
}

func (r *endlessReader) Read(p []byte) (int, error) {
	if r.n <= 0 {
		return 0, io.EOF
	}
	k := min(int64(len(p)), r.n)
	for i := range p[:k] {
		p[i] = 'a'
	}
	r.n -= k
	r.read.Add(k)
	return int(k), nil
}

// streamTranscript streams a transcription and returns the text of its deltas, its
// transcript.text.done event and the call's generation id.
func streamTranscript(t *testing.T, oc openai.Client, params openai.AudioTranscriptionNewParams) (string, openai.TranscriptionStreamEventUnion, string) {
	t.Helper()
	var httpResp *http.Response
	stream := oc.Audio.Transcriptions.NewStreaming(context.Background(), params, option.WithResponseInto(&httpResp))
	var text strings.Builder
	var done openai.TranscriptionStreamEventUnion
	for stream.Next() {
		switch ev := stream.Current(); ev.Type {
		case "transcript.text.delta":
			text.WriteString(ev.Delta)
		case "transcript.text.done":
			done = ev
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	return text.String(), done, httpResp.Header.Get("X-Generation-Id")
}

// showsSeconds checks that a final transcription event shows the 4 started seconds billed,
// at 0.0001 USD a second.
func showsSeconds(t *testing.T, done openai.TranscriptionStreamEventUnion) {
	t.Helper()
	if done.Type != "transcript.text.done" || done.Usage.Type != "duration" || !strings.Contains(done.RawJSON(), `"seconds":4`) ||
		!strings.Contains(done.RawJSON(), `"cost_nanos":400000`) {
		t.Fatalf("last event %s", done.RawJSON())
	}
}

func TestOversizedUploadIsRefusedWithNothingSent(t *testing.T) {
	up := newFakeAudio(t, nil)
	// Another model takes uploads up to 100 MiB: a body is read within that until its model
	// is known, and the 413 names the limit that refused it.
	cfg := providerBlock("oa", up.URL) + embeddingModel("whisper", embeddingRoute("oa", "whisper-1", "input_audio_seconds 0.0001")) +
		embeddingModel("whisper-big", embeddingRoute("oa", "whisper-1", "input_audio_seconds 0.0001\n\t\t\t\tmax_upload 100MiB"))
	env := startGateway(t, cfg, "")
	_, key := env.workspace(5 * usd)
	const size = 200 << 20
	model, largest := "25 MiB (26214400 bytes)", "any model of /audio/transcriptions takes: the largest max_upload of its routes is 100 MiB"
	// sent bounds what the client got to send: the limit the body was read within, or
	// nothing when it was refused as announced, plus what the sockets' buffers take.
	const buffers = 16 << 20
	for _, tc := range []struct {
		name       string
		modelFirst bool
		length     int64
		want       string
		sent       int64
	}{
		{"model first, chunked", true, -1, model, 25<<20 + buffers},
		{"file first, chunked", false, -1, largest, 100<<20 + buffers},
		{"announced length", true, size + 400, largest, buffers},
		{"announced length within the largest, model first", true, 50 << 20, model, buffers},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pr, pw := io.Pipe()
			mw := multipart.NewWriter(pw)
			file := &endlessReader{n: size}
			go func() {
				if tc.modelFirst {
					_ = mw.WriteField("model", "whisper")
				}
				fw, err := mw.CreateFormFile("file", "huge.wav")
				if err != nil { // answered before the file began
					_ = pw.CloseWithError(err)
					return
				}
				if _, err := io.Copy(fw, file); err != nil {
					_ = pw.CloseWithError(err)
					return
				}
				if !tc.modelFirst {
					_ = mw.WriteField("model", "whisper")
				}
				_ = pw.CloseWithError(mw.Close())
			}()
			req, _ := http.NewRequest(http.MethodPost, env.baseURL+"/v1/audio/transcriptions", pr)
			req.Header.Set("Authorization", "Bearer "+key)
			req.Header.Set("Content-Type", mw.FormDataContentType())
			if tc.length > 0 {
				req.ContentLength = tc.length
			}
			var ms runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&ms)
			allocated := ms.TotalAlloc
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			_ = pr.CloseWithError(io.ErrClosedPipe)
			runtime.ReadMemStats(&ms)
			if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(body), "payload_too_large") || !strings.Contains(string(body), tc.want) {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
			if n := up.calls.Load(); n != 0 {
				t.Fatalf("the upstream was called %d times", n)
			}
			if sent := file.read.Load(); sent > tc.sent {
				t.Fatalf("the client sent %d MiB before the refusal, want at most %d", sent>>20, tc.sent>>20)
			}
			// The process allocated far less than the upload (the client's own writes included).
			if grew := ms.TotalAlloc - allocated; grew > 16<<20 {
				t.Fatalf("%d MiB allocated while refusing a %d MiB upload", grew>>20, size>>20)
			}
		})
	}

	// A client that announces its size and waits for an answer before it sends the body
	// gets its answer at once (413, or 401 for a wrong key), and the connection is closed
	// rather than drained.
	for _, tc := range []struct {
		key  string
		want int
	}{{key, http.StatusRequestEntityTooLarge}, {"gateway_v1_sk_wrong_key", http.StatusUnauthorized}} {
		t.Run(fmt.Sprintf("announced length, answer awaited, %d", tc.want), func(t *testing.T) {
			conn, err := net.Dial("tcp", strings.TrimPrefix(env.baseURL, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = conn.Close() }()
			fmt.Fprintf(conn, "POST /v1/audio/transcriptions HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n"+
				"Content-Type: multipart/form-data; boundary=XX\r\nContent-Length: %d\r\n\r\n", conn.RemoteAddr(), tc.key, size)
			_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("no answer before the body: %v", err)
			}
			_ = resp.Body.Close()
			if resp.StatusCode != tc.want || !resp.Close {
				t.Fatalf("%d, Connection %q", resp.StatusCode, resp.Header.Get("Connection"))
			}
		})
	}
}

func TestAudioThroughNeutralAdapters(t *testing.T) {
	clip := wavFile(3200 * time.Millisecond)
	cfg := `
		provider mk {
			type mock
			chunks 4
		}` +
		embeddingModel("mock-tts", embeddingRoute("mk", "mock-tts", "input_characters 15")) +
		embeddingModel("mock-whisper", embeddingRoute("mk", "mock-whisper", "input_audio_seconds 0.0001"))
	env := startGateway(t, cfg, "")
	wsID, key := env.workspace(5 * usd)
	ctx := context.Background()
	oc := env.openai(key)
	const text = "Twelve words."

	before := env.balance(wsID).BalanceNanos
	resp, err := oc.Audio.Speech.New(ctx, openai.AudioSpeechNewParams{Model: "mock-tts", Input: text, ResponseFormat: openai.AudioSpeechNewParamsResponseFormatWAV,
		Voice: openai.AudioSpeechNewParamsVoiceUnion{OfString: openai.String("alloy")}})
	if err != nil {
		t.Fatal(err)
	}
	wav, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.Header.Get("Content-Type") != "audio/wav" || len(wav) < 44 || string(wav[:4]) != "RIFF" || string(wav[8:12]) != "WAVE" {
		t.Fatalf("%s: %d bytes %q", resp.Header.Get("Content-Type"), len(wav), wav[:min(12, len(wav))])
	}
	env.chargedLines(t, wsID, resp.Header.Get("X-Generation-Id"), before, int64(len(text))*15_000, fmt.Sprintf("input_characters:%d", len(text)))

	resp, err = oc.Audio.Speech.New(ctx, openai.AudioSpeechNewParams{Model: "mock-tts", Input: text, ResponseFormat: openai.AudioSpeechNewParamsResponseFormatPCM,
		StreamFormat: openai.AudioSpeechNewParamsStreamFormatSSE, Voice: openai.AudioSpeechNewParamsVoiceUnion{OfString: openai.String("alloy")}})
	if err != nil {
		t.Fatal(err)
	}
	events, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if n := strings.Count(string(events), `"speech.audio.delta"`); n < 2 || !strings.Contains(string(events), fmt.Sprintf(`"cost_nanos":%d`, len(text)*15_000)) {
		t.Fatalf("%d deltas in %s", n, events[max(0, len(events)-300):])
	}

	for _, format := range []openai.AudioResponseFormat{"json", "verbose_json", "srt"} {
		before := env.balance(wsID).BalanceNanos
		var httpResp *http.Response
		var body []byte
		_, err := oc.Audio.Transcriptions.New(ctx, openai.AudioTranscriptionNewParams{Model: "mock-whisper", ResponseFormat: format,
			File: openai.File(bytes.NewReader(clip), "meeting.wav", "audio/wav")}, option.WithResponseInto(&httpResp), option.WithResponseBodyInto(&body))
		if err != nil {
			t.Fatal(err)
		}
		raw := string(body)
		if !strings.Contains(raw, "mock transcription of meeting.wav") {
			t.Fatalf("%s: %s", format, raw)
		}
		if format == "srt" && !strings.HasPrefix(raw, "1\n00:00:00,000 --> ") {
			t.Fatalf("srt %q", raw)
		}
		env.chargedLines(t, wsID, httpResp.Header.Get("X-Generation-Id"), before, 400_000, "input_audio_seconds:4")
	}

	// Streamed, the final event shows the usage billed, as a forwarded one does.
	before = env.balance(wsID).BalanceNanos
	_, done, genID := streamTranscript(t, oc, openai.AudioTranscriptionNewParams{Model: "mock-whisper",
		File: openai.File(bytes.NewReader(clip), "meeting.wav", "audio/wav")})
	showsSeconds(t, done)
	env.chargedLines(t, wsID, genID, before, 400_000, "input_audio_seconds:4")

	// An empty file is refused by the gateway, one that is not audio by the mock as OpenAI
	// would: 400 either way, nothing charged.
	before = env.balance(wsID).BalanceNanos
	for _, tc := range []struct{ data, param, says string }{{"", "file", `"notes.wav" is empty`}, {"just notes", "", "not audio"}} {
		_, err := oc.Audio.Transcriptions.New(ctx, openai.AudioTranscriptionNewParams{Model: "mock-whisper", File: openai.File(strings.NewReader(tc.data), "notes.wav", "audio/wav")})
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Param != tc.param || !strings.Contains(apiErr.Message, tc.says) {
			t.Fatalf("%q: %v", tc.data, err)
		}
	}
	if after := env.balance(wsID); after.BalanceNanos != before || after.ReservedNanos != 0 {
		t.Fatalf("refused files moved the wallet: %+v", after)
	}
}

// newFakeAudioVendors speaks ElevenLabs (text-to-speech, Scribe), Mistral (Voxtral
// transcription, plain and streamed) and Gemini (streamed speech) on one server.
func newFakeAudioVendors(t *testing.T, wantFile []byte) *httptest.Server {
	pcm := speechClip[:24000]
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		checkFile := func() bool {
			f, fh, err := r.FormFile("file")
			if err != nil {
				http.Error(w, `{"detail":"no file"}`, 422)
				return false
			}
			data, _ := io.ReadAll(f)
			if !bytes.Equal(data, wantFile) || fh.Filename != "meeting.wav" {
				http.Error(w, `{"detail":"damaged file"}`, 422)
				return false
			}
			return true
		}
		switch {
		case strings.HasPrefix(r.URL.Path, "/v1/text-to-speech/voice-123/stream"):
			if r.Header.Get("xi-api-key") != "el-secret" || r.URL.Query().Get("output_format") != "mp3_44100_128" {
				http.Error(w, `{"detail":{"status":"invalid","message":"bad request"}}`, 400)
				return
			}
			w.Header().Set("Content-Type", "audio/mpeg")
			_, _ = w.Write(speechClip)
		case r.URL.Path == "/v1/speech-to-text":
			if !checkFile() || r.FormValue("model_id") != "scribe_v1" {
				return
			}
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"language_code":"eng","language_probability":0.98,"text":"Hello there.","words":[{"text":"Hello","start":0.1,"end":0.5,"type":"word","speaker_id":"speaker_0"},{"text":" ","start":0.5,"end":0.6,"type":"spacing"},{"text":"there.","start":0.6,"end":1.1,"type":"word","speaker_id":"speaker_0"}]}`)
		case r.URL.Path == "/mistral/v1/audio/transcriptions":
			if !checkFile() {
				return
			}
			if r.FormValue("stream") == "true" {
				w.Header().Set("Content-Type", "text/event-stream")
				fmt.Fprint(w, "event: transcription.language\ndata: {\"type\":\"transcription.language\",\"audio_language\":\"en\"}\n\n")
				fmt.Fprint(w, "event: transcription.text.delta\ndata: {\"type\":\"transcription.text.delta\",\"text\":\"Hello there.\"}\n\n")
				fmt.Fprint(w, "event: transcription.done\ndata: {\"type\":\"transcription.done\",\"model\":\"voxtral-mini-latest\",\"text\":\"Hello there.\",\"language\":\"en\",\"segments\":[],\"usage\":{\"prompt_audio_seconds\":3.2,\"prompt_tokens\":5,\"completion_tokens\":4,\"total_tokens\":9}}\n\n")
				return
			}
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"model":"voxtral-mini-latest","text":"Hello there.","language":"en","segments":[],"usage":{"prompt_audio_seconds":3.2,"prompt_tokens":5,"completion_tokens":4,"total_tokens":9}}`)
		case strings.HasSuffix(r.URL.Path, ":streamGenerateContent"):
			w.Header().Set("Content-Type", "text/event-stream")
			if body, _ := io.ReadAll(r.Body); bytes.Contains(body, []byte("blocked")) {
				fmt.Fprint(w, "data: {\"promptFeedback\":{\"blockReason\":\"PROHIBITED_CONTENT\"}}\n\n")
				return
			}
			for i := 0; i < len(pcm); i += 8000 {
				fmt.Fprintf(w, "data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"inlineData\":{\"mimeType\":\"audio/L16;codec=pcm;rate=24000\",\"data\":%q}}]}}]}\n\n",
					base64.StdEncoding.EncodeToString(pcm[i:i+8000]))
			}
			fmt.Fprint(w, "data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[]},\"finishReason\":\"STOP\"}],\"usageMetadata\":{\"promptTokenCount\":9,\"candidatesTokenCount\":75,\"totalTokenCount\":84}}\n\n")
		default:
			http.Error(w, `{"detail":"no such path"}`, 404)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestAudioThroughTranslatedUpstreams(t *testing.T) {
	clip := wavFile(3200 * time.Millisecond)
	up := newFakeAudioVendors(t, clip)
	cfg := fmt.Sprintf(`
		provider el {
			type elevenlabs
			base_url %[1]s
			api_key el-secret
			retries 0
		}
		provider mi {
			type mistral
			base_url %[1]s/mistral/v1
			api_key mi-secret
			retries 0
		}
		provider ge {
			type gemini
			base_url %[1]s/v1beta
			api_key ge-secret
			retries 0
		}`, up.URL) +
		embeddingModel("eleven", embeddingRoute("el", "eleven_multilingual_v2", "input_characters 100")) +
		embeddingModel("scribe", embeddingRoute("el", "scribe_v1", "input_audio_seconds 0.0001")) +
		embeddingModel("voxtral", embeddingRoute("mi", "voxtral-mini-latest", "input_audio_seconds 0.00003")) +
		embeddingModel("gemini-tts", embeddingRoute("ge", "gemini-2.5-flash-preview-tts", "input 0.5\n\t\t\t\toutput_audio_tokens 10")) +
		embeddingModel("gemini-or-eleven", embeddingRoute("ge", "gemini-2.5-flash-preview-tts", "input_characters 100")+
			embeddingRoute("el", "eleven_multilingual_v2", "input_characters 100"))
	env := startGateway(t, cfg, "")
	wsID, key := env.workspace(5 * usd)
	ctx := context.Background()
	oc := env.openai(key)
	const text = "Hello there."

	before := env.balance(wsID).BalanceNanos
	resp, err := oc.Audio.Speech.New(ctx, openai.AudioSpeechNewParams{Model: "eleven", Input: text, Voice: openai.AudioSpeechNewParamsVoiceUnion{OfString: openai.String("voice-123")}})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if !bytes.Equal(got, speechClip) {
		t.Fatalf("elevenlabs speech: %d bytes", len(got))
	}
	env.chargedLines(t, wsID, resp.Header.Get("X-Generation-Id"), before, int64(len(text))*100_000, fmt.Sprintf("input_characters:%d", len(text)))

	// A format one upstream cannot make goes to the next route; when none can, the last
	// refusal answers, as the caller's to change, with nothing called or charged.
	before = env.balance(wsID).BalanceNanos
	resp, err = oc.Audio.Speech.New(ctx, openai.AudioSpeechNewParams{Model: "gemini-or-eleven", Input: text, Voice: openai.AudioSpeechNewParamsVoiceUnion{OfString: openai.String("voice-123")}})
	if err != nil {
		t.Fatal(err)
	}
	got, _ = io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	genID := resp.Header.Get("X-Generation-Id")
	if gen := env.generation(wsID, genID); !bytes.Equal(got, speechClip) || gen.Provider != "el" || len(gen.Attempts) != 2 || gen.Attempts[0].Status != 0 {
		t.Fatalf("mp3 past gemini: %d bytes, generation %+v", len(got), gen)
	}
	env.chargedLines(t, wsID, genID, before, int64(len(text))*100_000, fmt.Sprintf("input_characters:%d", len(text)))
	_, err = oc.Audio.Speech.New(ctx, openai.AudioSpeechNewParams{Model: "gemini-or-eleven", Input: text, ResponseFormat: openai.AudioSpeechNewParamsResponseFormatFLAC,
		Voice: openai.AudioSpeechNewParamsVoiceUnion{OfString: openai.String("voice-123")}})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Param != "response_format" || !strings.Contains(apiErr.Message, "ElevenLabs cannot produce") {
		t.Fatalf("flac on no route that makes it: %v", err)
	}
	_, err = oc.Audio.Speech.New(ctx, openai.AudioSpeechNewParams{Model: "gemini-or-eleven", Input: text, ResponseFormat: openai.AudioSpeechNewParamsResponseFormatWAV,
		Voice: openai.AudioSpeechNewParamsVoiceUnion{OfString: openai.String("alloy")}})
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Param != "voice" || !strings.Contains(apiErr.Message, "is an OpenAI voice") {
		t.Fatalf("an OpenAI voice on routes that know none: %v", err)
	}
	// A prompt Gemini blocked after the call is the caller's to change: answered at once,
	// not sent on to the next route.
	var httpResp *http.Response
	_, err = oc.Audio.Speech.New(ctx, openai.AudioSpeechNewParams{Model: "gemini-or-eleven", Input: "blocked words", ResponseFormat: openai.AudioSpeechNewParamsResponseFormatWAV,
		Voice: openai.AudioSpeechNewParamsVoiceUnion{OfString: openai.String("voice-123")}}, option.WithResponseInto(&httpResp))
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || !strings.Contains(apiErr.Message, "PROHIBITED_CONTENT") {
		t.Fatalf("a blocked prompt: %v", err)
	}
	if gen := env.generation(wsID, httpResp.Header.Get("X-Generation-Id")); len(gen.Attempts) != 1 || gen.Attempts[0].Provider != "ge" {
		t.Fatalf("a blocked prompt went on to another route: %+v", gen.Attempts)
	}
	if after := env.balance(wsID); after.BalanceNanos != before-int64(len(text))*100_000 || after.ReservedNanos != 0 {
		t.Fatalf("a refused request moved the wallet: %+v", after)
	}

	before = env.balance(wsID).BalanceNanos
	resp, err = oc.Audio.Speech.New(ctx, openai.AudioSpeechNewParams{Model: "gemini-tts", Input: text, ResponseFormat: openai.AudioSpeechNewParamsResponseFormatWAV,
		Voice: openai.AudioSpeechNewParamsVoiceUnion{OfString: openai.String("Kore")}})
	if err != nil {
		t.Fatal(err)
	}
	got, _ = io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if len(got) != 44+24000 || string(got[:4]) != "RIFF" || !bytes.Equal(got[44:], speechClip[:24000]) {
		t.Fatalf("gemini speech: %d bytes", len(got))
	}
	// 9 prompt tokens at 0.5, 75 audio tokens at 10 USD/M, read once the audio ended.
	env.chargedLines(t, wsID, resp.Header.Get("X-Generation-Id"), before, 9*500+75*10_000, "input:9", "output_audio_tokens:75")

	for _, tc := range []struct {
		model  string
		stream bool
		nanos  int64
	}{{"scribe", false, 400_000}, {"voxtral", false, 120_000}, {"voxtral", true, 120_000}} {
		before := env.balance(wsID).BalanceNanos
		params := openai.AudioTranscriptionNewParams{Model: tc.model, File: openai.File(bytes.NewReader(clip), "meeting.wav", "audio/wav")}
		var httpResp *http.Response
		var text string
		if tc.stream {
			stream := oc.Audio.Transcriptions.NewStreaming(ctx, params, option.WithResponseInto(&httpResp))
			for stream.Next() {
				if ev := stream.Current(); ev.Type == "transcript.text.done" {
					text = ev.Text
				}
			}
			if err := stream.Err(); err != nil {
				t.Fatal(err)
			}
		} else {
			res, err := oc.Audio.Transcriptions.New(ctx, params, option.WithResponseInto(&httpResp))
			if err != nil {
				t.Fatal(err)
			}
			text = res.Text
		}
		if text != "Hello there." {
			t.Fatalf("%s: %q", tc.model, text)
		}
		env.chargedLines(t, wsID, httpResp.Header.Get("X-Generation-Id"), before, tc.nanos, "input_audio_seconds:4")
	}
}

// Uploads are spooled in upload_dir: when it cannot take them the request is refused as
// the gateway's failure, with nothing sent or charged and no path shown, and it serves
// again once the directory is back, without a restart.
func TestUploadDir(t *testing.T) {
	if _, err := checkUploadDir(filepath.Join(t.TempDir(), "missing")); err == nil || !strings.Contains(err.Error(), "upload_dir") {
		t.Fatalf("a missing upload_dir: %v", err)
	}
	clip := wavFile(3200 * time.Millisecond)
	up := newFakeAudio(t, clip)
	dir := filepath.Join(t.TempDir(), "spool")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	env := startGateway(t, "\t\tupload_dir "+dir+"\n"+providerBlock("oa", up.URL)+
		embeddingModel("whisper", embeddingRoute("oa", "whisper-1", "input_audio_seconds 0.0001")), "")
	wsID, key := env.workspace(5 * usd)
	oc := env.openai(key)
	transcribe := func() (*openai.AudioTranscriptionNewResponseUnion, error) {
		return oc.Audio.Transcriptions.New(context.Background(), openai.AudioTranscriptionNewParams{
			Model: "whisper", File: openai.File(bytes.NewReader(clip), "meeting.wav", "audio/wav")})
	}

	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	before := env.balance(wsID)
	_, err := transcribe()
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 500 || apiErr.Code != "gateway_error" ||
		!strings.Contains(apiErr.Message, "upload directory") || strings.Contains(apiErr.Message, dir) {
		t.Fatalf("an upload with no directory to spool it: %v", err)
	}
	if after := env.balance(wsID); up.calls.Load() != 0 || after != before {
		t.Fatalf("%d upstream calls; wallet %+v, was %+v", up.calls.Load(), after, before)
	}

	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if res, err := transcribe(); err != nil || res.Text != "Hello there." {
		t.Fatalf("once the directory is back: %v", err)
	}
}
