package core

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
)

// What a create sent in one round trip writes at the statement's now — its
// times as now plus createArgs' offsets, its payload as the parts around
// them — is exactly what createIn writes at that now: NewOrder(now) and its
// EventPayload, whatever the timeout, the grace, the now, and an id or SKU
// made to look like the keys cut at.
func TestCreateArgsWriteNewOrderAtAnyNow(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	ids := []string{"o1", `"created_at":"2000-01-01T00:00:00.000Z"`, `x","expires_at":"`, "é\u2028<&>"}
	for i := range 2000 {
		now := time.UnixMilli(r.Int64N(4e12)).UTC() // 1970 to 2096
		p := store.CreateOrderParams{
			ID: ids[i%len(ids)], AmountCents: 100, Currency: "EUR", IdempotencyKey: "k", RequestHash: "h",
			Timeout: time.Duration(r.Int64N(int64(48 * time.Hour))),
			Grace:   time.Duration(r.Int64N(int64(time.Hour))),
			Items:   store.ItemsBySKU([]order.Item{{SKU: ids[(i+1)%len(ids)], Qty: 2}, {SKU: "b", Qty: 1}}),
		}
		if i%3 == 0 {
			p.ReservationID = "res-1"
		}
		for _, known := range []time.Time{{}, now} { // the statement's clock, or the transaction's
			a, err := createArgs(p, known, false)
			if err != nil {
				t.Fatalf("%+v: %v", p, err)
			}
			want := p.NewOrder(now)
			if got := now.Add(a.ExpiresIn); !got.Equal(want.ExpiresAt) {
				t.Fatalf("timeout %v at %v: expires %v, want %v", p.Timeout, now, got, want.ExpiresAt)
			}
			if got := now.Add(a.CancelIn); !got.Equal(want.CancelAfter) {
				t.Fatalf("grace %v at %v: cancel_after %v, want %v", p.Grace, now, got, want.CancelAfter)
			}
			payload, err := EventPayload(want)
			if err != nil {
				t.Fatal(err)
			}
			pp := a.PayloadParts
			got := pp[0] + order.FormatTime(now) + pp[1] + order.FormatTime(want.ExpiresAt) + pp[2] +
				order.FormatTime(want.CancelAfter) + pp[3]
			if got != string(payload) {
				t.Fatalf("payload at %v:\n got %s\nwant %s", now, got, payload)
			}
			if a.Reserve != (p.ReservationID == "") || a.EventType != order.EventCreated || a.Event.OrderID != p.ID ||
				a.Key != (Key{Key: "k", RequestHash: "h", OrderID: p.ID}) || a.Order.ID != p.ID {
				t.Fatalf("args %+v of %+v", a, p)
			}
		}
	}
}

// A payload that does not hold each time once is refused, not cut wrong.
func TestPayloadPartsRefusesAPayloadItCannotCut(t *testing.T) {
	t.Parallel()
	o := store.CreateOrderParams{ID: "o1"}.NewOrder(createBase)
	good, err := EventPayload(o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := payloadParts(good, o); err != nil {
		t.Fatalf("the order's own payload: %v", err)
	}
	for _, bad := range []string{
		`{}`,
		string(good) + string(good),
		`{"created_at":"2000-01-01T00:00:00.000Z"}`,
	} {
		if _, err := payloadParts([]byte(bad), o); err == nil {
			t.Errorf("%s: cut", bad)
		}
	}
	o2 := o
	o2.ExpiresAt = o.ExpiresAt.Add(time.Millisecond)
	if _, err := payloadParts(good, o2); err == nil {
		t.Error("a payload of other times: cut")
	}
}
