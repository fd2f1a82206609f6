package inventory_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lapsehq/lapse/internal/rabbit"
	"github.com/lapsehq/lapse/internal/rabbit/rabbittest"
	"github.com/lapsehq/lapse/inventory"
	"github.com/lapsehq/lapse/inventory/inventorytest"
)

// memLedger is an in-memory Applier that applies each (reservation, action)
// once, as an inventory's memLedger does, with switches for the faults the
// transport must carry: failing Applies, withheld answers, rejections, a
// gate that holds Applies.
type memLedger struct {
	mu       sync.Mutex
	results  map[[2]string]inventory.Result
	applied  map[[2]string]int
	withhold map[string]bool // task ids whose next answer is withheld
	reject   map[string]string
	calls    atomic.Int64
	failures atomic.Int64  // the next this many Applies fail
	gate     chan struct{} // non-nil: Apply waits for it to close
}

func newMemLedger() *memLedger {
	return &memLedger{
		results: map[[2]string]inventory.Result{}, applied: map[[2]string]int{},
		withhold: map[string]bool{}, reject: map[string]string{},
	}
}

func (l *memLedger) Apply(ctx context.Context, c inventory.Command) (inventory.Answer, error) {
	l.calls.Add(1)
	l.mu.Lock()
	gate := l.gate
	l.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return inventory.Answer{}, ctx.Err()
		}
	}
	for {
		n := l.failures.Load()
		if n <= 0 {
			break
		}
		if l.failures.CompareAndSwap(n, n-1) {
			return inventory.Answer{}, errors.New("database down")
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	k := [2]string{c.ReservationID, string(c.Action)}
	a := inventory.Answer{TaskID: c.TaskID}
	switch r, done := l.results[k]; {
	case done && r == inventory.Rejected:
		a.Result, a.Reason = inventory.Rejected, l.reject[c.ReservationID]
	case done:
		a.Result = inventory.AlreadyDone
	case l.reject[c.ReservationID] != "":
		a.Result, a.Reason = inventory.Rejected, l.reject[c.ReservationID]
		l.results[k] = a.Result
	default:
		a.Result = inventory.Success
		l.results[k] = a.Result
		l.applied[k]++
	}
	if l.withhold[c.TaskID] {
		delete(l.withhold, c.TaskID)
		return a, inventory.ErrWithhold
	}
	return a, nil
}

func (l *memLedger) timesApplied(reservation string, action inventory.Action) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.applied[[2]string{reservation, string(action)}]
}

// amqpStack is a server and a client on names of their own.
type amqpStack struct {
	prefix string
	server *inventory.AMQPServer
	client *inventory.AMQPClient
	admin  *amqp.Connection
}

func quietAMQP() inventory.AMQPOption { return inventory.AMQPLogger(slog.New(slog.DiscardHandler)) }

// startAMQP starts an AMQPServer applying with a, on a prefix of its own,
// and a client of it, which reach the broker at serverURL and clientURL (""
// is the broker's own URL), all closed and deleted when t ends.
func startAMQP(t testing.TB, a inventory.Applier, serverURL, clientURL string, opts ...inventory.AMQPOption) *amqpStack {
	t.Helper()
	if serverURL == "" {
		serverURL = rabbittest.URL(t)
	}
	if clientURL == "" {
		clientURL = rabbittest.URL(t)
	}
	s := &amqpStack{prefix: rabbittest.Name("stock"), admin: rabbittest.Admin(t)}
	opts = append([]inventory.AMQPOption{inventory.AMQPPrefix(s.prefix), inventory.AMQPRetryBackoff(10*time.Millisecond, 100*time.Millisecond), quietAMQP()}, opts...)
	deleteAMQPAtEnd(t, s.admin, []string{s.prefix, s.prefix + ".dead"}, []string{s.prefix + ".commands", s.prefix + ".dead"})

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var err error
	if s.server, err = inventory.NewAMQPServer(ctx, serverURL, a, opts...); err != nil {
		t.Fatal(err)
	}
	serveCtx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.server.Serve(serveCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
		if err := s.server.Close(); err != nil {
			t.Errorf("server Close: %v", err)
		}
	})
	s.client = dialAMQPClient(t, clientURL, opts...)
	return s
}

// dialAMQPClient dials a client, closed and its reply queue deleted when t
// ends.
func dialAMQPClient(t testing.TB, url string, opts ...inventory.AMQPOption) *inventory.AMQPClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := inventory.DialAMQP(ctx, url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	deleteAMQPAtEnd(t, rabbittest.Admin(t), nil, []string{c.ReplyQueue()})
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("client Close: %v", err)
		}
	})
	return c
}

// deleteAMQPAtEnd deletes exchanges and queues when t ends.
func deleteAMQPAtEnd(t testing.TB, conn *amqp.Connection, exchanges, queues []string) {
	t.Cleanup(func() {
		ch, err := conn.Channel()
		if err != nil {
			return
		}
		defer func() { _ = ch.Close() }()
		for _, q := range queues {
			_, _ = ch.QueueDelete(q, false, false, false)
		}
		for _, x := range exchanges {
			_ = ch.ExchangeDelete(x, false, false)
		}
	})
}

// amqpTransport is the shape of a transport conformance suite: given an
// Applier, a Client that reaches it over RabbitMQ.
func amqpTransport(t *testing.T, a inventory.Applier) inventory.Client {
	return startAMQP(t, a, "", "").client
}

var amqpSeq atomic.Int64

// command returns a command of action for a reservation, with a task id of
// its own.
func amqpCommand(action inventory.Action, reservation string) inventory.Command {
	n := amqpSeq.Add(1)
	return inventory.Command{
		TaskID: fmt.Sprintf("task-%d-%d", time.Now().UnixNano(), n), Action: action,
		ReservationID: reservation, OrderID: "order-" + reservation,
		Items: []inventory.Item{{SKU: "sku-1", Qty: 2}},
	}
}

func amqpSend(t testing.TB, c inventory.Client, cmd inventory.Command) inventory.Answer {
	t.Helper()
	a, err := c.Send(context.Background(), cmd)
	if err != nil {
		t.Fatalf("Send %s %s: %v", cmd.Action, cmd.TaskID, err)
	}
	if a.TaskID != cmd.TaskID {
		t.Fatalf("Send %s: answer for task %q", cmd.TaskID, a.TaskID)
	}
	return a
}

func TestAMQPRoundTripOfEachAction(t *testing.T) {
	l := newMemLedger()
	s := startAMQP(t, l, "", "")
	// A queue of the test's beside the inventory's, to look at the
	// commands as they travel.
	rec := rabbittest.Record(t, s.admin, rabbittest.Queue(t, s.admin, nil, s.prefix, "stock.#"))
	var tasks []string
	for _, action := range []inventory.Action{inventory.Reserve, inventory.Confirm, inventory.Release} {
		cmd := amqpCommand(action, "r1")
		if a := amqpSend(t, s.client, cmd); a.Result != inventory.Success {
			t.Errorf("%s: %+v, want %s", action, a, inventory.Success)
		}
		if n := l.timesApplied("r1", action); n != 1 {
			t.Errorf("%s applied %d times", action, n)
		}
		tasks = append(tasks, cmd.TaskID)
	}
	rec.WaitIDs(t, tasks)
	for _, d := range rec.Deliveries() {
		var c inventory.Command
		if err := json.Unmarshal(d.Body, &c); err != nil {
			t.Fatal(err)
		}
		if d.DeliveryMode != amqp.Persistent || d.ContentType != "application/json" || d.MessageId != c.TaskID ||
			d.CorrelationId != c.TaskID || d.ReplyTo != s.client.ReplyQueue() || d.RoutingKey != c.Action.RoutingKey() {
			t.Errorf("command %s travelled as mode %d, type %q, message_id %q, correlation_id %q, reply_to %q, key %q",
				c.TaskID, d.DeliveryMode, d.ContentType, d.MessageId, d.CorrelationId, d.ReplyTo, d.RoutingKey)
		}
	}
	if n := s.client.Dropped(); n != 0 {
		t.Errorf("Dropped = %d", n)
	}
}

func TestAMQPDuplicatesAreAnsweredAlreadyDone(t *testing.T) {
	l := newMemLedger()
	c := amqpTransport(t, l)
	cmd := amqpCommand(inventory.Release, "r1")
	if a := amqpSend(t, c, cmd); a.Result != inventory.Success {
		t.Fatalf("first: %+v", a)
	}
	if a := amqpSend(t, c, cmd); a.Result != inventory.AlreadyDone {
		t.Errorf("same task again: %+v, want %s", a, inventory.AlreadyDone)
	}
	other := amqpCommand(inventory.Release, "r1") // another task, same (reservation, action)
	if a := amqpSend(t, c, other); a.Result != inventory.AlreadyDone {
		t.Errorf("another task: %+v, want %s", a, inventory.AlreadyDone)
	}
	if n := l.timesApplied("r1", inventory.Release); n != 1 {
		t.Errorf("applied %d times", n)
	}
}

func TestAMQPRejectedCommandIsDeadLettered(t *testing.T) {
	l := newMemLedger()
	l.reject["r-short"] = inventory.ReasonInsufficientStock
	s := startAMQP(t, l, "", "")

	refused := amqpCommand(inventory.Reserve, "r-short")
	a := amqpSend(t, s.client, refused)
	if a.Result != inventory.Rejected || a.Reason != inventory.ReasonInsufficientStock || a.Done() {
		t.Errorf("answer %+v, want %s for %s", a, inventory.Rejected, inventory.ReasonInsufficientStock)
	}
	malformed := amqpCommand(inventory.Reserve, "r2")
	malformed.Items = nil // a reserve needs items
	if a := amqpSend(t, s.client, malformed); a.Result != inventory.Rejected || a.Reason == "" {
		t.Errorf("malformed: %+v, want %s with a reason", a, inventory.Rejected)
	}
	// Not even JSON, no reply_to: dead-lettered without an answer.
	ch := rabbittest.Channel(t, s.admin)
	if err := ch.PublishWithContext(context.Background(), s.prefix, "stock.release", false, false,
		amqp.Publishing{MessageId: "garbage", Body: []byte("{not json")}); err != nil {
		t.Fatal(err)
	}

	rec := rabbittest.Record(t, s.admin, s.prefix+".dead")
	rec.WaitIDs(t, []string{refused.TaskID, malformed.TaskID, "garbage"})
	for _, d := range rec.Deliveries() {
		if d.MessageId == refused.TaskID {
			if death, ok := d.Headers["x-death"].([]any); !ok || len(death) == 0 {
				t.Errorf("dead-lettered command without x-death: %v", d.Headers)
			}
			if d.RoutingKey != "stock.reserve" {
				t.Errorf("dead-lettered with key %q, want stock.reserve", d.RoutingKey)
			}
		}
	}
	if n := l.calls.Load(); n != 1 {
		t.Errorf("Apply called %d times; want once (malformed commands are not applied)", n)
	}
}

func TestAMQPWithheldAnswerTimesOutAndResendIsAnswered(t *testing.T) {
	l := newMemLedger()
	s := startAMQP(t, l, "", "", inventory.AMQPTimeout(300*time.Millisecond))
	cmd := amqpCommand(inventory.Confirm, "r1")
	l.mu.Lock()
	l.withhold[cmd.TaskID] = true
	l.mu.Unlock()

	_, err := s.client.Send(context.Background(), cmd)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("withheld: Send = %v, want a deadline error", err)
	}
	if a := amqpSend(t, s.client, cmd); a.Result != inventory.AlreadyDone {
		t.Errorf("resend: %+v, want %s", a, inventory.AlreadyDone)
	}
	if n := l.timesApplied("r1", inventory.Confirm); n != 1 {
		t.Errorf("applied %d times", n)
	}
}

func TestAMQPLateAnswerIsDroppedAndCounted(t *testing.T) {
	l := newMemLedger()
	l.gate = make(chan struct{})
	s := startAMQP(t, l, "", "", inventory.AMQPTimeout(200*time.Millisecond))
	cmd := amqpCommand(inventory.Release, "r1")
	if _, err := s.client.Send(context.Background(), cmd); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Send = %v, want a deadline error", err)
	}
	close(l.gate)
	rabbittest.Eventually(t, 10*time.Second, func() bool { return s.client.Dropped() == 1 },
		func() string { return fmt.Sprintf("Dropped = %d, want 1", s.client.Dropped()) })
}

func TestAMQPManyConcurrentSends(t *testing.T) {
	l := newMemLedger()
	c := amqpTransport(t, l)
	const workers, each = 32, 8
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				cmd := amqpCommand(inventory.Release, fmt.Sprintf("r-%d-%d", w, i))
				a, err := c.Send(context.Background(), cmd)
				switch {
				case err != nil:
					errs <- err
				case a.TaskID != cmd.TaskID || a.Result != inventory.Success:
					errs <- fmt.Errorf("task %s answered %+v", cmd.TaskID, a)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestAMQPClientsOfSeveralInstancesGetTheirOwnAnswers(t *testing.T) {
	l := newMemLedger()
	s := startAMQP(t, l, "", "")
	other := dialAMQPClient(t, rabbittest.URL(t), inventory.AMQPPrefix(s.prefix), quietAMQP())
	if other.ReplyQueue() == s.client.ReplyQueue() {
		t.Fatal("two clients share a reply queue")
	}
	var wg sync.WaitGroup
	for i, c := range []*inventory.AMQPClient{s.client, other, s.client, other} {
		wg.Go(func() {
			cmd := amqpCommand(inventory.Release, fmt.Sprintf("r%d", i))
			if a, err := c.Send(context.Background(), cmd); err != nil || a.Result != inventory.Success {
				t.Errorf("client %d: %+v, %v", i, a, err)
			}
		})
	}
	wg.Wait()
	if s.client.Dropped()+other.Dropped() != 0 {
		t.Errorf("answers went astray: dropped %d and %d", s.client.Dropped(), other.Dropped())
	}
}

func TestAMQPUnroutableCommandIsAnError(t *testing.T) {
	// A client whose inventory never declared its queue.
	prefix := rabbittest.Name("stock")
	admin := rabbittest.Admin(t)
	deleteAMQPAtEnd(t, admin, []string{prefix}, nil)
	c := dialAMQPClient(t, rabbittest.URL(t), inventory.AMQPPrefix(prefix), quietAMQP())
	_, err := c.Send(context.Background(), amqpCommand(inventory.Release, "r1"))
	if !errors.Is(err, rabbit.ErrReturned) {
		t.Errorf("Send = %v, want rabbit.ErrReturned", err)
	}
}

func TestAMQPClientSurvivesConnectionLoss(t *testing.T) {
	l := newMemLedger()
	proxy := rabbittest.NewProxy(t, rabbittest.URL(t))
	s := startAMQP(t, l, "", proxy.URL, inventory.AMQPTimeout(time.Second))
	amqpSend(t, s.client, amqpCommand(inventory.Release, "r1"))

	proxy.Cut()
	cmd := amqpCommand(inventory.Release, "r2")
	if _, err := s.client.Send(context.Background(), cmd); err == nil {
		t.Fatal("Send succeeded with the connection cut")
	}
	proxy.Restore(t)
	var a inventory.Answer
	rabbittest.Eventually(t, 20*time.Second, func() bool {
		var err error
		a, err = s.client.Send(context.Background(), cmd)
		return err == nil
	}, func() string { return "Send never succeeded after the connection came back" })
	if !a.Done() {
		t.Errorf("after the reconnect: %+v", a)
	}
	if n := l.timesApplied("r2", inventory.Release); n != 1 {
		t.Errorf("applied %d times", n)
	}
}

func TestAMQPServerSurvivesConnectionLoss(t *testing.T) {
	l := newMemLedger()
	proxy := rabbittest.NewProxy(t, rabbittest.URL(t))
	s := startAMQP(t, l, proxy.URL, "")
	amqpSend(t, s.client, amqpCommand(inventory.Release, "r0"))

	proxy.Cut()
	// Once the broker closed the server's channel, what it held unacked is
	// back in the queue: r0, if its ack was still on the wire.
	ch := rabbittest.Channel(t, s.admin)
	var before amqp.Queue
	rabbittest.Eventually(t, 10*time.Second, func() bool {
		before = inspectQueue(t, ch, s.prefix+".commands")
		return s.server.Ping(context.Background()) != nil && before.Consumers == 0
	}, func() string { return "the server's connection never went away" })
	// Commands wait in the durable queue while the inventory is away.
	cmd := amqpCommand(inventory.Release, "r1")
	answered := make(chan error, 1)
	go func() {
		a, err := s.client.Send(context.Background(), cmd)
		if err == nil && a.Result != inventory.Success {
			err = fmt.Errorf("answer %+v", a)
		}
		answered <- err
	}()
	rabbittest.Eventually(t, 5*time.Second, func() bool { return inspectQueue(t, ch, s.prefix+".commands").Messages == before.Messages+1 },
		func() string { return "the command never waited in the queue" })
	proxy.Restore(t)
	if err := <-answered; err != nil {
		t.Errorf("Send while the inventory was away: %v", err)
	}
	if n := l.timesApplied("r0", inventory.Release) + l.timesApplied("r1", inventory.Release); n != 2 {
		t.Errorf("r0 and r1 applied %d times in all, want 2", n)
	}
}

// inspect returns queue's ready messages and consumers.
func inspectQueue(t testing.TB, ch *amqp.Channel, queue string) amqp.Queue {
	t.Helper()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		t.Fatalf("inspect queue %s: %v", queue, err)
	}
	return q
}

func TestAMQPApplyErrorRequeuesThenSucceeds(t *testing.T) {
	l := newMemLedger()
	l.failures.Store(3)
	c := amqpTransport(t, l)
	if a := amqpSend(t, c, amqpCommand(inventory.Release, "r1")); a.Result != inventory.Success {
		t.Errorf("answer %+v", a)
	}
	if n := l.calls.Load(); n != 4 {
		t.Errorf("Apply called %d times, want 4 (3 failures, then applied)", n)
	}
}

func TestServeAMQPRunsUntilCancelled(t *testing.T) {
	l := newMemLedger()
	prefix := rabbittest.Name("stock")
	deleteAMQPAtEnd(t, rabbittest.Admin(t), []string{prefix, prefix + ".dead"}, []string{prefix + ".commands", prefix + ".dead"})
	opts := []inventory.AMQPOption{inventory.AMQPPrefix(prefix), quietAMQP()}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- inventory.ServeAMQP(ctx, rabbittest.URL(t), l, opts...) }()
	c := dialAMQPClient(t, rabbittest.URL(t), opts...)
	// Unroutable until ServeAMQP declared its queue.
	var a inventory.Answer
	rabbittest.Eventually(t, 10*time.Second, func() bool {
		var err error
		a, err = c.Send(context.Background(), amqpCommand(inventory.Release, "r1"))
		return err == nil
	}, func() string { return "ServeAMQP never answered" })
	if a.Result != inventory.Success {
		t.Errorf("answer %+v", a)
	}
	cancel()
	if err := <-served; err != nil {
		t.Errorf("ServeAMQP = %v, want nil once ctx ended", err)
	}
}

func TestAMQPReplyQueueDeletedIsDeclaredAgain(t *testing.T) {
	l := newMemLedger()
	s := startAMQP(t, l, "", "", inventory.AMQPTimeout(time.Second))
	amqpSend(t, s.client, amqpCommand(inventory.Release, "r1"))
	ch := rabbittest.Channel(t, s.admin)
	if _, err := ch.QueueDelete(s.client.ReplyQueue(), false, false, false); err != nil {
		t.Fatal(err)
	}
	// Answers to the missing queue are returned to the inventory and
	// lost; the client declares its queue again and subscribes anew.
	cmd := amqpCommand(inventory.Release, "r2")
	var a inventory.Answer
	rabbittest.Eventually(t, 15*time.Second, func() bool {
		var err error
		a, err = s.client.Send(context.Background(), cmd)
		return err == nil
	}, func() string { return "Send never succeeded after the reply queue was deleted" })
	if !a.Done() {
		t.Errorf("answer %+v", a)
	}
}

// The AMQP transport passes the conformance suite every transport passes,
// against the reference inventory.
func TestAMQPTransportConformance(t *testing.T) {
	inventorytest.Exercise(t, amqpTransport)
}
