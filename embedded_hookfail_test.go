package lapse_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/storetest"
	"github.com/lapsehq/lapse/timer"
)

// With the sql timers (PollStore), an OnCancelled that fails for one order
// of a batch of 200 holds back that order alone: the other 199 are cancelled
// while it fails; the failing one is claimed again only after each retry's backoff
// (every call of its hook is a claim that took it: their gaps grow as the
// record's next_at says), its record counts the attempts, the audit warns of
// it (and passes), and the record goes in the commit whose hook holds.
func TestEmbeddedPollStoreBacksOffAFailingHook(t *testing.T) {
	t.Parallel()
	for name, mk := range map[string]func(*testing.T, func(string) error) shop{"postgres": postgresShop, "mysql": mysqlShop} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			const failing = "o-13"
			var (
				broken atomic.Bool
				mu     sync.Mutex
				calls  []time.Time // of the failing order's hook
			)
			broken.Store(true)
			sh := mk(t, func(id string) error {
				if id != failing {
					return nil
				}
				mu.Lock()
				calls = append(calls, time.Now())
				mu.Unlock()
				if broken.Load() {
					return errors.New("the shop's database refused it (postgres://shop:s3cret@db/shop)")
				}
				return nil
			})
			ctx := context.Background()
			svc := newService(t, lapse.Config{Store: sh.store, PollStore: true, BatchSize: 200, SweepInterval: -1})
			storetest.Stock(t, sh.store, 200, "tee")
			const n = 200
			tx := sh.begin(t, false)
			for i := range n {
				id := fmt.Sprintf("o-%d", i)
				tx.exec("INSERT INTO orders_of_the_shop (id, status) VALUES (?, 'pending')", id)
				if _, err := svc.CreateOrderTx(ctx, tx.tx, lapse.CreateOrderRequest{ID: id, Items: []order.Item{{SKU: "tee", Qty: 1}},
					AmountCents: 100, Timeout: 2 * time.Second}); err != nil {
					t.Fatal(err)
				}
			}
			if err := tx.commit(); err != nil {
				t.Fatal(err)
			}
			// On a loaded machine the 200 creates may outlast the first
			// deadlines: no order is due before it committed.
			committed := time.Now()
			start(t, svc)
			callsSoFar := func() []time.Time {
				mu.Lock()
				defer mu.Unlock()
				return append([]time.Time(nil), calls...)
			}
			const fails = 4
			waitFor(t, 30*time.Second, "the failing hook tried 4 times", func() bool { return len(callsSoFar()) >= fails })

			// Every other order was cancelled on time, while the one hook fails.
			for i := range n {
				id := fmt.Sprintf("o-%d", i)
				if id == failing {
					continue
				}
				waitFor(t, 10*time.Second, id+" cancelled", func() bool { return status(t, svc, id) == order.Cancelled })
				o, err := svc.Get(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				// Generous: under -race on a loaded machine a batch that took
				// the failing order runs twice (the rerun without it).
				if late := o.CancelledAt.Sub(latest(o.CancelAfter, committed)); late > 10*time.Second {
					t.Fatalf("%s cancelled %s after its deadline (or its commit); want on time while %s's hook fails", id, late, failing)
				}
			}

			// While it fails: the record, the audit.
			var rec store.HookFailure
			waitFor(t, 10*time.Second, "the record of 4 attempts", func() bool {
				fs, err := sh.store.ListHookFailures(ctx, 10)
				if err != nil {
					t.Fatal(err)
				}
				if len(fs) == 1 {
					rec = fs[0]
				}
				return len(fs) == 1 && fs[0].Attempts >= fails
			})
			if rec.OrderID != failing || rec.Event != store.HookCancelled || !strings.Contains(rec.LastError, "refused it") ||
				strings.Contains(rec.LastError, "s3cret") || !rec.NextAt.After(rec.LastFailedAt) || rec.Attempts > len(callsSoFar()) {
				t.Fatalf("record %+v, want %s's OnCancelled with its error (no password) and a retry ahead", rec, failing)
			}
			rep, err := svc.Audit(ctx, store.AuditParams{AllowedLag: 0})
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range rep.Checks {
				if c.Name == "hook_failing" && (c.Count != 1 || !strings.Contains(c.Examples[0], "order "+failing)) {
					t.Fatalf("audit hook_failing: %+v", c)
				}
			}
			if !rep.OK() {
				t.Fatalf("the audit fails while a hook fails: %+v", rep)
			}

			broken.Store(false)
			waitFor(t, 60*time.Second, failing+" cancelled once its hook holds", func() bool { return status(t, svc, failing) == order.Cancelled })
			if got := sh.count(t, "SELECT COUNT(*) FROM lapse_hook_failures WHERE order_id = ?", failing); got != 0 {
				t.Fatalf("%d hook failure records left after the cancel whose hook held", got)
			}
			// Each failed call was followed by the next only after its
			// backoff: claims did not take the order in between.
			cs := callsSoFar()
			for k := 1; k < len(cs); k++ {
				if gap, least := cs[k].Sub(cs[k-1]), timer.Backoff(k)-5*time.Millisecond; gap < least {
					t.Fatalf("call %d of the failing hook came %s after the one before, want at least its backoff %s (calls %v)",
						k+1, gap, least, cs)
				}
			}
			if runs := sh.runs(t); runs["cancelled "+failing] != 1 || sh.status(t, failing) != "cancelled" {
				t.Fatalf("%s: %d committed OnCancelled runs, shop row %s", failing, runs["cancelled "+failing], sh.status(t, failing))
			}
			storetest.AuditOK(t, sh.store)
		})
	}
}

// latest is the later of a and b.
func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
