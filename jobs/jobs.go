// Package jobs runs work that outlives a request: a job (a video or a song an upstream
// makes in minutes, a batch) is created under a durable hold, stored with its first poll,
// and polled by whichever gateway instance claims it, at the pace its upstream asks, until
// it ends; then its hold is settled (or released) and the job completed, exactly once.
//
// A family of jobs is a Kind: how to ask its upstream where a job stands. Everything else
// (claims, pacing, retries with backoff, panics, holds, settlement, the job's events) is
// the Engine's, written once for every kind.
//
// Exactly once, across crashes: the settlement's generation id is the job's (GenerationID),
// and the store's settlement is idempotent by generation id, so an instance killed between
// settling a job and completing its poll settles it again, when the poll is claimed anew,
// and is charged once. The hold is a durable one (billing.Ledger.Durable): no instance owns
// it, so no instance's death frees it; the job's end does, or its expiry.
//
// The package knows neither HTTP nor Caddy: a kind is handed the job's route from the
// newest configuration (Env), and module runs the Engine as one of its workers.
package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/modelgateway/caddy-modelgateway/blobs"
	"github.com/modelgateway/caddy-modelgateway/internal/pricing"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// Public statuses of a job: the four openai-go's poll helper knows, and the terminal ones
// beyond them that a job may end in without an upstream saying so.
const (
	StatusQueued     = "queued"
	StatusInProgress = "in_progress"
	StatusCompleted  = "completed"
	StatusFailed     = "failed"
	StatusCancelled  = "cancelled"
	StatusExpired    = "expired"
)

// Terminal reports whether a job of status has ended.
func Terminal(status string) bool {
	switch status {
	case StatusCompleted, StatusFailed, StatusCancelled, StatusExpired:
		return true
	}
	return false
}

// Lifecycle stages the engine keeps beside the public status.
const (
	LifecycleSubmitted = "submitted"
	LifecyclePolling   = "polling"
	LifecycleSettled   = "settled"
	LifecycleReleased  = "released"
)

// Kind is one family of jobs: how its upstream tells where a job stands.
type Kind interface {
	// Poll asks the upstream where job j stands. An error is a failed poll, retried with
	// backoff (an *Failure ends the job instead); a panic is recovered and retried the same
	// way.
	Poll(ctx context.Context, env Env, j store.Job) (Report, error)
}

// LongPoller is a Kind whose polls of some jobs may outlast the engine's bound of a poll
// (half its lease): a synchronous upstream that makes the result within the poll (a song
// ElevenLabs composes in minutes). PollTimeout bounds the poll of job j instead when it is
// longer; the engine first extends the poll's claim to twice it, so that no other instance
// polls the job meanwhile.
type LongPoller interface {
	Kind
	PollTimeout(j store.Job) time.Duration
}

// StatusKind is a Kind whose jobs go through live statuses of their own beside queued and
// in_progress (a batch's validating, finalizing, cancelling): its polls may report them,
// and the Result of each of its polls is kept as the job's (its running state), where
// another kind's is kept only from its start and its end.
type StatusKind interface {
	Kind
	LiveStatuses() []string
}

// PiecewiseKind is a Kind whose jobs are charged piecewise while they run (each row of a
// batch settles against the job's hold as it is answered): at the job's end the engine
// releases what the hold has left instead of settling the job's usage, and records no
// generation of the job's own.
type PiecewiseKind interface {
	Kind
	SettlesPiecewise()
}

// Report is where an upstream says a job stands.
type Report struct {
	// Status is StatusQueued, StatusInProgress, StatusCompleted or StatusFailed; a kind may
	// also end a job as StatusCancelled or StatusExpired (with its Result), and a
	// StatusKind report its own live statuses.
	Status string
	// Progress is a percentage, 0 to 100.
	Progress int
	// PollAfter is when the upstream asks to be polled again (openai-poll-after-ms, an
	// operation's hint); 0 leaves it to the engine's pace.
	PollAfter time.Duration
	// PollNow makes the next poll due at once, not after the engine's MinPoll, which is
	// there to spare upstreams: for a poll that asks nothing of an upstream (a batch the
	// gateway runs, whose next step is its own store's and files').
	PollNow bool
	// Usage is what the job consumed, by dimension: what a completed job is charged for.
	Usage pricing.Usage
	// Result is the job's result for its family (an output's location, its metadata).
	Result json.RawMessage
	// ErrorCode and ErrorMessage say why a failed job failed.
	ErrorCode    string
	ErrorMessage string
}

// Failure is an error of Poll that ends the job as failed, rather than a poll to retry:
// the upstream forgot the job, or refuses it for good.
type Failure struct {
	Code    string
	Message string
}

func (f *Failure) Error() string { return f.Code + ": " + f.Message }

// Env is what a poll may use of the newest configuration.
type Env struct {
	// Route returns the route job j was created on (its Provider and UpstreamModel, for its
	// Model), as the newest configuration has it: its adapter (a providers.Provider, which
	// the kind asserts to its capability) and the price its model bills. false when the
	// configuration no longer has it.
	Route func(j store.Job) (Route, bool)
	// Blobs is the configuration's blob store, where a kind keeps what its jobs made
	// (music audio, batch output files); nil when none is configured.
	Blobs blobs.Store
	// Store is the engine's store, for a kind that keeps records of its own beside the job
	// (a batch's rows and files); the engine sets it when the Env has none.
	Store store.Store
}

// Route is a job's route in a configuration.
type Route struct {
	Upstream any
	Price    pricing.Price
	// Free is set for a route of a model that bills nothing (a ":free" name, or no route
	// priced): its jobs are charged nothing, whatever they made.
	Free bool
}

var (
	kindsMu sync.RWMutex
	kinds   = map[string]Kind{}
)

// Register makes kind k run under name (a store job kind: lower-case letters, digits and
// underscores). Families register in an init function, as database/sql drivers do; a name
// registered twice panics.
func Register(name string, k Kind) {
	if err := store.ValidateJobKind(name); err != nil {
		panic(err)
	}
	kindsMu.Lock()
	defer kindsMu.Unlock()
	if _, dup := kinds[name]; dup {
		panic(fmt.Sprintf("jobs: kind %q registered twice", name))
	}
	kinds[name] = k
}

// Kinds returns the registered kinds' names, sorted.
func Kinds() []string {
	kindsMu.RLock()
	defer kindsMu.RUnlock()
	names := make([]string, 0, len(kinds))
	for n := range kinds {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func kindOf(name string) (Kind, bool) {
	kindsMu.RLock()
	defer kindsMu.RUnlock()
	k, ok := kinds[name]
	return k, ok
}

// GenerationID is the id of the generation that records job id's charge: derived from the
// job's, so that every settlement of the job, whichever instance makes it, names the same
// generation, and the store's idempotent settlement charges it once.
func GenerationID(jobID string) string {
	if _, rest, ok := strings.Cut(jobID, "_"); ok {
		return "gen_job_" + rest
	}
	return "gen_job_" + jobID
}

// errNoHold refuses a job to create without the hold it needs.
var errNoHold = errors.New("a job needs a hold: its reservation id and the worst case it holds")
