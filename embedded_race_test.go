package lapse_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/storetest"
)

// A shop's pay path and lapse's timeout cancel, racing on the same 1,000
// orders all due at one moment, never deadlock when both keep the
// documented lock order (docs/embedding.md): lapse's order row, then the
// shop's row, then stock. The shop's pay path is its own transaction:
// NotifyTx first (lapse's row, then its OnPaid hook on the shop's row), then
// the shop's own UPDATE of its row; lapse's cancel updates its rows of a
// batch, then runs OnCancelled on the shop's rows, then moves the stock.
// No deadlock reaches the shop, none is lost and run again inside lapse
// (PostgreSQL: every statement on the pool is traced; MariaDB: the server's
// latest detected deadlock names no table of the test's database), every
// order ends PAID or CANCELLED with the shop's row agreeing and one
// committed hook run, and the audit holds.
func TestEmbeddedPayAndCancelNeverDeadlock(t *testing.T) {
	t.Parallel()
	for _, driver := range []string{"postgres", "mysql"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			db := newEmbeddedDB(t, driver, guardedHook(shopCancelled, "cancelled"), guardedHook(shopPaid, "paid"))
			ctx := context.Background()
			svc := newService(t, lapse.Config{Store: db.store, BatchSize: 200})
			const n, skus, perTx = 1000, 10, 50
			sku := func(i int) string { return fmt.Sprintf("sku-%02d", i%skus) }
			for i := range skus {
				storetest.Stock(t, db.store, n, sku(i))
			}
			ids := make([]string, n)
			for lo := 0; lo < n; lo += perTx {
				tx, err := db.begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				for i := lo; i < lo+perTx; i++ {
					ids[i] = fmt.Sprintf("o-%04d", i)
					if err := tx.exec(ctx, "INSERT INTO orders_of_the_shop (id, status) VALUES (?, 'pending')", ids[i]); err != nil {
						t.Fatal(err)
					}
					// Due at once: lapse runs no timer until start, below.
					if _, err := svc.CreateOrderTx(ctx, tx.tx, lapse.CreateOrderRequest{ID: ids[i],
						Items: []order.Item{{SKU: sku(i), Qty: 1}}, AmountCents: 100, Timeout: time.Millisecond}); err != nil {
						t.Fatal(err)
					}
				}
				if err := tx.commit(ctx); err != nil {
					t.Fatal(err)
				}
			}
			var deadlocksBefore int64
			if driver == "mysql" {
				deadlocksBefore, _ = innodbDeadlocks(t, db)
			}

			// The payers take the orders in a random order, so that they
			// meet lapse's batches (taken in deadline order) everywhere.
			todo := make(chan string, n)
			for _, i := range rand.Perm(n) {
				todo <- ids[i]
			}
			close(todo)
			var surfaced, paid, refunds atomic.Int64
			var mu sync.Mutex
			var failures []string
			pay := func(id string) error {
				tx, err := db.begin(ctx)
				if err != nil {
					return err
				}
				defer tx.rollback(ctx)
				res, err := svc.NotifyTx(ctx, tx.tx, lapse.Notification{OrderID: id, PaymentID: "pay-" + id,
					Status: lapse.PaymentSucceeded, AmountCents: 100})
				if err != nil {
					return err
				}
				switch res.Outcome {
				case store.OutcomePaid:
					// The shop's own write, after lapse's row (locked by
					// NotifyTx): the documented order.
					if err := tx.exec(ctx, "UPDATE orders_of_the_shop SET status = 'paid' WHERE id = ?", id); err != nil {
						return err
					}
					paid.Add(1)
				case store.OutcomeRefundRequired: // lapse cancelled it first
					refunds.Add(1)
				default:
					return fmt.Errorf("outcome %v", res.Outcome)
				}
				return tx.commit(ctx)
			}
			start(t, svc)
			began := time.Now()
			var wg sync.WaitGroup
			for range 8 {
				wg.Go(func() {
					for id := range todo {
						for attempt := 0; ; attempt++ {
							err := pay(id)
							if err == nil {
								break
							}
							if (lapse.IsRetryable(err) || isConflict(err)) && attempt < 5 {
								surfaced.Add(1) // the shop runs its transaction again
								continue
							}
							mu.Lock()
							failures = append(failures, fmt.Sprintf("%s: %v", id, err))
							mu.Unlock()
							break
						}
					}
				})
			}
			wg.Wait()
			payers := time.Since(began)
			if len(failures) > 0 {
				t.Fatalf("%d pay transactions failed: %v", len(failures), failures[:min(len(failures), 5)])
			}
			waitFor(t, 45*time.Second, "every order PAID or CANCELLED", func() bool {
				c, err := countWhere(ctx, db, "SELECT count(*) FROM lapse_orders WHERE status IN ('PAID', 'CANCELLED')")
				if err != nil {
					t.Fatal(err)
				}
				return c == n
			})
			t.Logf("%s: %d paid, %d refunds (cancelled first), payers done in %s, all settled in %s",
				driver, paid.Load(), refunds.Load(), payers.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))

			if s := surfaced.Load(); s != 0 {
				t.Errorf("the shop saw %d deadlocks or serialization failures, want 0", s)
			}
			switch driver {
			case "postgres":
				if c := db.conflicts.Load(); c != 0 {
					t.Errorf("%d statements on the pool failed with 40P01/40001 (lapse's included), want 0", c)
				}
			case "mysql":
				after, latest := innodbDeadlocks(t, db)
				cfg, err := gomysql.ParseDSN(db.dsn)
				if err != nil {
					t.Fatal(err)
				}
				if strings.Contains(latest, cfg.DBName) {
					t.Errorf("the server's latest deadlock is in the test's database:\n%s", latest)
				}
				t.Logf("server-wide Innodb_deadlocks during the run: %d (other tests share the server)", after-deadlocksBefore)
			}
			if paid.Load()+refunds.Load() != n {
				t.Errorf("%d paid and %d refunds, want %d in all", paid.Load(), refunds.Load(), n)
			}
			if paid.Load() == 0 || int(paid.Load()) == n {
				t.Errorf("%d of %d paid: the payers and the cancels did not race", paid.Load(), n)
			}

			rows, runs := shopStatuses(t, db), hookRuns(t, db)
			want := map[order.Status]string{order.Paid: "paid", order.Cancelled: "cancelled"}
			for _, id := range ids {
				o, err := svc.Get(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				w, ok := want[o.Status]
				if !ok || rows[id] != w || runs[w+" "+id] != 1 || len(runs) != n {
					t.Fatalf("%s: lapse %s, shop %q, committed runs %d paid %d cancelled (%d in all); want PAID or CANCELLED, the shop agreeing, one run",
						id, o.Status, rows[id], runs["paid "+id], runs["cancelled "+id], len(runs))
				}
			}
			storetest.AuditOK(t, db.store)
		})
	}
}
