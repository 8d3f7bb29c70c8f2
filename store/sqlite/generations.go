package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/modelgateway/caddy-modelgateway/store"
)

// Generations are stored as store.GenerationFields lists them: times in Unix
// milliseconds, cost lines and attempts as JSON text.

// generationValue is a field of a generation (what GenerationField.Addr returns) as it is
// stored. scratch is a buffer the JSON fields are encoded in, returned for the next call.
func generationValue(field any, scratch []byte) (driver.Value, []byte) {
	switch p := field.(type) {
	case *string:
		return *p, scratch
	case *int64:
		return *p, scratch
	case *int:
		return int64(*p), scratch
	case *bool:
		return *p, scratch
	case *time.Time:
		return millis(*p), scratch
	case *[]store.CostLine:
		// nil is written as null and empty as [], so both read back as they were written.
		scratch = store.AppendCostLinesJSON(scratch[:0], *p)
		return string(scratch), scratch
	case *[]store.Attempt:
		scratch = store.AppendAttemptsJSON(scratch[:0], *p)
		return string(scratch), scratch
	}
	panic(fmt.Sprintf("sqlite: generation field of unknown type %T", field))
}

// insertGenerationStatement inserts one generation.
var insertGenerationStatement = `INSERT INTO generations (` + store.GenerationColumns + `) VALUES (?` +
	strings.Repeat(", ?", len(store.GenerationFields)-1) + `)`

func insertGeneration(ctx context.Context, tx *sql.Tx, g *store.Generation) error {
	var args [len(store.GenerationFields)]any
	var scratch []byte
	for i, f := range store.GenerationFields {
		args[i], scratch = generationValue(f.Addr(g), scratch)
	}
	_, err := tx.ExecContext(ctx, insertGenerationStatement, args[:]...)
	if isConflict(err) {
		return fmt.Errorf("generation %q: %w", g.ID, store.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("inserting generation: %w", err)
	}
	return nil
}

// GetGeneration returns a generation of the given workspace; another workspace's
// generation is store.ErrNotFound, exactly like a missing one.
func (s *Store) GetGeneration(ctx context.Context, workspaceID, id string) (store.Generation, error) {
	if err := s.caughtUp(ctx); err != nil {
		return store.Generation{}, fmt.Errorf("getting generation %q: %w", id, err)
	}
	row := s.r.QueryRowContext(ctx, `SELECT `+store.GenerationColumns+` FROM generations WHERE workspace_id = ? AND id = ?`,
		workspaceID, id)
	g, err := scanGeneration(row)
	if errors.Is(err, sql.ErrNoRows) {
		return store.Generation{}, fmt.Errorf("generation %q: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return store.Generation{}, fmt.Errorf("getting generation %q: %w", id, err)
	}
	return g, nil
}

// scanGeneration reads a row of store.GenerationColumns.
func scanGeneration(row scanner) (store.Generation, error) {
	var g store.Generation
	var dest [len(store.GenerationFields)]any
	// Times and JSON are read into these first, then converted.
	var ms [len(store.GenerationFields)]int64
	var text [len(store.GenerationFields)]string
	for i, f := range store.GenerationFields {
		switch p := f.Addr(&g).(type) {
		case *time.Time:
			dest[i] = &ms[i]
		case *[]store.CostLine, *[]store.Attempt:
			dest[i] = &text[i]
		default:
			dest[i] = p
		}
	}
	if err := row.Scan(dest[:]...); err != nil {
		return store.Generation{}, err
	}
	for i, f := range store.GenerationFields {
		switch p := f.Addr(&g).(type) {
		case *time.Time:
			*p = fromMillis(ms[i])
		case *[]store.CostLine, *[]store.Attempt:
			if err := json.Unmarshal([]byte(text[i]), p); err != nil {
				return store.Generation{}, fmt.Errorf("decoding %s: %w", f.Column, err)
			}
		}
	}
	return g, nil
}

// activityFilter selects the generations of an activity query created in [from, to): the
// condition and its arguments. The key filter is written so that an empty KeyID matches
// every key.
func activityFilter(q store.ActivityQuery, from, to time.Time) (string, []any) {
	return `workspace_id = ? AND created_at >= ? AND created_at < ? AND (? = '' OR key_id = ?)`,
		[]any{q.WorkspaceID, millis(from), millis(to), q.KeyID, q.KeyID}
}

// activitySums are the sums of an activity row, after its day, model and provider.
const activitySums = `COUNT(*), SUM(input_tokens), SUM(cache_read_tokens), SUM(cache_write_tokens),
	SUM(output_tokens), SUM(reasoning_tokens), SUM(cost_nanos)`

// Activity returns a page of a workspace's generations summed per UTC day, model and
// provider.
func (s *Store) Activity(ctx context.Context, q store.ActivityQuery) ([]store.ActivityRow, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	if err := s.caughtUp(ctx); err != nil {
		return nil, fmt.Errorf("summing activity: %w", err)
	}
	from, to := q.Range()
	where, args := activityFilter(q, from, to)
	having := ""
	if a := q.After; a != nil {
		var n int
		from, to := q.AfterDay()
		cond, cargs := activityFilter(q, from, to)
		err := s.r.QueryRowContext(ctx, `SELECT COUNT(*) FROM (SELECT 1 FROM generations WHERE `+cond+`
			AND model = ? AND provider = ? LIMIT 1)`, append(cargs, a.Model, a.Provider)...).Scan(&n)
		if err != nil {
			return nil, fmt.Errorf("summing activity: %w", err)
		}
		if n == 0 {
			return nil, fmt.Errorf("summing activity: after %s|%s|%s: %w", a.Day.Format(time.DateOnly), a.Model, a.Provider, store.ErrCursorNotFound)
		}
		having = ` HAVING (day, model, provider) > (?, ?, ?)`
		args = append(args, a.Day.Format(time.DateOnly), a.Model, a.Provider)
	}
	rows, err := s.r.QueryContext(ctx, `SELECT strftime('%Y-%m-%d', created_at / 1000, 'unixepoch') AS day, model, provider,
			`+activitySums+`
		FROM generations WHERE `+where+`
		GROUP BY day, model, provider`+having+`
		ORDER BY day, model, provider LIMIT ?`, append(args, store.PageSize(q.Limit)+1)...)
	if err != nil {
		return nil, fmt.Errorf("summing activity: %w", err)
	}
	defer rows.Close()
	out := []store.ActivityRow{}
	for rows.Next() {
		var a store.ActivityRow
		var day string
		if err := rows.Scan(&day, &a.Model, &a.Provider, &a.Requests, &a.InputTokens, &a.CacheReadTokens,
			&a.CacheWriteTokens, &a.OutputTokens, &a.ReasoningTokens, &a.CostNanos); err != nil {
			return nil, fmt.Errorf("summing activity: %w", err)
		}
		if a.Day, err = time.Parse(time.DateOnly, day); err != nil {
			return nil, fmt.Errorf("summing activity: day %q: %w", day, err)
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("summing activity: %w", err)
	}
	return out, nil
}

// ActivityTotals sums every generation of the query.
func (s *Store) ActivityTotals(ctx context.Context, q store.ActivityQuery) (store.ActivityRow, error) {
	if err := q.Validate(); err != nil {
		return store.ActivityRow{}, err
	}
	if err := s.caughtUp(ctx); err != nil {
		return store.ActivityRow{}, fmt.Errorf("summing activity: %w", err)
	}
	where, args := activityFilter(q, q.From, q.To)
	var a store.ActivityRow
	// COALESCE: the SUM of no rows is NULL.
	err := s.r.QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(SUM(input_tokens), 0), COALESCE(SUM(cache_read_tokens), 0),
			COALESCE(SUM(cache_write_tokens), 0), COALESCE(SUM(output_tokens), 0),
			COALESCE(SUM(reasoning_tokens), 0), COALESCE(SUM(cost_nanos), 0)
		FROM generations WHERE `+where, args...).
		Scan(&a.Requests, &a.InputTokens, &a.CacheReadTokens, &a.CacheWriteTokens, &a.OutputTokens, &a.ReasoningTokens, &a.CostNanos)
	if err != nil {
		return store.ActivityRow{}, fmt.Errorf("summing activity: %w", err)
	}
	return a, nil
}
