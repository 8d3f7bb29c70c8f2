package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/modelgateway/caddy-modelgateway/store"
)

const generationColumns = `id, workspace_id, key_id, endpoint, model, provider, upstream_model, upstream_id,
	streamed, cancelled, status, finish_reason, error_code, error_message,
	input_tokens, cache_read_tokens, cache_write_tokens, output_tokens, reasoning_tokens,
	cost_nanos, unbilled_nanos, cost_lines, attempts,
	latency_ms, generation_ms, end_to_end_ms, created_at`

func insertGeneration(ctx context.Context, tx *sql.Tx, g *store.Generation) error {
	// nil is written as null and empty as [], so both read back as they were written.
	lines, attempts := store.AppendCostLinesJSON(nil, g.CostLines), store.AppendAttemptsJSON(nil, g.Attempts)
	_, err := tx.ExecContext(ctx, `INSERT INTO generations (`+generationColumns+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		g.ID, g.WorkspaceID, g.KeyID, g.Endpoint, g.Model, g.Provider, g.UpstreamModel, g.UpstreamID,
		g.Streamed, g.Cancelled, g.Status, g.FinishReason, g.ErrorCode, g.ErrorMessage,
		g.InputTokens, g.CacheReadTokens, g.CacheWriteTokens, g.OutputTokens, g.ReasoningTokens,
		g.CostNanos, g.UnbilledNanos, string(lines), string(attempts),
		g.LatencyMs, g.GenerationMs, g.EndToEndMs, millis(g.CreatedAt))
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
	row := s.r.QueryRowContext(ctx, `SELECT `+generationColumns+` FROM generations WHERE workspace_id = ? AND id = ?`,
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

func scanGeneration(row scanner) (store.Generation, error) {
	var g store.Generation
	var lines, attempts string
	var created int64
	err := row.Scan(&g.ID, &g.WorkspaceID, &g.KeyID, &g.Endpoint, &g.Model, &g.Provider, &g.UpstreamModel, &g.UpstreamID,
		&g.Streamed, &g.Cancelled, &g.Status, &g.FinishReason, &g.ErrorCode, &g.ErrorMessage,
		&g.InputTokens, &g.CacheReadTokens, &g.CacheWriteTokens, &g.OutputTokens, &g.ReasoningTokens,
		&g.CostNanos, &g.UnbilledNanos, &lines, &attempts,
		&g.LatencyMs, &g.GenerationMs, &g.EndToEndMs, &created)
	if err != nil {
		return store.Generation{}, err
	}
	if err := json.Unmarshal([]byte(lines), &g.CostLines); err != nil {
		return store.Generation{}, fmt.Errorf("decoding cost lines: %w", err)
	}
	if err := json.Unmarshal([]byte(attempts), &g.Attempts); err != nil {
		return store.Generation{}, fmt.Errorf("decoding attempts: %w", err)
	}
	g.CreatedAt = fromMillis(created)
	return g, nil
}

// Activity sums a workspace's generations per UTC day, model and provider.
func (s *Store) Activity(ctx context.Context, q store.ActivityQuery) ([]store.ActivityRow, error) {
	if q.WorkspaceID == "" {
		return nil, errors.New("activity: empty workspace id")
	}
	if err := s.caughtUp(ctx); err != nil {
		return nil, fmt.Errorf("summing activity: %w", err)
	}
	// The key filter is written so that an empty KeyID matches every key.
	rows, err := s.r.QueryContext(ctx, `SELECT strftime('%Y-%m-%d', created_at / 1000, 'unixepoch') AS day, model, provider,
			COUNT(*), SUM(input_tokens), SUM(cache_read_tokens), SUM(cache_write_tokens),
			SUM(output_tokens), SUM(reasoning_tokens), SUM(cost_nanos)
		FROM generations
		WHERE workspace_id = ? AND created_at >= ? AND created_at < ? AND (? = '' OR key_id = ?)
		GROUP BY day, model, provider
		ORDER BY day, model, provider`,
		q.WorkspaceID, millis(q.From), millis(q.To), q.KeyID, q.KeyID)
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
