package fence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// DefaultOrdersTable is the orders table's default name.
const DefaultOrdersTable = "orders"

// Order is one row of an Orders table.
type Order struct {
	// ID is the order's identifier.
	ID string
	// Status is whatever the last accepted writer set, e.g. "paid".
	Status string
	// Token is the fencing token of the write that set Status.
	Token int64
}

// Orders is the worked example of the fencing dance — A holds a lock and
// pauses past its lease; B is granted the lock with a higher token and
// writes; A wakes and writes with its old token, and that write is refused:
// an orders table that is written only through an SQLGuard, so that a
// worker whose lock expired during a pause cannot overwrite the work of the
// worker that holds the lock now. Each row records the token that wrote it.
//
// An order with ID id is fenced under resource "order:" + id; the lock that
// grants the tokens must be the same for all writers of the order. An Orders
// is safe for concurrent use.
type Orders struct {
	guard *SQLGuard
	put   string
	get   string
}

// NewOrders creates the orders table if missing and returns an Orders that
// writes it through guard, in guard's database. table is an SQL identifier
// like SQLConfig.Table; empty means DefaultOrdersTable. It blocks for one
// statement.
func NewOrders(ctx context.Context, guard *SQLGuard, table string) (*Orders, error) {
	if table == "" {
		table = DefaultOrdersTable
	}
	if !identRE.MatchString(table) {
		return nil, fmt.Errorf("%w: orders table %q; want an SQL identifier ([A-Za-z_][A-Za-z0-9_]*, at most 63 bytes, optionally schema.table)", ErrInvalidConfig, table)
	}
	d := guard.cfg.Dialect
	create := fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (id TEXT PRIMARY KEY, status TEXT NOT NULL, token BIGINT NOT NULL)`, table)
	if err := createTable(ctx, guard.db, create); err != nil {
		return nil, fmt.Errorf("fence: create table %s: %w", table, err)
	}
	return &Orders{
		guard: guard,
		put: fmt.Sprintf(`INSERT INTO %s (id, status, token) VALUES (%s, %s, %s)
ON CONFLICT (id) DO UPDATE SET status = excluded.status, token = excluded.token`,
			table, d.arg(1), d.arg(2), d.arg(3)),
		get: fmt.Sprintf(`SELECT status, token FROM %s WHERE id = %s`, table, d.arg(1)),
	}, nil
}

// Put sets the order's status and records token in its row, if token is not
// lower than the highest token accepted for the order; otherwise it returns a
// *StaleTokenError and changes nothing. It blocks like SQLGuard.Write.
func (o *Orders) Put(ctx context.Context, orderID, status string, token int64) error {
	if orderID == "" {
		return fmt.Errorf("%w: order id is empty", ErrEmptyResource)
	}
	return o.guard.Write(ctx, "order:"+orderID, token, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, o.put, orderID, status, token); err != nil {
			return fmt.Errorf("fence: write order %q: %w", orderID, err)
		}
		return nil
	})
}

// Get returns the order, or an error wrapping ErrNotFound if no write of it
// was ever accepted.
func (o *Orders) Get(ctx context.Context, orderID string) (Order, error) {
	ord := Order{ID: orderID}
	err := o.guard.db.QueryRowContext(ctx, o.get, orderID).Scan(&ord.Status, &ord.Token)
	if errors.Is(err, sql.ErrNoRows) {
		return Order{}, fmt.Errorf("%w: order %q", ErrNotFound, orderID)
	}
	if err != nil {
		return Order{}, fmt.Errorf("fence: read order %q: %w", orderID, err)
	}
	return ord, nil
}
