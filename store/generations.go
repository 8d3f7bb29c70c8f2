package store

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/modelgateway/caddy-modelgateway/internal/meter"
)

// Generations is the store's role for what requests did: the record of each request
// (written by the wallet's settlement, in the same transaction as its charge) and sums of
// them.
type Generations interface {
	// GetGeneration returns a generation of the workspace; another workspace's is
	// ErrNotFound, exactly like a missing one.
	GetGeneration(ctx context.Context, workspaceID, id string) (Generation, error)
	// Activity returns a page of a workspace's generations summed per UTC day, model and
	// provider, ordered by day, model and provider (byte order): at most q.Limit rows, or
	// one more to tell that more follow (page.go), after q.After.
	Activity(ctx context.Context, q ActivityQuery) ([]ActivityRow, error)
	// ActivityTotals sums every generation q selects, whatever its page: a row with a zero
	// Day, Model and Provider.
	ActivityTotals(ctx context.Context, q ActivityQuery) (ActivityRow, error)
}

// CostLine is one priced dimension of a request's cost (meter.CostLine: the line pricing
// makes), with the key it priced for a keyed dimension.
type CostLine = meter.CostLine

// Attempt is one upstream call made for a generation.
type Attempt struct {
	Provider      string `json:"provider"`
	UpstreamModel string `json:"upstream_model"`
	Status        int    `json:"status"`
	DurationMs    int64  `json:"duration_ms"`
	Error         string `json:"error,omitempty"`
	Category      string `json:"category,omitempty"`
}

// Generation is the stored record of one request. A field added here is added to
// GenerationFields too (a test fails until it is), and to both backends' generations
// table by a migration: nothing else lists the fields.
type Generation struct {
	ID          string
	WorkspaceID string
	KeyID       string
	// ReservationID is the hold the generation was settled against, "" for none (a free
	// model's, an interrupted record's): a settlement repeated against the same hold is
	// answered with this record (Wallet.Settle).
	ReservationID string
	Endpoint      string
	Model         string
	Provider      string
	UpstreamModel string
	UpstreamID    string
	Streamed      bool
	Cancelled     bool
	// Status is the HTTP status the client received.
	Status       int
	FinishReason string
	ErrorCode    string
	ErrorMessage string
	// ErrorOrigin is where the error came from: user, gateway or upstream ("" without one).
	ErrorOrigin string

	// Tokens, each counted once: InputTokens and OutputTokens count a media call's audio
	// and image tokens with its text's (its cost lines tell them apart).
	InputTokens      int64
	CacheReadTokens  int64
	CacheWriteTokens int64
	OutputTokens     int64
	ReasoningTokens  int64

	// The usage in the dimensions that are not tokens, as metered (RecordDimensions): input
	// characters, images, pages, and seconds of audio and video, in milliseconds. Zero for
	// a call that used none (every text call).
	InputCharacters int64
	Images          int64
	Pages           int64
	InputAudioMs    int64
	OutputAudioMs   int64
	OutputVideoMs   int64

	// CostNanos is what the wallet was charged.
	CostNanos int64
	// UnbilledNanos is priced usage the wallet could not cover (it never goes negative).
	UnbilledNanos int64
	CostLines     []CostLine
	Attempts      []Attempt

	LatencyMs    int64
	GenerationMs int64
	EndToEndMs   int64
	CreatedAt    time.Time
}

// RecordDimensions records in g the usage u of a call in the dimensions that are not
// tokens; its tokens are the caller's to count (audio and image tokens with the text's).
func (g *Generation) RecordDimensions(u *meter.Usage) {
	g.InputCharacters, g.Images, g.Pages = u.InputCharacters, u.Images, u.Pages
	g.InputAudioMs, g.OutputAudioMs = u.InputAudio.Milliseconds(), u.OutputAudio.Milliseconds()
	g.OutputVideoMs = u.OutputVideo.Milliseconds()
}

// HasDimensions reports whether g records usage in a dimension that is not tokens
// (RecordDimensions): no text call does.
func (g *Generation) HasDimensions() bool {
	return g.InputCharacters != 0 || g.Images != 0 || g.Pages != 0 || g.InputAudioMs != 0 || g.OutputAudioMs != 0 || g.OutputVideoMs != 0
}

// dimensionColumns are the columns of the fields RecordDimensions sets, which both
// backends' tables default to 0.
var dimensionColumns = []string{"input_characters", "images", "pages", "input_audio_ms", "output_audio_ms", "output_video_ms"}

// TokenOnlyFields are GenerationFields without the dimension columns, and TokenOnlyColumns
// their column list: what a backend may insert for generations none of which HasDimensions,
// leaving those columns to their default, so that a text call's record binds six values
// fewer on the hot path.
var TokenOnlyFields, TokenOnlyColumns = func() ([]GenerationField, string) {
	var fields []GenerationField
	var cols []string
	for _, f := range GenerationFields {
		if !slices.Contains(dimensionColumns, f.Column) {
			fields = append(fields, f)
			cols = append(cols, f.Column)
		}
	}
	return fields, strings.Join(cols, ", ")
}()

// GenerationField is one stored field of a Generation: its column in the backends'
// generations table, and where it is in the struct.
type GenerationField struct {
	Column string
	// Addr returns the field's address in g: a *string, *int64, *int, *bool, *time.Time,
	// *[]CostLine or *[]Attempt. Backends convert by that type (times, and cost lines and
	// attempts, which are stored as JSON).
	Addr func(g *Generation) any
}

// GenerationFields are the stored fields of a Generation, in their columns' order: the
// one list backends build their statements, arguments and scans from.
var GenerationFields = [...]GenerationField{
	{"id", func(g *Generation) any { return &g.ID }},
	{"workspace_id", func(g *Generation) any { return &g.WorkspaceID }},
	{"key_id", func(g *Generation) any { return &g.KeyID }},
	{"reservation_id", func(g *Generation) any { return &g.ReservationID }},
	{"endpoint", func(g *Generation) any { return &g.Endpoint }},
	{"model", func(g *Generation) any { return &g.Model }},
	{"provider", func(g *Generation) any { return &g.Provider }},
	{"upstream_model", func(g *Generation) any { return &g.UpstreamModel }},
	{"upstream_id", func(g *Generation) any { return &g.UpstreamID }},
	{"streamed", func(g *Generation) any { return &g.Streamed }},
	{"cancelled", func(g *Generation) any { return &g.Cancelled }},
	{"status", func(g *Generation) any { return &g.Status }},
	{"finish_reason", func(g *Generation) any { return &g.FinishReason }},
	{"error_code", func(g *Generation) any { return &g.ErrorCode }},
	{"error_message", func(g *Generation) any { return &g.ErrorMessage }},
	{"error_origin", func(g *Generation) any { return &g.ErrorOrigin }},
	{"input_tokens", func(g *Generation) any { return &g.InputTokens }},
	{"cache_read_tokens", func(g *Generation) any { return &g.CacheReadTokens }},
	{"cache_write_tokens", func(g *Generation) any { return &g.CacheWriteTokens }},
	{"output_tokens", func(g *Generation) any { return &g.OutputTokens }},
	{"reasoning_tokens", func(g *Generation) any { return &g.ReasoningTokens }},
	{"input_characters", func(g *Generation) any { return &g.InputCharacters }},
	{"images", func(g *Generation) any { return &g.Images }},
	{"pages", func(g *Generation) any { return &g.Pages }},
	{"input_audio_ms", func(g *Generation) any { return &g.InputAudioMs }},
	{"output_audio_ms", func(g *Generation) any { return &g.OutputAudioMs }},
	{"output_video_ms", func(g *Generation) any { return &g.OutputVideoMs }},
	{"cost_nanos", func(g *Generation) any { return &g.CostNanos }},
	{"unbilled_nanos", func(g *Generation) any { return &g.UnbilledNanos }},
	{"cost_lines", func(g *Generation) any { return &g.CostLines }},
	{"attempts", func(g *Generation) any { return &g.Attempts }},
	{"latency_ms", func(g *Generation) any { return &g.LatencyMs }},
	{"generation_ms", func(g *Generation) any { return &g.GenerationMs }},
	{"end_to_end_ms", func(g *Generation) any { return &g.EndToEndMs }},
	{"created_at", func(g *Generation) any { return &g.CreatedAt }},
}

// GenerationColumns is the column list of GenerationFields, comma-separated, for SELECT
// and INSERT statements.
var GenerationColumns = func() string {
	cols := make([]string, len(GenerationFields))
	for i, f := range GenerationFields {
		cols[i] = f.Column
	}
	return strings.Join(cols, ", ")
}()

// ActivityQuery selects generations of a workspace created in [From, To); KeyID, when
// set, keeps only that key's. After and Limit choose the page Activity returns.
type ActivityQuery struct {
	WorkspaceID string
	From, To    time.Time
	KeyID       string
	// After, when set, starts the page after that row, which must be one of the query's
	// (ErrCursorNotFound otherwise).
	After *ActivityKey
	// Limit is the page size, as Page.Limit.
	Limit int
}

// Validate checks an activity query.
func (q ActivityQuery) Validate() error {
	if q.WorkspaceID == "" {
		return errors.New("activity: empty workspace id")
	}
	return nil
}

// Range is the part of [From, To) a page of the query sums: from the day of After on,
// when set, since the rows of earlier days come before the cursor.
func (q ActivityQuery) Range() (from, to time.Time) {
	if q.After != nil && q.After.Day.After(q.From) {
		return q.After.Day, q.To
	}
	return q.From, q.To
}

// AfterDay is the part of [From, To) in the day of After: where the generations of the
// cursor's row were created, if it is a row of the query. After must be set.
func (q ActivityQuery) AfterDay() (from, to time.Time) {
	from, to = q.After.Day.UTC(), q.After.Day.UTC().AddDate(0, 0, 1)
	if q.From.After(from) {
		from = q.From
	}
	if q.To.Before(to) {
		to = q.To
	}
	return from, to
}

// ActivityKey names one row of an activity list: its place in the list's order.
type ActivityKey struct {
	// Day is midnight UTC of the day.
	Day      time.Time
	Model    string
	Provider string
}

// ActivityRow sums the generations of one UTC day, model and provider.
type ActivityRow struct {
	// Day is midnight UTC of the day.
	Day              time.Time
	Model            string
	Provider         string
	Requests         int64
	InputTokens      int64
	CacheReadTokens  int64
	CacheWriteTokens int64
	OutputTokens     int64
	ReasoningTokens  int64
	CostNanos        int64
}
