package stripe_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/lapsehq/lapse/payment"
	"github.com/lapsehq/lapse/payment/stripe"
)

// refundEvent is a Stripe event of type typ whose data.object is object.
func refundEvent(id, typ string, object map[string]any) []byte {
	b, _ := json.Marshal(map[string]any{"id": id, "object": "event", "api_version": "2020-08-27", "created": time.Now().Unix(),
		"livemode": false, "pending_webhooks": 1, "type": typ, "data": map[string]any{"object": object}})
	return b
}

func charge(pi string, refunded int64, refunds ...map[string]any) map[string]any {
	c := map[string]any{"id": "ch_1", "object": "charge", "amount": 1299, "amount_refunded": refunded, "currency": "usd",
		"refunded": refunded == 1299, "status": "succeeded", "payment_intent": pi}
	if refunds != nil {
		data := make([]any, len(refunds))
		for i, r := range refunds {
			data[i] = r
		}
		c["refunds"] = map[string]any{"object": "list", "has_more": false, "data": data}
	}
	return c
}

func refundObject(id, pi, status string, amount int64) map[string]any {
	return map[string]any{"id": id, "object": "refund", "amount": amount, "currency": "usd", "status": status, "payment_intent": pi,
		"metadata": map[string]string{"order_id": "o-1"}}
}

// Stripe's refund events read as refund reports: charge.refunded names
// the newest succeeded refund listed (or none when the API version lists
// none) with the Charge's amount_refunded; the Refund events report
// succeeded, failed and canceled refunds; pending refunds and charges
// without a PaymentIntent report nothing; a forged one is refused.
func TestVerifyRefundEvents(t *testing.T) {
	t.Parallel()
	n, err := stripe.NewNotifier(testWebhookSecret)
	if err != nil {
		t.Fatal(err)
	}
	refund := func(pi, refundID string, ok bool, cents int64, orderID, evID string) []payment.Report {
		return []payment.Report{{Kind: payment.ReportRefund, OrderID: orderID, PaymentID: pi, RefundID: refundID, Succeeded: ok,
			AmountCents: cents, Currency: "USD", CallbackID: evID}}
	}
	for _, c := range []struct {
		name string
		body []byte
		want []payment.Report
	}{
		{"charge.refunded names the newest succeeded refund listed, with amount_refunded",
			refundEvent("evt_1", "charge.refunded", charge("pi_1", 1299, refundObject("re_2", "pi_1", "pending", 299), refundObject("re_1", "pi_1", "succeeded", 1000))),
			refund("pi_1", "re_1", true, 1299, "", "evt_1")},
		{"charge.refunded without a refunds list names none",
			refundEvent("evt_2", "charge.refunded", charge("pi_2", 1299)), refund("pi_2", "", true, 1299, "", "evt_2")},
		{"charge.refunded whose refunds are all pending reports nothing",
			refundEvent("evt_3", "charge.refunded", charge("pi_3", 1299, refundObject("re_3", "pi_3", "pending", 1299))), nil},
		{"charge.refunded of a charge without a PaymentIntent reports nothing",
			refundEvent("evt_4", "charge.refunded", charge("", 1299)), nil},
		{"charge.refund.updated succeeded",
			refundEvent("evt_5", "charge.refund.updated", refundObject("re_5", "pi_5", "succeeded", 1299)), refund("pi_5", "re_5", true, 1299, "o-1", "evt_5")},
		{"refund.failed",
			refundEvent("evt_6", "refund.failed", refundObject("re_6", "pi_6", "failed", 1299)), refund("pi_6", "re_6", false, 1299, "o-1", "evt_6")},
		{"refund.updated canceled",
			refundEvent("evt_7", "refund.updated", refundObject("re_7", "pi_7", "canceled", 1299)), refund("pi_7", "re_7", false, 1299, "o-1", "evt_7")},
		{"refund.updated pending reports nothing",
			refundEvent("evt_8", "refund.updated", refundObject("re_8", "pi_8", "pending", 1299)), nil},
	} {
		got, err := n.Verify(context.Background(), sign(c.body, testWebhookSecret, time.Now()), c.body)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %+v, %v; want %+v", c.name, got, err, c.want)
		}
	}
	body := refundEvent("evt_9", "charge.refunded", charge("pi_9", 1299))
	if _, err := n.Verify(context.Background(), sign(body, "whsec_another", time.Now()), body); !errors.Is(err, stripe.ErrInvalidSignature) {
		t.Errorf("signed with another secret: %v, want ErrInvalidSignature", err)
	}
	body = refundEvent("evt_10", "charge.refunded", map[string]any{"id": "pi_10", "object": "payment_intent"})
	if _, err := n.Verify(context.Background(), sign(body, testWebhookSecret, time.Now()), body); !errors.Is(err, stripe.ErrInvalidEvent) {
		t.Errorf("charge.refunded about a PaymentIntent: %v, want ErrInvalidEvent", err)
	}
}
