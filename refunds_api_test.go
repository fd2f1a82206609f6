package lapse_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/payment"
	"github.com/lapsehq/lapse/refund"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/storetest"
)

// refundStub is a gateway that refunds: a payment it was told to refuse
// answers a final error (the refund is DEAD at once), any other is
// refunded as re_<payment id>.
type refundStub struct {
	mu      sync.Mutex
	refuse  map[string]bool
	refunds map[string]int // asked, per payment id
}

func newRefundStub() *refundStub {
	return &refundStub{refuse: map[string]bool{}, refunds: map[string]int{}}
}

func (g *refundStub) Query(context.Context, string) (payment.Status, error) {
	return payment.Status{}, errors.New("the stub answers no query")
}
func (g *refundStub) Close(context.Context, string) error { return nil }

func (g *refundStub) Refund(_ context.Context, r payment.Refund) (payment.RefundResult, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.refunds[r.PaymentID]++
	if g.refuse[r.PaymentID] {
		return payment.RefundResult{}, fmt.Errorf("refund %s: %w", r.PaymentID, payment.ErrUnknownPayment)
	}
	return payment.RefundResult{RefundID: "re_" + r.PaymentID, State: payment.RefundSucceeded, AmountCents: r.AmountCents, Currency: r.Currency}, nil
}

func (g *refundStub) setRefuse(paymentID string, refuse bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.refuse[paymentID] = refuse
}

// An operator's view of the refunds (ListRefunds) and their retry
// (RetryRefunds): two refunds the gateway refuses for good are DEAD, listed
// with their error, paged by payment id; one retried by id is refunded by
// the dispatcher, woken by the retry (its interval is an hour); bad pages
// and selections are refused, naming the field, and change nothing.
func TestListAndRetryRefunds(t *testing.T) {
	t.Parallel()
	gw := newRefundStub()
	st := openStore(t, filepath.Join(t.TempDir(), "l.db"))
	t.Cleanup(func() { st.Close() })
	svc := newService(t, lapse.Config{Store: st, Gateway: gw, AutoRefund: true, ConfirmAfter: time.Hour,
		Refunds: refund.Config{Interval: time.Hour, RetryBase: time.Hour, RetryMax: time.Hour}})
	storetest.Stock(t, st, 100, "sku")
	start(t, svc)
	ctx := context.Background()

	// Each order is paid, then paid again by a second attempt: money to
	// give back, which the gateway refuses.
	for _, id := range []string{"r1", "r2"} {
		create(t, svc, id, time.Hour)
		gw.setRefuse(id+"-b", true)
		for _, p := range []string{id + "-a", id + "-b"} {
			if _, err := svc.Notify(ctx, lapse.Notification{OrderID: id, PaymentID: p, Status: lapse.PaymentSucceeded, AmountCents: 100}); err != nil {
				t.Fatalf("notify %s: %v", p, err)
			}
		}
	}
	var dead lapse.RefundPage
	waitFor(t, 10*time.Second, "two DEAD refunds", func() bool {
		var err error
		dead, err = svc.ListRefunds(ctx, store.ListTasksParams{Dead: true})
		return err == nil && len(dead.Refunds) == 2
	})
	if r := dead.Refunds[0]; r.PaymentID != "r1-b" || r.OrderID != "r1" || r.Status != order.TaskDead || r.AmountCents != 100 ||
		!strings.Contains(r.LastError, "payment") || dead.Refunds[1].PaymentID != "r2-b" || dead.NextAfter != "" {
		t.Fatalf("dead refunds: %+v", dead)
	}
	first, err := svc.ListRefunds(ctx, store.ListTasksParams{Limit: 1})
	if err != nil || len(first.Refunds) != 1 || first.NextAfter != "r1-b" {
		t.Fatalf("a page of one: %+v, %v", first, err)
	}
	if rest, err := svc.ListRefunds(ctx, store.ListTasksParams{Limit: 1, After: first.NextAfter}); err != nil ||
		len(rest.Refunds) != 1 || rest.Refunds[0].PaymentID != "r2-b" || rest.NextAfter != "" {
		t.Fatalf("the next page: %+v, %v", rest, err)
	}

	for name, p := range map[string]store.ListTasksParams{
		"a limit too large":            {Limit: lapse.MaxRefundsLimit + 1},
		"a negative limit":             {Limit: -1},
		"an after longer than any id":  {After: strings.Repeat("p", 129)},
		"an order id that is not one":  {OrderID: "not an id"},
		"an after with a control byte": {After: "p\x00"},
	} {
		var inv *lapse.InvalidError
		if _, err := svc.ListRefunds(ctx, p); !errors.As(err, &inv) {
			t.Errorf("list with %s: %v, want an InvalidError", name, err)
		}
	}
	// A payment id is longer than an order id may be: a page after one is fine.
	if _, err := svc.ListRefunds(ctx, store.ListTasksParams{After: strings.Repeat("p", 128)}); err != nil {
		t.Errorf("a page after a 128-byte payment id: %v", err)
	}
	for name, p := range map[string]store.RetryTasksParams{
		"nothing named":          {},
		"ids and every dead one": {IDs: []string{"r1-b"}, AllDead: true},
		"an empty id":            {IDs: []string{""}},
		"an id too long":         {IDs: []string{strings.Repeat("p", 129)}},
		"too many ids":           {IDs: make([]string, lapse.MaxRefundIDs+1)},
	} {
		var inv *lapse.InvalidError
		if _, err := svc.RetryRefunds(ctx, p); !errors.As(err, &inv) {
			t.Errorf("retry with %s: %v, want an InvalidError", name, err)
		}
	}
	if again, _ := svc.ListRefunds(ctx, store.ListTasksParams{Dead: true}); len(again.Refunds) != 2 {
		t.Fatalf("after the refused retries: %+v, want both still DEAD", again)
	}

	// The gateway takes r1-b's refund now: retried by its payment id, the
	// dispatcher (whose interval is an hour) is woken and refunds it.
	gw.setRefuse("r1-b", false)
	if n, err := svc.RetryRefunds(ctx, store.RetryTasksParams{IDs: []string{"r1-b", "no-such-payment"}}); err != nil || n != 1 {
		t.Fatalf("retry r1-b: %d, %v, want 1", n, err)
	}
	waitFor(t, 10*time.Second, "r1-b refunded", func() bool {
		o, err := svc.Get(ctx, "r1")
		return err == nil && hasPayment(o, "r1-b", order.PaymentRefunded) && !o.RefundRequired
	})
	rs, err := svc.ListRefunds(ctx, store.ListTasksParams{OrderID: "r1"})
	if err != nil || len(rs.Refunds) != 1 || rs.Refunds[0].Status != order.TaskDone || rs.Refunds[0].RefundID != "re_r1-b" {
		t.Fatalf("r1's refunds: %+v, %v, want one DONE as re_r1-b", rs, err)
	}
	if n, err := svc.RetryRefunds(ctx, store.RetryTasksParams{IDs: []string{"r1-b"}}); err != nil || n != 0 {
		t.Fatalf("retry of a DONE refund: %d, %v, want 0", n, err)
	}
	if n, err := svc.RetryRefunds(ctx, store.RetryTasksParams{AllDead: true}); err != nil || n != 1 {
		t.Fatalf("retry every dead one: %d, %v, want r2-b's", n, err)
	}
}

// A refund made by hand needs a note saying how (the event records it,
// with who); a note or a gateway's refund id past their bounds, or a
// refund id on a refund lapse makes, is refused before anything is
// written.
func TestRefundPaymentChecksTheRequest(t *testing.T) {
	t.Parallel()
	gw := newRefundStub()
	st := openStore(t, filepath.Join(t.TempDir(), "l.db"))
	t.Cleanup(func() { st.Close() })
	svc := newService(t, lapse.Config{Store: st, Gateway: gw, ConfirmAfter: time.Hour})
	storetest.Stock(t, st, 100, "sku")
	ctx := context.Background()
	create(t, svc, "m1", time.Hour)
	for _, p := range []string{"m1-a", "m1-b"} {
		if _, err := svc.Notify(ctx, lapse.Notification{OrderID: "m1", PaymentID: p, Status: lapse.PaymentSucceeded, AmountCents: 100}); err != nil {
			t.Fatal(err)
		}
	}
	for name, r := range map[string]lapse.RefundRequest{
		"by hand without a note":         {Manual: true},
		"by hand with a blank note":      {Manual: true, Note: " \t\n"},
		"a note too long":                {Manual: true, Note: strings.Repeat("n", 1001)},
		"a refund id too long":           {Manual: true, Note: "console", RefundID: strings.Repeat("r", 256)},
		"a refund id on a gateway's one": {RefundID: "re_x"},
	} {
		var inv *lapse.InvalidError
		if _, err := svc.RefundPayment(ctx, "m1-b", r); !errors.As(err, &inv) {
			t.Errorf("%s: %v, want an InvalidError", name, err)
		}
	}
	if o, _ := svc.Get(ctx, "m1"); !hasPayment(o, "m1-b", order.PaymentRefundRequired) || len(gw.refunds) != 0 {
		t.Fatalf("after the refused requests: %+v, the gateway asked %v", o, gw.refunds)
	}
	res, err := svc.RefundPayment(ctx, "m1-b", lapse.RefundRequest{Manual: true, Note: "refunded in the console", Actor: "alice"})
	if err != nil || !hasPayment(res.Order, "m1-b", order.PaymentRefunded) {
		t.Fatalf("by hand: %+v, %v", res, err)
	}
	rs, err := svc.ListRefunds(ctx, store.ListTasksParams{OrderID: "m1"})
	if err != nil || len(rs.Refunds) != 1 || !rs.Refunds[0].Manual || rs.Refunds[0].Note != "refunded in the console" || rs.Refunds[0].Actor != "alice" {
		t.Fatalf("m1's refunds: %+v, %v", rs, err)
	}
	if !svc.CanRefund() {
		t.Error("CanRefund with a gateway that refunds: false")
	}
	if newService(t, lapse.Config{Store: st}).CanRefund() {
		t.Error("CanRefund without a gateway: true")
	}
}
