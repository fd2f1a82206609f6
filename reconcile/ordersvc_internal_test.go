package reconcile

import (
	"testing"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/ordersvc"
)

// judgeShop on every pair of lapse's status and the shop's that matters:
// an unsettled order at lapse may be anything at the shop, a CANCELLING one
// whose command is still being sent is in flight, not a mismatch.
func TestJudgeShop(t *testing.T) {
	t.Parallel()
	pending := []order.Command{{ID: "cmd_a", Status: order.TaskPending}}
	dead := []order.Command{{ID: "cmd_a", Status: order.TaskDead}}
	for _, tc := range []struct {
		name     string
		lapse    order.Status
		commands []order.Command
		shop     ordersvc.OrderStatus
		want     Kind
		inFlight bool
	}{
		{"both cancelled", order.Cancelled, nil, ordersvc.StatusCancelled, "", false},
		{"both paid", order.Paid, nil, ordersvc.StatusPaid, "", false},
		{"pending at lapse, paid at the shop before the deadline", order.Pending, nil, ordersvc.StatusPaid, "", false},
		{"pending at lapse, cancelled by the buyer at the shop", order.Pending, nil, ordersvc.StatusCancelled, "", false},
		{"paying at lapse, pending at the shop", order.Paying, nil, ordersvc.StatusPending, "", false},
		{"cancelling, pending at the shop", order.Cancelling, dead, ordersvc.StatusPending, "", false},
		{"cancelling, command in flight", order.Cancelling, pending, ordersvc.StatusCancelled, "", true},
		{"cancelling, command DEAD", order.Cancelling, dead, ordersvc.StatusPaid, KindCancellingButShopFinal, false},
		{"cancelling, command purged", order.Cancelling, nil, ordersvc.StatusCancelled, KindCancellingButShopFinal, false},
		{"cancelled, pending at the shop", order.Cancelled, nil, ordersvc.StatusPending, KindCancelledButShopOpen, false},
		{"cancelled, paying at the shop", order.Cancelled, nil, ordersvc.StatusPaying, KindCancelledButShopOpen, false},
		{"cancelled, paid at the shop", order.Cancelled, nil, ordersvc.StatusPaid, KindCancelledButShopPaid, false},
		{"paid, cancelled at the shop", order.Paid, nil, ordersvc.StatusCancelled, KindPaidButShopCancelled, false},
		{"paid, pending at the shop", order.Paid, nil, ordersvc.StatusPending, KindPaidButShopOpen, false},
		{"not at the shop", order.Pending, nil, ordersvc.StatusNotFound, KindNotFoundAtShop, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, inFlight := judgeShop(order.Order{ID: "o-1", Status: tc.lapse, Commands: tc.commands}, tc.shop)
			var got Kind
			if m != nil {
				got = m.Kind
			}
			if got != tc.want || inFlight != tc.inFlight {
				t.Errorf("%s at lapse, %s at the shop: %q in flight %v; want %q in flight %v", tc.lapse, tc.shop, got, inFlight, tc.want, tc.inFlight)
			}
		})
	}
}
