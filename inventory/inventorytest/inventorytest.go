// Package inventorytest is the conformance suite of the inventory
// transports: every way of carrying a command from lapse to an inventory
// and its answer back (HTTP, RabbitMQ) must pass Exercise, against the
// reference inventory on a real store.
//
// A transport under test is given as a Transport: a function that serves
// an inventory.Applier over the transport and returns a Client that sends
// to it. For HTTP:
//
//	inventorytest.Exercise(t, func(t *testing.T, a inventory.Applier) inventory.Client {
//		srv := httptest.NewServer(reference.CommandHandler(a, nil))
//		t.Cleanup(srv.Close)
//		c := inventory.NewHTTPClient(srv.URL)
//		t.Cleanup(func() { c.Close() })
//		return c
//	})
//
// The suite switches the applier's faults (the reference's Faulty) between
// cases, so the transport must hand every command to a — no caching of its
// own — and map what a answers:
//
//   - an Answer: the same Answer to the sender (its Result and Reason);
//   - inventory.ErrWithhold: no answer at all — Send returns an error, by
//     the end of its ctx at the latest (the suite gives it 3 s);
//   - any other error: no answer either (HTTP 5xx, AMQP a requeue) — Send
//     returns an error, and the command is not applied.
//
// Exercise runs on SQLite in a temporary directory, and on PostgreSQL too
// when LAPSE_TEST_POSTGRES names a server (in a schema of its own, dropped
// afterwards). Each store gets one Transport call; the cases run one after
// another on it, each with SKUs and reservations of its own.
package inventorytest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lapsehq/lapse/inventory"
	"github.com/lapsehq/lapse/inventory/reference"
)

// Transport serves a over the transport under test and returns a Client
// that sends to it. It registers the cleanup of what it starts with
// t.Cleanup, and fails t if it cannot start.
type Transport func(t *testing.T, a inventory.Applier) inventory.Client

// Exercise runs the conformance suite over tr.
func Exercise(t *testing.T, tr Transport) {
	t.Run("sqlite", func(t *testing.T) { exercise(t, tr, SQLite(t)) })
	t.Run("postgres", func(t *testing.T) { exercise(t, tr, Postgres(t)) })
}

// SQLite returns a migrated reference store in a file of t's temporary
// directory, closed when t ends.
func SQLite(t testing.TB) *reference.Store {
	t.Helper()
	return open(t, "sqlite://"+filepath.Join(t.TempDir(), "inventory.db"))
}

// Postgres returns a migrated reference store in a fresh schema of
// LAPSE_TEST_POSTGRES, dropped when t ends; it skips t when the variable
// is not set.
func Postgres(t testing.TB) *reference.Store {
	t.Helper()
	return open(t, PostgresURL(t))
}

// PostgresURL returns LAPSE_TEST_POSTGRES pointed (search_path) at a fresh
// schema, dropped when t ends; it skips t when the variable is not set.
func PostgresURL(t testing.TB) string {
	t.Helper()
	base := os.Getenv("LAPSE_TEST_POSTGRES")
	if base == "" {
		t.Skip("set LAPSE_TEST_POSTGRES=postgres://… to run")
	}
	schema := "inv_t_" + randomHex(6)
	admin := func(sql string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, sql)
		return err
	}
	ident := pgx.Identifier{schema}.Sanitize()
	if err := admin("CREATE SCHEMA " + ident); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	t.Cleanup(func() {
		if err := admin("DROP SCHEMA " + ident + " CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("LAPSE_TEST_POSTGRES: %v", err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

func open(t testing.TB, storeURL string) *reference.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := reference.Open(ctx, storeURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// suite is one store's run.
type suite struct {
	st     *reference.Store
	faulty *reference.Faulty
	client inventory.Client
	prefix string // of the case's SKUs and ids
}

func exercise(t *testing.T, tr Transport, st *reference.Store) {
	s := &suite{st: st, faulty: reference.NewFaulty(st, reference.Faults{})}
	s.client = tr(t, s.faulty)
	for _, c := range []struct {
		name string
		run  func(t *testing.T, s *suite)
	}{
		{"reserve and release, each twice", reserveRelease},
		{"reserve and confirm, each twice", reserveConfirm},
		{"short stock is rejected and moves nothing", shortStock},
		{"a release before its reserve refuses the reserve", releaseFirst},
		{"refusals after a release or a confirm", refusals},
		{"a withheld answer, then a resend", withheld},
		{"a failing inventory applies nothing", failing},
		{"the reject switch", rejectSwitch},
		{"concurrent duplicates are applied once", concurrent},
	} {
		s.prefix = randomHex(4) + "-"
		s.faulty.SetFaults(reference.Faults{})
		t.Run(c.name, func(t *testing.T) { c.run(t, s) })
	}
}

// id is a name unique to the case.
func (s *suite) id(name string) string { return s.prefix + name }

// stock creates a SKU of the case with n available units and returns its name.
func (s *suite) stock(t *testing.T, name string, n int64) string {
	t.Helper()
	sku := s.id(name)
	if _, err := s.st.SetAvailable(context.Background(), sku, n); err != nil {
		t.Fatal(err)
	}
	return sku
}

// send sends c and fails t on an error.
func (s *suite) send(t *testing.T, c inventory.Command) inventory.Answer {
	t.Helper()
	ans, err := s.trySend(c)
	if err != nil {
		t.Fatalf("%s %s (task %s): %v", c.Action, c.ReservationID, c.TaskID, err)
	}
	if ans.TaskID != c.TaskID {
		t.Errorf("%s %s: answer for task %q, want %q", c.Action, c.ReservationID, ans.TaskID, c.TaskID)
	}
	return ans
}

func (s *suite) trySend(c inventory.Command) (inventory.Answer, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return s.client.Send(ctx, c)
}

// want fails t unless ans has result and reason.
func want(t *testing.T, what string, ans inventory.Answer, result inventory.Result, reason string) {
	t.Helper()
	if ans.Result != result || ans.Reason != reason {
		t.Errorf("%s: answered %s %q, want %s %q", what, ans.Result, ans.Reason, result, reason)
	}
}

// counters fails t unless sku holds available, reserved and sold units.
func (s *suite) counters(t *testing.T, sku string, available, reserved, sold int64) {
	t.Helper()
	k, err := s.st.SKU(context.Background(), sku)
	if err != nil {
		t.Fatal(err)
	}
	if k.Available != available || k.Reserved != reserved || k.Sold != sold {
		t.Errorf("%s: available %d, reserved %d, sold %d; want %d, %d, %d", sku, k.Available, k.Reserved, k.Sold, available, reserved, sold)
	}
}

// ledger fails t unless the reservation's ledger holds exactly actions, in order.
func (s *suite) ledger(t *testing.T, id string, actions ...inventory.Action) {
	t.Helper()
	r, err := s.st.Reservation(context.Background(), id)
	if errors.Is(err, reference.ErrNotFound) && len(actions) == 0 {
		return
	} else if err != nil {
		t.Fatalf("reservation %s: %v", id, err)
	}
	var got []inventory.Action
	for _, l := range r.Ledger {
		got = append(got, l.Action)
	}
	if len(got) != len(actions) {
		t.Fatalf("reservation %s: ledger %v, want %v", id, got, actions)
	}
	for i := range got {
		if got[i] != actions[i] {
			t.Fatalf("reservation %s: ledger %v, want %v", id, got, actions)
		}
	}
}

func (s *suite) cmd(action inventory.Action, reservation string, items ...inventory.Item) inventory.Command {
	return inventory.Command{
		TaskID: s.id(string(action) + "-" + reservation + "-" + randomHex(3)), Action: action,
		ReservationID: reservation, OrderID: "order-" + reservation, Items: items,
	}
}

func reserveRelease(t *testing.T, s *suite) {
	tee, mug := s.stock(t, "tee", 5), s.stock(t, "mug", 1)
	id := s.id("r1")
	reserve := s.cmd(inventory.Reserve, id, inventory.Item{SKU: tee, Qty: 2}, inventory.Item{SKU: mug, Qty: 1})
	want(t, "reserve", s.send(t, reserve), inventory.Success, "")
	want(t, "reserve again", s.send(t, reserve), inventory.AlreadyDone, "")
	s.counters(t, tee, 3, 2, 0)
	s.counters(t, mug, 0, 1, 0)
	release := s.cmd(inventory.Release, id, reserve.Items...)
	want(t, "release", s.send(t, release), inventory.Success, "")
	want(t, "release again", s.send(t, release), inventory.AlreadyDone, "")
	// A second release task (another task id) of the same reservation is
	// a duplicate too: the ledger is keyed by reservation and action.
	want(t, "release by another task", s.send(t, s.cmd(inventory.Release, id)), inventory.AlreadyDone, "")
	s.counters(t, tee, 5, 0, 0)
	s.counters(t, mug, 1, 0, 0)
	s.ledger(t, id, inventory.Reserve, inventory.Release)
}

func reserveConfirm(t *testing.T, s *suite) {
	tee := s.stock(t, "tee", 5)
	id := s.id("c1")
	reserve := s.cmd(inventory.Reserve, id, inventory.Item{SKU: tee, Qty: 3})
	want(t, "reserve", s.send(t, reserve), inventory.Success, "")
	confirm := s.cmd(inventory.Confirm, id, reserve.Items...)
	want(t, "confirm", s.send(t, confirm), inventory.Success, "")
	want(t, "confirm again", s.send(t, confirm), inventory.AlreadyDone, "")
	want(t, "reserve after the confirm", s.send(t, reserve), inventory.AlreadyDone, "")
	s.counters(t, tee, 2, 0, 3)
	s.ledger(t, id, inventory.Reserve, inventory.Confirm)
}

func shortStock(t *testing.T, s *suite) {
	tee, mug := s.stock(t, "tee", 5), s.stock(t, "mug", 1)
	id := s.id("s1")
	ans := s.send(t, s.cmd(inventory.Reserve, id, inventory.Item{SKU: tee, Qty: 2}, inventory.Item{SKU: mug, Qty: 2}))
	want(t, "reserve beyond the stock", ans, inventory.Rejected, inventory.ReasonInsufficientStock)
	unknown := s.send(t, s.cmd(inventory.Reserve, s.id("s2"), inventory.Item{SKU: s.id("no-such-sku"), Qty: 1}))
	want(t, "reserve of an unknown SKU", unknown, inventory.Rejected, inventory.ReasonInsufficientStock)
	s.counters(t, tee, 5, 0, 0)
	s.counters(t, mug, 1, 0, 0)
	s.ledger(t, id)
	// Refused for stock, the reservation may be tried again with more.
	if _, err := s.st.SetAvailable(context.Background(), mug, 2); err != nil {
		t.Fatal(err)
	}
	want(t, "reserve once restocked", s.send(t, s.cmd(inventory.Reserve, id, inventory.Item{SKU: tee, Qty: 2}, inventory.Item{SKU: mug, Qty: 2})), inventory.Success, "")
	s.counters(t, mug, 0, 2, 0)
}

func releaseFirst(t *testing.T, s *suite) {
	tee := s.stock(t, "tee", 5)
	id := s.id("t1")
	want(t, "release of an unknown reservation", s.send(t, s.cmd(inventory.Release, id, inventory.Item{SKU: tee, Qty: 1})), inventory.AlreadyDone, "")
	want(t, "the late reserve", s.send(t, s.cmd(inventory.Reserve, id, inventory.Item{SKU: tee, Qty: 1})), inventory.Rejected, reference.ReasonReleased)
	want(t, "a confirm", s.send(t, s.cmd(inventory.Confirm, id)), inventory.Rejected, reference.ReasonReleased)
	s.counters(t, tee, 5, 0, 0)
	s.ledger(t, id, inventory.Release)
}

func refusals(t *testing.T, s *suite) {
	tee := s.stock(t, "tee", 5)
	released, confirmed := s.id("f1"), s.id("f2")
	want(t, "reserve", s.send(t, s.cmd(inventory.Reserve, released, inventory.Item{SKU: tee, Qty: 1})), inventory.Success, "")
	want(t, "release", s.send(t, s.cmd(inventory.Release, released)), inventory.Success, "")
	want(t, "confirm after the release", s.send(t, s.cmd(inventory.Confirm, released)), inventory.Rejected, reference.ReasonReleased)
	want(t, "reserve after the release", s.send(t, s.cmd(inventory.Reserve, released, inventory.Item{SKU: tee, Qty: 1})), inventory.Rejected, reference.ReasonReleased)
	want(t, "reserve", s.send(t, s.cmd(inventory.Reserve, confirmed, inventory.Item{SKU: tee, Qty: 1})), inventory.Success, "")
	want(t, "confirm", s.send(t, s.cmd(inventory.Confirm, confirmed)), inventory.Success, "")
	want(t, "release after the confirm", s.send(t, s.cmd(inventory.Release, confirmed)), inventory.Rejected, reference.ReasonConfirmed)
	want(t, "confirm of an unknown reservation", s.send(t, s.cmd(inventory.Confirm, s.id("f3"))), inventory.Rejected, reference.ReasonUnknownReservation)
	s.counters(t, tee, 4, 0, 1)
	s.ledger(t, released, inventory.Reserve, inventory.Release)
	s.ledger(t, confirmed, inventory.Reserve, inventory.Confirm)
	s.ledger(t, s.id("f3"))
}

func withheld(t *testing.T, s *suite) {
	tee := s.stock(t, "tee", 5)
	id := s.id("w1")
	reserve := s.cmd(inventory.Reserve, id, inventory.Item{SKU: tee, Qty: 2})
	s.faulty.SetFaults(reference.Faults{DropAnswers: true})
	if ans, err := s.trySend(reserve); err == nil {
		t.Fatalf("reserve with its answer withheld: answered %+v, want an error", ans)
	}
	s.counters(t, tee, 3, 2, 0) // applied all the same
	s.faulty.SetFaults(reference.Faults{})
	want(t, "reserve resent", s.send(t, reserve), inventory.AlreadyDone, "")
	s.counters(t, tee, 3, 2, 0)

	release := s.cmd(inventory.Release, id)
	s.faulty.SetFaults(reference.Faults{DropAnswers: true})
	if ans, err := s.trySend(release); err == nil {
		t.Fatalf("release with its answer withheld: answered %+v, want an error", ans)
	}
	s.faulty.SetFaults(reference.Faults{})
	want(t, "release resent", s.send(t, release), inventory.AlreadyDone, "")
	s.counters(t, tee, 5, 0, 0)
	s.ledger(t, id, inventory.Reserve, inventory.Release)
}

func failing(t *testing.T, s *suite) {
	tee := s.stock(t, "tee", 5)
	id := s.id("x1")
	reserve := s.cmd(inventory.Reserve, id, inventory.Item{SKU: tee, Qty: 2})
	s.faulty.SetFaults(reference.Faults{Fail: true})
	if ans, err := s.trySend(reserve); err == nil {
		t.Fatalf("reserve while the inventory fails: answered %+v, want an error", ans)
	}
	s.counters(t, tee, 5, 0, 0)
	s.ledger(t, id)
	s.faulty.SetFaults(reference.Faults{})
	want(t, "reserve resent", s.send(t, reserve), inventory.Success, "")
	s.counters(t, tee, 3, 2, 0)
}

func rejectSwitch(t *testing.T, s *suite) {
	tee := s.stock(t, "tee", 5)
	s.faulty.SetFaults(reference.Faults{Reject: true})
	ans := s.send(t, s.cmd(inventory.Reserve, s.id("j1"), inventory.Item{SKU: tee, Qty: 1}))
	want(t, "reserve while rejecting", ans, inventory.Rejected, reference.ReasonFault)
	s.counters(t, tee, 5, 0, 0)
}

func concurrent(t *testing.T, s *suite) {
	tee := s.stock(t, "tee", 10)
	const n = 6
	run := func(c inventory.Command) {
		t.Helper()
		var wg sync.WaitGroup
		answers := make([]inventory.Answer, n)
		errs := make([]error, n)
		for i := range n {
			wg.Go(func() { answers[i], errs[i] = s.trySend(c) })
		}
		wg.Wait()
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("%s, one of %d at once: %v", c.Action, n, errs[i])
			}
			if !answers[i].Done() {
				t.Errorf("%s, one of %d at once: answered %s %q, want it done", c.Action, n, answers[i].Result, answers[i].Reason)
			}
		}
	}
	for i := range 2 {
		id := s.id("k" + string(rune('0'+i)))
		run(s.cmd(inventory.Reserve, id, inventory.Item{SKU: tee, Qty: 3}))
		if i == 0 {
			run(s.cmd(inventory.Release, id))
		} else {
			run(s.cmd(inventory.Confirm, id))
		}
	}
	s.counters(t, tee, 7, 0, 3)
	s.ledger(t, s.id("k0"), inventory.Reserve, inventory.Release)
	s.ledger(t, s.id("k1"), inventory.Reserve, inventory.Confirm)
}
