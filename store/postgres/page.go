package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/modelgateway/caddy-modelgateway/store"
)

// readPage reads one page (store.Page) of the rows of table that match where, a condition
// over args ($1, $2...), in (created_at, id) order, which an index of the table serves: the
// rows after the row p.After, which must match where too (store.ErrCursorNotFound
// otherwise), one more than the page holds.
func readPage[T any](ctx context.Context, conn *pgx.Conn, table, columns, where string, args []any, p store.Page, scan func(pgx.Row) (T, error)) ([]T, error) {
	return readListing(ctx, conn, listing{table: table, columns: columns, where: where, args: args}, p, scan)
}

// listing is a list readListing reads a page of.
type listing struct {
	table, columns string
	// where selects the rows of the list, over args ($1, $2...).
	where string
	args  []any
	// scope, over scopeArgs ($1, $2...), selects the rows a cursor may be: where and args
	// when empty. A filtered list scopes its cursor wider than its filter, to a row that
	// may have left the filter since the page before was read.
	scope     string
	scopeArgs []any
	// desc lists in (created_at, id) descending order.
	desc bool
}

// readListing reads one page of l, as readPage does, in l's order.
func readListing[T any](ctx context.Context, conn *pgx.Conn, l listing, p store.Page, scan func(pgx.Row) (T, error)) ([]T, error) {
	where, args := l.where, slices.Clip(l.args)
	if p.After != "" {
		scope, scopeArgs := l.scope, slices.Clip(l.scopeArgs)
		if scope == "" {
			scope, scopeArgs = where, args
		}
		var created time.Time
		err := conn.QueryRow(ctx, fmt.Sprintf(`SELECT created_at FROM %s WHERE %s AND id = $%d`, l.table, scope, len(scopeArgs)+1),
			append(scopeArgs, p.After)...).Scan(&created)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Errorf("after %q: %w", p.After, store.ErrCursorNotFound)
		}
		if err != nil {
			return nil, err
		}
		n, cmp := len(args), ">"
		if l.desc {
			cmp = "<"
		}
		where += fmt.Sprintf(` AND (created_at, id) %s ($%d, $%d)`, cmp, n+1, n+2)
		args = append(args, created, p.After)
	}
	order := `created_at, id`
	if l.desc {
		order = `created_at DESC, id DESC`
	}
	rows, err := conn.Query(ctx, fmt.Sprintf(`SELECT %s FROM %s WHERE %s ORDER BY %s LIMIT $%d`, l.columns, l.table, where, order, len(args)+1),
		append(args, p.Fetch())...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (T, error) { return scan(row) })
}
