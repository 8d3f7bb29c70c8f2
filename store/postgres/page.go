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
	args = slices.Clip(args)
	if p.After != "" {
		n := len(args)
		var created time.Time
		err := conn.QueryRow(ctx, fmt.Sprintf(`SELECT created_at FROM %s WHERE %s AND id = $%d`, table, where, n+1),
			append(args, p.After)...).Scan(&created)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Errorf("after %q: %w", p.After, store.ErrCursorNotFound)
		}
		if err != nil {
			return nil, err
		}
		where += fmt.Sprintf(` AND (created_at, id) > ($%d, $%d)`, n+1, n+2)
		args = append(args, created, p.After)
	}
	rows, err := conn.Query(ctx, fmt.Sprintf(`SELECT %s FROM %s WHERE %s ORDER BY created_at, id LIMIT $%d`, columns, table, where, len(args)+1),
		append(args, p.Fetch())...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (T, error) { return scan(row) })
}
