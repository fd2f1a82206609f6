package webhook_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/outbox"
)

// The JSON Schemas of docs/events are checked here, where events leave
// lapse, against payloads made the way the store makes them: the order as
// encoding/json renders it, led by schema_version.

const schemaDir = "../../docs/events"

// schemas compiles every schema of docs/events, keyed by file name.
func schemas(t *testing.T) map[string]*jsonschema.Schema {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(schemaDir, "*.schema.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no schema in %s: %v", schemaDir, err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat() // date-time and uuid are checked, not just annotations
	out := map[string]*jsonschema.Schema{}
	for _, f := range files {
		var head struct {
			Schema string `json:"$schema"`
			Title  string `json:"title"`
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &head); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if head.Schema != "https://json-schema.org/draft/2020-12/schema" || head.Title == "" {
			t.Errorf("%s: $schema %q, title %q; want draft 2020-12 and a title", f, head.Schema, head.Title)
		}
		s, err := c.Compile(f)
		if err != nil {
			t.Fatalf("compile %s: %v", f, err)
		}
		out[filepath.Base(f)] = s
	}
	for _, typ := range []string{order.EventCreated, order.EventPaid, order.EventCancelled, order.EventRefundRequired, order.EventRefunded, order.EventExtended} {
		if out[typ+".schema.json"] == nil {
			t.Errorf("no schema for %s in %s", typ, schemaDir)
		}
	}
	if out["envelope.schema.json"] == nil {
		t.Errorf("no envelope.schema.json in %s", schemaDir)
	}
	return out
}

// payload is o as the store writes it into an event: schema_version first,
// then the API's rendering of the order, then extra (refund).
func payload(t *testing.T, o order.Order, extra map[string]any) []byte {
	t.Helper()
	b, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	out := append([]byte(`{"schema_version":1,`), b[1:]...)
	for k, v := range extra {
		x, err := json.Marshal(map[string]any{k: v})
		if err != nil {
			t.Fatal(err)
		}
		out = append(append(out[:len(out)-1], ','), x[1:]...)
	}
	return out
}

func decode(t *testing.T, b []byte) any {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return v
}

// edit returns b with fn applied to its top-level object.
func edit(t *testing.T, b []byte, fn func(m map[string]any)) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	fn(m)
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// sampleOrders are one order in each state an event reports.
func sampleOrders() (created, paid, cancelled, paidTwice order.Order) {
	at := time.Date(2025, 3, 14, 9, 26, 53, 589_000_000, time.UTC)
	created = order.Order{
		ID: "0195a3c2-7d1e-7b3a-9c4d-5e6f7a8b9c0d", Status: order.Pending,
		Items:       []order.Item{{SKU: "SKU-1", Qty: 2}, {SKU: "book:978-0", Qty: 1}},
		AmountCents: 4999, Currency: "EUR",
		CreatedAt: at, ExpiresAt: at.Add(15 * time.Minute), CancelAfter: at.Add(16 * time.Minute),
		Version: 1,
	}
	paid = created
	paid.Status, paid.PaidAt, paid.PaymentID, paid.PaymentAttempts, paid.Version = order.Paid, at.Add(3*time.Minute), "pi_3Nq9", 1, 4
	cancelled = created
	cancelled.ID, cancelled.Status, cancelled.CancelledAt, cancelled.CancelReason, cancelled.Version = "shop-42", order.Cancelled, at.Add(16*time.Minute), order.ReasonTimeout, 2
	paidTwice = paid
	paidTwice.RefundRequired, paidTwice.Version = true, 5
	paidTwice.Payments = []order.Payment{ // as a read of one order shows them
		{PaymentID: "pi_3Nq8", Status: order.PaymentSuperseded, CreatedAt: at.Add(time.Minute), UpdatedAt: at.Add(2 * time.Minute)},
		{PaymentID: "pi_3Nq9", Status: order.PaymentSucceeded, AmountCents: 4999, CreatedAt: at.Add(2 * time.Minute), UpdatedAt: at.Add(3 * time.Minute)},
		{PaymentID: "pi_3Nq8", Status: order.PaymentRefundRequired, AmountCents: 4999, CreatedAt: at.Add(4 * time.Minute), UpdatedAt: at.Add(4 * time.Minute)},
	}
	return created, paid, cancelled, paidTwice
}

func TestEventSchemas(t *testing.T) {
	s := schemas(t)
	created, paid, cancelled, paidTwice := sampleOrders()
	buyerCancelled := cancelled
	buyerCancelled.CancelReason = order.ReasonBuyer
	cancelledThenPaid := cancelled
	cancelledThenPaid.RefundRequired, cancelledThenPaid.PaymentID, cancelledThenPaid.Version = true, "pi_late", 3
	extended := created
	extended.ExpiresAt, extended.CancelAfter, extended.Version = created.ExpiresAt.Add(time.Hour), created.CancelAfter.Add(time.Hour), 2
	extendedAfterFailure := extended
	extendedAfterFailure.PaymentAttempts, extendedAfterFailure.PaymentID, extendedAfterFailure.Version = 1, "pi_3Nq7", 4
	refund := func(id string, cents int64) map[string]any {
		return map[string]any{"refund": map[string]any{"payment_id": id, "amount_cents": cents}}
	}
	refundedOrder := cancelledThenPaid
	refundedOrder.RefundRequired, refundedOrder.Version = false, refundedOrder.Version+1
	refunded := func(id, refundID string, manual bool) map[string]any {
		r := map[string]any{"payment_id": id, "amount_cents": 4999, "currency": "USD", "refund_id": refundID, "manual": manual}
		if manual {
			r["note"], r["actor"] = "refunded in the gateway's console", "alice"
		}
		return map[string]any{"refund": r}
	}

	valid := []struct {
		typ     string
		payload []byte
	}{
		{order.EventCreated, payload(t, created, nil)},
		{order.EventPaid, payload(t, paid, nil)},
		{order.EventCancelled, payload(t, cancelled, nil)},
		{order.EventCancelled, payload(t, buyerCancelled, nil)},
		{order.EventRefundRequired, payload(t, cancelledThenPaid, refund("pi_late", 4999))},
		{order.EventRefundRequired, payload(t, paidTwice, refund("pi_3Nq8", 4999))},
		{order.EventRefunded, payload(t, refundedOrder, refunded("pi_late", "re_3Nq9", false))},
		{order.EventRefunded, payload(t, refundedOrder, refunded("pi_late", "", true))},
		{order.EventExtended, payload(t, extended, nil)},
		{order.EventExtended, payload(t, extendedAfterFailure, nil)},
		// Additive changes keep version 1: a property receivers do not know yet.
		{order.EventPaid, edit(t, payload(t, paid, nil), func(m map[string]any) { m["loyalty_points"] = 12 })},
	}
	for _, v := range valid {
		if err := s[v.typ+".schema.json"].Validate(decode(t, v.payload)); err != nil {
			t.Errorf("%s payload %s does not validate: %v", v.typ, v.payload, err)
		}
		// The envelope validates the payload by its type, and so does the
		// data of a structured CloudEvent.
		e := order.Event{ID: "0195a3c2-8000-7000-8000-000000000001", Type: v.typ, OrderID: stringField(t, v.payload, "id"),
			Payload: v.payload, CreatedAt: time.Date(2025, 3, 14, 9, 26, 53, 589_123_000, time.UTC)}
		body, _, err := outbox.FormatJSON.Structured(e)
		if err != nil {
			t.Fatal(err)
		}
		if err := s["envelope.schema.json"].Validate(decode(t, body)); err != nil {
			t.Errorf("%s envelope %s does not validate: %v", v.typ, body, err)
		}
		ce, _, err := outbox.FormatCloudEvents.Structured(e)
		if err != nil {
			t.Fatal(err)
		}
		var data struct{ Data json.RawMessage }
		if err := json.Unmarshal(ce, &data); err != nil {
			t.Fatal(err)
		}
		if err := s[v.typ+".schema.json"].Validate(decode(t, data.Data)); err != nil {
			t.Errorf("%s CloudEvent data %s does not validate: %v", v.typ, data.Data, err)
		}
	}

	base := map[string][]byte{
		order.EventCreated:        payload(t, created, nil),
		order.EventPaid:           payload(t, paid, nil),
		order.EventCancelled:      payload(t, cancelled, nil),
		order.EventRefundRequired: payload(t, cancelledThenPaid, refund("pi_late", 4999)),
		order.EventRefunded:       payload(t, refundedOrder, refunded("pi_late", "re_3Nq9", false)),
		order.EventExtended:       payload(t, extended, nil),
	}
	invalid := []struct {
		name string
		typ  string
		fn   func(m map[string]any)
	}{
		{"no id", order.EventCreated, func(m map[string]any) { delete(m, "id") }},
		{"no schema_version", order.EventCreated, func(m map[string]any) { delete(m, "schema_version") }},
		{"schema_version 2", order.EventPaid, func(m map[string]any) { m["schema_version"] = 2 }},
		{"created but PAYING", order.EventCreated, func(m map[string]any) { m["status"] = "PAYING" }},
		{"paid but PENDING", order.EventPaid, func(m map[string]any) { m["status"] = "PENDING" }},
		{"cancelled but PAID", order.EventCancelled, func(m map[string]any) { m["status"] = "PAID" }},
		{"unknown status", order.EventRefundRequired, func(m map[string]any) { m["status"] = "EXPIRED" }},
		{"paid without paid_at", order.EventPaid, func(m map[string]any) { delete(m, "paid_at") }},
		{"paid without payment_id", order.EventPaid, func(m map[string]any) { delete(m, "payment_id") }},
		{"cancelled without reason", order.EventCancelled, func(m map[string]any) { delete(m, "cancel_reason") }},
		{"cancelled by an admin", order.EventCancelled, func(m map[string]any) { m["cancel_reason"] = "admin" }},
		{"refund without refund", order.EventRefundRequired, func(m map[string]any) { delete(m, "refund") }},
		{"refund without amount", order.EventRefundRequired, func(m map[string]any) { delete(m["refund"].(map[string]any), "amount_cents") }},
		{"refund not flagged", order.EventRefundRequired, func(m map[string]any) { m["refund_required"] = false }},
		{"refunded without refund", order.EventRefunded, func(m map[string]any) { delete(m, "refund") }},
		{"refunded without its refund id", order.EventRefunded, func(m map[string]any) { delete(m["refund"].(map[string]any), "refund_id") }},
		{"refunded manual as a string", order.EventRefunded, func(m map[string]any) { m["refund"].(map[string]any)["manual"] = "yes" }},
		{"no items", order.EventCreated, func(m map[string]any) { m["items"] = []any{} }},
		{"amount as a string", order.EventCreated, func(m map[string]any) { m["amount_cents"] = "49.99" }},
		{"time not in UTC", order.EventCreated, func(m map[string]any) { m["created_at"] = "2025-03-14T10:26:53.589+01:00" }},
		{"time without milliseconds", order.EventCreated, func(m map[string]any) { m["expires_at"] = "2025-03-14T09:41:53Z" }},
		{"currency in lower case", order.EventCreated, func(m map[string]any) { m["currency"] = "eur" }},
		{"extended but PAYING", order.EventExtended, func(m map[string]any) { m["status"] = "PAYING" }},
		{"extended but CANCELLED", order.EventExtended, func(m map[string]any) {
			m["status"], m["cancelled_at"], m["cancel_reason"] = "CANCELLED", m["expires_at"], "timeout"
		}},
		{"extended without expires_at", order.EventExtended, func(m map[string]any) { delete(m, "expires_at") }},
	}
	for _, c := range invalid {
		b := edit(t, base[c.typ], c.fn)
		if err := s[c.typ+".schema.json"].Validate(decode(t, b)); err == nil {
			t.Errorf("%s: %s payload %s validates; want it refused", c.name, c.typ, b)
		}
	}

	// Each status-changing event's schema refuses the others' payloads.
	for _, typ := range []string{order.EventCreated, order.EventPaid, order.EventCancelled} {
		for _, other := range []string{order.EventCreated, order.EventPaid, order.EventCancelled} {
			if other == typ {
				continue
			}
			if err := s[typ+".schema.json"].Validate(decode(t, base[other])); err == nil {
				t.Errorf("the %s payload %s validates as %s; want it refused", other, base[other], typ)
			}
		}
	}

	// The envelope checks data against its type's schema, and its own fields.
	good, _, err := outbox.FormatJSON.Structured(order.Event{ID: "0195a3c2-8000-7000-8000-000000000002", Type: order.EventPaid,
		OrderID: created.ID, Payload: base[order.EventPaid], CreatedAt: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	for name, fn := range map[string]func(m map[string]any){
		"order.paid around a PENDING order": func(m map[string]any) { m["data"] = decodeMap(t, base[order.EventCreated]) },
		"order.extended around a PAID order": func(m map[string]any) {
			m["type"] = order.EventExtended
		},
		"no id":                 func(m map[string]any) { delete(m, "id") },
		"an id that is no UUID": func(m map[string]any) { m["id"] = "evt-1" },
		"no data":               func(m map[string]any) { delete(m, "data") },
		"no created_at":         func(m map[string]any) { delete(m, "created_at") },
	} {
		if err := s["envelope.schema.json"].Validate(decode(t, edit(t, good, fn))); err == nil {
			t.Errorf("envelope with %s validates; want it refused", name)
		}
	}
	// An event type added later passes the envelope: receivers skip it.
	later := edit(t, good, func(m map[string]any) { m["type"] = "order.shipped"; m["data"] = map[string]any{"anything": true} })
	if err := s["envelope.schema.json"].Validate(decode(t, later)); err != nil {
		t.Errorf("envelope of a new event type: %v; want it accepted", err)
	}
}

func stringField(t *testing.T, b []byte, key string) string {
	t.Helper()
	s, _ := decodeMap(t, b)[key].(string)
	if strings.TrimSpace(s) == "" {
		t.Fatalf("%s has no %s", b, key)
	}
	return s
}

func decodeMap(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}
