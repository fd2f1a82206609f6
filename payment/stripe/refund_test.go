package stripe_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/lapsehq/lapse/payment"
	"github.com/lapsehq/lapse/payment/stripe"
	"github.com/lapsehq/lapse/payment/stripe/stripetest"
)

func refundOf(pi string, cents int64) payment.Refund {
	return payment.Refund{OrderID: "o-1", PaymentID: pi, AmountCents: cents, Currency: "USD", Key: payment.RefundKey(pi), Reason: "paid after the cancel"}
}

// A refund is created under the refund's key as Idempotency-Key, with its
// key, order and reason in metadata; once Stripe has forgotten the key (24
// hours), the refund is found again by its metadata, not made twice.
func TestRefundIsFoundByItsKey(t *testing.T) {
	t.Parallel()
	fs := stripetest.New(t, testKey)
	fs.Set(stripetest.PaymentIntent{ID: "pi_r1", Status: "succeeded", Amount: 1299, AmountReceived: 1299, Metadata: map[string]string{"order_id": "o-1"}})
	g := newGateway(t, fs.URL, stripe.Config{})
	ctx := context.Background()
	// A part: were the key lost, a second refund of it would be possible.
	first, err := g.Refund(ctx, refundOf("pi_r1", 500))
	if err != nil || first.State != payment.RefundSucceeded || first.AmountCents != 500 || first.Currency != "USD" {
		t.Fatalf("refund: %+v, %v", first, err)
	}
	if keys := fs.IdempotencyKeys(); !slices.Equal(keys, []string{"lapse-refund-pi_r1"}) {
		t.Fatalf("Idempotency-Keys sent: %q", keys)
	}
	rfs := fs.Refunds("pi_r1")
	if len(rfs) != 1 || rfs[0].Metadata["lapse_refund_key"] != "lapse-refund-pi_r1" || rfs[0].Metadata["order_id"] != "o-1" ||
		rfs[0].Metadata["lapse_reason"] != "paid after the cancel" {
		t.Fatalf("refunds at Stripe: %+v", rfs)
	}
	fs.ExpireIdempotencyKeys()
	again, err := g.Refund(ctx, refundOf("pi_r1", 500))
	if err != nil || again != first {
		t.Fatalf("the refund sent again after the key expired: %+v, %v; want %+v", again, err, first)
	}
	if n := fs.Count("POST /v1/refunds"); n != 1 {
		t.Fatalf("%d refunds created, want 1", n)
	}
}

// Two refunds of one key at once are one refund: the Idempotency-Key
// covers what the look-up by metadata cannot (neither finds the other's).
func TestConcurrentRefundsAreOne(t *testing.T) {
	t.Parallel()
	fs := stripetest.New(t, testKey)
	fs.Set(stripetest.PaymentIntent{ID: "pi_r2", Status: "succeeded", Amount: 1299, AmountReceived: 1299})
	g := newGateway(t, fs.URL, stripe.Config{})
	results := make(chan error, 4)
	ids := make(chan string, 4)
	for range 4 {
		go func() {
			res, err := g.Refund(context.Background(), refundOf("pi_r2", 300))
			ids <- res.RefundID
			results <- err
		}()
	}
	var first string
	for i := range 4 {
		if err := <-results; err != nil {
			t.Fatalf("refund: %v", err)
		}
		id := <-ids
		if i == 0 {
			first = id
		} else if id != first {
			t.Fatalf("refund ids %q and %q", first, id)
		}
	}
	if n := len(fs.Refunds("pi_r2")); n != 1 {
		t.Fatalf("%d refunds, want 1", n)
	}
}

// What is refused, and how: another order's PaymentIntent is
// ErrUnknownPayment (never refunded); a currency other than the
// PaymentIntent's is an error; a refund Stripe fails is ErrRefundFailed, a
// pending one PENDING; a PaymentIntent refunded whole under another key is
// ErrNotRefundable.
func TestRefundRefusals(t *testing.T) {
	t.Parallel()
	fs := stripetest.New(t, testKey)
	g := newGateway(t, fs.URL, stripe.Config{})
	ctx := context.Background()
	paid := func(id, order string) {
		fs.Set(stripetest.PaymentIntent{ID: id, Status: "succeeded", Amount: 1299, AmountReceived: 1299, Metadata: map[string]string{"order_id": order}})
	}

	paid("pi_foreign", "o-other")
	if _, err := g.Refund(ctx, refundOf("pi_foreign", 1299)); !errors.Is(err, payment.ErrUnknownPayment) {
		t.Fatalf("another order's PaymentIntent: %v, want ErrUnknownPayment", err)
	}
	paid("pi_eur", "o-1")
	r := refundOf("pi_eur", 1299)
	r.Currency = "EUR"
	if _, err := g.Refund(ctx, r); err == nil {
		t.Fatal("a refund in EUR of a payment in usd: nil error")
	}
	for _, pi := range []string{"pi_foreign", "pi_eur"} {
		if n := len(fs.Refunds(pi)); n != 0 {
			t.Fatalf("%s: %d refunds made", pi, n)
		}
	}

	paid("pi_twice", "o-1")
	if _, err := g.Refund(ctx, refundOf("pi_twice", 1299)); err != nil {
		t.Fatal(err)
	}
	r = refundOf("pi_twice", 1299)
	r.Key = "another-key"
	if _, err := g.Refund(ctx, r); !errors.Is(err, payment.ErrNotRefundable) {
		t.Fatalf("a whole refund again under another key: %v, want ErrNotRefundable", err)
	}

	fs.RefundStatus = "pending"
	paid("pi_pending", "o-1")
	if res, err := g.Refund(ctx, refundOf("pi_pending", 1299)); err != nil || res.State != payment.RefundPending {
		t.Fatalf("a pending refund: %+v, %v", res, err)
	}
	fs.RefundStatus = "failed"
	paid("pi_failed", "o-1")
	if _, err := g.Refund(ctx, refundOf("pi_failed", 1299)); !errors.Is(err, payment.ErrRefundFailed) {
		t.Fatalf("a failed refund: %v, want ErrRefundFailed", err)
	}
	if _, err := g.Refund(ctx, refundOf("pi_failed", 1299)); !errors.Is(err, payment.ErrRefundFailed) {
		t.Fatalf("the failed refund sent again: %v, want ErrRefundFailed", err)
	}
}

// The create failing — a 500, no answer — is an error, never a refund; sent
// again once Stripe is back, it is one refund.
func TestRefundCreateFailing(t *testing.T) {
	t.Parallel()
	fs := stripetest.New(t, testKey)
	fs.Set(stripetest.PaymentIntent{ID: "pi_r3", Status: "succeeded", Amount: 1299, AmountReceived: 1299})
	g := newGateway(t, fs.URL, stripe.Config{Timeout: 200 * time.Millisecond})
	ctx := context.Background()
	fs.Fail("POST /v1/refunds", 500)
	if res, err := g.Refund(ctx, refundOf("pi_r3", 1299)); err == nil {
		t.Fatalf("a refund answered 500: %+v", res)
	}
	fs.Fail("POST /v1/refunds", 0)
	if res, err := g.Refund(ctx, refundOf("pi_r3", 1299)); err != nil || res.State != payment.RefundSucceeded {
		t.Fatalf("the refund sent again: %+v, %v", res, err)
	}
	fs.Set(stripetest.PaymentIntent{ID: "pi_r4", Status: "succeeded", Amount: 1299, AmountReceived: 1299})
	fs.Hang("POST /v1/refunds")
	start := time.Now()
	if res, err := g.Refund(ctx, refundOf("pi_r4", 1299)); err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("a refund left unanswered: %+v, %v after %s", res, err, time.Since(start))
	}
	if n, m := len(fs.Refunds("pi_r3")), len(fs.Refunds("pi_r4")); n != 1 || m != 0 {
		t.Fatalf("refunds: %d of pi_r3, %d of pi_r4; want 1 and 0", n, m)
	}
}

// A Stripe API that does not list refunds (404 on GET /v1/refunds: a fake
// of only what the issue names, POST /v1/refunds) still refunds, once: the
// Idempotency-Key is the guard then.
func TestRefundWithoutTheRefundList(t *testing.T) {
	t.Parallel()
	fs := stripetest.New(t, testKey)
	fs.Set(stripetest.PaymentIntent{ID: "pi_r5", Status: "succeeded", Amount: 1299, AmountReceived: 1299})
	fs.Fail("GET /v1/refunds", 404)
	g := newGateway(t, fs.URL, stripe.Config{Timeout: 2 * time.Second})
	for i := range 2 {
		if res, err := g.Refund(context.Background(), refundOf("pi_r5", 1299)); err != nil || res.State != payment.RefundSucceeded {
			t.Fatalf("refund %d with no refund list: %+v, %v", i+1, res, err)
		}
	}
	if n := len(fs.Refunds("pi_r5")); n != 1 {
		t.Fatalf("%d refunds of pi_r5, want 1", n)
	}
	// Any other failure of the list is not taken for "none": no refund
	// is created blind.
	fs.Set(stripetest.PaymentIntent{ID: "pi_r6", Status: "succeeded", Amount: 1299, AmountReceived: 1299})
	fs.Fail("GET /v1/refunds", 500)
	if res, err := g.Refund(context.Background(), refundOf("pi_r6", 1299)); err == nil {
		t.Fatalf("a refund whose list answered 500: %+v", res)
	}
	if n := len(fs.Refunds("pi_r6")); n != 0 {
		t.Fatalf("%d refunds of pi_r6 made blind, want 0", n)
	}
}
