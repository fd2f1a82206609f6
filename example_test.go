package lapse_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store/sqlite"
)

// The embedded default: a SQLite file and in-process timers. An order that is
// not paid within its timeout (plus grace) is cancelled and its stock returns.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "lapse-example-")
	defer os.RemoveAll(dir)

	st, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(dir, "lapse.db")})
	if err != nil {
		panic(err)
	}
	defer st.Close()
	if err := st.Migrate(ctx); err != nil {
		panic(err)
	}
	svc, err := lapse.New(lapse.Config{Store: st, Grace: 0, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	go svc.Run(runCtx) // cancels due orders until stopped

	if _, err := svc.SetStock(ctx, "tee", 5); err != nil {
		panic(err)
	}
	res, err := svc.CreateOrder(ctx, lapse.CreateOrderRequest{
		ID: "o-1", Items: []order.Item{{SKU: "tee", Qty: 2}}, AmountCents: 1999, Timeout: 100 * time.Millisecond,
	})
	if err != nil {
		panic(err)
	}
	sku, _ := svc.GetSKU(ctx, "tee")
	fmt.Println(res.Order.Status, "available", sku.Available, "locked", sku.Locked)

	for o, _ := svc.Get(ctx, "o-1"); o.Status != order.Cancelled; o, _ = svc.Get(ctx, "o-1") {
		time.Sleep(10 * time.Millisecond)
	}
	o, _ := svc.Get(ctx, "o-1")
	sku, _ = svc.GetSKU(ctx, "tee")
	fmt.Println(o.Status, o.CancelReason, "available", sku.Available, "locked", sku.Locked)
	// Output:
	// PENDING available 3 locked 2
	// CANCELLED timeout available 5 locked 0
}

// A payment started before the deadline wins over the timer: the order is
// PAYING, never cancelled blind, and the gateway's callback makes it PAID.
func ExampleService_Pay() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "lapse-example-")
	defer os.RemoveAll(dir)
	st, _ := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(dir, "lapse.db")})
	defer st.Close()
	_ = st.Migrate(ctx)
	svc, _ := lapse.New(lapse.Config{Store: st, Logger: slog.New(slog.DiscardHandler)})
	_, _ = svc.SetStock(ctx, "tee", 5)
	_, _ = svc.CreateOrder(ctx, lapse.CreateOrderRequest{ID: "o-2", Items: []order.Item{{SKU: "tee", Qty: 1}}, AmountCents: 999})

	o, _ := svc.Pay(ctx, "o-2")
	fmt.Println(o.Status)
	res, _ := svc.Notify(ctx, lapse.Notification{OrderID: "o-2", PaymentID: o.PaymentID, Status: lapse.PaymentSucceeded, AmountCents: 999})
	sku, _ := svc.GetSKU(ctx, "tee")
	fmt.Println(res.Order.Status, "sold", sku.Sold)
	// Output:
	// PAYING
	// PAID sold 1
}
