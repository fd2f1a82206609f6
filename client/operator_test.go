package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/lapsehq/lapse/client"
	"github.com/lapsehq/lapse/order"
)

// The operator's actions through the typed client, on a server without a
// gateway: the check and a cancel that would close are refused, no_close
// cancels as operator, and the buyer's cancel is as before.
func TestOperatorActions(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envConfig{})
	c := newClient(t, e.url)
	ctx := context.Background()
	if _, err := c.SetStock(ctx, "tee", 5); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"op1", "op2"} {
		if _, err := c.CreateOrder(ctx, client.CreateOrder{ID: id, Items: []order.Item{{SKU: "tee", Qty: 1}}, AmountCents: 100, Timeout: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Pay(ctx, "op1", ""); err != nil {
		t.Fatal(err)
	}
	_, err := c.Check(ctx, "op1")
	wantCode(t, "Check without a gateway", err, 409, client.CodeNoGateway)
	_, err = c.CancelAsOperator(ctx, "op1", client.OperatorCancel{})
	wantCode(t, "CancelAsOperator without a gateway", err, 409, client.CodeNoGateway)
	o, err := c.CancelAsOperator(ctx, "op1", client.OperatorCancel{NoClose: true})
	if err != nil || o.Status != order.Cancelled || o.CancelReason != order.ReasonOperator {
		t.Fatalf("CancelAsOperator no_close: %+v, %v", o, err)
	}
	_, err = c.CancelAsOperator(ctx, "op1", client.OperatorCancel{NoClose: true})
	wantCode(t, "CancelAsOperator a CANCELLED order", err, 409, client.CodeOrderNotOpen)
	if o, err := c.Cancel(ctx, "op2"); err != nil || o.CancelReason != order.ReasonBuyer {
		t.Fatalf("the buyer's Cancel: %+v, %v", o, err)
	}
}
