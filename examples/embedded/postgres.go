package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/postgres"
)

// pgSchema is the shop's own table. A real shop has it in its own
// migrations; lapse's tables are all lapse_*, so the two never collide.
const pgSchema = `CREATE TABLE IF NOT EXISTS orders (
	id           text PRIMARY KEY,
	status       text NOT NULL,
	amount_cents bigint NOT NULL,
	pay_by       timestamptz NOT NULL
)`

// pgDB is the shop's database on PostgreSQL: one pgx pool for the shop and
// for lapse.
type pgDB struct {
	pool  *pgxpool.Pool
	store *postgres.Store
}

// openPostgres connects to url, sets up lapse on the shop's pool with the
// shop's hooks, and migrates lapse's tables and the shop's.
func openPostgres(ctx context.Context, url string) (*pgDB, error) {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("open postgres: %w", err)
	}
	st, err := postgres.FromPool(pool, postgres.Config{Hooks: postgres.Hooks{
		OnCancelled: pgMark(statusCancelled),
		OnPaid:      pgMark(statusPaid),
	}})
	if err == nil {
		err = st.Migrate(ctx)
	}
	if err == nil {
		_, err = pool.Exec(ctx, pgSchema)
	}
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("set up postgres: %w", err)
	}
	return &pgDB{pool: pool, store: st}, nil
}

// pgMark is a hook that moves the shop's row to status, inside the
// transaction where lapse makes the transition. It is guarded by the status
// it moves from: a hook may run more than once (its transaction retried),
// and a second run must change nothing.
func pgMark(status string) func(context.Context, pgx.Tx, order.Order) error {
	return func(ctx context.Context, tx pgx.Tx, o order.Order) error {
		_, err := tx.Exec(ctx, `UPDATE orders SET status = $1 WHERE id = $2 AND status = 'pending'`, status, o.ID)
		if err != nil {
			return fmt.Errorf("mark order %s %s: %w", o.ID, status, err)
		}
		return nil
	}
}

func (d *pgDB) inTx(ctx context.Context, fn func(shopTx) error) error {
	tx, err := d.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	// After a commit a no-op; after a failure, done even if ctx is over.
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := fn(pgTx{tx: tx, store: d.store}); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

func (d *pgDB) order(ctx context.Context, id string) (shopOrder, error) {
	o := shopOrder{ID: id}
	err := d.pool.QueryRow(ctx, `SELECT status, amount_cents, pay_by FROM orders WHERE id = $1`, id).
		Scan(&o.Status, &o.AmountCents, &o.PayBy)
	if errors.Is(err, pgx.ErrNoRows) {
		return shopOrder{}, errNoOrder
	}
	if err != nil {
		return shopOrder{}, fmt.Errorf("read order %s: %w", id, err)
	}
	o.PayBy = o.PayBy.UTC()
	return o, nil
}

func (d *pgDB) lapseStore() store.Store { return d.store }

func (d *pgDB) close() {
	_ = d.store.Close() // lapse's part: it leaves the shop's pool open
	d.pool.Close()
}

// pgTx is an open transaction of the shop's on PostgreSQL.
type pgTx struct {
	tx    pgx.Tx
	store *postgres.Store
}

func (t pgTx) lapse() store.Tx { return t.store.InTx(t.tx) }

func (t pgTx) insertOrder(ctx context.Context, o shopOrder) error {
	_, err := t.tx.Exec(ctx, `INSERT INTO orders (id, status, amount_cents, pay_by) VALUES ($1, $2, $3, $4)`,
		o.ID, o.Status, o.AmountCents, o.PayBy)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" { // unique_violation
		return errDuplicate
	}
	if err != nil {
		return fmt.Errorf("insert order %s: %w", o.ID, err)
	}
	return nil
}
