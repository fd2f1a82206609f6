package webhook_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/outbox"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/sqlite"
	"github.com/lapsehq/lapse/store/storetest"
)

// The payloads a real store writes — every event type — validate against
// docs/events, alone and inside the envelope.
func TestStorePayloadsMatchTheSchemas(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "s.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	storetest.Stock(t, st, 10, "a", "b")
	storetest.Create(t, st, "paid", "a", "b")
	if _, err := st.StartPayment(ctx, store.StartPaymentParams{OrderID: "paid", PaymentID: "pi_1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.CompletePayment(ctx, store.PaymentParams{OrderID: "paid", PaymentID: "pi_1", AmountCents: 1000}); err != nil {
		t.Fatal(err)
	}
	o := storetest.Create(t, st, "moved", "a")
	if _, err := st.Extend(ctx, store.ExtendParams{OrderID: "moved", ExpiresAt: o.ExpiresAt.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	storetest.Create(t, st, "late", "a")
	if _, err := st.CancelOrder(ctx, "late"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.CompletePayment(ctx, store.PaymentParams{OrderID: "late", PaymentID: "pi_late", AmountCents: 1000}); err != nil {
		t.Fatal(err)
	}
	evs, err := st.UnpublishedEvents(ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	s := schemas(t)
	seen := map[string]bool{}
	for _, e := range evs {
		seen[e.Type] = true
		if err := s[e.Type+".schema.json"].Validate(decode(t, e.Payload)); err != nil {
			t.Errorf("%s of %s: %s\ndoes not match %s.schema.json: %v", e.Type, e.OrderID, e.Payload, e.Type, err)
		}
		body, _, err := outbox.FormatJSON.Structured(e)
		if err != nil {
			t.Fatal(err)
		}
		if err := s["envelope.schema.json"].Validate(decode(t, body)); err != nil {
			t.Errorf("envelope of %s: %v", e.ID, err)
		}
	}
	for _, typ := range []string{order.EventCreated, order.EventPaid, order.EventCancelled, order.EventRefundRequired, order.EventExtended} {
		if !seen[typ] {
			t.Errorf("the store wrote no %s event", typ)
		}
	}
}
