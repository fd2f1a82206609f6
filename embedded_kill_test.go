package lapse_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store/storetest"
)

// The environment of a test binary run again as a process of its own
// (TestEmbeddedChildProcess): lapse embedded in a shop's service.
const (
	childDriverEnv = "LAPSE_EMBEDDED_CHILD_DRIVER" // postgres or mysql; unset in a normal run
	childDSNEnv    = "LAPSE_EMBEDDED_CHILD_DSN"
	childHoldEnv   = "LAPSE_EMBEDDED_CHILD_HOLD" // an order whose OnCancelled hook stops in its transaction
)

// TestEmbeddedChildProcess is not a test: it is the shop's service that
// TestEmbeddedCancelHookOnceUnderKill runs as a process of its own (the
// test binary re-executed, as os/exec's tests do) and kills. It runs a
// lapse.Service on the shop's pool with an OnCancelled hook that moves the
// shop's row and counts its run in hook_runs. The hook of the order named
// by LAPSE_EMBEDDED_CHILD_HOLD, having run its statements, says "holding"
// on stdout and waits, its batch's transaction open, for the kill.
func TestEmbeddedChildProcess(t *testing.T) {
	driver := os.Getenv(childDriverEnv)
	if driver == "" {
		return // a normal run of the tests: nothing to do
	}
	hold := os.Getenv(childHoldEnv)
	cancelled := guardedHook(shopCancelled, "cancelled")
	db, err := connectEmbeddedDB(t, driver, os.Getenv(childDSNEnv), func(ctx context.Context, exec func(string, ...any) error, o order.Order) error {
		if err := cancelled(ctx, exec, o); err != nil {
			return err
		}
		if o.ID == hold {
			fmt.Printf("holding %s\n", o.ID)
			select {
			case <-ctx.Done():
			case <-time.After(time.Minute):
			}
			return errors.New("held until killed")
		}
		return nil
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := lapse.New(lapse.Config{Store: db.store, BatchSize: 200,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("running")
	if err := svc.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// child is a running TestEmbeddedChildProcess.
type child struct {
	cmd     *exec.Cmd
	holding chan string // the order whose hook holds its transaction open
	stderr  *syncBuffer
	done    chan struct{}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// startChild runs the shop's service in a process of its own on db; hold
// names the order whose hook waits for the kill ("" for none). The process
// is killed when the test ends, if it still runs.
func startChild(t *testing.T, db embeddedDB, hold string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestEmbeddedChildProcess$", "-test.count=1", "-test.timeout=5m")
	cmd.Env = append(os.Environ(), childDriverEnv+"="+db.driver, childDSNEnv+"="+db.dsn, childHoldEnv+"="+hold)
	c := &child{cmd: cmd, holding: make(chan string, 1), stderr: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stderr = c.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(c.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if id, ok := strings.CutPrefix(sc.Text(), "holding "); ok {
				select {
				case c.holding <- id:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	t.Cleanup(func() { c.kill(t) })
	return c
}

// kill ends the process with SIGKILL: no deferred function, no rollback of
// its own; the database sees its connections drop.
func (c *child) kill(t *testing.T) {
	t.Helper()
	if c.cmd.ProcessState != nil {
		return
	}
	if err := c.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("kill the child: %v", err)
	}
	<-c.done // its stdout closed
	_ = c.cmd.Wait()
	if t.Failed() {
		t.Logf("the child's stderr:\n%s", c.stderr.String())
	}
}

// OnCancelled runs exactly once per committed cancel — counted in the
// shop's own table, in the shop's own transaction with lapse's — when the
// process is killed with SIGKILL in the middle of a batch of timeout
// cancels: the batch's transaction, hooks run and uncommitted, is lost with
// the process; the next process cancels those orders, and each hook's run
// commits once. Every shop row ends cancelled and the audit holds.
func TestEmbeddedCancelHookOnceUnderKill(t *testing.T) {
	t.Parallel()
	for _, driver := range []string{"postgres", "mysql"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			db := newEmbeddedDB(t, driver, nil, nil) // this process makes no transition: no hook
			ctx := context.Background()
			svc := newService(t, lapse.Config{Store: db.store}) // never run: CreateOrderTx only
			const n = 400
			storetest.Stock(t, db.store, n, "tee")
			for i := range n {
				id := fmt.Sprintf("o-%03d", i)
				tx, err := db.begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if err := tx.exec(ctx, "INSERT INTO orders_of_the_shop (id, status) VALUES (?, 'pending')", id); err != nil {
					t.Fatal(err)
				}
				if _, err := svc.CreateOrderTx(ctx, tx.tx, lapse.CreateOrderRequest{ID: id, Items: []order.Item{{SKU: "tee", Qty: 1}},
					AmountCents: 100, Timeout: time.Millisecond}); err != nil {
					t.Fatal(err)
				}
				if err := tx.commit(ctx); err != nil {
					t.Fatal(err)
				}
			}
			cancelled := func() int {
				t.Helper()
				c, err := countWhere(ctx, db, "SELECT count(*) FROM lapse_orders WHERE status = 'CANCELLED'")
				if err != nil {
					t.Fatal(err)
				}
				return c
			}

			// Every order is due: the first process takes them in batches
			// of 200 and is killed while o-250's batch holds its
			// transaction open, its hooks run.
			const held = "o-250"
			first := startChild(t, db, held)
			select {
			case id := <-first.holding:
				if id != held {
					t.Fatalf("holding %s", id)
				}
			case <-first.done:
				t.Fatalf("the first process ended before its hook held:\n%s", first.stderr.String())
			case <-time.After(2 * time.Minute):
				t.Fatalf("no hook held within 2m:\n%s", first.stderr.String())
			}
			first.kill(t)
			atKill := cancelled()
			runsAtKill := hookRuns(t, db)
			if atKill >= n || runsAtKill["cancelled "+held] != 0 {
				t.Fatalf("at the kill: %d of %d cancelled, %d committed runs for %s; want the held batch uncommitted",
					atKill, n, runsAtKill["cancelled "+held], held)
			}
			t.Logf("killed with %d of %d orders cancelled (%d committed hook runs)", atKill, n, len(runsAtKill))

			second := startChild(t, db, "")
			waitFor(t, 2*time.Minute, "every order cancelled by the second process", func() bool {
				select {
				case <-second.done:
					t.Fatalf("the second process ended:\n%s", second.stderr.String())
				default:
				}
				return cancelled() == n
			})
			second.kill(t)

			runs, rows := hookRuns(t, db), shopStatuses(t, db)
			for i := range n {
				id := fmt.Sprintf("o-%03d", i)
				if runs["cancelled "+id] != 1 || rows[id] != "cancelled" {
					t.Errorf("%s: %d committed OnCancelled runs, shop row %q; want 1 and cancelled", id, runs["cancelled "+id], rows[id])
				}
			}
			if len(runs) != n {
				t.Errorf("%d distinct committed hook runs, want %d: %v", len(runs), n, runs)
			}
			storetest.AuditOK(t, db.store)
		})
	}
}
