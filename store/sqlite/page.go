package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"

	"github.com/modelgateway/caddy-modelgateway/store"
)

// querier is what *sql.DB and *sql.Tx have in common.
type querier interface {
	rowQuerier
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// readPage reads one page (store.Page) of the rows of table that match where, a condition
// over args, in (created_at, id) order, which an index of the table serves: the rows after
// the row p.After, which must match where too (store.ErrCursorNotFound otherwise), one more
// than the page holds.
func readPage[T any](ctx context.Context, q querier, table, columns, where string, args []any, p store.Page, scan func(scanner) (T, error)) ([]T, error) {
	args = slices.Clip(args)
	if p.After != "" {
		var created int64
		err := q.QueryRowContext(ctx, `SELECT created_at FROM `+table+` WHERE id = ? AND `+where,
			append([]any{p.After}, args...)...).Scan(&created)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, fmt.Errorf("after %q: %w", p.After, store.ErrCursorNotFound)
		}
		if err != nil {
			return nil, err
		}
		where += ` AND (created_at, id) > (?, ?)`
		args = append(args, created, p.After)
	}
	rows, err := q.QueryContext(ctx, `SELECT `+columns+` FROM `+table+` WHERE `+where+` ORDER BY created_at, id LIMIT ?`,
		append(args, p.Fetch())...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, nil
}
