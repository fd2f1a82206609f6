package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/lapsehq/lapse/client"
	"github.com/lapsehq/lapse/order"
)

// Refunds through the typed client, on a server without a gateway: a
// refund through the gateway is refused (no_refunder), one made by hand
// needs its note and is recorded with it; the refund's row then lists
// under its order, nothing is DEAD, and a retry naming nothing is refused.
func TestRefunds(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	c := newClient(t, e.url)
	ctx := context.Background()
	if _, err := c.SetStock(ctx, "tee", 5); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateOrder(ctx, client.CreateOrder{ID: "rf1", Items: []order.Item{{SKU: "tee", Qty: 1}}, AmountCents: 100, Timeout: time.Hour}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"rf1-a", "rf1-b"} { // paid twice: rf1-b owes money back
		if _, err := c.NotifyPayment(ctx, client.Notification{OrderID: "rf1", PaymentID: p, Succeeded: true, AmountCents: 100}, secret); err != nil {
			t.Fatal(err)
		}
	}
	_, err := c.RefundPayment(ctx, "rf1-b", client.Refund{})
	wantCode(t, "a refund through no gateway", err, 409, client.CodeNoRefunder)
	_, err = c.RefundPayment(ctx, "rf1-b", client.Refund{Manual: true})
	wantCode(t, "a refund by hand without a note", err, 400, client.CodeInvalidField)
	_, err = c.RefundPayment(ctx, "rf1-a", client.Refund{Manual: true, Note: "n"})
	wantCode(t, "a refund of the attempt that paid", err, 409, client.CodeNotRefundable)
	_, err = c.RefundPayment(ctx, "nobody-paid", client.Refund{Manual: true, Note: "n"})
	wantCode(t, "a refund of no attempt", err, 404, client.CodePaymentNotFound)

	a, err := c.RefundPayment(ctx, "rf1-b", client.Refund{Manual: true, Note: "refunded in the console", RefundID: "re_console_1"})
	if err != nil || a.Pending || a.RefundID != "re_console_1" || a.Order.RefundRequired {
		t.Fatalf("a refund by hand: %+v, %v", a, err)
	}
	page, err := c.ListRefunds(ctx, client.ListRefunds{OrderID: "rf1"})
	if err != nil || len(page.Refunds) != 1 || page.NextAfter != "" {
		t.Fatalf("rf1's refunds: %+v, %v", page, err)
	}
	if r := page.Refunds[0]; r.PaymentID != "rf1-b" || r.Status != order.TaskDone || !r.Manual || r.Note != "refunded in the console" ||
		r.Actor != "api" || r.RefundID != "re_console_1" || r.AmountCents != 100 {
		t.Fatalf("rf1-b's refund: %+v", r)
	}
	if page, err := c.ListRefunds(ctx, client.ListRefunds{Dead: true, Limit: 10}); err != nil || len(page.Refunds) != 0 {
		t.Fatalf("DEAD refunds: %+v, %v", page, err)
	}
	if n, err := c.RetryRefunds(ctx, client.DeadRefunds{AllDead: true}); err != nil || n != 0 {
		t.Fatalf("retry every dead refund: %d, %v", n, err)
	}
	_, err = c.RetryRefunds(ctx, client.DeadRefunds{})
	wantCode(t, "a retry naming nothing", err, 400, client.CodeInvalidField)
}
