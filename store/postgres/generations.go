package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/modelgateway/caddy-modelgateway/store"
)

const generationColumns = `id, workspace_id, key_id, endpoint, model, provider, upstream_model, upstream_id,
	streamed, cancelled, status, finish_reason, error_code, error_message,
	input_tokens, cache_read_tokens, cache_write_tokens, output_tokens, reasoning_tokens,
	cost_nanos, unbilled_nanos, cost_lines, attempts,
	latency_ms, generation_ms, end_to_end_ms, created_at`

func insertGeneration(ctx context.Context, tx pgx.Tx, g *store.Generation) error {
	// json.Marshal keeps nil as null and empty as [], so both read back as they were written.
	lines, err := json.Marshal(g.CostLines)
	if err != nil {
		return fmt.Errorf("encoding cost lines: %w", err)
	}
	attempts, err := json.Marshal(g.Attempts)
	if err != nil {
		return fmt.Errorf("encoding attempts: %w", err)
	}
	_, err = tx.Exec(ctx, `INSERT INTO generations (`+generationColumns+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20,
			$21, $22, $23, $24, $25, $26, $27)`,
		g.ID, g.WorkspaceID, g.KeyID, g.Endpoint, g.Model, g.Provider, g.UpstreamModel, g.UpstreamID,
		g.Streamed, g.Cancelled, g.Status, g.FinishReason, g.ErrorCode, g.ErrorMessage,
		g.InputTokens, g.CacheReadTokens, g.CacheWriteTokens, g.OutputTokens, g.ReasoningTokens,
		g.CostNanos, g.UnbilledNanos, string(lines), string(attempts),
		g.LatencyMs, g.GenerationMs, g.EndToEndMs, g.CreatedAt)
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
		g, err = scanGeneration(conn.QueryRow(ctx, `SELECT `+generationColumns+` FROM generations
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

func scanGeneration(row pgx.Row) (store.Generation, error) {
	var g store.Generation
	// Raw JSON, decoded here rather than by pgx, so a stored null stays a nil slice.
	var lines, attempts []byte
	err := row.Scan(&g.ID, &g.WorkspaceID, &g.KeyID, &g.Endpoint, &g.Model, &g.Provider, &g.UpstreamModel, &g.UpstreamID,
		&g.Streamed, &g.Cancelled, &g.Status, &g.FinishReason, &g.ErrorCode, &g.ErrorMessage,
		&g.InputTokens, &g.CacheReadTokens, &g.CacheWriteTokens, &g.OutputTokens, &g.ReasoningTokens,
		&g.CostNanos, &g.UnbilledNanos, &lines, &attempts,
		&g.LatencyMs, &g.GenerationMs, &g.EndToEndMs, &g.CreatedAt)
	if err != nil {
		return store.Generation{}, err
	}
	if err := json.Unmarshal(lines, &g.CostLines); err != nil {
		return store.Generation{}, fmt.Errorf("decoding cost lines: %w", err)
	}
	if err := json.Unmarshal(attempts, &g.Attempts); err != nil {
		return store.Generation{}, fmt.Errorf("decoding attempts: %w", err)
	}
	g.CreatedAt = utc(g.CreatedAt)
	return g, nil
}

// Activity sums a workspace's generations per UTC day, model and provider.
func (s *Store) Activity(ctx context.Context, q store.ActivityQuery) ([]store.ActivityRow, error) {
	if q.WorkspaceID == "" {
		return nil, errors.New("activity: empty workspace id")
	}
	out := []store.ActivityRow{}
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		// The key filter is written so that an empty KeyID matches every key.
		rows, err := conn.Query(ctx, `SELECT to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD') AS day, model, provider,
				COUNT(*), SUM(input_tokens)::BIGINT, SUM(cache_read_tokens)::BIGINT, SUM(cache_write_tokens)::BIGINT,
				SUM(output_tokens)::BIGINT, SUM(reasoning_tokens)::BIGINT, SUM(cost_nanos)::BIGINT
			FROM generations
			WHERE workspace_id = $1 AND created_at >= $2 AND created_at < $3 AND ($4 = '' OR key_id = $4)
			GROUP BY day, model, provider
			ORDER BY day, model COLLATE "C", provider COLLATE "C"`,
			q.WorkspaceID, q.From, q.To, q.KeyID)
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
