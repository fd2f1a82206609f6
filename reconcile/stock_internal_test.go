package reconcile

import (
	"slices"
	"testing"

	"github.com/lapsehq/lapse/order"
)

// TestJudge covers what the reference inventory's unique key and rules do
// not let a test produce: rows applied twice, both confirm and release.
func TestJudge(t *testing.T) {
	done := func(a order.TaskAction) order.StockTask {
		return order.StockTask{ID: "t-" + string(a), Action: a, Status: order.TaskDone, Result: "REPLENISH_SUCCESS"}
	}
	for _, c := range []struct {
		status order.Status
		n      [3]uint8 // reserve, release, confirm
		tasks  []order.StockTask
		want   []Kind
	}{
		{order.Cancelled, [3]uint8{1, 1, 0}, []order.StockTask{done("release")}, nil},
		{order.Paid, [3]uint8{1, 0, 1}, []order.StockTask{done("confirm")}, nil},
		{order.Pending, [3]uint8{1, 0, 0}, nil, nil},
		{order.Paying, [3]uint8{1, 0, 0}, nil, nil},
		// A release of a reservation never made (a tombstone) is a release.
		{order.Cancelled, [3]uint8{0, 1, 0}, []order.StockTask{done("release")}, nil},
		{order.Cancelled, [3]uint8{1, 2, 0}, nil, []Kind{KindReleasedTwice}},
		{order.Cancelled, [3]uint8{1, 3, 0}, nil, []Kind{KindReleasedTwice}},
		{order.Paid, [3]uint8{2, 0, 2}, nil, []Kind{KindAppliedTwice, KindAppliedTwice}},
		{order.Cancelled, [3]uint8{1, 1, 1}, nil, []Kind{KindConfirmedAndReleased}},
		{order.Paid, [3]uint8{1, 1, 1}, nil, []Kind{KindConfirmedAndReleased}},
		{order.Cancelled, [3]uint8{1, 0, 1}, nil, []Kind{KindNeverReleased, KindConfirmedButCancelled}},
		{order.Paid, [3]uint8{1, 1, 0}, nil, []Kind{KindNeverConfirmed, KindReleasedButPaid}},
		{order.Paid, [3]uint8{1, 0, 0}, []order.StockTask{done("confirm")}, []Kind{KindNeverConfirmed, KindDoneButNotApplied}},
		{order.Paying, [3]uint8{1, 0, 1}, nil, []Kind{KindAppliedWhileOpen}},
		// A reserve task DONE that the ledger does not hold.
		{order.Pending, [3]uint8{0, 0, 0}, []order.StockTask{done("reserve")}, []Kind{KindDoneButNotApplied}},
		// A task not DONE is no claim that the ledger has it.
		{order.Paid, [3]uint8{1, 0, 0}, []order.StockTask{{ID: "t", Action: "confirm", Status: order.TaskPending}}, []Kind{KindNeverConfirmed}},
	} {
		var got []Kind
		for _, m := range judge(c.status, c.n, c.tasks) {
			got = append(got, m.Kind)
			if m.Detail == "" {
				t.Errorf("%s %v: %s without a detail", c.status, c.n, m.Kind)
			}
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s %v %d tasks: %v, want %v", c.status, c.n, len(c.tasks), got, c.want)
		}
	}
}

// TestElsewhere: a release or confirm row is lapse's only when its task id
// is the order's task of that action.
func TestElsewhere(t *testing.T) {
	tasks := []order.StockTask{{ID: "t-confirm", Action: order.TaskConfirm, Status: order.TaskDone, Result: "ALREADY_DONE"}}
	for _, c := range []struct {
		rows []LedgerRow
		want int
	}{
		{[]LedgerRow{{Action: "reserve", TaskID: "caller"}, {Action: "confirm", TaskID: "t-confirm"}}, 0},
		{[]LedgerRow{{Action: "confirm", TaskID: "other"}}, 1},
		{[]LedgerRow{{Action: "release", TaskID: "t-confirm"}}, 1}, // lapse has no release task
		{[]LedgerRow{{Action: "release", TaskID: "x"}, {Action: "confirm", TaskID: "y"}}, 2},
	} {
		got := elsewhere(tasks, c.rows)
		if len(got) != c.want {
			t.Errorf("rows %+v: %d mismatches, want %d", c.rows, len(got), c.want)
		}
		for _, m := range got {
			if m.Kind != KindAppliedElsewhere || m.Detail == "" {
				t.Errorf("mismatch %+v", m)
			}
		}
	}
}
