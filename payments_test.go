package lapse_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store/storetest"
)

func TestRepeatedFailedPaymentWhoseAnswerWasLostStillTimesOut(t *testing.T) {
	t.Parallel()
	st := openStore(t, filepath.Join(t.TempDir(), "l.db"))
	t.Cleanup(func() { st.Close() })
	// No fallback sweep: only the order's timer can cancel it.
	cut := &lostAnswer{Store: st, id: "o-1"}
	cut.lostCreate.Store(true) // the create answers
	svc := newService(t, lapse.Config{Store: cut, SweepInterval: -1})
	storetest.Stock(t, st, 10, "sku")
	start(t, svc)
	o := create(t, svc, "o-1", 200*time.Millisecond)
	if _, err := svc.PayAttempt(context.Background(), o.ID, "pay-1"); err != nil {
		t.Fatal(err)
	}
	// The timer fires while the order is PAYING: it is not cancelled, and
	// only the failure report can set the timer again.
	waitFor(t, 5*time.Second, "the timer to find the order PAYING", func() bool {
		return metric(t, svc, "lapse_timers_paying_total") >= 1
	})
	failed := lapse.Notification{OrderID: o.ID, PaymentID: "pay-1", Status: lapse.PaymentFailed, AmountCents: o.AmountCents}
	if _, err := svc.Notify(context.Background(), failed); err == nil {
		t.Fatal("the first report answered; want its answer lost")
	}
	res, err := svc.Notify(context.Background(), failed) // the gateway sends it again
	if err != nil || res.Order.Status != order.Pending {
		t.Fatalf("repeated report: %+v, %v; want the order PENDING", res, err)
	}
	waitFor(t, 5*time.Second, "the order to time out", func() bool { return status(t, svc, o.ID) == order.Cancelled })
	storetest.AuditOK(t, st)
}
