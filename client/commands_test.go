package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/lapsehq/lapse/client"
	"github.com/lapsehq/lapse/internal/ordersvctest"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/ordersvc"
)

// The typed client's view of order-service mode's cancel commands, against
// the real handler on PostgreSQL and a real signed receiver.
func TestCommands(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rcv := ordersvctest.New(t)
	e := newEnv(t, envConfig{postgres: true, orderService: rcv.Client(t)})
	c := newClient(t, e.url)
	rcv.Set("k-ok", ordersvctest.Pending)
	for _, id := range []string{"k-ok", "k-gone-1", "k-gone-2"} {
		if _, err := c.CreateOrder(ctx, client.CreateOrder{ID: id, Items: []order.Item{{SKU: "tee", Qty: 1}}, AmountCents: 100, Timeout: 50 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
	}
	var dead client.CommandPage
	var err error
	for deadline := time.Now().Add(20 * time.Second); len(dead.Commands) < 2; time.Sleep(5 * time.Millisecond) {
		if dead, err = c.ListCommands(ctx, client.ListCommands{Dead: true}); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("DEAD commands %+v: want the two the order service does not know", dead.Commands)
		}
	}
	for _, cmd := range dead.Commands {
		if cmd.Status != order.TaskDead || cmd.Result != string(ordersvc.NotFound) || cmd.DeadAt.IsZero() || cmd.CancelAfter.IsZero() ||
			cmd.ID != ordersvc.CommandID(cmd.OrderID, cmd.CancelAfter) {
			t.Fatalf("DEAD command %+v", cmd)
		}
	}
	first, err := c.ListCommands(ctx, client.ListCommands{Limit: 1})
	if err != nil || len(first.Commands) != 1 || first.NextAfter == "" {
		t.Fatalf("a page of one: %+v, %v", first, err)
	}
	if rest, err := c.ListCommands(ctx, client.ListCommands{Limit: 1, After: first.NextAfter}); err != nil || len(rest.Commands) != 1 ||
		rest.Commands[0].ID == first.Commands[0].ID || rest.NextAfter != "" {
		t.Fatalf("the second page: %+v, %v", rest, err)
	}
	var ok client.CommandPage
	for deadline := time.Now().Add(20 * time.Second); len(ok.Commands) == 0 || ok.Commands[0].Status != order.TaskDone; time.Sleep(5 * time.Millisecond) {
		if ok, err = c.ListCommands(ctx, client.ListCommands{OrderID: "k-ok"}); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("k-ok's commands %+v: want one DONE", ok.Commands)
		}
	}
	if o, err := c.GetOrder(ctx, "k-ok"); err != nil || o.Status != order.Cancelled || len(o.Commands) != 1 || o.Commands[0].ID != ok.Commands[0].ID {
		t.Fatalf("k-ok with its commands: %+v, %v", o, err)
	}

	// k-gone-1 becomes known: retried by id, answered, cancelled.
	rcv.Set("k-gone-1", ordersvctest.Pending)
	var one string
	for _, cmd := range dead.Commands {
		if cmd.OrderID == "k-gone-1" {
			one = cmd.ID
		}
	}
	if one == "" {
		t.Fatalf("no DEAD command of k-gone-1 in %+v", dead.Commands)
	}
	if n, err := c.RetryCommands(ctx, client.DeadCommands{IDs: []string{one, "cmd_none"}}); err != nil || n != 1 {
		t.Fatalf("RetryCommands ids: %d, %v", n, err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		o, err := c.GetOrder(ctx, "k-gone-1")
		if err != nil {
			t.Fatal(err)
		}
		if o.Status == order.Cancelled {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("k-gone-1 after the retry: %s", o.Status)
		}
	}
	// k-gone-2 still unknown: retried (DEAD again), then purged.
	if n, err := c.RetryCommands(ctx, client.DeadCommands{AllDead: true}); err != nil || n != 1 {
		t.Fatalf("RetryCommands dead: %d, %v", n, err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if dead, err = c.ListCommands(ctx, client.ListCommands{Dead: true}); err != nil {
			t.Fatal(err)
		}
		if len(dead.Commands) == 1 && dead.Commands[0].OrderID == "k-gone-2" && dead.Commands[0].Attempts == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("DEAD after the second retry: %+v", dead.Commands)
		}
	}
	if n, err := c.PurgeCommands(ctx, client.DeadCommands{IDs: []string{dead.Commands[0].ID}}); err != nil || n != 1 {
		t.Fatalf("PurgeCommands ids: %d, %v", n, err)
	}
	if n, err := c.PurgeCommands(ctx, client.DeadCommands{AllDead: true}); err != nil || n != 0 {
		t.Fatalf("PurgeCommands dead with none left: %d, %v", n, err)
	}
	if o, err := c.GetOrder(ctx, "k-gone-2"); err != nil || o.Status != order.Cancelling || o.Commands != nil {
		t.Fatalf("k-gone-2 after the purge: %+v, %v; want CANCELLING without commands", o, err)
	}

	_, err = c.RetryCommands(ctx, client.DeadCommands{IDs: []string{"a"}, AllDead: true})
	wantCode(t, "RetryCommands of both", err, 400, client.CodeInvalidField)
	_, err = c.PurgeCommands(ctx, client.DeadCommands{})
	wantCode(t, "PurgeCommands of nothing", err, 400, client.CodeInvalidField)
	_, err = c.ListCommands(ctx, client.ListCommands{Limit: 501})
	wantCode(t, "ListCommands limit 501", err, 400, client.CodeInvalidField)
	_, err = c.ListCommands(ctx, client.ListCommands{OrderID: "not an id"})
	wantCode(t, "ListCommands of a bad order id", err, 400, client.CodeInvalidField)
}
