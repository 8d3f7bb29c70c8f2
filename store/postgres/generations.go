package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/modelgateway/caddy-modelgateway/store"
)

// Generations are stored as store.GenerationFields lists them: cost lines and attempts
// as JSONB.

// generationValue is a field of a generation (what GenerationField.Addr returns) as it is
// written: cost lines and attempts as their JSON text (nil as null and empty as [], so
// both read back as they were written).
func generationValue(field any) any {
	switch p := field.(type) {
	case *[]store.CostLine:
		return string(store.AppendCostLinesJSON(nil, *p))
	case *[]store.Attempt:
		return string(store.AppendAttemptsJSON(nil, *p))
	case *string:
		return *p
	case *int64:
		return *p
	case *int:
		return *p
	case *bool:
		return *p
	case *time.Time:
		return *p
	}
	panic(fmt.Sprintf("postgres: generation field of unknown type %T", field))
}

// insertGenerationStatement inserts one generation.
var insertGenerationStatement = func() string {
	params := make([]string, len(store.GenerationFields))
	for i := range params {
		params[i] = "$" + strconv.Itoa(i+1)
	}
	return `INSERT INTO generations (` + store.GenerationColumns + `) VALUES (` + strings.Join(params, ", ") + `)`
}()

// insertInterruptedStatement inserts an interrupted record unless the generation exists:
// a request settled before its gateway died keeps its own record.
var insertInterruptedStatement = insertGenerationStatement + ` ON CONFLICT (id) DO NOTHING`

func insertGeneration(ctx context.Context, tx pgx.Tx, g *store.Generation) error {
	return execGeneration(ctx, tx, insertGenerationStatement, g)
}

// recordInterrupted records the request f as interrupted, unless its generation exists.
func recordInterrupted(ctx context.Context, tx pgx.Tx, f store.InFlight) error {
	g := store.Interrupted(f)
	return execGeneration(ctx, tx, insertInterruptedStatement, &g)
}

func execGeneration(ctx context.Context, tx pgx.Tx, statement string, g *store.Generation) error {
	var args [len(store.GenerationFields)]any
	for i, f := range store.GenerationFields {
		args[i] = generationValue(f.Addr(g))
	}
	_, err := tx.Exec(ctx, statement, args[:]...)
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
	var g store.Generation
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		var err error
		g, err = scanGeneration(conn.QueryRow(ctx, `SELECT `+store.GenerationColumns+` FROM generations
			WHERE workspace_id = $1 AND id = $2`, workspaceID, id))
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Generation{}, fmt.Errorf("generation %q: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return store.Generation{}, fmt.Errorf("getting generation %q: %w", id, err)
	}
	return g, nil
}

// scanGeneration reads a row of store.GenerationColumns.
func scanGeneration(row pgx.Row) (store.Generation, error) {
	var g store.Generation
	var dest [len(store.GenerationFields)]any
	// Raw JSON, decoded here rather than by pgx, so a stored null stays a nil slice.
	var raw [len(store.GenerationFields)][]byte
	for i, f := range store.GenerationFields {
		switch p := f.Addr(&g).(type) {
		case *[]store.CostLine, *[]store.Attempt:
			dest[i] = &raw[i]
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
			*p = utc(*p)
		case *[]store.CostLine, *[]store.Attempt:
			if err := json.Unmarshal(raw[i], p); err != nil {
				return store.Generation{}, fmt.Errorf("decoding %s: %w", f.Column, err)
			}
		}
	}
	return g, nil
}

// activityFilter selects the generations of an activity query created in [from, to): the
// condition over $1 to $4 and its arguments. The key filter is written so that an empty
// KeyID matches every key.
func activityFilter(q store.ActivityQuery, from, to time.Time) (string, []any) {
	return `workspace_id = $1 AND created_at >= $2 AND created_at < $3 AND ($4 = '' OR key_id = $4)`,
		[]any{q.WorkspaceID, from, to, q.KeyID}
}

// activityDay is the UTC day of a generation, as text that sorts as the day.
const activityDay = `to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD')`

// activitySums are the sums of an activity row, after its day, model and provider.
const activitySums = `COUNT(*), SUM(input_tokens)::BIGINT, SUM(cache_read_tokens)::BIGINT, SUM(cache_write_tokens)::BIGINT,
	SUM(output_tokens)::BIGINT, SUM(reasoning_tokens)::BIGINT, SUM(cost_nanos)::BIGINT`

// Activity returns a page of a workspace's generations summed per UTC day, model and
// provider. Models and providers sort byte by byte (COLLATE "C"), as on SQLite.
func (s *Store) Activity(ctx context.Context, q store.ActivityQuery) ([]store.ActivityRow, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	from, to := q.Range()
	where, args := activityFilter(q, from, to)
	having := ""
	if a := q.After; a != nil {
		having = ` HAVING (` + activityDay + `, model COLLATE "C", provider COLLATE "C") > ($5, $6, $7)`
		args = append(args, a.Day.Format(time.DateOnly), a.Model, a.Provider)
	}
	out := []store.ActivityRow{}
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		if a := q.After; a != nil {
			from, to := q.AfterDay()
			cond, cargs := activityFilter(q, from, to)
			var exists bool
			err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM generations WHERE `+cond+` AND model = $5 AND provider = $6)`,
				append(cargs, a.Model, a.Provider)...).Scan(&exists)
			if err != nil {
				return err
			}
			if !exists {
				return fmt.Errorf("after %s|%s|%s: %w", a.Day.Format(time.DateOnly), a.Model, a.Provider, store.ErrCursorNotFound)
			}
		}
		rows, err := conn.Query(ctx, `SELECT `+activityDay+` AS day, model, provider, `+activitySums+`
			FROM generations WHERE `+where+`
			GROUP BY day, model, provider`+having+`
			ORDER BY day, model COLLATE "C", provider COLLATE "C"
			LIMIT `+"$"+strconv.Itoa(len(args)+1), append(args, store.PageSize(q.Limit)+1)...)
		if err != nil {
			return err
		}
		var a store.ActivityRow
		var day string
		_, err = pgx.ForEachRow(rows, []any{&day, &a.Model, &a.Provider, &a.Requests, &a.InputTokens, &a.CacheReadTokens,
			&a.CacheWriteTokens, &a.OutputTokens, &a.ReasoningTokens, &a.CostNanos}, func() error {
			d, err := time.Parse(time.DateOnly, day)
			if err != nil {
				return fmt.Errorf("day %q: %w", day, err)
			}
			a.Day = d
			out = append(out, a)
			return nil
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("summing activity: %w", err)
	}
	return out, nil
}

// ActivityTotals sums every generation of the query.
func (s *Store) ActivityTotals(ctx context.Context, q store.ActivityQuery) (store.ActivityRow, error) {
	if err := q.Validate(); err != nil {
		return store.ActivityRow{}, err
	}
	where, args := activityFilter(q, q.From, q.To)
	var a store.ActivityRow
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		// COALESCE: the SUM of no rows is NULL.
		return conn.QueryRow(ctx, `SELECT COUNT(*), COALESCE(SUM(input_tokens), 0)::BIGINT, COALESCE(SUM(cache_read_tokens), 0)::BIGINT,
				COALESCE(SUM(cache_write_tokens), 0)::BIGINT, COALESCE(SUM(output_tokens), 0)::BIGINT,
				COALESCE(SUM(reasoning_tokens), 0)::BIGINT, COALESCE(SUM(cost_nanos), 0)::BIGINT
			FROM generations WHERE `+where, args...).
			Scan(&a.Requests, &a.InputTokens, &a.CacheReadTokens, &a.CacheWriteTokens, &a.OutputTokens, &a.ReasoningTokens, &a.CostNanos)
	})
	if err != nil {
		return store.ActivityRow{}, fmt.Errorf("summing activity: %w", err)
	}
	return a, nil
}
