package redis_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/internal/redistest"
	"github.com/lapsehq/lapse/internal/servicetest"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/storetest"
	"github.com/lapsehq/lapse/timer/redis"
)

// The Sentinel tests start their own Redis processes (internal/redistest):
// they need redis-server on the machine, and no server of the environment.

// sentinelClient returns a client of setup s through its redis-sentinel://
// URL, as lapse serve opens it; closed when t ends.
func sentinelClient(t *testing.T, s *redistest.Sentinel) goredis.UniversalClient {
	t.Helper()
	rdb, err := redis.ParseURL(s.URL + "&pool_size=64")
	if err != nil {
		t.Fatalf("%s: %v", s.URL, err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("%s: %v", s.URL, err)
	}
	return rdb
}

// The shared suite through a master and a replica that Sentinel watches: the
// failover client carries the scripts, pipelines and group commits as a
// standalone client does. Not parallel, as TestConformance, for its
// timing-sensitive subtests.
func TestSentinelConformance(t *testing.T) {
	exercise(t, sentinelClient(t, redistest.StartSentinel(t)), 20_000)
}

// Seed markers that say "ok" for another Redis process — what a failover to
// a replica, or a restart, leaves — are a loss: the shards are seeded again,
// and the markers then name the process that holds them.
func TestSeedMarkersOfAnotherRedisProcessAreReseeded(t *testing.T) {
	t.Parallel()
	forEachServer(t, func(t *testing.T, rdb goredis.UniversalClient) {
		prefix := newPrefix(t, rdb)
		logs := &logBuffer{}
		st := &fakeStore{pending: map[string]time.Time{}}
		s := mustNew(t, rdb, redis.Config{Prefix: prefix, Shards: 4, LossCheck: 50 * time.Millisecond,
			Logger: slog.New(slog.NewTextHandler(logs, nil))})
		s.SetSeed(st.seed(s))
		stop := run(t, s, st.cancel)
		waitFor(t, "the first seed", 5*time.Second, func() bool { return logs.count("seeded from the store") == 1 })
		stop()
		ctx := context.Background()
		markers, values := make([]string, 4), make([]string, 4)
		for i := range markers {
			markers[i] = fmt.Sprintf("%s:{s%02d}:seeded", prefix, i)
			v, err := rdb.Get(ctx, markers[i]).Result()
			if err != nil || len(v) != len("ok:")+40 || v[:3] != "ok:" {
				t.Fatalf("marker %s = %q (%v), want ok:<the 40-character run id>", markers[i], v, err)
			}
			values[i] = v
		}
		// The marker of shard 2 now names a process that is gone; a timer
		// of the store is missing from Redis, as one the replica missed.
		// That of shard 1 is a lapse's before run ids: "ok" alone.
		if err := rdb.Set(ctx, markers[2], "ok:"+fmt.Sprintf("%040d", 7), 0).Err(); err != nil {
			t.Fatal(err)
		}
		if err := rdb.Set(ctx, markers[1], "ok", 0).Err(); err != nil {
			t.Fatal(err)
		}
		st.add("missed-by-the-replica", time.Now())
		run(t, s, st.cancel)
		waitFor(t, "the seed again, and the missed timer delivered", 5*time.Second, func() bool {
			return logs.count("seeded from the store") == 2 && st.left() == 0
		})
		if n := logs.count("seeded on another Redis process"); n != 1 {
			t.Errorf("the other process logged %d times, want once:\n%s", n, logs.b.String())
		}
		for _, i := range []int{1, 2} {
			if v, err := rdb.Get(ctx, markers[i]).Result(); err != nil || v != values[i] {
				t.Errorf("marker of shard %d = %q (%v) after the seed, want %q: the run id of its Redis", i, v, err, values[i])
			}
		}
		if n := logs.count("seed markers missing"); n != 1 {
			t.Errorf("markers reported missing %d times, want once (the first start): an \"ok\" marker is not missing", n)
		}
	})
}

// The failover for real: lapse on Redis timers through Sentinel, orders
// created under load (timeouts of 1 to 3 s, a third paid), the replica cut
// off from the master and the master SIGKILLed mid-run, so that the
// promoted replica has lost the timers of the orders created in between.
// The fallback sweep is off: lapse must notice the failover (the seed
// markers name the old master's run id) and reseed from the store. Every
// order ends PAID or CANCELLED, none cancelled before its deadline, the
// audit passes; the worst lateness is logged.
func TestSentinelFailoverLosesNoOrder(t *testing.T) {
	t.Parallel()
	setup := redistest.StartSentinel(t)
	rdb := sentinelClient(t, setup)
	ctx := context.Background()
	st := servicetest.SQLite(t)
	storetest.Stock(t, st, 1_000_000, "sku")
	prefix := newPrefix(t, rdb)
	logs := &logBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, nil))
	timers := mustNew(t, rdb, redis.Config{Prefix: prefix, Lease: 2 * time.Second, LossCheck: 200 * time.Millisecond, Logger: logger})
	svc, err := lapse.New(lapse.Config{Store: st, Scheduler: timers, SweepInterval: -1, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	servicetest.Run(t, svc)
	waitFor(t, "the first seed", 10*time.Second, func() bool { return logs.count("seeded from the store") >= 1 })

	// The load: 4 clients create orders back to back until stop, each
	// with a timeout of 1 to 3 s; every third is paid halfway through
	// its window.
	const cut, kill, loadFor = 2 * time.Second, 2500 * time.Millisecond, 7 * time.Second
	var (
		created  atomic.Int64
		slowest  atomic.Int64 // the slowest CreateOrder, ns: it waits for the timer's write
		paidMu   sync.Mutex
		paid     = map[string]bool{} // order → its success notification was applied
		payments sync.WaitGroup
	)
	start := time.Now()
	stopLoad := start.Add(loadFor)
	var load sync.WaitGroup
	for c := range 4 {
		load.Go(func() {
			for i := 0; time.Now().Before(stopLoad); i++ {
				id := fmt.Sprintf("o-%d-%04d", c, i)
				timeout := time.Second + time.Duration((i*7919+c*104729)%2000)*time.Millisecond
				began := time.Now()
				if _, err := svc.CreateOrder(ctx, lapse.CreateOrderRequest{
					ID: id, Items: []order.Item{{SKU: "sku", Qty: 1}}, AmountCents: 100, Timeout: timeout,
				}); err != nil {
					t.Errorf("create %s: %v", id, err)
					return
				}
				for took := int64(time.Since(began)); ; {
					if old := slowest.Load(); took <= old || slowest.CompareAndSwap(old, took) {
						break
					}
				}
				created.Add(1)
				if i%3 == 0 {
					payments.Go(func() {
						time.Sleep(timeout / 2) // the buyer pays halfway through the window
						res, err := svc.Notify(ctx, lapse.Notification{OrderID: id, PaymentID: id + "-pay", Status: lapse.PaymentSucceeded, AmountCents: 100})
						if err != nil {
							t.Errorf("pay %s: %v", id, err)
							return
						}
						if res.Order.Status == order.Paid {
							paidMu.Lock()
							paid[id] = true
							paidMu.Unlock()
						}
					})
				}
			}
		})
	}

	time.Sleep(time.Until(start.Add(cut)))
	setup.CutReplication(t)
	cutAt := time.Now()
	before := created.Load()
	// Kill at the planned time, once a few orders have their timers on
	// the master alone (a slow machine may create none in a moment).
	waitFor(t, "orders created after the replication cut", 10*time.Second, func() bool {
		return created.Load()-before >= 5 && !time.Now().Before(start.Add(kill))
	})
	setup.KillMaster(t)
	killedAt := time.Now()
	lostWindow := created.Load() - before
	failover := setup.WaitFailover(t, 20*time.Second)
	t.Logf("master SIGKILLed %v after the replication cut (%d orders created in between, their timers on the old master only); sentinels failed over %v after the kill",
		killedAt.Sub(cutAt).Round(time.Millisecond), lostWindow, failover.Round(time.Millisecond))
	load.Wait()
	payments.Wait()
	if t.Failed() {
		return
	}
	t.Logf("%d orders created in %v; the slowest create took %v (its timer's write waits out the failover)",
		created.Load(), loadFor, time.Duration(slowest.Load()).Round(time.Millisecond))
	if lostWindow == 0 {
		t.Fatal("no order was created between the replication cut and the kill: the test proves nothing")
	}

	waitFor(t, "every order settled", 30*time.Second, func() bool {
		for _, s := range []order.Status{order.Pending, order.Paying} {
			rep, err := svc.List(ctx, store.ListOrdersParams{Status: s, Limit: 1})
			if err != nil || len(rep.Orders) > 0 {
				return false
			}
		}
		return true
	})
	var (
		lateness          []time.Duration
		lostLate          time.Duration // the worst of the orders created between the cut and the kill
		nPaid, nCancelled int
		after             store.ListOrdersParams
	)
	for {
		after.Limit = 500
		page, err := svc.List(ctx, after)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range page.Orders {
			paidMu.Lock()
			wasPaid := paid[o.ID]
			paidMu.Unlock()
			switch o.Status {
			case order.Paid:
				nPaid++
			case order.Cancelled:
				nCancelled++
				if wasPaid {
					t.Errorf("%s: cancelled after its payment was applied", o.ID)
				}
				if o.CancelledAt.Before(o.CancelAfter) {
					t.Errorf("%s: cancelled %v before its deadline", o.ID, o.CancelAfter.Sub(o.CancelledAt))
				}
				lateness = append(lateness, o.CancelledAt.Sub(o.CancelAfter))
				if o.CreatedAt.After(cutAt) && o.CreatedAt.Before(killedAt) {
					lostLate = max(lostLate, o.CancelledAt.Sub(o.CancelAfter))
				}
			default:
				t.Errorf("%s: %s, want PAID or CANCELLED", o.ID, o.Status)
			}
		}
		if page.NextCursor == "" {
			break
		}
		after.Cursor = page.NextCursor
	}
	if got := int64(nPaid + nCancelled); got != created.Load() {
		t.Errorf("%d orders listed, %d created", got, created.Load())
	}
	slices.Sort(lateness)
	if len(lateness) == 0 {
		t.Fatal("no order was cancelled")
	}
	worst := lateness[len(lateness)-1]
	t.Logf("%d paid, %d cancelled; lateness through the failover: p50 %v, p99 %v, worst %v (worst of the orders whose timers the failover lost: %v)",
		nPaid, nCancelled, lateness[len(lateness)/2].Round(time.Millisecond),
		lateness[len(lateness)*99/100].Round(time.Millisecond), worst.Round(time.Millisecond), lostLate.Round(time.Millisecond))
	// Bounded by the failover (DownAfter and the election) plus a loss
	// check and the reseed; far more means a timer came back by luck.
	if limit := redistest.DownAfter + 14*time.Second; worst > limit {
		t.Errorf("worst lateness %v, want under %v", worst, limit)
	}
	if logs.count("seeded on another Redis process") == 0 {
		t.Errorf("the failover was not noticed (no reseed for the new master):\n%s", logs.b.String())
	}
	storetest.AuditOK(t, st)
}

// A Redis that refuses INFO (an ACL without it, a proxy, a managed service
// that renames it) has no run id to read: the markers say "ok:", a seed is
// not repeated for it, the loss check still notices missing markers, and
// the refusal is logged once.
func TestRedisThatRefusesInfoIsSeededOnce(t *testing.T) {
	t.Parallel()
	admin := connect(t, "LAPSE_TEST_REDIS", "redis://127.0.0.1:6379/0").(*goredis.Client)
	ctx := context.Background()
	user := "lapsetest-noinfo-" + newPrefix(t, admin)[len("lapsetest-"):]
	if err := admin.Do(ctx, "ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "+@all", "-info").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Do(context.Background(), "ACL", "DELUSER", user) })
	o := *admin.Options()
	o.Username, o.Password = user, "pw"
	rdb := goredis.NewClient(&o)
	t.Cleanup(func() { _ = rdb.Close() })
	if err := rdb.Info(ctx, "server").Err(); err == nil {
		t.Fatal("INFO allowed: the ACL did not take")
	}

	prefix := newPrefix(t, admin)
	logs := &logBuffer{}
	st := &fakeStore{pending: map[string]time.Time{}}
	s := mustNew(t, rdb, redis.Config{Prefix: prefix, Shards: 2, LossCheck: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	s.SetSeed(st.seed(s))
	run(t, s, st.cancel)
	waitFor(t, "the first seed", 5*time.Second, func() bool { return logs.count("seeded from the store") == 1 })
	checks := time.Now().Add(20 * 20 * time.Millisecond) // twenty loss checks
	waitFor(t, "twenty loss checks", time.Second, func() bool { return time.Now().After(checks) })
	if n := logs.count("seeded from the store"); n != 1 {
		t.Errorf("seeded %d times, want once: a Redis without run id must not look like another process each check", n)
	}
	if v, err := admin.Get(ctx, prefix+":{s00}:seeded").Result(); err != nil || v != "ok:" {
		t.Errorf("marker %q (%v), want \"ok:\"", v, err)
	}
	if n := logs.count("refuses INFO server"); n != 1 {
		t.Errorf("the refusal logged %d times, want once:\n%s", n, logs.b.String())
	}
	purge(t, admin, prefix)
	waitFor(t, "the loss noticed and seeded again", 5*time.Second, func() bool { return logs.count("seeded from the store") == 2 })
}
