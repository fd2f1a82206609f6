package reconcile

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/lapsehq/lapse/inventory"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
)

// Stock reconciliation: lapse's orders whose stock a remote inventory holds
// (a reservation_id) against the inventory's ledger (docs/inventory.md).
// For each such order, the ledger must hold
//
//	CANCELLED       exactly one release of its reservation, no confirm
//	PAID            exactly one confirm, no release
//	PENDING, PAYING neither (lapse still holds the order open)
//
// and every stock task of the order that lapse has DONE must have its
// action in the ledger. The kinds below name what is found otherwise.
const (
	// KindNeverReleased: lapse cancelled the order; the ledger has no
	// release of its reservation. The stock stays held for nobody. The
	// detail says where the release task stands: PENDING (still being
	// sent), DEAD (waiting for `lapse tasks retry`), DONE (then also
	// done_but_not_applied), or missing.
	KindNeverReleased Kind = "never_released"
	// KindNeverConfirmed: lapse has the order PAID; the ledger has no
	// confirm. The detail says where the confirm task stands.
	KindNeverConfirmed Kind = "never_confirmed"
	// KindReleasedTwice: the ledger has more than one release of the
	// reservation (its unique key should make that impossible).
	KindReleasedTwice Kind = "released_twice"
	// KindAppliedTwice: the ledger has a reserve or a confirm of the
	// reservation more than once (as impossible as released_twice).
	KindAppliedTwice Kind = "applied_twice"
	// KindConfirmedAndReleased: the ledger has both a confirm and a
	// release of the reservation: stock sold and given back.
	KindConfirmedAndReleased Kind = "confirmed_and_released"
	// KindReleasedButPaid: lapse has the order PAID; the ledger has a
	// release (and no confirm): goods paid for are back on sale.
	KindReleasedButPaid Kind = "released_but_paid"
	// KindConfirmedButCancelled: lapse cancelled the order; the ledger has
	// a confirm (and no release): stock sold for an order that does not
	// exist any more.
	KindConfirmedButCancelled Kind = "confirmed_but_cancelled"
	// KindAppliedWhileOpen: lapse still has the order PENDING or PAYING;
	// the ledger has a release or a confirm of its reservation.
	KindAppliedWhileOpen Kind = "applied_while_open"
	// KindDoneButNotApplied: a stock task of the order is DONE in lapse
	// (the inventory answered it applied) but the ledger does not hold its
	// action for the reservation.
	KindDoneButNotApplied Kind = "done_but_not_applied"
	// KindAppliedElsewhere: the ledger has a release or confirm of the
	// order's reservation that lapse's own task of that action for the
	// order did not send (its task id is another's, or lapse has no such
	// task): someone else moved the stock, and lapse's task — if it sent
	// one — was answered ALREADY_DONE.
	KindAppliedElsewhere Kind = "applied_elsewhere"
	// KindItemsDiffer (StockParams.CheckItems): the inventory holds other
	// units of some SKU under the order's reservation than the order has
	// (or does not know the reservation).
	KindItemsDiffer Kind = "items_differ"
)

// TaskReader pages lapse's stock tasks; store.Tasks implements it.
type TaskReader interface {
	TaskRefs(ctx context.Context, after string, limit int) ([]store.TaskRef, error)
}

// StockParams selects what ReconcileStock compares.
type StockParams struct {
	// Orders is lapse's side: its orders, and through GetOrder their stock
	// tasks. Required.
	Orders store.Orders
	// Ledger is the inventory's side. Required.
	Ledger Ledger
	// Tasks are lapse's stock tasks, read in full (by id, a page of
	// LedgerPageSize at a time) to tell the ledger's rows lapse sent from
	// those of others. Nil takes Orders when it is a TaskReader (a
	// store.Store is); without either ReconcileStock fails.
	Tasks TaskReader
	// CheckItems also compares every order's items with what the inventory
	// holds under its reservation (KindItemsDiffer): one order read and one
	// reservation read per order, Concurrency at a time. Ledger must be a
	// ReservationReader (HTTPLedger is).
	CheckItems bool
	// From and To bound the orders' created_at: From <= created_at < To; a
	// zero bound is none. The whole ledger is read whatever the range: its
	// rows do not say which order they are for.
	From, To time.Time
	// PageSize is how many orders are read from the store at a time
	// (default 500); LedgerPageSize how many ledger rows (default 1000, the
	// reference inventory's most).
	PageSize, LedgerPageSize int
	// MaxExamples is how many mismatches of each kind the report lists
	// (default 10); Counts has them all.
	MaxExamples int
	// Concurrency bounds the orders re-read at once (default 8).
	Concurrency int
}

// StockReport is the outcome of ReconcileStock. It is clean (OK) when no
// mismatch was found.
type StockReport struct {
	From time.Time `json:"from,omitzero"`
	To   time.Time `json:"to,omitzero"`
	// Inventory is where the ledger was read (the caller sets it, password
	// hidden).
	Inventory string `json:"inventory,omitempty"`
	// Orders counts lapse's orders of the range with a reservation; Open
	// those of them still PENDING or PAYING.
	Orders int `json:"orders"`
	Open   int `json:"open"`
	// LedgerRows counts the rows read; OtherRows those of reservations no
	// order of the range holds (orders outside it, reserves whose order
	// never committed, other users of the inventory).
	LedgerRows int64 `json:"ledger_rows"`
	OtherRows  int64 `json:"other_rows"`
	// Rechecked counts the orders the ledger's pages flagged, each read
	// again from lapse and from the inventory before it is reported.
	Rechecked int `json:"rechecked"`
	// ItemsChecked counts the reservations whose items were compared
	// (StockParams.CheckItems).
	ItemsChecked int `json:"items_checked,omitempty"`
	// MismatchedOrders counts the orders with at least one mismatch.
	MismatchedOrders int `json:"mismatched_orders"`
	// Counts are the mismatches found, by kind; Mismatches lists up to
	// MaxExamples of each, by kind then order id.
	Counts     map[Kind]int    `json:"counts"`
	Mismatches []StockMismatch `json:"mismatches"`
}

// OK reports whether lapse and the inventory agree on every order.
func (r StockReport) OK() bool { return len(r.Counts) == 0 }

// StockMismatch is one disagreement about one order's reservation.
type StockMismatch struct {
	Kind          Kind         `json:"kind"`
	OrderID       string       `json:"order_id"`
	ReservationID string       `json:"reservation_id"`
	LapseStatus   order.Status `json:"lapse_status"`
	// Tasks are the order's stock tasks in lapse, as GET /v1/tasks shows them.
	Tasks []order.StockTask `json:"tasks"`
	// Ledger counts the reservation's ledger rows by action.
	Ledger map[string]int `json:"ledger"`
	Detail string         `json:"detail"`
}

// entry is what the ledger pass keeps of one order: its id, its status, and
// how many rows of each action the ledger holds for its reservation (to
// three: more says "twice" as well).
type entry struct {
	orderID string
	status  order.Status
	n       [3]uint8 // reserve, release, confirm
	// tasks are the ids of lapse's release and confirm tasks of the order;
	// elsewhere says a release or confirm row of the reservation names
	// another task id.
	tasks     [2]string
	elsewhere bool
}

func actionIndex(a string) int {
	switch a {
	case string(order.TaskReserve):
		return 0
	case string(order.TaskRelease):
		return 1
	case string(order.TaskConfirm):
		return 2
	}
	return -1
}

// ReconcileStock compares lapse's orders with the inventory's ledger and
// reports every disagreement. It returns an error only when it could not
// compare (the store or the inventory failed, ctx ended): a partial
// comparison must not pass for a clean one.
//
// How it reads, and how it scales:
//
//  1. The orders of the range with a reservation are read from the store
//     in pages, and one small entry is kept per order (its id, status and
//     three counters), keyed by reservation: memory grows with the orders
//     in the range — about 100 bytes each plus the ids, so a million orders
//     is some 200 MB; narrow the range for more.
//  2. lapse's stock tasks are read in pages by id, and each order's entry
//     keeps the ids of its release and confirm tasks (about 100 bytes
//     more per order).
//  3. The whole ledger is streamed in pages (one page in memory at a
//     time): each row bumps its reservation's counter, or, when no order
//     of the range holds the reservation, only OtherRows; a release or
//     confirm row whose task id is not the order's task of that action
//     marks the entry (applied_elsewhere). Time grows with the ledger's
//     length; nothing of it is kept.
//  4. The orders whose counters look wrong — or whose reservation has no
//     reserve in the ledger, for a DONE reserve task is then not applied,
//     or whose entry is marked — are the suspects. Each is read again: the order with its tasks from
//     lapse, then the reservation's own rows from the inventory (a point
//     read: it sees every row committed by then), then the order again; a
//     suspect that lapse changed in between is read again, up to three
//     times. Only what this second look confirms is reported. Suspects
//     are few on a healthy system; the re-reads cost three requests each,
//     Concurrency at a time.
//  5. With CheckItems, every order is read once more, with its items, and
//     its reservation at the inventory (KindItemsDiffer).
//
// Why the second look. lapse is read before the ledger, and a task is DONE
// only after the inventory committed its row, so the ledger read later
// holds every row lapse counted on — except that the ledger's seq is
// allocated when a command is applied, not when it commits: on PostgreSQL
// a row can commit behind a reader's cursor, and a paged read misses it.
// And lapse keeps moving while the ledger is read (an order cancelled and
// released meanwhile looks applied while open). The point re-reads settle
// both for the orders that would be reported. A row missed by the paging
// of an order that looked clean can only hide an extra row (a second
// release, a release of a paid order) that the unique key or the
// inventory's rules already refuse; the next run sees it.
func ReconcileStock(ctx context.Context, p StockParams) (StockReport, error) {
	if p.Orders == nil || p.Ledger == nil {
		return StockReport{}, errors.New("reconcile: StockParams.Orders and StockParams.Ledger are required")
	}
	if p.Tasks == nil {
		tr, ok := p.Orders.(TaskReader)
		if !ok {
			return StockReport{}, errors.New("reconcile: StockParams.Tasks is required (a store.Store is one)")
		}
		p.Tasks = tr
	}
	var items ReservationReader
	if p.CheckItems {
		var ok bool
		if items, ok = p.Ledger.(ReservationReader); !ok {
			return StockReport{}, errors.New("reconcile: StockParams.CheckItems needs a Ledger that reads reservations (a ReservationReader)")
		}
	}
	if !p.From.IsZero() && !p.To.IsZero() && !p.From.Before(p.To) {
		return StockReport{}, fmt.Errorf("reconcile: empty range: From %s is not before To %s", p.From.Format(time.RFC3339), p.To.Format(time.RFC3339))
	}
	if p.PageSize <= 0 {
		p.PageSize = 500
	}
	if p.LedgerPageSize <= 0 {
		p.LedgerPageSize = 1000
	}
	if p.MaxExamples <= 0 {
		p.MaxExamples = 10
	}
	if p.Concurrency <= 0 {
		p.Concurrency = 8
	}
	s := &stockRun{p: p, rep: StockReport{From: p.From, To: p.To, Counts: map[Kind]int{}}, mismatched: map[string]bool{}}
	entries := map[string]*entry{} // by reservation: one order each
	var suspects []string          // order ids
	err := eachOrderIn(ctx, p.Orders, p.From, p.To, p.PageSize, func(o order.Order) error {
		if o.ReservationID == "" {
			return nil
		}
		s.rep.Orders++
		if o.Status.HoldsStock() {
			s.rep.Open++
		}
		if first, ok := entries[o.ReservationID]; ok {
			// The stores' unique key orders_reservation forbids it.
			return fmt.Errorf("reconcile: orders %s and %s hold the same reservation %s: the store is not lapse's schema (lapse audit)",
				showID(first.orderID), showID(o.ID), showID(o.ReservationID))
		}
		entries[o.ReservationID] = &entry{orderID: o.ID, status: o.Status}
		return nil
	})
	if err != nil {
		return StockReport{}, err
	}

	// lapse's tasks are read before the ledger: a row one of them sent is
	// committed before the task is DONE, so the task is seen first (a row
	// of a task written after this read is a suspect the re-read settles).
	for after := ""; ; {
		refs, err := p.Tasks.TaskRefs(ctx, after, p.LedgerPageSize)
		if err != nil {
			return StockReport{}, fmt.Errorf("reconcile: read lapse's stock tasks after %s: %w", showID(after), err)
		}
		for _, r := range refs {
			if e, ok := entries[r.ReservationID]; ok && r.OrderID == e.orderID {
				if i := actionIndex(string(r.Action)) - 1; i >= 0 {
					e.tasks[i] = r.ID
				}
			}
		}
		if len(refs) < p.LedgerPageSize {
			break
		}
		after = refs[len(refs)-1].ID
	}

	after := int64(0)
	for {
		page, err := p.Ledger.LedgerPage(ctx, after, p.LedgerPageSize)
		if err != nil {
			return StockReport{}, fmt.Errorf("reconcile: read the inventory's ledger after seq %d: %w", after, err)
		}
		for _, row := range page.Rows {
			s.rep.LedgerRows++
			e, ok := entries[row.ReservationID]
			if !ok {
				s.rep.OtherRows++
				continue
			}
			i := actionIndex(row.Action)
			if i >= 0 && e.n[i] < 3 {
				e.n[i]++
			}
			if i >= 1 && row.TaskID != e.tasks[i-1] {
				e.elsewhere = true
			}
		}
		if page.Next == nil {
			break
		}
		after = *page.Next
	}

	var all []string // with CheckItems
	for _, e := range entries {
		if len(judge(e.status, e.n, nil)) > 0 || e.n[0] == 0 || e.elsewhere {
			suspects = append(suspects, e.orderID)
		}
		if p.CheckItems {
			all = append(all, e.orderID)
		}
	}
	entries = nil // the re-reads need only the suspects
	slices.Sort(suspects)
	s.rep.Rechecked = len(suspects)
	if err := s.parallel(ctx, suspects, s.recheckOne); err != nil {
		return StockReport{}, err
	}
	if p.CheckItems {
		slices.Sort(all)
		s.rep.ItemsChecked = len(all)
		err := s.parallel(ctx, all, func(ctx context.Context, id string) error { return s.checkItems(ctx, items, id) })
		if err != nil {
			return StockReport{}, err
		}
	}

	rep := s.rep
	rep.MismatchedOrders = len(s.mismatched)
	slices.SortFunc(rep.Mismatches, func(a, b StockMismatch) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.OrderID, b.OrderID))
	})
	if rep.Mismatches == nil {
		rep.Mismatches = []StockMismatch{}
	}
	return rep, nil
}

// eachOrderIn calls f for every order created in [from, to), newest first,
// as pages of the store list them (without payments or tasks).
func eachOrderIn(ctx context.Context, orders store.Orders, from, to time.Time, pageSize int, f func(order.Order) error) error {
	cursor := ""
	for {
		page, err := orders.ListOrders(ctx, store.ListOrdersParams{Limit: pageSize, Cursor: cursor})
		if err != nil {
			return fmt.Errorf("reconcile: list orders: %w", err)
		}
		for _, o := range page.Orders {
			if !to.IsZero() && !o.CreatedAt.Before(to) {
				continue
			}
			if !from.IsZero() && o.CreatedAt.Before(from) {
				return nil
			}
			if err := f(o); err != nil {
				return err
			}
		}
		if page.NextCursor == "" {
			return nil
		}
		cursor = page.NextCursor
	}
}

type stockRun struct {
	p          StockParams
	mu         sync.Mutex // guards rep and mismatched while re-reads run
	rep        StockReport
	mismatched map[string]bool
}

func (s *stockRun) add(m StockMismatch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mismatched[m.OrderID] = true
	s.rep.Counts[m.Kind]++
	if s.rep.Counts[m.Kind] <= s.p.MaxExamples {
		if m.Tasks == nil {
			m.Tasks = []order.StockTask{}
		}
		if m.Ledger == nil {
			m.Ledger = map[string]int{}
		}
		s.rep.Mismatches = append(s.rep.Mismatches, m)
	}
}

// parallel runs f for every id, Concurrency at a time, and returns the
// first error (the others are not started).
func (s *stockRun) parallel(ctx context.Context, ids []string, f func(ctx context.Context, id string) error) error {
	return parallel(ctx, s.p.Concurrency, ids, f)
}

// parallel runs f for every id, concurrency at a time, and returns the
// first error (the others are not started).
func parallel(ctx context.Context, concurrency int, ids []string, f func(ctx context.Context, id string) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	jobs := make(chan string)
	var wg sync.WaitGroup
	for range concurrency {
		wg.Go(func() {
			for id := range jobs {
				if err := f(ctx, id); err != nil {
					cancel(err)
				}
			}
		})
	}
	for _, id := range ids {
		select {
		case jobs <- id:
			continue
		case <-ctx.Done():
		}
		break
	}
	close(jobs)
	wg.Wait()
	return context.Cause(ctx)
}

// recheckOne reads an order, its reservation's rows, and the order again,
// until lapse did not change it in between (three tries), then judges it.
func (s *stockRun) recheckOne(ctx context.Context, id string) error {
	const tries = 3
	var o order.Order
	var rows []LedgerRow
	settled := false
	for range tries {
		before, err := s.p.Orders.GetOrder(ctx, id)
		if err != nil {
			return fmt.Errorf("reconcile: read order %s: %w", showID(id), err)
		}
		if rows, _, err = s.p.Ledger.ReservationLedger(ctx, before.ReservationID); err != nil {
			return fmt.Errorf("reconcile: read reservation %s of order %s at the inventory: %w", showID(before.ReservationID), showID(id), err)
		}
		if o, err = s.p.Orders.GetOrder(ctx, id); err != nil {
			return fmt.Errorf("reconcile: read order %s: %w", showID(id), err)
		}
		if sameState(before, o) {
			settled = true
			break
		}
	}
	var n [3]uint8
	ledger := map[string]int{}
	for _, r := range rows {
		ledger[r.Action]++
		if i := actionIndex(r.Action); i >= 0 && n[i] < 3 {
			n[i]++
		}
	}
	for _, m := range append(judge(o.Status, n, o.Tasks), elsewhere(o.Tasks, rows)...) {
		m.OrderID, m.ReservationID, m.LapseStatus, m.Tasks, m.Ledger = o.ID, o.ReservationID, o.Status, o.Tasks, ledger
		if !settled {
			m.Detail += fmt.Sprintf(" (lapse changed the order while it was read, %d times: run again once it settles)", tries)
		}
		s.add(m)
	}
	return nil
}

// checkItems compares the items of order id with those the inventory holds
// under its reservation. Neither changes once made, so one read of each is
// enough.
func (s *stockRun) checkItems(ctx context.Context, rr ReservationReader, id string) error {
	o, err := s.p.Orders.GetOrder(ctx, id)
	if err != nil {
		return fmt.Errorf("reconcile: read order %s: %w", showID(id), err)
	}
	res, found, err := rr.Reservation(ctx, o.ReservationID)
	if err != nil {
		return fmt.Errorf("reconcile: read reservation %s of order %s at the inventory: %w", showID(o.ReservationID), showID(id), err)
	}
	ledger := map[string]int{}
	for _, r := range res.Ledger {
		ledger[r.Action]++
	}
	m := StockMismatch{Kind: KindItemsDiffer, OrderID: o.ID, ReservationID: o.ReservationID, LapseStatus: o.Status, Tasks: o.Tasks, Ledger: ledger}
	if !found {
		m.Detail = "the inventory does not know the reservation: it holds none of the order's items"
		s.add(m)
		return nil
	}
	mine := make([]inventory.Item, len(o.Items))
	for i, it := range o.Items {
		mine[i] = inventory.Item{SKU: it.SKU, Qty: it.Qty}
	}
	if diff := inventory.ItemsDiff(mine, res.Items); diff != nil {
		m.Detail = fmt.Sprintf("the inventory holds other items under the reservation (%s) than the order: %s", cmp.Or(res.Status, "no status"), inventory.DescribeDiff(diff))
		s.add(m)
	}
	return nil
}

// elsewhere returns an applied_elsewhere mismatch for each release or
// confirm row of the reservation that the order's own task of that action
// (in tasks) did not send. Only Kind and Detail are set.
func elsewhere(tasks []order.StockTask, rows []LedgerRow) []StockMismatch {
	var ms []StockMismatch
	for _, r := range rows {
		if r.Action != string(order.TaskRelease) && r.Action != string(order.TaskConfirm) {
			continue
		}
		mine := slices.IndexFunc(tasks, func(t order.StockTask) bool { return string(t.Action) == r.Action })
		if mine >= 0 && tasks[mine].ID == r.TaskID {
			continue
		}
		d := fmt.Sprintf("the ledger's %s of the reservation (seq %d) was sent by task %s, ", r.Action, r.Seq, showID(r.TaskID))
		if mine < 0 {
			d += fmt.Sprintf("and lapse has no %s task for the order: someone else moved the stock", r.Action)
		} else {
			t := tasks[mine]
			d += fmt.Sprintf("not by lapse's %s task %s (%s, answer %s): someone else moved the stock", r.Action, showID(t.ID), t.Status, cmp.Or(t.Result, "(none)"))
		}
		ms = append(ms, StockMismatch{Kind: KindAppliedElsewhere, Detail: d})
	}
	return ms
}

// sameState reports whether lapse changed nothing of an order between two
// reads: its version (every transition) and its tasks' progress.
func sameState(a, b order.Order) bool {
	return a.Version == b.Version && slices.EqualFunc(a.Tasks, b.Tasks, func(x, y order.StockTask) bool {
		return x.ID == y.ID && x.Status == y.Status && x.Attempts == y.Attempts
	})
}

// judge returns the mismatches of an order in status with the ledger
// counts n (reserve, release, confirm) — with tasks, the order's stock
// tasks; nil for the first pass, which has not read them. Only Kind and
// Detail are set.
func judge(status order.Status, n [3]uint8, tasks []order.StockTask) []StockMismatch {
	reserves, releases, confirms := n[0], n[1], n[2]
	var ms []StockMismatch
	add := func(k Kind, format string, args ...any) {
		ms = append(ms, StockMismatch{Kind: k, Detail: fmt.Sprintf(format, args...)})
	}
	if releases > 1 {
		add(KindReleasedTwice, "the ledger has %s releases of the reservation", atLeast(releases))
	}
	if reserves > 1 {
		add(KindAppliedTwice, "the ledger has %s reserves of the reservation", atLeast(reserves))
	}
	if confirms > 1 {
		add(KindAppliedTwice, "the ledger has %s confirms of the reservation", atLeast(confirms))
	}
	if releases > 0 && confirms > 0 {
		add(KindConfirmedAndReleased, "the ledger has the reservation both confirmed (sold) and released (back on sale); lapse has the order %s", status)
	}
	switch status {
	case order.Cancelled:
		if releases == 0 {
			add(KindNeverReleased, "lapse cancelled the order; the ledger has no release: %s", taskState(tasks, order.TaskRelease))
			if confirms > 0 {
				add(KindConfirmedButCancelled, "lapse cancelled the order; the ledger has it confirmed (sold) instead of released")
			}
		}
	case order.Paid:
		if confirms == 0 {
			add(KindNeverConfirmed, "lapse has the order paid; the ledger has no confirm: %s", taskState(tasks, order.TaskConfirm))
			if releases > 0 {
				add(KindReleasedButPaid, "lapse has the order paid; the ledger has it released (back on sale) instead of confirmed")
			}
		}
	case order.Pending, order.Paying:
		if releases > 0 || confirms > 0 {
			add(KindAppliedWhileOpen, "lapse still has the order %s; the ledger has %d release(s) and %d confirm(s)", status, releases, confirms)
		}
	}
	for _, t := range tasks {
		if t.Status != order.TaskDone {
			continue
		}
		if i := actionIndex(string(t.Action)); i >= 0 && n[i] == 0 {
			add(KindDoneButNotApplied, "task %s (%s) is DONE since %s with answer %s; the ledger has no %s of the reservation",
				showID(t.ID), t.Action, order.FormatTime(t.DoneAt), cmp.Or(t.Result, "(none)"), t.Action)
		}
	}
	return ms
}

func atLeast(n uint8) string {
	if n >= 3 {
		return "3 or more"
	}
	return fmt.Sprint(n)
}

// taskState says where an order's task of action stands: why the ledger
// does not have it yet, or that it should.
func taskState(tasks []order.StockTask, action order.TaskAction) string {
	for _, t := range tasks {
		if t.Action != action {
			continue
		}
		var b strings.Builder
		fmt.Fprintf(&b, "its %s task %s is %s", action, showID(t.ID), t.Status)
		switch t.Status {
		case order.TaskPending:
			fmt.Fprintf(&b, " after %d send(s), due %s: not applied yet", t.Attempts, order.FormatTime(t.NextAt))
		case order.TaskDead:
			fmt.Fprintf(&b, " since %s: waiting for an operator (lapse tasks retry %s)", order.FormatTime(t.DeadAt), showID(t.ID))
		case order.TaskDone:
			fmt.Fprintf(&b, " since %s (answer %s): the inventory said applied", order.FormatTime(t.DoneAt), cmp.Or(t.Result, "(none)"))
		}
		if t.LastError != "" {
			msg := t.LastError
			if r := []rune(msg); len(r) > 120 {
				msg = string(r[:119]) + "…"
			}
			fmt.Fprintf(&b, "; last error: %s", msg)
		}
		return b.String()
	}
	if tasks == nil {
		return "its tasks not read"
	}
	return fmt.Sprintf("lapse has no %s task for it (lapse audit reports that)", action)
}
