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
	return readListing(ctx, q, listing{table: table, columns: columns, where: where, args: args}, p, scan)
}

// listing is a list readListing reads a page of.
type listing struct {
	table, columns string
	// where selects the rows of the list, over args.
	where string
	args  []any
	// scope, over scopeArgs, selects the rows a cursor may be: where and args when empty.
	// A filtered list scopes its cursor wider than its filter, to a row that may have
	// left the filter since the page before was read.
	scope     string
	scopeArgs []any
	// desc lists in (created_at, id) descending order.
	desc bool
}

// readListing reads one page of l, as readPage does, in l's order.
func readListing[T any](ctx context.Context, q querier, l listing, p store.Page, scan func(scanner) (T, error)) ([]T, error) {
	where, args := l.where, slices.Clip(l.args)
	if p.After != "" {
		scope, scopeArgs := l.scope, l.scopeArgs
		if scope == "" {
			scope, scopeArgs = where, args
		}
		var created int64
		err := q.QueryRowContext(ctx, `SELECT created_at FROM `+l.table+` WHERE id = ? AND `+scope,
			append([]any{p.After}, scopeArgs...)...).Scan(&created)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, fmt.Errorf("after %q: %w", p.After, store.ErrCursorNotFound)
		}
		if err != nil {
			return nil, err
		}
		if l.desc {
			where += ` AND (created_at, id) < (?, ?)`
		} else {
			where += ` AND (created_at, id) > (?, ?)`
		}
		args = append(args, created, p.After)
	}
	order := `created_at, id`
	if l.desc {
		order = `created_at DESC, id DESC`
	}
	rows, err := q.QueryContext(ctx, `SELECT `+l.columns+` FROM `+l.table+` WHERE `+where+` ORDER BY `+order+` LIMIT ?`,
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
