package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Jobs is the store's role for work that outlives a request (video and music generations,
// batches): a job row, polled through the claims (claims.go) by whichever instance claims
// it, and changed only together with its claim.
//
// A job's polls are the items of queue JobQueue(kind), named by the job's id, grouped by
// its provider (so that one provider's jobs never take every poller: ClaimParams.GroupCap),
// whose payload is the job's workspace id. Every change to a job (CreateJob, AdvanceJob) is
// published on the change feed (Watch) once committed.
type Jobs interface {
	// CreateJob, in one transaction: stores job j, enqueues its first poll at firstPoll
	// (now when zero) and enqueues events for delivery (deliveries.go: its created event).
	// An id already used is ErrConflict, an unknown workspace ErrNotFound, and then nothing
	// is written. CreatedAt is stamped now when zero, UpdatedAt is CreatedAt when zero.
	CreateJob(ctx context.Context, j Job, firstPoll time.Time, events []Event) error
	// GetJob returns a job of the workspace; another workspace's is ErrNotFound, exactly
	// like a missing one.
	GetJob(ctx context.Context, workspaceID, id string) (Job, error)
	// ListJobs returns a page of the jobs q selects (page.go), in the order it asks.
	ListJobs(ctx context.Context, q JobQuery) ([]Job, error)
	// AdvanceJob, in one transaction: applies u to the job claim c polls (its id is the
	// claim's), stamping UpdatedAt; enqueues events for delivery (deliveries.go); and
	// completes the claim when next is zero (the job needs no more polls) or requeues it at
	// next, without raising its attempt. A claim no longer held is ErrClaimLost, and then
	// nothing changes.
	AdvanceJob(ctx context.Context, c Claim, u JobUpdate, events []Event, next time.Time) error
	// UnpolledJobs returns up to limit live jobs (no CompletedAt) that have no poll in
	// their kind's queue, oldest first: jobs nothing would poll again (a database restored
	// from a backup, a poll removed by hand), which jobs.Engine queues again. CreateJob
	// and AdvanceJob change a job and its poll in one transaction, so no job in the making
	// is among them.
	UnpolledJobs(ctx context.Context, limit int) ([]Job, error)
	// Watch returns the change feed: every change to a job of any workspace committed from
	// now on, by this store or, on PostgreSQL, by any store on the same schema, until ctx
	// ends or the store closes (then the channel is closed). Writers never wait for a
	// watcher: one that falls behind loses its oldest changes, never the newest, and the
	// job itself (GetJob) is the truth; on PostgreSQL, changes made while the listening
	// connection is down and being reconnected are lost too.
	Watch(ctx context.Context) (<-chan JobChange, error)
	// DeleteJob removes a job of the workspace, with any poll of it still queued (the
	// caller decides which jobs may go: the store deletes whatever it is asked to). Its
	// events already enqueued stay and are delivered. Another workspace's job, or a missing
	// one, is ErrNotFound, and then nothing is deleted.
	DeleteJob(ctx context.Context, workspaceID, id string) error
}

// Job kinds.
const (
	JobVideo = "video"
	JobMusic = "music"
	JobBatch = "batch"
)

// JobQueue is the queue of the polls of jobs of kind.
func JobQueue(kind string) string { return "jobs." + kind }

// Job is a stored job. A field added here is added to JobFields too, and to both backends'
// jobs table by a migration: nothing else lists the fields. JSON fields are nil when unset
// and are kept as JSON, not byte for byte (PostgreSQL normalises its whitespace and the
// order of object keys).
type Job struct {
	ID          string
	WorkspaceID string
	// Kind is JobVideo, JobMusic, JobBatch or another kind made of lower-case letters,
	// digits and underscores (tests have theirs).
	Kind  string
	KeyID string
	Model string
	// Provider and UpstreamModel are the route the job was created on, which polls it.
	Provider      string
	UpstreamModel string
	// NativeID is the upstream's id of the job.
	NativeID string
	// Status is the job's public status (queued, in_progress, completed, failed...);
	// Lifecycle is the gateway's own stage of it (submitted, polling, settling...).
	Status    string
	Lifecycle string
	Progress  int
	// Usage is the usage by dimension, as JSON.
	Usage json.RawMessage
	// ReservationID is the job's hold, and HeldNanos what it holds: the job's worst case,
	// which a usage that cannot be priced is charged.
	ReservationID string
	HeldNanos     int64
	// Webhook is the webhook configuration, and Delivery the state of its deliveries.
	Webhook  json.RawMessage
	Delivery json.RawMessage
	// Request is the request payload the job was created with, Result its result.
	Request      json.RawMessage
	Result       json.RawMessage
	ErrorCode    string
	ErrorMessage string
	CreatedAt    time.Time
	UpdatedAt    time.Time
	// CompletedAt and ExpiresAt are zero when unset.
	CompletedAt time.Time
	ExpiresAt   time.Time
}

// JobField is one stored field of a Job: its column in the backends' jobs table, and where
// it is in the struct.
type JobField struct {
	Column string
	// Addr returns the field's address in j: a *string, *int, *int64, *json.RawMessage or
	// *time.Time. Backends convert by that type: a zero time and a nil JSON are NULL.
	Addr func(j *Job) any
}

// JobFields are the stored fields of a Job, in their columns' order: the one list backends
// build their statements, arguments and scans from.
var JobFields = [...]JobField{
	{"id", func(j *Job) any { return &j.ID }},
	{"workspace_id", func(j *Job) any { return &j.WorkspaceID }},
	{"kind", func(j *Job) any { return &j.Kind }},
	{"key_id", func(j *Job) any { return &j.KeyID }},
	{"model", func(j *Job) any { return &j.Model }},
	{"provider", func(j *Job) any { return &j.Provider }},
	{"upstream_model", func(j *Job) any { return &j.UpstreamModel }},
	{"native_id", func(j *Job) any { return &j.NativeID }},
	{"status", func(j *Job) any { return &j.Status }},
	{"lifecycle", func(j *Job) any { return &j.Lifecycle }},
	{"progress", func(j *Job) any { return &j.Progress }},
	{"usage", func(j *Job) any { return &j.Usage }},
	{"reservation_id", func(j *Job) any { return &j.ReservationID }},
	{"held_nanos", func(j *Job) any { return &j.HeldNanos }},
	{"webhook", func(j *Job) any { return &j.Webhook }},
	{"delivery", func(j *Job) any { return &j.Delivery }},
	{"request", func(j *Job) any { return &j.Request }},
	{"result", func(j *Job) any { return &j.Result }},
	{"error_code", func(j *Job) any { return &j.ErrorCode }},
	{"error_message", func(j *Job) any { return &j.ErrorMessage }},
	{"created_at", func(j *Job) any { return &j.CreatedAt }},
	{"updated_at", func(j *Job) any { return &j.UpdatedAt }},
	{"completed_at", func(j *Job) any { return &j.CompletedAt }},
	{"expires_at", func(j *Job) any { return &j.ExpiresAt }},
}

// JobValue is a field of a job (what JobField.Addr returns, or a JobSet's value) as a
// backend writes it: unset times and JSON as NULL (nil), JSON as text, set times as at
// makes them (each backend keeps its own representation of a time).
func JobValue(field any, at func(time.Time) any) any {
	switch p := field.(type) {
	case *string:
		return *p
	case *int:
		return *p
	case *int64:
		return *p
	case *json.RawMessage:
		if *p == nil {
			return nil
		}
		return string(*p)
	case *time.Time:
		if p.IsZero() {
			return nil
		}
		return at(*p)
	}
	panic(fmt.Sprintf("store: job field of unknown type %T", field))
}

// JobColumns is the column list of JobFields, comma-separated.
var JobColumns = func() string {
	cols := make([]string, len(JobFields))
	for i, f := range JobFields {
		cols[i] = f.Column
	}
	return strings.Join(cols, ", ")
}()

// PrepareJob checks a job and the events given to CreateJob and returns the job as stored:
// CreatedAt stamped by now when zero, UpdatedAt the same when zero, both at the store's
// precision.
func PrepareJob(j Job, events []Event, now func() time.Time) (Job, error) {
	if err := ValidateJob(j); err != nil {
		return j, err
	}
	for _, e := range events {
		if err := e.Validate(); err != nil {
			return j, fmt.Errorf("creating job %q: %w", j.ID, err)
		}
	}
	j.CreatedAt = Stamp(j.CreatedAt, now)
	if j.UpdatedAt.IsZero() {
		j.UpdatedAt = j.CreatedAt
	}
	j.UpdatedAt = Stamp(j.UpdatedAt, now)
	for _, t := range []*time.Time{&j.CompletedAt, &j.ExpiresAt} {
		if !t.IsZero() {
			*t = Stamp(*t, now)
		}
	}
	return j, nil
}

// ValidateJob checks a job given to CreateJob.
func ValidateJob(j Job) error {
	switch {
	case j.ID == "":
		return errors.New("job: empty id")
	case j.WorkspaceID == "":
		return errors.New("job: empty workspace id")
	case j.Status == "":
		return fmt.Errorf("job %q: empty status", j.ID)
	}
	if err := ValidateJobKind(j.Kind); err != nil {
		return fmt.Errorf("job %q: %w", j.ID, err)
	}
	for _, f := range JobFields {
		if p, ok := f.Addr(&j).(*json.RawMessage); ok && *p != nil && !json.Valid(*p) {
			return fmt.Errorf("job %q: %s is not JSON", j.ID, f.Column)
		}
	}
	return nil
}

// ValidateJobKind checks a job kind: lower-case letters, digits and underscores, which
// also make a queue name (JobQueue).
func ValidateJobKind(kind string) error {
	if kind == "" || len(kind) > 64 || strings.ContainsFunc(kind, func(r rune) bool {
		return (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '_'
	}) {
		return fmt.Errorf("job kind %q is not lower-case letters, digits and underscores", kind)
	}
	return nil
}

// JobItem is the payload of a job's poll in its queue (JobQueue).
type JobItem struct {
	WorkspaceID string `json:"workspace_id"`
}

// JobEnqueue is the first poll of job j, due at firstPoll (now when zero).
func JobEnqueue(j Job, firstPoll time.Time) EnqueueParams {
	payload, _ := json.Marshal(JobItem{WorkspaceID: j.WorkspaceID}) // a struct of a string
	return EnqueueParams{Queue: JobQueue(j.Kind), ID: j.ID, Group: j.Provider, Payload: payload, RunAt: firstPoll}
}

// JobOf returns the workspace and id of the job a claimed poll is for.
func JobOf(it ClaimedItem) (workspaceID, id string, err error) {
	var item JobItem
	if err := json.Unmarshal(it.Payload, &item); err != nil || item.WorkspaceID == "" {
		return "", "", fmt.Errorf("item %q of queue %q is not a job's poll", it.ID, it.Queue)
	}
	return item.WorkspaceID, it.ID, nil
}

// JobUpdate is a change AdvanceJob applies to a job: each field set (not nil) replaces the
// job's, the others stay as they are.
type JobUpdate struct {
	NativeID      *string
	Status        *string
	Lifecycle     *string
	Progress      *int
	Usage         json.RawMessage
	ReservationID *string
	Webhook       json.RawMessage
	Delivery      json.RawMessage
	Result        json.RawMessage
	ErrorCode     *string
	ErrorMessage  *string
	CompletedAt   *time.Time
	ExpiresAt     *time.Time
}

// JobSet is one column JobUpdate sets, and its new value: a *string, *int,
// *json.RawMessage or *time.Time, as JobField.Addr returns.
type JobSet struct {
	Column string
	Value  any
}

// Sets returns the columns u sets, in JobFields order, with their values.
func (u *JobUpdate) Sets() []JobSet {
	var out []JobSet
	add := func(column string, value any, set bool) {
		if set {
			out = append(out, JobSet{column, value})
		}
	}
	add("native_id", u.NativeID, u.NativeID != nil)
	add("status", u.Status, u.Status != nil)
	add("lifecycle", u.Lifecycle, u.Lifecycle != nil)
	add("progress", u.Progress, u.Progress != nil)
	add("usage", &u.Usage, u.Usage != nil)
	add("reservation_id", u.ReservationID, u.ReservationID != nil)
	add("webhook", &u.Webhook, u.Webhook != nil)
	add("delivery", &u.Delivery, u.Delivery != nil)
	add("result", &u.Result, u.Result != nil)
	add("error_code", u.ErrorCode, u.ErrorCode != nil)
	add("error_message", u.ErrorMessage, u.ErrorMessage != nil)
	if u.CompletedAt != nil {
		t := u.CompletedAt.UTC().Truncate(time.Millisecond)
		add("completed_at", &t, true)
	}
	if u.ExpiresAt != nil {
		t := u.ExpiresAt.UTC().Truncate(time.Millisecond)
		add("expires_at", &t, true)
	}
	return out
}

// ValidateAdvance checks the arguments of AdvanceJob.
func ValidateAdvance(c Claim, u JobUpdate, events []Event) error {
	if err := c.Validate(); err != nil {
		return err
	}
	for _, raw := range []json.RawMessage{u.Usage, u.Webhook, u.Delivery, u.Result} {
		if raw != nil && !json.Valid(raw) {
			return fmt.Errorf("advancing job %q: an update is not JSON", c.ID)
		}
	}
	for _, e := range events {
		if err := e.Validate(); err != nil {
			return fmt.Errorf("advancing job %q: %w", c.ID, err)
		}
	}
	return nil
}

// Orders of a list.
const (
	// NewestFirst lists the newest first: (created_at, id) descending. The default.
	NewestFirst = "desc"
	// OldestFirst lists the oldest first: (created_at, id) ascending.
	OldestFirst = "asc"
)

// JobQuery selects jobs of a workspace: of Kind when set, of one of Statuses when set.
type JobQuery struct {
	WorkspaceID string
	Kind        string
	Statuses    []string
	// Order is NewestFirst (the default, when empty) or OldestFirst.
	Order string
	// Page is the page to return. Its After may be any job of the workspace, whether or
	// not the filters select it (its status may have changed since the last page).
	Page
}

// Validate checks a job query.
func (q JobQuery) Validate() error {
	switch {
	case q.WorkspaceID == "":
		return errors.New("listing jobs: empty workspace id")
	case q.Order != "" && q.Order != NewestFirst && q.Order != OldestFirst:
		return fmt.Errorf("listing jobs: order %q is neither %q nor %q", q.Order, NewestFirst, OldestFirst)
	case len(q.Statuses) > MaxPageLimit:
		return fmt.Errorf("listing jobs: %d statuses, at most %d", len(q.Statuses), MaxPageLimit)
	}
	return nil
}

// Descending reports whether the query lists the newest first.
func (q JobQuery) Descending() bool { return q.Order != OldestFirst }

// JobChange tells that a job changed: what the change feed (Watch) carries.
type JobChange struct {
	JobID       string    `json:"id"`
	WorkspaceID string    `json:"workspace_id"`
	Kind        string    `json:"kind"`
	Status      string    `json:"status"`
	UpdatedAt   time.Time `json:"updated_at"`
}

// ChangeOf is the change a write of job j makes.
func ChangeOf(j *Job) JobChange {
	return JobChange{JobID: j.ID, WorkspaceID: j.WorkspaceID, Kind: j.Kind, Status: j.Status, UpdatedAt: j.UpdatedAt}
}
