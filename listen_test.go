package lapse_test

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/testdb"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store/mysql"
	"github.com/lapsehq/lapse/store/postgres"
	"github.com/lapsehq/lapse/store/storetest"
)

// logSignal is a slog.Handler that sends each message containing want to
// ch (dropping it when nobody waits): a test learns that the service got
// somewhere without sleeping.
type logSignal struct {
	want string
	ch   chan string
}

func (h logSignal) Enabled(context.Context, slog.Level) bool { return true }
func (h logSignal) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.want) {
		select {
		case h.ch <- r.Message:
		default:
		}
	}
	return nil
}
func (h logSignal) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h logSignal) WithGroup(string) slog.Handler      { return h }

// twoInstances is one PostgreSQL schema with two lapse instances on it,
// each on a pool of its own with memory timers: a is never run (it only
// takes checkouts, as a shop's web process would, or an instance that
// stopped); b runs with no sweep, so that it can only learn of a's orders
// as they commit. seeded receives b's "timers seeded" log lines.
type twoInstances struct {
	poolA, poolB *pgxpool.Pool
	a, b         *lapse.Service
	stA          *postgres.Store
	seeded       chan string
	url          string
}

func newTwoInstances(t *testing.T, maxConnsB int32) twoInstances {
	t.Helper()
	ctx := context.Background()
	u := testdb.PostgresSchema(t)
	pool := func(max int32) *pgxpool.Pool {
		pc, err := pgxpool.ParseConfig(u)
		if err != nil {
			t.Fatal(err)
		}
		if max > 0 {
			pc.MaxConns = max
		}
		p, err := pgxpool.NewWithConfig(ctx, pc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		return p
	}
	ti := twoInstances{poolA: pool(0), poolB: pool(maxConnsB), seeded: make(chan string, 4), url: u}
	var err error
	if ti.stA, err = postgres.FromPool(ti.poolA, postgres.Config{}); err != nil {
		t.Fatal(err)
	}
	if err := ti.stA.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	stB, err := postgres.FromPool(ti.poolB, postgres.Config{})
	if err != nil {
		t.Fatal(err)
	}
	storetest.Stock(t, ti.stA, 100, "tee")
	ti.a = newService(t, lapse.Config{Store: ti.stA, SweepInterval: -1})
	ti.b = newService(t, lapse.Config{Store: stB, SweepInterval: -1,
		Logger: slog.New(logSignal{want: "timers seeded", ch: ti.seeded})})
	return ti
}

// checkout creates id through a in a caller's transaction and returns its
// commit.
func (ti twoInstances) checkout(t *testing.T, id string, timeout time.Duration) func() {
	t.Helper()
	ctx := context.Background()
	tx, err := ti.poolA.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	if _, err := ti.a.CreateOrderTx(ctx, ti.stA.InTx(tx), lapse.CreateOrderRequest{ID: id, Items: []order.Item{{SKU: "tee", Qty: 1}},
		AmountCents: 100, Timeout: timeout}); err != nil {
		t.Fatal(err)
	}
	return func() {
		t.Helper()
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// onTime waits until b cancelled id and checks it did so within a second
// of its deadline.
func (ti twoInstances) onTime(t *testing.T, id string) {
	t.Helper()
	waitFor(t, 15*time.Second, id+" cancelled", func() bool { return status(t, ti.b, id) == order.Cancelled })
	o, err := ti.b.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if late := o.CancelledAt.Sub(o.CancelAfter); late > time.Second {
		t.Fatalf("%s cancelled %s after its deadline, want within a second", id, late)
	}
}

// An order a caller's transaction commits through instance a, which never
// runs, is cancelled on time by instance b, which learns of it from the
// store's NOTIFY at commit: b's seed ran before the commit, and b has no
// sweep.
func TestAnotherInstanceHearsACommittedOrder(t *testing.T) {
	t.Parallel()
	ti := newTwoInstances(t, 0)
	commit := ti.checkout(t, "heard", 1500*time.Millisecond)
	start(t, ti.b)
	select {
	case <-ti.seeded:
	case <-time.After(10 * time.Second):
		t.Fatal("b never seeded its timers")
	}
	commit()
	ti.onTime(t, "heard")
	if got := metric(t, ti.b, "lapse_due_heard_total"); got < 1 {
		t.Fatalf("lapse_due_heard_total = %v, want the order heard", got)
	}
}

// When b's listening connection is killed, b listens again and plans from
// the store: an order committed while it could not listen (its pool held by
// the test, so that it cannot connect again before the commit) is
// cancelled on time all the same.
func TestListeningAgainPlansFromTheStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const maxConns = 3
	ti := newTwoInstances(t, maxConns)
	start(t, ti.b)
	select {
	case <-ti.seeded:
	case <-time.After(10 * time.Second):
		t.Fatal("b never seeded its timers")
	}
	var held []*pgxpool.Conn
	for range maxConns {
		c, err := ti.poolB.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	var killed bool
	if err := ti.poolA.QueryRow(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE query = 'LISTEN ' || $1`, pgx.Identifier{"lapse_due:" + schemaOf(t, ti.poolA)}.Sanitize()).Scan(&killed); err != nil || !killed {
		t.Fatalf("terminate b's listening backend: %v %v", killed, err)
	}
	waitFor(t, 10*time.Second, "b noticing the lost listen", func() bool { return metric(t, ti.b, "lapse_due_listen_lost_total") >= 1 })
	ti.checkout(t, "missed", 1500*time.Millisecond)()
	if got := metric(t, ti.b, "lapse_due_heard_total"); got != 0 {
		t.Fatalf("b heard %v deadlines while it could not listen", got)
	}
	for _, c := range held {
		c.Release()
	}
	ti.onTime(t, "missed")
}

// schemaOf is the schema a pool's connections use.
func schemaOf(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var s string
	if err := pool.QueryRow(context.Background(), "SELECT current_schema()").Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// On MySQL the store cannot tell other instances of a commit: an instance
// whose memory timers were seeded before another process created an order
// learns of it from Wake (or, later, its sweep, off here), and then cancels
// it on time; an order it was not woken for stays PENDING past its
// deadline. Wake of an order that does not exist is ErrNotFound.
func TestWakeSetsTheTimerOfAnOrderAnotherProcessCreated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dc := testdb.MySQLDatabase(t)
	dc.ParseTime, dc.ClientFoundRows = true, true
	open := func() (*sql.DB, *mysql.Store) {
		db, err := sql.Open("mysql", dc.FormatDSN())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		st, err := mysql.FromDB(db, mysql.Config{})
		if err != nil {
			t.Fatal(err)
		}
		return db, st
	}
	dbA, stA := open()
	_, stB := open()
	if err := stA.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	storetest.Stock(t, stA, 10, "tee")
	seeded := make(chan string, 4)
	a := newService(t, lapse.Config{Store: stA, SweepInterval: -1})
	b := newService(t, lapse.Config{Store: stB, SweepInterval: -1, Logger: slog.New(logSignal{want: "timers seeded", ch: seeded})})
	start(t, b)
	select {
	case <-seeded:
	case <-time.After(10 * time.Second):
		t.Fatal("b never seeded its timers")
	}
	for _, id := range []string{"woken", "unwoken"} {
		tx, err := dbA.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.CreateOrderTx(ctx, stA.InTx(tx), lapse.CreateOrderRequest{ID: id, Items: []order.Item{{SKU: "tee", Qty: 1}},
			AmountCents: 100, Timeout: time.Second}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Wake(ctx, "woken"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "woken cancelled", func() bool { return status(t, b, "woken") == order.Cancelled })
	o, err := b.Get(ctx, "woken")
	if err != nil {
		t.Fatal(err)
	}
	if late := o.CancelledAt.Sub(o.CancelAfter); late > time.Second {
		t.Fatalf("woken cancelled %s after its deadline", late)
	}
	if got := status(t, b, "unwoken"); got != order.Pending {
		t.Fatalf("unwoken is %s: b had no way to know of it", got)
	}
	if err := b.Wake(ctx, "nope"); !errors.Is(err, lapse.ErrNotFound) {
		t.Fatalf("Wake of no order: %v, want ErrNotFound", err)
	}
}
