package ordersvc_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/lapsehq/lapse/internal/rabbit"
	"github.com/lapsehq/lapse/internal/rabbit/rabbittest"
	"github.com/lapsehq/lapse/ordersvc"
)

// memShop is an order service in memory: a conditional update per command,
// with switches for the faults the transport must carry (failing applies,
// a gate that holds them).
type memShop struct {
	mu       sync.Mutex
	orders   map[string]string // pending, paid, cancelled
	applied  map[string]int    // cancels applied, by order
	ids      map[string]map[string]bool
	calls    atomic.Int64
	failures atomic.Int64  // the next this many applies fail
	gate     chan struct{} // non-nil: apply waits for it to close
}

func newMemShop() *memShop {
	return &memShop{orders: map[string]string{}, applied: map[string]int{}, ids: map[string]map[string]bool{}}
}

func (s *memShop) add(id, status string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.orders[id] = status
}

func (s *memShop) apply(ctx context.Context, c ordersvc.Command, id string) (ordersvc.Answer, error) {
	s.calls.Add(1)
	s.mu.Lock()
	gate := s.gate
	s.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return ordersvc.Answer{}, ctx.Err()
		}
	}
	for {
		n := s.failures.Load()
		if n <= 0 {
			break
		}
		if s.failures.CompareAndSwap(n, n-1) {
			return ordersvc.Answer{}, errors.New("database down")
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ids[c.OrderID] == nil {
		s.ids[c.OrderID] = map[string]bool{}
	}
	s.ids[c.OrderID][id] = true
	switch s.orders[c.OrderID] {
	case "pending":
		s.orders[c.OrderID] = "cancelled"
		s.applied[c.OrderID]++
		return ordersvc.Answer{Result: ordersvc.Cancelled, CommandID: id}, nil
	case "cancelled":
		return ordersvc.Answer{Result: ordersvc.AlreadyCancelled, CommandID: id}, nil
	case "paid":
		return ordersvc.Answer{Result: ordersvc.AlreadyPaid, CommandID: id}, nil
	}
	return ordersvc.Answer{Result: ordersvc.NotFound}, nil
}

func (s *memShop) timesApplied(order string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.applied[order]
}

func quietAMQP() ordersvc.AMQPOption { return ordersvc.AMQPLogger(slog.New(slog.DiscardHandler)) }

// amqpDelivery is the first delivery of the command for order, due now.
func amqpDelivery(order string) ordersvc.Delivery {
	at := time.Now().Truncate(time.Millisecond)
	return ordersvc.Delivery{ID: ordersvc.CommandID(order, at), Attempt: 1, Command: ordersvc.Command{
		Type: ordersvc.Type, OrderID: order, Deadline: ordersvc.FormatTime(at.Add(-time.Second)), CancelAfter: ordersvc.FormatTime(at),
		AmountCents: 1200, Currency: "EUR", Attempts: []ordersvc.Attempt{}, SchemaVersion: ordersvc.SchemaVersion}}
}

// amqpPrefix returns a prefix of the test's own, whose exchange and command
// queue are deleted when t ends.
func amqpPrefix(t testing.TB) string {
	t.Helper()
	prefix := rabbittest.Name("orders")
	rabbittest.DeleteAtEnd(t, []string{prefix}, []string{prefix + ".commands"})
	return prefix
}

// receiver runs an AMQPServer applying with shop until stopped (or t
// ends).
type receiver struct {
	t      testing.TB
	server *ordersvc.AMQPServer
	stop   context.CancelFunc
	served chan error
}

func startReceiver(t testing.TB, url string, shop *memShop, opts ...ordersvc.AMQPOption) *receiver {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	opts = append([]ordersvc.AMQPOption{ordersvc.AMQPRetryBackoff(10*time.Millisecond, 100*time.Millisecond), quietAMQP()}, opts...)
	s, err := ordersvc.NewAMQPServer(ctx, url, shop.apply, opts...)
	if err != nil {
		t.Fatal(err)
	}
	serveCtx, stop := context.WithCancel(context.Background())
	r := &receiver{t: t, server: s, stop: stop, served: make(chan error, 1)}
	go func() { r.served <- s.Serve(serveCtx) }()
	t.Cleanup(r.close)
	return r
}

// close stops Serve, checks it returned nil, and closes the server. It is
// idempotent.
func (r *receiver) close() {
	if r.stop == nil {
		return
	}
	r.stop()
	r.stop = nil
	if err := <-r.served; err != nil {
		r.t.Errorf("Serve: %v", err)
	}
	if err := r.server.Close(); err != nil {
		r.t.Errorf("server Close: %v", err)
	}
}

// dialClient dials a client, closed and its reply queue deleted when t
// ends.
func dialClient(t testing.TB, url string, opts ...ordersvc.AMQPOption) *ordersvc.AMQPClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := ordersvc.DialAMQP(ctx, url, append([]ordersvc.AMQPOption{quietAMQP()}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	rabbittest.DeleteAtEnd(t, nil, []string{c.ReplyQueue()})
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("client Close: %v", err)
		}
	})
	return c
}

func send(t testing.TB, c ordersvc.Client, d ordersvc.Delivery) ordersvc.Answer {
	t.Helper()
	a, err := c.Send(context.Background(), d)
	if err != nil {
		t.Fatalf("Send %s: %v", d.ID, err)
	}
	return a
}

// headersOf returns a message's string headers as HTTP ones, as a
// receiver in another language would hand them to its Standard Webhooks
// library.
func headersOf(d amqp.Delivery) http.Header {
	h := http.Header{}
	for k, v := range d.Headers {
		if s, ok := v.(string); ok {
			h.Set(k, s)
		}
	}
	return h
}

func TestAMQPRoundTripIsSignedAndVerified(t *testing.T) {
	shop := newMemShop()
	shop.add("o-1", "pending")
	prefix := amqpPrefix(t)
	url := rabbittest.URL(t)
	// The receiver holds the previous secret only, as during a rotation;
	// lapse signs with both.
	r := startReceiver(t, url, shop, ordersvc.AMQPPrefix(prefix), ordersvc.AMQPSecrets(secretOld))
	c := dialClient(t, url, ordersvc.AMQPPrefix(prefix), ordersvc.AMQPSecrets(secretNew, secretOld), ordersvc.AMQPTimeout(7*time.Second))
	admin := rabbittest.Admin(t)
	rec := rabbittest.Record(t, admin, rabbittest.Queue(t, admin, nil, prefix, "order.*"))

	d := amqpDelivery("o-1")
	d.Attempt = 3
	if a := send(t, c, d); a.Result != ordersvc.Cancelled || a.CommandID != d.ID {
		t.Errorf("first send: %+v, want cancelled for %s", a, d.ID)
	}
	d.Attempt = 4
	if a := send(t, c, d); a.Result != ordersvc.AlreadyCancelled {
		t.Errorf("second send: %+v, want already_cancelled", a)
	}
	if n := shop.timesApplied("o-1"); n != 1 {
		t.Errorf("cancel applied %d times", n)
	}

	rec.WaitIDs(t, []string{d.ID})
	rabbittest.Eventually(t, 10*time.Second, func() bool { return len(rec.Deliveries()) == 2 },
		func() string { return fmt.Sprintf("%d commands recorded, want 2", len(rec.Deliveries())) })
	for i, m := range rec.Deliveries() {
		h := headersOf(m)
		if m.DeliveryMode != amqp.Persistent || m.ContentType != "application/json" || m.MessageId != d.ID || m.CorrelationId != d.ID ||
			m.ReplyTo != c.ReplyQueue() || m.RoutingKey != ordersvc.Type || m.Expiration != "7000" {
			t.Errorf("command travelled as mode %d, type %q, message_id %q, correlation_id %q, reply_to %q, key %q, expiration %q",
				m.DeliveryMode, m.ContentType, m.MessageId, m.CorrelationId, m.ReplyTo, m.RoutingKey, m.Expiration)
		}
		if h.Get("webhook-id") != d.ID || h.Get(ordersvc.HeaderAttempt) != fmt.Sprint(3+i) || h.Get(ordersvc.HeaderDeadline) != d.Command.Deadline {
			t.Errorf("headers %v: want webhook-id %s, lapse-attempt %d, lapse-deadline %s", m.Headers, d.ID, 3+i, d.Command.Deadline)
		}
		// Any receiver verifies with its Standard Webhooks library and
		// either secret.
		for _, secret := range []string{secretOld, secretNew} {
			w, err := standardwebhooks.NewWebhook(secret)
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Verify(m.Body, h); err != nil {
				t.Errorf("signature does not verify: %v", err)
			}
		}
	}
	rabbittest.Eventually(t, 10*time.Second, func() bool {
		st := r.server.Stats()
		return st.Applied == 2 && st.Unverified+st.Invalid+st.Requeued == 0
	},
		func() string { return fmt.Sprintf("receiver stats %+v, want 2 applied", r.server.Stats()) })
	if n := c.Dropped(); n != 0 {
		t.Errorf("Dropped = %d", n)
	}
}

func TestAMQPUnverifiedCommandIsRejectedUnanswered(t *testing.T) {
	shop := newMemShop()
	shop.add("o-1", "pending")
	prefix := amqpPrefix(t)
	url := rabbittest.URL(t)
	r := startReceiver(t, url, shop, ordersvc.AMQPPrefix(prefix), ordersvc.AMQPSecrets(secretOld))
	// A lapse holding another secret.
	c := dialClient(t, url, ordersvc.AMQPPrefix(prefix), ordersvc.AMQPSecrets(secretNew), ordersvc.AMQPTimeout(2*time.Second))
	_, err := c.Send(context.Background(), amqpDelivery("o-1"))
	if err == nil || ordersvc.IsRefusal(err) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Send with a wrong signature = %v, want no answer (a retryable timeout)", err)
	}
	// Unsigned, straight onto the exchange.
	ch := rabbittest.Channel(t, rabbittest.Admin(t))
	if err := ch.PublishWithContext(context.Background(), prefix, ordersvc.Type, false, false,
		amqp.Publishing{MessageId: "forged", Body: []byte(`{"type":"order.cancel_if_pending","order_id":"o-1"}`)}); err != nil {
		t.Fatal(err)
	}
	rabbittest.Eventually(t, 10*time.Second, func() bool { return r.server.Stats().Unverified == 2 },
		func() string { return fmt.Sprintf("receiver stats %+v, want 2 unverified", r.server.Stats()) })
	if n := shop.calls.Load(); n != 0 {
		t.Errorf("apply called %d times for unverified commands", n)
	}
	// Rejected, not requeued: the queue is empty.
	q, err := ch.QueueDeclarePassive(prefix+".commands", true, false, false, false, nil)
	if err != nil || q.Messages != 0 {
		t.Errorf("command queue holds %d messages (%v), want none", q.Messages, err)
	}
}

func TestAMQPUnreadableCommandIsRefused(t *testing.T) {
	shop := newMemShop()
	prefix := amqpPrefix(t)
	url := rabbittest.URL(t)
	r := startReceiver(t, url, shop, ordersvc.AMQPPrefix(prefix), ordersvc.AMQPSecrets(secretOld))
	c := dialClient(t, url, ordersvc.AMQPPrefix(prefix), ordersvc.AMQPSecrets(secretOld))
	d := amqpDelivery("o-1")
	d.Command.SchemaVersion = 2
	_, err := c.Send(context.Background(), d)
	var serr *ordersvc.StatusError
	if !ordersvc.IsRefusal(err) || !errors.As(err, &serr) || serr.Code != http.StatusBadRequest {
		t.Errorf("Send of an unknown schema_version = %v, want a refusal with status 400", err)
	}
	if st := r.server.Stats(); st.Invalid != 1 || shop.calls.Load() != 0 {
		t.Errorf("receiver stats %+v and %d applies, want 1 invalid and none applied", st, shop.calls.Load())
	}
}

func TestAMQPUnroutableCommandIsRetryable(t *testing.T) {
	// A lapse whose order service never declared its queue.
	c := dialClient(t, rabbittest.URL(t), ordersvc.AMQPPrefix(amqpPrefix(t)), ordersvc.AMQPSecrets(secretOld))
	_, err := c.Send(context.Background(), amqpDelivery("o-1"))
	if !errors.Is(err, rabbit.ErrReturned) || ordersvc.IsRefusal(err) {
		t.Errorf("Send = %v, want rabbit.ErrReturned, not a refusal", err)
	}
}

func TestAMQPLateAnswerIsDroppedAndCounted(t *testing.T) {
	shop := newMemShop()
	shop.add("o-1", "pending")
	shop.gate = make(chan struct{})
	prefix := amqpPrefix(t)
	url := rabbittest.URL(t)
	startReceiver(t, url, shop, ordersvc.AMQPPrefix(prefix), ordersvc.AMQPSecrets(secretOld))
	c := dialClient(t, url, ordersvc.AMQPPrefix(prefix), ordersvc.AMQPSecrets(secretOld), ordersvc.AMQPTimeout(2*time.Second))
	d := amqpDelivery("o-1")
	if _, err := c.Send(context.Background(), d); !errors.Is(err, context.DeadlineExceeded) || ordersvc.IsRefusal(err) {
		t.Fatalf("Send = %v, want a deadline error", err)
	}
	rabbittest.Eventually(t, 10*time.Second, func() bool { return shop.calls.Load() == 1 },
		func() string { return "the receiver never took the command" })
	shop.mu.Lock()
	close(shop.gate)
	shop.gate = nil
	shop.mu.Unlock()
	rabbittest.Eventually(t, 10*time.Second, func() bool { return c.Dropped() == 1 },
		func() string { return fmt.Sprintf("Dropped = %d, want 1", c.Dropped()) })
	// Sent again, the command is answered as applied.
	if a := send(t, c, d); a.Result != ordersvc.AlreadyCancelled {
		t.Errorf("resend: %+v, want already_cancelled", a)
	}
	if n := shop.timesApplied("o-1"); n != 1 {
		t.Errorf("cancel applied %d times", n)
	}
}

func TestAMQPApplyErrorRequeuesThenAnswers(t *testing.T) {
	shop := newMemShop()
	shop.add("o-1", "pending")
	shop.failures.Store(3)
	prefix := amqpPrefix(t)
	url := rabbittest.URL(t)
	r := startReceiver(t, url, shop, ordersvc.AMQPPrefix(prefix), ordersvc.AMQPSecrets(secretOld))
	c := dialClient(t, url, ordersvc.AMQPPrefix(prefix), ordersvc.AMQPSecrets(secretOld))
	if a := send(t, c, amqpDelivery("o-1")); a.Result != ordersvc.Cancelled {
		t.Errorf("answer %+v", a)
	}
	if n := shop.calls.Load(); n != 4 {
		t.Errorf("apply called %d times, want 4 (3 failures, then applied)", n)
	}
	// Counted once the answer is confirmed, after lapse may have read it.
	rabbittest.Eventually(t, 10*time.Second, func() bool { st := r.server.Stats(); return st.Requeued == 3 && st.Applied == 1 },
		func() string {
			return fmt.Sprintf("receiver stats %+v, want 3 requeued and 1 applied", r.server.Stats())
		})
}

func TestAMQPBadConfigIsRefused(t *testing.T) {
	ctx := context.Background()
	url := rabbittest.URL(t)
	for name, tc := range map[string]struct {
		url  string
		opts []ordersvc.AMQPOption
	}{
		"no secret":        {url, nil},
		"a bad secret":     {url, []ordersvc.AMQPOption{ordersvc.AMQPSecrets("whsec_short")}},
		"an amq. prefix":   {url + "?prefix=amq.orders", []ordersvc.AMQPOption{ordersvc.AMQPSecrets(secretOld)}},
		"an unknown param": {url + "?prefx=orders", []ordersvc.AMQPOption{ordersvc.AMQPSecrets(secretOld)}},
		"another scheme":   {"http://guest:hunter2@127.0.0.1:5672/", []ordersvc.AMQPOption{ordersvc.AMQPSecrets(secretOld)}},
		"a zero timeout":   {url, []ordersvc.AMQPOption{ordersvc.AMQPSecrets(secretOld), ordersvc.AMQPTimeout(0)}},
	} {
		t.Run(name, func(t *testing.T) {
			if c, err := ordersvc.DialAMQP(ctx, tc.url, tc.opts...); err == nil {
				_ = c.Close()
				t.Fatal("DialAMQP: nil error")
			}
			if _, err := ordersvc.NewAMQPServer(ctx, tc.url, newMemShop().apply, tc.opts...); err == nil {
				t.Fatal("NewAMQPServer: nil error")
			}
		})
	}
	for raw, ok := range map[string]bool{
		"amqp://guest:hunter2@127.0.0.1:5672/?prefix=shop.orders&heartbeat=5": true,
		"amqps://guest:hunter2@rabbit.example/vhost":                          true,
		"amqp://guest:hunter2@127.0.0.1:5672/?prefix=":                        false,
		"amqp://guest:hunter2@127.0.0.1:5672/?prefetch=3":                     false,
	} {
		err := ordersvc.CheckAMQPURL(raw)
		if (err == nil) != ok {
			t.Errorf("CheckAMQPURL(%s) = %v, want ok %v", raw, err, ok)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("CheckAMQPURL error shows the password: %v", err)
		}
	}
}

// dispatch sends each delivery until it is answered, as the dispatcher
// does (each failed send is retried after a short wait), and returns the
// answers, by order; it fails t after timeout.
func dispatch(t testing.TB, c ordersvc.Client, ds []ordersvc.Delivery, timeout time.Duration) map[string]ordersvc.Answer {
	t.Helper()
	var (
		mu      sync.Mutex
		answers = map[string]ordersvc.Answer{}
		wg      sync.WaitGroup
		failed  = make(chan error, len(ds))
	)
	deadline := time.Now().Add(timeout)
	for _, d := range ds {
		wg.Go(func() {
			for attempt := 1; ; attempt++ {
				d.Attempt = attempt
				a, err := c.Send(context.Background(), d)
				if err == nil {
					mu.Lock()
					answers[d.Command.OrderID] = a
					mu.Unlock()
					return
				}
				if ordersvc.IsRefusal(err) || time.Now().After(deadline) {
					failed <- fmt.Errorf("%s after %d attempts: %w", d.Command.OrderID, attempt, err)
					return
				}
				time.Sleep(rabbit.Backoff(attempt, 20*time.Millisecond, 500*time.Millisecond))
			}
		})
	}
	wg.Wait()
	close(failed)
	for err := range failed {
		t.Error(err)
	}
	return answers
}

// checkEveryOrderCancelledOnce checks that each of n orders named
// prefix-i was cancelled once and answered cancelled or already_cancelled.
func checkEveryOrderCancelledOnce(t testing.TB, shop *memShop, answers map[string]ordersvc.Answer, orders []string) {
	t.Helper()
	for _, id := range orders {
		if a := answers[id]; a.Result != ordersvc.Cancelled && a.Result != ordersvc.AlreadyCancelled {
			t.Errorf("%s answered %+v", id, a)
		}
		if n := shop.timesApplied(id); n != 1 {
			t.Errorf("%s: cancel applied %d times", id, n)
		}
	}
	shop.mu.Lock()
	defer shop.mu.Unlock()
	for id, set := range shop.ids {
		if len(set) != 1 {
			t.Errorf("%s: deliveries carried %d command ids, want one", id, len(set))
		}
	}
}

func deliveries(shop *memShop, prefix string, n int) ([]ordersvc.Delivery, []string) {
	var ds []ordersvc.Delivery
	var ids []string
	for i := range n {
		id := fmt.Sprintf("%s-%03d", prefix, i)
		shop.add(id, "pending")
		ds = append(ds, amqpDelivery(id))
		ids = append(ids, id)
	}
	return ds, ids
}

// The receiver stops mid-run: the commands lapse sends meanwhile wait in
// the durable queue, and the restarted receiver applies and answers them
// (those whose Send gave up are sent again and answered as applied).
func TestAMQPReceiverRestartsMidRun(t *testing.T) {
	shop := newMemShop()
	prefix := amqpPrefix(t)
	url := rabbittest.URL(t)
	opts := []ordersvc.AMQPOption{ordersvc.AMQPPrefix(prefix), ordersvc.AMQPSecrets(secretOld)}
	r := startReceiver(t, url, shop, opts...)
	c := dialClient(t, url, append(opts, ordersvc.AMQPTimeout(10*time.Second))...)

	before, beforeIDs := deliveries(shop, "before", 20)
	checkEveryOrderCancelledOnce(t, shop, dispatch(t, c, before, 30*time.Second), beforeIDs)

	r.close()
	applied := shop.calls.Load()
	during, duringIDs := deliveries(shop, "during", 20)
	done := make(chan map[string]ordersvc.Answer, 1)
	go func() { done <- dispatch(t, c, during, 60*time.Second) }()
	ch := rabbittest.Channel(t, rabbittest.Admin(t))
	rabbittest.Eventually(t, 10*time.Second, func() bool {
		q, err := ch.QueueDeclarePassive(prefix+".commands", true, false, false, false, nil)
		return err == nil && q.Messages >= 10
	}, func() string { return "the commands never waited in the queue" })
	if n := shop.calls.Load(); n != applied {
		t.Fatalf("apply called %d times while the receiver was down", n-applied)
	}
	startReceiver(t, url, shop, opts...)
	checkEveryOrderCancelledOnce(t, shop, <-done, duringIDs)
}

// The broker restarts mid-run — a RabbitMQ node of the test's own, its
// process stopped (SIGTERM) and started again on its data: lapse's and the
// receiver's connections are lost with commands waiting in the queue,
// commands in the receiver's hands (held there by a gate) and answers on
// their way, and so is lapse's non-durable reply queue. Both sides
// reconnect, lapse declares its reply queue again, the held commands are
// applied and redelivered, and every command is answered, none applied
// twice; Send works again.
func TestAMQPBrokerRestartMidRun(t *testing.T) {
	shop := newMemShop()
	prefix := amqpPrefix(t)
	rabbittest.URL(t) // skipped with the other RabbitMQ tests
	node := rabbittest.StartNode(t)
	brokerURL := node.URL
	opts := []ordersvc.AMQPOption{ordersvc.AMQPPrefix(prefix), ordersvc.AMQPSecrets(secretOld), ordersvc.AMQPPrefetch(8)}
	r := startReceiver(t, brokerURL, shop, opts...)
	c := dialClient(t, brokerURL, append(opts, ordersvc.AMQPTimeout(2*time.Second))...)

	before, beforeIDs := deliveries(shop, "before", 20)
	checkEveryOrderCancelledOnce(t, shop, dispatch(t, c, before, 30*time.Second), beforeIDs)

	applied := shop.calls.Load()
	gate := make(chan struct{})
	shop.mu.Lock()
	shop.gate = gate
	shop.mu.Unlock()
	during, duringIDs := deliveries(shop, "during", 40)
	done := make(chan map[string]ordersvc.Answer, 1)
	go func() { done <- dispatch(t, c, during, 90*time.Second) }()
	// Mid-run: the receiver holds a prefetch of commands, the rest wait
	// in the queue.
	rabbittest.Eventually(t, 30*time.Second, func() bool { return shop.calls.Load() >= applied+8 },
		func() string { return "the receiver never took the commands" })
	t.Logf("broker restarted in %s", node.Restart(t))
	shop.mu.Lock()
	close(gate)
	shop.gate = nil
	shop.mu.Unlock()

	checkEveryOrderCancelledOnce(t, shop, <-done, duringIDs)
	rabbittest.Eventually(t, 20*time.Second, func() bool { return c.Ping(context.Background()) == nil && r.server.Ping(context.Background()) == nil },
		func() string { return "not reconnected" })
	shop.add("after", "pending")
	if a := send(t, c, amqpDelivery("after")); a.Result != ordersvc.Cancelled {
		t.Errorf("after the restart: %+v", a)
	}
	t.Logf("%d applies for %d commands, %d late answers dropped, receiver %+v",
		shop.calls.Load(), len(before)+len(during)+1, c.Dropped(), r.server.Stats())
}
