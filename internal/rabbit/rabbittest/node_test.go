package rabbittest

import (
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

// A node of the test's own restarts for real: a persistent message in a
// durable queue, published with a confirm before the restart, is there
// after; a non-durable queue is not.
func TestNodeRestartKeepsDurableMessages(t *testing.T) {
	n := StartNode(t)
	conn, err := amqp.Dial(n.URL)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("kept", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("lost", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	dc, err := ch.PublishWithDeferredConfirm("", "kept", false, false, amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte("m")})
	if err != nil || !dc.Wait() {
		t.Fatalf("publish: %v (confirmed %v)", err, dc != nil && dc.Acked())
	}
	took := n.Restart(t)
	t.Logf("restarted in %s", took)
	if !conn.IsClosed() {
		// The cut is seen a moment later; either way the old connection is gone.
		<-conn.NotifyClose(make(chan *amqp.Error, 1))
	}
	conn2, err := amqp.Dial(n.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close()
	ch2, err := conn2.Channel()
	if err != nil {
		t.Fatal(err)
	}
	q, err := ch2.QueueDeclarePassive("kept", true, false, false, false, nil)
	if err != nil || q.Messages != 1 {
		t.Fatalf("after the restart: queue kept %+v, %v; want its one message", q, err)
	}
	if _, err := ch2.QueueDeclarePassive("lost", false, false, false, false, nil); err == nil {
		t.Fatal("a non-durable queue survived the restart: it was not a real one")
	}
}
