package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/lapsehq/lapse/client"
	"github.com/lapsehq/lapse/order"
)

func TestExtend(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	c := newClient(t, e.url)
	ctx := context.Background()
	if _, err := c.SetStock(ctx, "tee", 5); err != nil {
		t.Fatal(err)
	}
	o, err := c.CreateOrder(ctx, client.CreateOrder{ID: "x1", Items: []order.Item{{SKU: "tee", Qty: 1}}, AmountCents: 100, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(3 * time.Hour).UTC().Truncate(time.Millisecond)
	got, err := c.Extend(ctx, "x1", at)
	if err != nil || !got.ExpiresAt.Equal(at) || got.Version != o.Version+1 || got.Status != order.Pending {
		t.Fatalf("Extend: %+v, %v; want expires_at %v", got, err, at)
	}
	before := time.Now()
	got, err = c.ExtendFor(ctx, "x1", 90*time.Second)
	if err != nil || got.ExpiresAt.Before(before.Add(90*time.Second).Truncate(time.Millisecond)) || got.ExpiresAt.After(time.Now().Add(90*time.Second)) {
		t.Fatalf("ExtendFor: %+v, %v; want expires_at 90 s from now", got, err)
	}
	_, err = c.Extend(ctx, "x1", time.Now().Add(-time.Minute))
	wantCode(t, "Extend into the past", err, 400, client.CodeInvalidField)
	_, err = c.ExtendFor(ctx, "nope", time.Minute)
	wantCode(t, "ExtendFor an unknown order", err, 404, client.CodeOrderNotFound)
	if _, err := c.Cancel(ctx, "x1"); err != nil {
		t.Fatal(err)
	}
	_, err = c.Extend(ctx, "x1", at)
	wantCode(t, "Extend a CANCELLED order", err, 409, client.CodeOrderNotPending)
}
