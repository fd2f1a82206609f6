package lapse_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/lapsehq/lapse/internal/rabbit/rabbittest"
	"github.com/lapsehq/lapse/ordersvc"
)

// The answers decide over RabbitMQ as over HTTP: lapse's AMQP client
// publishes the signed commands, ordersvc's AMQP receiver verifies them and
// has the shop apply them (its first applies fail and are requeued), and
// every order ends as the shop answered.
func TestOrderServiceAnswersDecideOverAMQP(t *testing.T) {
	rcv := newShopReceiver(t)
	rcv.failing = 3 // the first applies fail: requeued by the receiver
	st := orderServiceStore(t)
	url := rabbittest.URL(t)
	prefix := rabbittest.Name("orders")
	admin := rabbittest.Admin(t)
	rabbittest.DeleteExchangeAtEnd(t, admin, prefix)
	opts := []ordersvc.AMQPOption{ordersvc.AMQPPrefix(prefix), ordersvc.AMQPSecrets(testSecret),
		ordersvc.AMQPLogger(slog.New(slog.DiscardHandler))}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	server, err := ordersvc.NewAMQPServer(ctx, url, rcv.apply, append(opts, ordersvc.AMQPRetryBackoff(10*time.Millisecond, 100*time.Millisecond))...)
	if err != nil {
		t.Fatal(err)
	}
	serveCtx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- server.Serve(serveCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
		_ = server.Close()
		if ch, err := admin.Channel(); err == nil {
			_, _ = ch.QueueDelete(prefix+".commands", false, false, false)
			_ = ch.Close()
		}
	})
	client, err := ordersvc.DialAMQP(ctx, url, append(opts, ordersvc.AMQPTimeout(5*time.Second))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.Close()
		if ch, err := admin.Channel(); err == nil {
			_, _ = ch.QueueDelete(client.ReplyQueue(), false, false, false)
			_ = ch.Close()
		}
	})
	svc, _ := orderServiceOn(t, st, client)
	checkAnswersDecide(t, svc, rcv)
	if st := server.Stats(); st.Unverified+st.Invalid != 0 || st.Requeued < 3 {
		t.Errorf("receiver stats %+v: want every command verified, and the 3 failed applies requeued", st)
	}
}
