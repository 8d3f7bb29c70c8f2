// Command gatewaybench measures the gateway against its physical limit, a plain Caddy
// reverse_proxy in front of the same upstream, side by side in one run on one machine.
//
// It builds the project's Caddy, starts three processes on loopback ports (a fake upstream
// that speaks OpenAI chat completions and Anthropic Messages with a fixed latency and
// streamed chunks, a plain Caddy reverse_proxy to it, and the gateway configured with an
// SQLite store and a priced model on an OpenAI-wire and on an Anthropic-wire provider of
// the fake), creates a workspace and key with "caddy gateway bootstrap", and runs five arms
// in alternation, several rounds:
//
//	direct                  the fake upstream itself
//	caddy                   plain reverse_proxy (the reference: every ratio is to it)
//	gw-chat-passthrough     gateway /v1/chat/completions to the OpenAI-wire provider
//	gw-messages-translated  gateway /v1/messages to the OpenAI-wire provider
//	gw-chat-translated      gateway /v1/chat/completions to the Anthropic-wire provider
//	gw-chat-passthrough-small-wallet
//	                        gw-chat-passthrough for a workspace under 10 USD, too small for a
//	                        full credit lease (only when named in -arms)
//	gw-chat-translated-cheap
//	                        gw-chat-translated to a model priced like the OpenAI-wire one
//	                        (only when named in -arms)
//
// Figures: throughput at saturation (closed loop), latency p50/p99 at a fixed rate (open
// loop), time to first chunk and gaps between chunks on streams opened at a fixed pace (or
// back to back, -back-to-back), memory per open stream
// (proxy RSS growth with K held streams), CPU time per request (/proc of the proxy
// process), a capacity run of many concurrent streams checked for stalls, errors, and the
// gateway's generation records counted against its successful answers.
//
// Three media tests run only when -tests names them (or "media"), each on an arm of the
// gateway of its own next to direct and caddy (media.go): speech-ttfb (time to the first
// byte of audio of POST /v1/audio/speech at a fixed pace), transcription-heap (the proxy's
// peak Go heap growth over its idle heap during 25 MiB WAV uploads to
// POST /v1/audio/transcriptions) and image-edit (throughput of POST /v1/images/edits with
// two 4 MB images, closed loop).
//
// Three jobs tests run only when -tests names them (or "jobs"), on arms of the gateway of
// their own. Two are over the fake's OpenAI /videos wire (jobs.go, upstream_videos.go):
// video-content (the throughput of GET /v1/videos/{id}/content of a completed 200 MB job,
// whole and by Range, against plain Caddy's reverse_proxy to the same upstream path, and the
// proxy's heap growth during the downloads) and jobs-load (the gateway's chat p99 at a fixed
// rate with 1,000 live video jobs polled every second, over its p99 with none, before and
// after them). The third, batch-load (batch.go), runs 10,000 chat rows as a batch the gateway
// runs itself (POST /v1/files, POST /v1/batches, polled to completed, the output checked),
// against the same rows sent through the gateway by as many client workers as the batch's
// row concurrency: the batch's rows per second over the client's, and the gateway's chat p99
// at a fixed rate during the batch over its p99 idle.
//
//	go run ./cmd/gatewaybench                 # default run, about 3 minutes on 2 cores
//	go run ./cmd/gatewaybench -quick          # smoke run, under a minute
//	go run ./cmd/gatewaybench -json out.json  # also write the results as JSON
//	go run ./cmd/gatewaybench -tests media    # the three media tests, about 2.5 minutes
//	go run ./cmd/gatewaybench -tests jobs     # the three jobs tests
//	go run ./cmd/gatewaybench -tests batch-load -rounds 2   # the batch test alone
//
// It is not part of "go test": it needs a C compiler (the SQLite driver is cgo), several
// thousand file descriptors, and a machine left otherwise idle for honest figures.
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	_ "github.com/mattn/go-sqlite3"
)

// streamLoad is how the streaming test opens its streams.
func (c *config) streamLoad() streamLoad {
	return streamLoad{conc: c.Streams, backToBack: c.BackToBack}
}

// config holds every number of the run; each has a flag.
type config struct {
	Rounds         int           `json:"rounds"`
	Arms           string        `json:"arms"`
	Warmup         time.Duration `json:"warmup"`
	Duration       time.Duration `json:"duration"`
	Concurrency    int           `json:"concurrency"`
	Rate           int           `json:"rate"`
	RateDuration   time.Duration `json:"rate_duration"`
	Slot           time.Duration `json:"slot"`
	Streams        int           `json:"streams"`
	BackToBack     bool          `json:"streams_back_to_back,omitempty"`
	StreamDuration time.Duration `json:"stream_duration"`
	Chunks         int           `json:"chunks"`
	ChunkInterval  time.Duration `json:"chunk_interval"`
	Latency        time.Duration `json:"upstream_latency"`
	AnswerPieces   int           `json:"answer_pieces"`
	MemStreams     int           `json:"mem_streams"`
	CapStreams     int           `json:"capacity_streams"`
	HoldChunks     int           `json:"hold_chunks"`
	HoldInterval   time.Duration `json:"hold_interval"`
	OpenConc       int           `json:"open_concurrency"`
	Stall          time.Duration `json:"stall"`
	IdleConns      int           `json:"upstream_idle_conns"`
	Credits        string        `json:"credits"`
	Tests          string        `json:"tests"`
	Fresh          bool          `json:"fresh"`
	ProxyCPUs      string        `json:"proxy_cpus,omitempty"`
	Variant        string        `json:"variant,omitempty"`
	VariantCaddy   string        `json:"variant_caddy,omitempty"`
	// The media tests' (media.go).
	SpeechRate     int           `json:"speech_rate"`
	SpeechDuration time.Duration `json:"speech_duration"`
	SpeechSlot     time.Duration `json:"speech_slot"`
	SpeechPieces   int           `json:"speech_pieces"`
	SpeechGap      time.Duration `json:"speech_gap"`
	Uploads        int           `json:"uploads"`
	UploadBytes    int64         `json:"upload_bytes"`
	ImageConc      int           `json:"image_concurrency"`
	ImageDuration  time.Duration `json:"image_duration"`
	ImageBytes     int           `json:"image_bytes"`
	// The jobs tests' (jobs.go).
	VideoBytes     int64         `json:"video_bytes"`
	VideoRange     string        `json:"video_range"`
	VideoDownloads int           `json:"video_downloads"`
	Jobs           int           `json:"jobs"`
	JobsRate       int           `json:"jobs_rate"`
	JobsDuration   time.Duration `json:"jobs_duration"`
	JobsPollAfter  time.Duration `json:"jobs_poll_after"`
	JobsCreateConc int           `json:"jobs_create_concurrency"`
	// The batch-load test's (batch.go).
	BatchRows          int           `json:"batch_rows"`
	BatchConc          int           `json:"batch_client_concurrency"`
	BatchChunks        int           `json:"batch_chunks"`
	BatchRowsPerChunk  int           `json:"batch_rows_per_chunk"`
	BatchProviderRows  int           `json:"batch_provider_rows"`
	BatchProcessChunks int           `json:"batch_process_chunks"`
	BatchRate          int           `json:"batch_rate"`
	BatchIdleDuration  time.Duration `json:"batch_idle_duration"`
	BatchTimeout       time.Duration `json:"batch_timeout"`

	caddyBin       string
	jsonOut        string
	keep           bool
	profileDir     string
	profileArms    string
	profileSeconds int
	profileRate    int
	profileStreams bool

	// Set by validate: the arms to run (caddy always) and -variant's environment entries.
	want       map[string]bool
	variantEnv []string
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "upstream" {
		if err := runUpstream(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "upstream:", err)
			os.Exit(1)
		}
		return
	}
	var c config
	quick := flag.Bool("quick", false, "a smoke run of under a minute: one round, short tests, fewer streams (explicit flags still win)")
	flag.IntVar(&c.Rounds, "rounds", 3, "rounds; every figure is the median over rounds")
	flag.StringVar(&c.Arms, "arms", "all", "comma-separated arms to run (caddy is always run: it is the reference)")
	flag.DurationVar(&c.Warmup, "warmup", 300*time.Millisecond, "warm-up before each saturation and fixed-rate test")
	flag.DurationVar(&c.Duration, "duration", 1500*time.Millisecond, "measured duration of each saturation test")
	flag.IntVar(&c.Concurrency, "c", 32, "closed-loop workers of the saturation test")
	flag.IntVar(&c.Rate, "rate", 1000, "requests per second of the fixed-rate latency test")
	flag.DurationVar(&c.RateDuration, "rate-duration", 3*time.Second, "measured duration of each arm's fixed-rate test")
	flag.DurationVar(&c.Slot, "slot", 250*time.Millisecond, "the fixed-rate and streaming tests take turns between the arms in slots of this length until each has its -rate-duration or -stream-duration (0: one arm after the other)")
	flag.IntVar(&c.Streams, "streams", 32, "concurrent streams of the streaming test: on average, opened at a fixed pace (one every stream length / streams), or with -back-to-back by that many workers")
	flag.BoolVar(&c.BackToBack, "back-to-back", false, "open the streaming test's streams back to back, each of -streams workers opening its next stream when its last one ended (closed loop: equal streams stay in step and arrive in bursts of -streams)")
	flag.DurationVar(&c.StreamDuration, "stream-duration", 3*time.Second, "duration of each arm's streaming test")
	flag.IntVar(&c.Chunks, "chunks", 16, "content chunks per stream")
	flag.DurationVar(&c.ChunkInterval, "chunk-interval", 5*time.Millisecond, "upstream interval between chunks")
	flag.DurationVar(&c.Latency, "latency", time.Millisecond, "upstream latency before an answer or a stream's first chunk")
	flag.IntVar(&c.AnswerPieces, "answer-pieces", 8, "pieces of text in a non-streamed answer")
	flag.IntVar(&c.MemStreams, "mem-streams", 500, "streams held open at once to measure memory per stream, each round (0: skip)")
	flag.IntVar(&c.CapStreams, "capacity-streams", 5000, "streams held open at once in the final capacity run (0: skip)")
	flag.IntVar(&c.HoldChunks, "hold-chunks", 5, "content chunks of a held stream")
	flag.DurationVar(&c.HoldInterval, "hold-interval", 200*time.Millisecond, "interval between a held stream's chunks after its release")
	flag.IntVar(&c.OpenConc, "open-concurrency", 256, "held streams opening at once")
	flag.DurationVar(&c.Stall, "stall", 2*time.Second, "a held stream silent longer than its interval plus this has stalled")
	flag.IntVar(&c.IdleConns, "idle-conns", 1024, "keepalive_idle_conns_per_host of both proxies' upstream transport")
	flag.BoolVar(&c.Fresh, "fresh", true, "restart the proxy (and warm it) before each memory and capacity measurement, so that its baseline is a fresh process's and not memory kept from earlier tests")
	flag.StringVar(&c.Tests, "tests", "all", "comma-separated tests to run: saturation, latency, streams, memory, capacity (these five are \"all\"), the media tests speech-ttfb, transcription-heap, image-edit (\"media\": the three), and the jobs tests video-content, jobs-load, batch-load (\"jobs\": the three)")
	flag.IntVar(&c.SpeechRate, "speech-rate", 50, "speech requests per second of the speech-ttfb test (open loop)")
	flag.DurationVar(&c.SpeechDuration, "speech-duration", 4*time.Second, "measured duration of each arm's speech-ttfb test in a round")
	flag.DurationVar(&c.SpeechSlot, "speech-slot", time.Second, "the speech-ttfb test takes turns between the arms in slots of this length (0: one arm after the other)")
	flag.IntVar(&c.SpeechPieces, "speech-pieces", 16, "pieces of 4 KiB of the fake's audio: the first at once, after -latency, then one every -speech-gap")
	flag.DurationVar(&c.SpeechGap, "speech-gap", 20*time.Millisecond, "gap between the fake's pieces of audio")
	flag.IntVar(&c.Uploads, "uploads", 5, "sequential uploads of the transcription-heap test, per arm and round")
	flag.Int64Var(&c.UploadBytes, "upload-bytes", 25<<20, "bytes of a transcription upload, multipart framing included (the gateway's default limit is 25 MiB)")
	flag.IntVar(&c.ImageConc, "image-c", 4, "closed-loop workers of the image-edit test")
	flag.DurationVar(&c.ImageDuration, "image-duration", 3*time.Second, "measured duration of each arm's image-edit test in a round")
	flag.IntVar(&c.ImageBytes, "image-bytes", 4_000_000, "bytes of each of the two PNG images of an image edit")
	flag.Int64Var(&c.VideoBytes, "video-bytes", 200_000_000, "bytes of the video content of the video-content test")
	flag.StringVar(&c.VideoRange, "video-range", "bytes=50000000-149999999", "the Range of the video-content test's ranged downloads (bytes=FIRST-LAST)")
	flag.IntVar(&c.VideoDownloads, "video-downloads", 5, "whole downloads, and as many ranged ones, per arm and round of the video-content test")
	flag.IntVar(&c.Jobs, "jobs", 1000, "live video jobs of the jobs-load test")
	flag.IntVar(&c.JobsRate, "jobs-rate", 200, "chat requests per second of the jobs-load test (open loop), with and without the live jobs")
	flag.DurationVar(&c.JobsDuration, "jobs-duration", 5*time.Second, "measured duration of each arm's chat in each phase of the jobs-load test, in a round")
	flag.DurationVar(&c.JobsPollAfter, "jobs-poll-after", time.Second, "the poll interval the fake asks of the gateway for each live job (openai-poll-after-ms)")
	flag.IntVar(&c.JobsCreateConc, "jobs-create-c", 8, "live jobs being created at once in the jobs-load test")
	flag.IntVar(&c.BatchRows, "batch-rows", 10000, "chat rows of the batch-load test's batch, and of its client baseline")
	flag.IntVar(&c.BatchChunks, "batch-chunks", 2, "the gateway's batch_chunks in the batch-load test: chunks of 64 rows of one batch run at once")
	flag.IntVar(&c.BatchRowsPerChunk, "batch-rows-per-chunk", 8, "the gateway's rows_per_chunk in the batch-load test: rows of one chunk run at once")
	flag.IntVar(&c.BatchProviderRows, "batch-provider-rows", 16, "the gateway's provider_rows in the batch-load test: batch rows the process sends one provider at once")
	flag.IntVar(&c.BatchProcessChunks, "batch-process-chunks", 4, "the gateway's chunks in the batch-load test: chunks of any batch the process runs at once")
	flag.IntVar(&c.BatchConc, "batch-c", 0, "closed-loop workers sending the batch-load test's rows as a client (0: the batch's row concurrency, min(-batch-chunks, -batch-process-chunks) × -batch-rows-per-chunk, at most -batch-provider-rows)")
	flag.IntVar(&c.BatchRate, "batch-rate", 200, "chat requests per second of the batch-load test (open loop), idle, during the client's rows and during the batch")
	flag.DurationVar(&c.BatchIdleDuration, "batch-idle-duration", 3*time.Second, "measured duration of each arm's idle chat in the batch-load test, in a round")
	flag.DurationVar(&c.BatchTimeout, "batch-timeout", 10*time.Minute, "the longest the batch-load test waits for its batch, upload to output")
	flag.StringVar(&c.Variant, "variant", "", "also run a second gateway whose process gets these environment variables (space-separated NAME=VALUE, e.g. \"GOGC=400\"), with a twin \""+variantPrefix+"<arm>\" of every gateway arm, so that a runtime setting is compared with the default side by side in the same run")
	flag.StringVar(&c.VariantCaddy, "variant-caddy", "", "run the second gateway (see -variant, which it needs no more) from this Caddy binary instead: two builds side by side in the same run, each arm of the one taking turns with the other's")
	flag.StringVar(&c.ProxyCPUs, "proxy-cpus", "", "run both proxies on these CPUs (taskset syntax, e.g. 1) and the load generator and fake upstream on the others, so that they do not compete for a core (needs taskset)")
	flag.StringVar(&c.Credits, "credits", "1000000", "credits of the benchmark workspace, in USD")
	flag.StringVar(&c.caddyBin, "caddy", "", "a Caddy binary built with the gateway (default: go build -tags gatewaybench ./cmd/caddy, which publishes the runtime figures the benchmark reads)")
	flag.StringVar(&c.jsonOut, "json", "", "also write the results to this JSON file")
	flag.BoolVar(&c.keep, "keep", false, "keep the temporary directory (configurations, logs, database)")
	flag.StringVar(&c.profileDir, "profile", "", "after the rounds, profile the proxies under saturation and write the profiles to this directory")
	flag.StringVar(&c.profileArms, "profile-arms", "gw-chat-passthrough", "comma-separated arms to profile (with -tests image-edit, caddy and gw-image-edit are profiled under that test's load; with -tests video-content, caddy and gw-video-content under whole downloads)")
	flag.IntVar(&c.profileSeconds, "profile-seconds", 10, "length of the CPU profile")
	flag.BoolVar(&c.profileStreams, "profile-streams", false, "profile under the streaming test's load (-streams, -back-to-back) instead of under saturation")
	flag.IntVar(&c.profileRate, "profile-rate", 0, "profile at this fixed rate in requests per second, as in the latency test, instead of under saturation (0: saturation)")
	flag.DurationVar(&gcWindow, "gc-window", gcWindow, "a request of the latency test (or a stream's wait for its first chunk) overlapped a collection of the proxy if the collection ended during it or within this after it (about the length of a mark phase)")
	flag.Parse()
	if *quick {
		set := map[string]bool{}
		flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
		def := func(name string, apply func()) {
			if !set[name] {
				apply()
			}
		}
		def("rounds", func() { c.Rounds = 1 })
		def("warmup", func() { c.Warmup = 200 * time.Millisecond })
		def("duration", func() { c.Duration = 750 * time.Millisecond })
		def("rate-duration", func() { c.RateDuration = 750 * time.Millisecond })
		def("stream-duration", func() { c.StreamDuration = 750 * time.Millisecond })
		def("mem-streams", func() { c.MemStreams = 200 })
		def("capacity-streams", func() { c.CapStreams = 500 })
		def("speech-duration", func() { c.SpeechDuration = 2 * time.Second })
		def("uploads", func() { c.Uploads = 2 })
		def("image-duration", func() { c.ImageDuration = 1500 * time.Millisecond })
		def("video-downloads", func() { c.VideoDownloads = 1 })
		def("jobs-duration", func() { c.JobsDuration = 2 * time.Second })
		def("batch-rows", func() { c.BatchRows = 2000 })
		def("batch-idle-duration", func() { c.BatchIdleDuration = time.Second })
	}
	if err := c.validate(); err != nil {
		fmt.Fprintln(os.Stderr, "gatewaybench:", err)
		os.Exit(2)
	}

	if c.ProxyCPUs != "" {
		if err := pinSelf(c.ProxyCPUs); err != nil {
			fmt.Fprintln(os.Stderr, "gatewaybench:", err)
			os.Exit(2)
		}
	}

	// A closed stdout (| head) must not kill the benchmark before it stops its children and
	// removes its directory: writes then just fail.
	signal.Ignore(syscall.SIGPIPE)
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	err := run(ctx, &c)
	cancel()
	stopChildren()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gatewaybench:", err)
		os.Exit(1)
	}
}

// runs reports whether a test is to be run: "all" names every test but the media and the
// jobs tests, "media" and "jobs" name those.
func (c *config) runs(test string) bool {
	group := ""
	switch {
	case slices.Contains(mediaTests, test):
		group = "media"
	case slices.Contains(jobsTests, test):
		group = "jobs"
	}
	for _, t := range strings.Split(c.Tests, ",") {
		if t = strings.TrimSpace(t); t == test || t == "all" && group == "" || t != "" && t == group {
			return true
		}
	}
	return false
}

var testNames = []string{"saturation", "latency", "streams", "memory", "capacity", "speech-ttfb", "transcription-heap", "image-edit", "video-content", "jobs-load", "batch-load"}

// MarshalJSON writes durations as Go duration strings ("1.5s") rather than nanoseconds.
func (c config) MarshalJSON() ([]byte, error) {
	v, t := reflect.ValueOf(c), reflect.TypeOf(c)
	m := make(map[string]any, t.NumField())
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "" || name == "-" {
			continue
		}
		val := v.Field(i).Interface()
		if d, ok := val.(time.Duration); ok {
			val = d.String()
		}
		m[name] = val
	}
	return json.Marshal(m)
}

func (c *config) validate() error {
	for _, t := range strings.Split(c.Tests, ",") {
		if t = strings.TrimSpace(t); t != "all" && t != "media" && t != "jobs" && !slices.Contains(testNames, t) {
			return fmt.Errorf("unknown test %q (tests: all, media, jobs, %s)", t, strings.Join(testNames, ", "))
		}
	}
	switch {
	case c.Rounds < 1:
		return errors.New("-rounds must be at least 1")
	case c.Concurrency < 1 || c.Streams < 1 || c.OpenConc < 1:
		return errors.New("-c, -streams and -open-concurrency must be at least 1")
	case c.Rate < 1 || c.Rate > 100000:
		return errors.New("-rate must be between 1 and 100000")
	case c.Duration <= 0 || c.RateDuration <= 0 || c.StreamDuration <= 0 || c.Warmup < 0 || c.Slot < 0:
		return errors.New("durations must be positive")
	case c.Chunks < 2 || c.HoldChunks < 2:
		return errors.New("-chunks and -hold-chunks must be at least 2")
	case c.MemStreams < 0 || c.CapStreams < 0:
		return errors.New("stream counts must not be negative")
	case c.profileSeconds < 1:
		return errors.New("-profile-seconds must be at least 1")
	case c.profileRate < 0:
		return errors.New("-profile-rate must not be negative")
	case c.SpeechRate < 1 || c.SpeechRate > 10000 || c.SpeechPieces < 1 || c.Uploads < 1 || c.ImageConc < 1 || c.ImageBytes < 1:
		return errors.New("-speech-rate, -speech-pieces, -uploads, -image-c and -image-bytes must be at least 1 (-speech-rate at most 10000)")
	case c.SpeechDuration <= 0 || c.ImageDuration <= 0 || c.SpeechSlot < 0 || c.SpeechGap < 0:
		return errors.New("durations must be positive")
	case c.VideoBytes < 1<<20 || c.VideoDownloads < 1 || c.Jobs < 1 || c.JobsRate < 1 || c.JobsRate > 100000 || c.JobsCreateConc < 1:
		return errors.New("-video-bytes must be at least 1 MiB, -video-downloads, -jobs, -jobs-rate and -jobs-create-c at least 1 (-jobs-rate at most 100000)")
	case c.JobsDuration <= 0 || c.JobsPollAfter < time.Millisecond:
		return errors.New("-jobs-duration and -jobs-poll-after must be positive")
	case c.BatchRows < 1 || c.BatchRows > maxBatchRows || c.BatchConc < 0 || c.BatchRate < 1 || c.BatchRate > 100000:
		return fmt.Errorf("-batch-rows must be between 1 and %d, -batch-rate between 1 and 100000, -batch-c not negative", maxBatchRows)
	case min(c.BatchChunks, c.BatchRowsPerChunk, c.BatchProviderRows, c.BatchProcessChunks) < 1 || max(c.BatchChunks, c.BatchRowsPerChunk, c.BatchProviderRows, c.BatchProcessChunks) > 1024:
		return errors.New("-batch-chunks, -batch-rows-per-chunk, -batch-provider-rows and -batch-process-chunks must be between 1 and 1024")
	case c.BatchIdleDuration <= 0 || c.BatchTimeout <= 0:
		return errors.New("-batch-idle-duration and -batch-timeout must be positive")
	}
	if _, _, err := c.videoRange(); err != nil {
		return err
	}
	var err error
	if c.variantEnv, err = parseVariant(c.Variant); err != nil {
		return err
	}
	if c.want, err = parseArms(c.Arms); err != nil {
		return err
	}
	if c.ProxyCPUs != "" && os.Getenv(pinnedEnv) == "" {
		if _, _, err := splitCPUs(c.ProxyCPUs, runtime.NumCPU()); err != nil {
			return err
		}
	}
	return nil
}

// armNames is the order of the arms in every table.
var armNames = []string{"direct", "caddy", "gw-chat-passthrough", "gw-messages-translated", "gw-chat-translated", smallWalletArm, cheapTranslatedArm}

// optionalArms run only when -arms names them ("all" leaves them out).
var optionalArms = []string{smallWalletArm, cheapTranslatedArm}

// cheapTranslatedArm is gw-chat-translated to a model of the Anthropic-wire provider priced
// as the OpenAI-wire one (0.15 and 0.60 USD per million tokens, against 3 and 15): at the
// dearer prices a key's 1 USD credit lease lasts about 5,000 requests, at these about 100,000,
// so the two arms side by side tell what the price (the lease's renewals) does to a latency.
const cheapTranslatedArm = "gw-chat-translated-cheap"

// smallWalletArm is chat passthrough for a key whose workspace holds less than a full
// credit lease needs (10 USD): the path of small wallets, which take small leases sized
// from their balance (handlers/lease.go). "all" leaves it out; name it in -arms.
const smallWalletArm = "gw-chat-passthrough-small-wallet"

// smallWalletCredits is the small wallet, in USD: under the lease threshold, and enough for
// any run at the benchmark's prices (about 0.00001 USD a request) to keep its 1 USD preflight.
const smallWalletCredits = "9"

// bench is the running benchmark: its processes and arms.
type bench struct {
	cfg         *config
	dir         string
	upstream    *child
	upstreamURL string
	plain       *child
	gateway     *child
	variant     *child // the -variant gateway, or nil
	// dbPaths are the SQLite files of the gateway and, with -variant, of its twin.
	dbPaths []string
	arms    []*arm
	// media are the arms of each media test that runs (media.go), and imageBody and
	// imageType the image-edit test's request body.
	media     map[string][]*arm
	imageBody []byte
	imageType string
	// gatewayURL is the gateway's address, where the jobs-load test creates its jobs and
	// the batch-load test its batches.
	gatewayURL string
	// batchRows counts the rows the gateway's batches completed: each is an answer with a
	// generation record of its own, as a client's request is (see answered).
	batchRows atomic.Int64
}

func run(ctx context.Context, cfg *config) error {
	started := time.Now()
	dir, err := os.MkdirTemp("", "gatewaybench-")
	if err != nil {
		return err
	}
	if cfg.keep {
		fmt.Fprintln(os.Stderr, "temporary directory:", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	b := &bench{cfg: cfg, dir: dir}
	if err := b.start(ctx); err != nil {
		return err
	}
	rep := &report{Config: *cfg, Machine: machineInfo(), Rounds: map[string][]roundResult{}}
	rep.Machine.LoadBefore = loadAvg()
	cpuTotal0, steal0, cpuOK := cpuTimes()
	for _, a := range b.arms {
		rep.Arms = append(rep.Arms, a.name)
	}
	for _, md := range mediaDefs {
		if b.media[md.test] != nil {
			rep.Arms = append(rep.Arms, md.arm)
		}
	}

	if err := b.sanity(ctx); err != nil {
		return err
	}
	if err := b.mediaSanity(ctx); err != nil {
		return err
	}
	for round := 0; round < cfg.Rounds && ctx.Err() == nil; round++ {
		t0, s0, ok := cpuTimes()
		results := b.round(ctx, round)
		for name, r := range results {
			rep.Rounds[name] = append(rep.Rounds[name], r)
		}
		steal := stealSince(t0, s0, ok)
		rep.Machine.RoundSteal = append(rep.Machine.RoundSteal, steal)
		if steal >= 0 {
			logf("  round %d: %.1f%% of the CPU stolen by the hypervisor", round+1, steal)
		}
	}
	if cfg.CapStreams > 0 && cfg.runs("capacity") && ctx.Err() == nil {
		rep.Capacity = map[string]heldResult{}
		for _, a := range b.arms {
			if a.kind == kindDirect || ctx.Err() != nil {
				continue
			}
			d := directive{n: cfg.HoldChunks, interval: cfg.HoldInterval, latency: cfg.Latency, hold: "cap-" + a.name}
			logf("capacity: %s, %d streams held open", a.name, cfg.CapStreams)
			if err := b.freshen(ctx, a); err != nil {
				return err
			}
			r := held(ctx, a, b.upstream, b.upstreamURL, cfg.CapStreams, cfg.OpenConc, d, cfg.Stall)
			logf("  opened %d in %.1fs, completed %d, stalled %d, max gap %.0f ms, %.1f KiB/stream",
				r.Opened, r.OpenSeconds, r.Completed, r.Stalled, r.MaxGapMs, r.BytesPerStream/1024)
			rep.Capacity[a.name] = r
		}
	}
	if cfg.profileDir != "" && ctx.Err() == nil {
		if err := b.profile(ctx); err != nil {
			logf("profiling: %v", err)
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	rep.Records = b.waitRecords(ctx, 2*time.Minute)
	rep.Machine.LoadAfter = loadAvg()
	rep.Machine.StealPercent = stealSince(cpuTotal0, steal0, cpuOK)
	rep.Seconds = time.Since(started).Seconds()
	rep.build()
	rep.print(os.Stdout)
	if cfg.jsonOut != "" {
		data, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(cfg.jsonOut, data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// start builds Caddy and starts the three processes.
func (b *bench) start(ctx context.Context) error {
	cfg := b.cfg
	env := append(os.Environ(),
		"XDG_DATA_HOME="+filepath.Join(b.dir, "data"),
		"XDG_CONFIG_HOME="+filepath.Join(b.dir, "config"))
	if cfg.runs("transcription-heap") || cfg.runs("video-content") {
		env = append(env, heapSampleEnv+"=1ms")
	}
	if cfg.runs("image-edit") {
		var err error
		if b.imageBody, b.imageType, err = imageEditBody("bench-image", cfg.ImageBytes); err != nil {
			return fmt.Errorf("making the image edit's body: %w", err)
		}
	}
	bin := cfg.caddyBin
	if bin == "" {
		logf("building ./cmd/caddy")
		var err error
		if bin, err = buildCaddy(ctx, b.dir); err != nil {
			return err
		}
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	ports := make([]int, 5)
	for i := range ports {
		if ports[i], err = freePort(); err != nil {
			return err
		}
	}
	upPort, plainPort, gwPort := ports[0], ports[1], ports[2]
	// The admin endpoints serve the profiles and the runtime's memory statistics
	// (allocations and collections per request); they cost nothing while unused.
	plainAdmin, gwAdmin := ports[3], ports[4]

	b.upstreamURL = fmt.Sprintf("http://127.0.0.1:%d", upPort)
	if b.upstream, err = startChild("upstream", b.dir, env, self, "upstream", "-addr", fmt.Sprintf("127.0.0.1:%d", upPort)); err != nil {
		return err
	}
	b.upstream.health = b.upstreamURL + "/bench/ping"
	if err := waitHTTP(ctx, b.upstream, http.MethodGet, b.upstream.health, 10*time.Second); err != nil {
		return err
	}

	plainCfg := filepath.Join(b.dir, "plain.Caddyfile")
	if err := os.WriteFile(plainCfg, []byte(plainCaddyfile(plainPort, upPort, plainAdmin, cfg.IdleConns)), 0o600); err != nil {
		return err
	}
	prog, args := proxyCommand(cfg.ProxyCPUs, bin, "run", "--config", plainCfg, "--adapter", "caddyfile")
	if b.plain, err = startChild("caddy", b.dir, env, prog, args...); err != nil {
		return err
	}
	b.plain.admin = plainAdmin
	plainURL := fmt.Sprintf("http://127.0.0.1:%d", plainPort)
	b.plain.health = plainURL + "/bench/ping"
	if err := waitHTTP(ctx, b.plain, http.MethodGet, b.plain.health, 30*time.Second); err != nil {
		return err
	}
	small := cfg.want[smallWalletArm]
	gw, err := b.startGateway(ctx, "gateway", bin, env, gwPort, upPort, gwAdmin, small)
	if err != nil {
		return err
	}
	b.gateway, b.gatewayURL = gw.proc, gw.url

	all := map[string]*arm{
		// Direct and Caddy send the same header the gateway arms do, so that every arm
		// forwards the same request.
		"direct": {kind: kindDirect, url: b.upstreamURL + "/v1/chat/completions", model: "bench-oa", key: gw.key},
		"caddy":  {kind: kindCaddy, url: plainURL + "/v1/chat/completions", model: "bench-oa", proc: b.plain, key: gw.key},
	}
	maps.Copy(all, gw.arms(""))
	variant := cfg.variantEnv
	var twins map[string]*arm
	if variant != nil || cfg.VariantCaddy != "" {
		vbin := bin
		if cfg.VariantCaddy != "" {
			vbin = cfg.VariantCaddy
		}
		ports := make([]int, 2)
		for i := range ports {
			if ports[i], err = freePort(); err != nil {
				return err
			}
		}
		vgw, err := b.startGateway(ctx, "gateway-b", vbin, append(slices.Clip(env), variant...), ports[0], upPort, ports[1], small)
		if err != nil {
			return err
		}
		b.variant = vgw.proc
		twins = vgw.arms(variantPrefix)
		logf("gateway-b pid %d runs %s with %s", vgw.proc.pid(), vbin, strings.Join(variant, " "))
	}
	// The arms of one proxy process share one client, as one population of callers would:
	// the proxy then holds the keep-alive connections of one pool, as plain Caddy does, not
	// one pool per arm (each idle connection is a goroutine whose stack every collection of
	// the proxy scans).
	clients := map[*child]*http.Client{}
	clientOf := func(a *arm) *http.Client {
		if a.proc == nil {
			return newClient()
		}
		if clients[a.proc] == nil {
			clients[a.proc] = newClient()
		}
		return clients[a.proc]
	}
	for _, n := range armNames {
		if !cfg.want[n] {
			continue
		}
		a := all[n]
		a.name, a.client = n, clientOf(a)
		b.arms = append(b.arms, a)
		if t := twins[variantPrefix+n]; t != nil {
			t.name, t.client = variantPrefix+n, clientOf(t)
			b.arms = append(b.arms, t)
		}
	}
	b.mediaArms(plainURL, gw, clientOf)
	logf("upstream pid %d, caddy pid %d, gateway pid %d; workdir %s", b.upstream.pid(), b.plain.pid(), b.gateway.pid(), b.dir)
	return nil
}

// quiesce closes the idle keep-alive connections that earlier tests left: the load
// generator's to the proxies, and the proxies' to the fake upstream (the fake closes its
// idle ones, and each proxy drops them from its pool as it sees them closed). Every test
// then runs with the connections its own load opens (each warms its arms first), not with
// the peak of an earlier one: after the memory test's 500 held streams, each proxy kept
// 500 idle upstream connections, a thousand goroutines whose stacks every one of its
// collections scanned for the rest of the run.
func (b *bench) quiesce(ctx context.Context) {
	for _, a := range b.allArms() {
		a.client.CloseIdleConnections()
	}
	if err := postControl(ctx, b.upstreamURL, "/bench/close-idle"); err != nil && ctx.Err() == nil {
		logf("closing the upstream's idle connections: %v", err)
	}
	sleepCtx(ctx, 200*time.Millisecond)
}

// variantPrefix starts the names of the arms of the -variant gateway.
const variantPrefix = "b:"

// parseArms reads -arms: the arms named, every one but the optional arms for "all", and
// caddy, the reference, always.
func parseArms(s string) (map[string]bool, error) {
	want := map[string]bool{"caddy": true}
	for _, n := range strings.Split(s, ",") {
		n = strings.TrimSpace(n)
		switch {
		case n == "all":
			for _, m := range armNames {
				want[m] = want[m] || !slices.Contains(optionalArms, m)
			}
		case slices.Contains(armNames, n):
			want[n] = true
		default:
			return nil, fmt.Errorf("unknown arm %q (arms: %s)", n, strings.Join(armNames, ", "))
		}
	}
	return want, nil
}

// parseVariant splits -variant into NAME=VALUE environment entries; nil when empty.
func parseVariant(s string) ([]string, error) {
	var env []string
	for _, f := range strings.Fields(s) {
		name, _, ok := strings.Cut(f, "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("-variant: %q is not NAME=VALUE", f)
		}
		env = append(env, f)
	}
	return env, nil
}

// gatewayProc is a running gateway: its process, address and bootstrapped key.
type gatewayProc struct {
	proc *child
	url  string
	key  string
	// smallKey is a key of a second workspace, holding smallWalletCredits ("" unless the
	// small-wallet arm runs).
	smallKey string
}

// startGateway writes a gateway's Caddyfile, bootstraps its database (and, with small, the
// small wallet's workspace) and starts it.
func (b *bench) startGateway(ctx context.Context, name, bin string, env []string, port, upPort, admin int, small bool) (*gatewayProc, error) {
	cfgPath := filepath.Join(b.dir, name+".Caddyfile")
	dbPath := filepath.Join(b.dir, name, "gateway.db")
	if err := os.WriteFile(cfgPath, []byte(gatewayCaddyfile(port, upPort, admin, b.cfg.IdleConns, dbPath, b.cfg.batchOptions())), 0o600); err != nil {
		return nil, err
	}
	key, err := bootstrap(ctx, bin, cfgPath, env, "bench", b.cfg.Credits)
	if err != nil {
		return nil, err
	}
	var smallKey string
	if small {
		if smallKey, err = bootstrap(ctx, bin, cfgPath, env, "bench-small-wallet", smallWalletCredits); err != nil {
			return nil, err
		}
	}
	prog, args := proxyCommand(b.cfg.ProxyCPUs, bin, "run", "--config", cfgPath, "--adapter", "caddyfile")
	proc, err := startChild(name, b.dir, env, prog, args...)
	if err != nil {
		return nil, err
	}
	proc.admin = admin
	b.dbPaths = append(b.dbPaths, dbPath)
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	proc.health = url + "/v1/health"
	if err := waitHTTP(ctx, proc, http.MethodGet, proc.health, 30*time.Second); err != nil {
		return nil, err
	}
	return &gatewayProc{proc: proc, url: url, key: key, smallKey: smallKey}, nil
}

// arms are the gateway's arms, their names prefixed.
func (g *gatewayProc) arms(prefix string) map[string]*arm {
	return map[string]*arm{
		prefix + "gw-chat-passthrough":    {kind: kindGateway, url: g.url + "/v1/chat/completions", model: "bench-oa", proc: g.proc, key: g.key},
		prefix + "gw-messages-translated": {kind: kindGateway, url: g.url + "/v1/messages", messages: true, model: "bench-oa", proc: g.proc, key: g.key},
		prefix + "gw-chat-translated":     {kind: kindGateway, url: g.url + "/v1/chat/completions", model: "bench-an", proc: g.proc, key: g.key},
		prefix + smallWalletArm:           {kind: kindGateway, url: g.url + "/v1/chat/completions", model: "bench-oa", proc: g.proc, key: g.smallKey},
		prefix + cheapTranslatedArm:       {kind: kindGateway, url: g.url + "/v1/chat/completions", model: "bench-an-cheap", proc: g.proc, key: g.key},
	}
}

// sanity sends one plain and one streamed request on every arm, so that a broken arm stops
// the run at once with its error rather than after minutes of zeros.
func (b *bench) sanity(ctx context.Context) error {
	for _, a := range b.arms {
		d := directive{n: 3, interval: time.Millisecond, latency: b.cfg.Latency}
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := a.do(rctx, a.body(false, d))
		if err == nil {
			o := a.openStream(rctx, a.body(true, d), nil)
			err = o.check(d.n)
		}
		cancel()
		if err != nil {
			for _, c := range []*child{b.upstream, b.plain, b.gateway, b.variant} {
				if c == nil {
					continue
				}
				if e := c.exited(); e != nil {
					return e
				}
			}
			return fmt.Errorf("arm %s does not work: %w (logs in %s; run with -keep to keep them)", a.name, err, b.dir)
		}
	}
	return nil
}

// roundResult is everything one round measured on one arm.
type roundResult struct {
	Saturation satResult    `json:"saturation"`
	Latency    latResult    `json:"latency"`
	Streams    streamResult `json:"streams"`
	Memory     *heldResult  `json:"memory,omitempty"`
	// The media tests' (media.go), on their own arms and on direct and caddy.
	Speech        *speechResult `json:"speech,omitempty"`
	Transcription *uploadResult `json:"transcription,omitempty"`
	ImageEdit     *satResult    `json:"image_edit,omitempty"`
	// The jobs tests' (jobs.go), on their own arms and on caddy (and direct).
	Video *videoResult `json:"video_content,omitempty"`
	Jobs  *jobsResult  `json:"jobs_load,omitempty"`
	Batch *batchResult `json:"batch_load,omitempty"`
}

// round runs every test on every arm, test by test so that the arms of one figure are
// measured close together, starting each round with a different arm.
func (b *bench) round(ctx context.Context, round int) map[string]roundResult {
	cfg := b.cfg
	n := len(b.arms)
	order := make([]*arm, n)
	for i := range order {
		order[i] = b.arms[(i+round)%n]
	}
	res := map[string]roundResult{}
	update := func(a *arm, f func(r *roundResult)) {
		r := res[a.name]
		f(&r)
		res[a.name] = r
	}
	nonStream := directive{n: cfg.AnswerPieces, latency: cfg.Latency}
	logf("round %d/%d", round+1, cfg.Rounds)
	for _, a := range order {
		if ctx.Err() != nil || !cfg.runs("saturation") {
			break
		}
		b.quiesce(ctx)
		r := saturate(ctx, a, b.upstream, cfg.Concurrency, cfg.Warmup, cfg.Duration, a.body(false, nonStream))
		logf("  saturation %-23s %8.0f rps  cpu %6.1f µs/req  errors %d %s", a.name, r.RPS, r.CPUPerReqUs, r.Errors, r.FirstError)
		update(a, func(rr *roundResult) { rr.Saturation = r })
	}
	if ctx.Err() == nil && cfg.runs("latency") {
		var lat map[string]latResult
		if cfg.Slot > 0 {
			b.quiesce(ctx)
			lat = interleaved(ctx, order, cfg.Rate, cfg.Warmup, cfg.Slot, cfg.RateDuration, func(a *arm) []byte { return a.body(false, nonStream) })
		} else {
			lat = map[string]latResult{}
			for _, a := range order {
				b.quiesce(ctx)
				lat[a.name] = fixedRate(ctx, a, cfg.Rate, cfg.Warmup, cfg.RateDuration, a.body(false, nonStream))
			}
		}
		for _, a := range order {
			r := lat[a.name]
			logf("  latency    %-23s p50 %7.0f µs  p90 %7.0f µs  p99 %7.0f µs  goroutines %4d  errors %d dropped %d %s", a.name, r.P50Us, r.P90Us, r.P99Us, r.GoroutinesMax, r.Errors, r.Dropped, r.FirstError)
			update(a, func(rr *roundResult) { rr.Latency = r })
		}
	}
	sd := directive{n: cfg.Chunks, interval: cfg.ChunkInterval, latency: cfg.Latency}
	if ctx.Err() == nil && cfg.runs("streams") {
		var st map[string]streamResult
		if cfg.Slot > 0 {
			b.quiesce(ctx)
			st = interleavedStreams(ctx, order, cfg.streamLoad(), cfg.Warmup, cfg.Slot, cfg.StreamDuration, sd)
		} else {
			st = map[string]streamResult{}
			for _, a := range order {
				b.quiesce(ctx)
				st[a.name] = streams(ctx, a, cfg.streamLoad(), cfg.Warmup, cfg.StreamDuration, sd)
			}
		}
		for _, a := range order {
			r := st[a.name]
			logf("  streams    %-23s ttfb p50 %6.0f p99 %6.0f µs  gap p50 %6.0f p99 %6.0f µs  (%d streams, errors %d %s)",
				a.name, r.TTFBP50Us, r.TTFBP99Us, r.GapP50Us, r.GapP99Us, r.Streams, r.Errors, r.FirstError)
			update(a, func(rr *roundResult) { rr.Streams = r })
		}
	}
	if cfg.MemStreams > 0 && cfg.runs("memory") {
		for _, a := range order {
			if ctx.Err() != nil || a.kind == kindDirect {
				continue
			}
			d := directive{n: cfg.HoldChunks, interval: cfg.HoldInterval, latency: cfg.Latency, hold: fmt.Sprintf("mem-%d-%s", round, a.name)}
			b.quiesce(ctx)
			if err := b.freshen(ctx, a); err != nil {
				logf("  memory     %-23s %v", a.name, err)
				continue
			}
			r := held(ctx, a, b.upstream, b.upstreamURL, cfg.MemStreams, cfg.OpenConc, d, cfg.Stall)
			logf("  memory     %-23s %6.1f KiB/stream (%d open in %.1fs, stalled %d, errors %d %s)",
				a.name, r.BytesPerStream/1024, r.Opened, r.OpenSeconds, r.Stalled, r.Errors, r.FirstError)
			update(a, func(rr *roundResult) { rr.Memory = &r })
		}
	}
	b.mediaRound(ctx, round, update)
	return res
}

// profile loads each chosen arm, at saturation or at -profile-rate, while fetching a CPU
// profile from its process's admin endpoint, with heap allocation profiles before and after.
func (b *bench) profile(ctx context.Context) error {
	if err := os.MkdirAll(b.cfg.profileDir, 0o755); err != nil {
		return err
	}
	for _, name := range strings.Split(b.cfg.profileArms, ",") {
		var a *arm
		for _, x := range b.allArms() {
			if x.name == strings.TrimSpace(name) {
				a = x
			}
		}
		if a == nil || a.proc == nil {
			return fmt.Errorf("cannot profile arm %q", name)
		}
		admin := fmt.Sprintf("http://localhost:%d/debug/pprof", a.proc.admin)
		base := filepath.Join(b.cfg.profileDir, a.name)
		if err := fetch(ctx, admin+"/allocs", base+".allocs.before.pprof", time.Minute); err != nil {
			return err
		}
		secs := b.cfg.profileSeconds
		body := a.body(false, directive{n: b.cfg.AnswerPieces, latency: b.cfg.Latency})
		load := time.Duration(secs+2) * time.Second
		done := make(chan string, 1)
		switch rate := b.cfg.profileRate; {
		case slices.Contains(b.media["video-content"], a):
			logf("profiling %s for %ds under whole video downloads, one after another", a.name, secs)
			go func() {
				var n int64
				t0 := time.Now()
				for time.Since(t0) < load && ctx.Err() == nil {
					k, _, err := a.download(ctx, "", 0, b.cfg.VideoBytes)
					if n += k; err != nil {
						done <- err.Error()
						return
					}
				}
				done <- fmt.Sprintf("%.0f MB/s", float64(n)/1e6/time.Since(t0).Seconds())
			}()
		case slices.Contains(b.media["image-edit"], a):
			logf("profiling %s for %ds under %d closed-loop workers", a.name, secs, b.cfg.ImageConc)
			go func() {
				r := saturate(ctx, a, b.upstream, b.cfg.ImageConc, 0, load, b.imageBody)
				done <- fmt.Sprintf("%.1f rps", r.RPS)
			}()
		case b.cfg.profileStreams:
			logf("profiling %s for %ds under %s", a.name, secs, b.cfg.streamLoad())
			go func() {
				r := streams(ctx, a, b.cfg.streamLoad(), 0, load, directive{n: b.cfg.Chunks, interval: b.cfg.ChunkInterval, latency: b.cfg.Latency})
				done <- fmt.Sprintf("ttfb p50 %.0f µs, p99 %.0f µs, %d streams", r.TTFBP50Us, r.TTFBP99Us, r.Streams)
			}()
		case rate > 0:
			logf("profiling %s for %ds at %d rps", a.name, secs, rate)
			go func() {
				r := fixedRate(ctx, a, rate, 0, load, body)
				done <- fmt.Sprintf("p50 %.0f µs, p99 %.0f µs", r.P50Us, r.P99Us)
			}()
		default:
			logf("profiling %s for %ds under saturation", a.name, secs)
			go func() {
				r := saturate(ctx, a, b.upstream, b.cfg.Concurrency, 0, load, body)
				done <- fmt.Sprintf("%.0f rps", r.RPS)
			}()
		}
		sleepCtx(ctx, time.Second)
		err := fetch(ctx, fmt.Sprintf("%s/profile?seconds=%d", admin, secs), base+".cpu.pprof", time.Duration(secs)*time.Second+time.Minute)
		loaded := <-done
		if err != nil {
			return err
		}
		if err := fetch(ctx, admin+"/allocs", base+".allocs.pprof", time.Minute); err != nil {
			return err
		}
		logf("  %s while profiled; go tool pprof -top %s.cpu.pprof; go tool pprof -top -sample_index=alloc_space -base %s.allocs.before.pprof %s.allocs.pprof",
			loaded, base, base, base)
	}
	return nil
}

func fetch(ctx context.Context, url, path string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("fetching %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 500))
		return fmt.Errorf("fetching %s: status %d: %s", url, resp.StatusCode, msg)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// allArms are the arms of every test, the media tests' included.
func (b *bench) allArms() []*arm {
	all := slices.Clone(b.arms)
	for _, md := range mediaDefs {
		all = append(all, b.media[md.test]...)
	}
	return all
}

// answered is the number of 200 answers of the gateway's arms, and of the rows its batches
// completed.
func (b *bench) answered() int64 {
	n := b.batchRows.Load()
	for _, a := range b.allArms() {
		if a.kind == kindGateway {
			n += a.ok200.Load()
		}
	}
	return n
}

// waitRecords waits until the gateway has a generation row for every 200 answer it gave,
// or the timeout passes, and returns the count. Streams are settled before their last
// event, but an answer can still be recorded after the client has it, and the settlements
// of thousands of streams ending together queue for the one SQLite writer.
func (b *bench) waitRecords(ctx context.Context, timeout time.Duration) recordCheck {
	start := time.Now()
	for {
		answered := b.answered()
		rc := b.records()
		rc.Answered = answered
		rc.Lost = max(0, answered-rc.Rows)
		rc.WaitSeconds = time.Since(start).Seconds()
		if rc.Lost == 0 || rc.Error != "" || time.Since(start) > timeout || ctx.Err() != nil {
			return rc
		}
		sleepCtx(ctx, 200*time.Millisecond)
	}
}

// freshen restarts the arm's proxy and warms it with a few requests and streams, after the
// gateway has recorded everything it answered (a stop must not cut a settlement short).
func (b *bench) freshen(ctx context.Context, a *arm) error {
	if !b.cfg.Fresh || a.proc == nil {
		return nil
	}
	if a.kind == kindGateway {
		if rc := b.waitRecords(ctx, 2*time.Minute); rc.Lost > 0 {
			return fmt.Errorf("%d answers still without a generation record after %.0fs; not restarting the gateway", rc.Lost, rc.WaitSeconds)
		}
	}
	if err := a.proc.restart(ctx); err != nil {
		return err
	}
	a.client.CloseIdleConnections() // the client of every arm of that process
	d := directive{n: 4, interval: time.Millisecond, latency: b.cfg.Latency}
	plain, streamed := a.body(false, d), a.body(true, d)
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 8; i++ {
				rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				_ = a.do(rctx, plain)
				_ = a.openStream(rctx, streamed, nil)
				cancel()
			}
		}()
	}
	wg.Wait()
	return nil
}

// records counts the generation rows of the gateway (and its -variant twin), reading their
// SQLite files directly.
func (b *bench) records() recordCheck {
	rc := recordCheck{ByStatus: map[string]int64{}}
	for _, path := range b.dbPaths {
		if err := rc.count(path); err != nil {
			rc.Error = err.Error()
			break
		}
	}
	return rc
}

func (rc *recordCheck) count(dbPath string) error {
	db, err := sql.Open("sqlite3", "file:"+dbPath+"?mode=ro&_busy_timeout=10000")
	if err != nil {
		return err
	}
	defer db.Close()
	rows, err := db.Query(`SELECT status, cancelled, COUNT(*) FROM generations GROUP BY status, cancelled`)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var status, cancelled, n int64
		if err := rows.Scan(&status, &cancelled, &n); err != nil {
			return err
		}
		key := fmt.Sprint(status)
		if cancelled != 0 {
			key += " cancelled"
		}
		rc.ByStatus[key] += n
		rc.Rows += n
	}
	return rows.Err()
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

// machine describes where the run happened.
type machine struct {
	CPUs       int    `json:"cpus"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	CPU        string `json:"cpu"`
	Kernel     string `json:"kernel"`
	Go         string `json:"go"`
	Source     string `json:"source"`
	LoadBefore string `json:"load_before"`
	LoadAfter  string `json:"load_after"`
	// StealPercent is the share of the machine's CPU time that its hypervisor gave to
	// others during the run (Linux /proc/stat); -1 when unknown. A virtual machine's
	// latencies mean little when it is high.
	StealPercent float64 `json:"steal_percent"`
	// RoundSteal is StealPercent of each round (-1 when unknown): a round whose tail figures
	// stand out may simply have been robbed.
	RoundSteal []float64 `json:"round_steal_percent,omitempty"`
	// RuntimeEnv holds the Go runtime's settings in the environment (GOGC, GOMEMLIMIT,
	// GOMAXPROCS, GODEBUG), which every process of the run inherits, plain Caddy's too.
	RuntimeEnv []string `json:"runtime_env,omitempty"`
}

// runtimeEnv lists the Go runtime settings set in the environment.
func runtimeEnv() []string {
	var out []string
	for _, k := range []string{"GOGC", "GOMEMLIMIT", "GOMAXPROCS", "GODEBUG"} {
		if v, ok := os.LookupEnv(k); ok {
			out = append(out, k+"="+v)
		}
	}
	return out
}

// cpuTimes reads the machine's total and stolen CPU time in clock ticks from /proc/stat.
func cpuTimes() (total, steal int64, ok bool) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, false
	}
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0, false
	}
	// user nice system idle iowait irq softirq steal (guest time is counted in user).
	for i := 1; i <= 8; i++ {
		v, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return 0, 0, false
		}
		total += v
	}
	steal, _ = strconv.ParseInt(f[8], 10, 64)
	return total, steal, true
}

// stealSince is the percentage of CPU time stolen since the cpuTimes reading t0, s0.
func stealSince(t0, s0 int64, ok0 bool) float64 {
	t1, s1, ok1 := cpuTimes()
	if !ok0 || !ok1 || t1 <= t0 {
		return -1
	}
	return 100 * float64(s1-s0) / float64(t1-t0)
}

func machineInfo() machine {
	m := machine{CPUs: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), Go: runtime.Version(), RuntimeEnv: runtimeEnv()}
	// Pinned (-proxy-cpus), this process sees only its own share of the CPUs.
	if data, err := os.ReadFile("/sys/devices/system/cpu/online"); err == nil {
		if cpus, err := parseCPUs(strings.TrimSpace(string(data))); err == nil {
			m.CPUs = len(cpus)
		}
	}
	if out, err := exec.Command("go", "version").Output(); err == nil {
		m.Go = strings.TrimSpace(string(out))
	}
	// The measured tree: the commit, and whether it had uncommitted changes (read-only: no
	// index refresh is written).
	if out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output(); err == nil {
		m.Source = strings.TrimSpace(string(out))
		if st, err := exec.Command("git", "--no-optional-locks", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(st) > 0 {
			m.Source += "-dirty"
		}
	}
	if data, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(data))
	}
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	return m
}

func loadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}
