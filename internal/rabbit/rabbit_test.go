package rabbit_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lapsehq/lapse/internal/rabbit"
	"github.com/lapsehq/lapse/internal/rabbit/rabbittest"
)

// dial connects to rawURL with fast reconnects, closed when t ends.
func dial(t *testing.T, rawURL string, cfg rabbit.Config) *rabbit.Conn {
	t.Helper()
	cfg.MaxBackoff = time.Second
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := rabbit.Dial(ctx, rawURL, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// messages returns n messages to exchange with routing key key, each with
// an id of its own.
func messages(exchange, key string, n int) []rabbit.Message {
	msgs := make([]rabbit.Message, n)
	for i := range msgs {
		id := uuid.NewString()
		msgs[i] = rabbit.Message{Exchange: exchange, RoutingKey: key, Publishing: amqp.Publishing{
			MessageId: id, ContentType: "text/plain", DeliveryMode: amqp.Persistent, Body: []byte("message " + id),
		}}
	}
	return msgs
}

func ids(msgs []rabbit.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.Publishing.MessageId
	}
	return out
}

func publish(t *testing.T, c *rabbit.Conn, msgs []rabbit.Message) []error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errs := c.Publish(ctx, msgs)
	if len(errs) != len(msgs) {
		t.Fatalf("Publish: %d results for %d messages", len(errs), len(msgs))
	}
	return errs
}

func mustPublish(t *testing.T, c *rabbit.Conn, msgs []rabbit.Message) {
	t.Helper()
	for i, err := range publish(t, c, msgs) {
		if err != nil {
			t.Fatalf("message %d (%s): %v", i, msgs[i].Publishing.MessageId, err)
		}
	}
}

func TestPublishIsConfirmedAndArrives(t *testing.T) {
	admin := rabbittest.Admin(t)
	ex := rabbittest.Exchange(t, admin, amqp.ExchangeTopic)
	rec := rabbittest.Record(t, admin, rabbittest.Queue(t, admin, nil, ex, "ok.#"))
	c := dial(t, rabbittest.URL(t), rabbit.Config{})

	msgs := messages(ex, "ok.a", 50)
	mustPublish(t, c, msgs)
	rec.WaitIDs(t, ids(msgs))
	d := rec.Deliveries()[0]
	if d.DeliveryMode != amqp.Persistent || d.ContentType != "text/plain" || d.RoutingKey != "ok.a" {
		t.Errorf("arrived with delivery mode %d, content type %q, routing key %q", d.DeliveryMode, d.ContentType, d.RoutingKey)
	}
	if err := c.Ping(context.Background()); err != nil || !c.Connected() {
		t.Errorf("Ping = %v, Connected = %v; want nil, true", err, c.Connected())
	}
}

func TestUnroutableMessageIsReturnedAlthoughAcked(t *testing.T) {
	admin := rabbittest.Admin(t)
	ex := rabbittest.Exchange(t, admin, amqp.ExchangeTopic)
	rec := rabbittest.Record(t, admin, rabbittest.Queue(t, admin, nil, ex, "ok.#"))
	c := dial(t, rabbittest.URL(t), rabbit.Config{})

	var msgs []rabbit.Message
	lost := map[int]bool{}
	for i := range 20 {
		key := "ok.a"
		if i%3 == 1 {
			key, lost[i] = "lost.a", true
		}
		msgs = append(msgs, messages(ex, key, 1)...)
	}
	errs := publish(t, c, msgs)
	var routed []string
	for i, err := range errs {
		if !lost[i] {
			if err != nil {
				t.Errorf("routable message %d: %v", i, err)
			}
			routed = append(routed, msgs[i].Publishing.MessageId)
			continue
		}
		var re *rabbit.ReturnError
		switch {
		case !errors.As(err, &re):
			t.Errorf("unroutable message %d: error %v, want a *rabbit.ReturnError", i, err)
		case re.ReplyCode != amqp.NoRoute || re.RoutingKey != "lost.a" || re.Exchange != ex || re.MessageID != msgs[i].Publishing.MessageId:
			t.Errorf("unroutable message %d: %+v, want reply 312 from %s with key lost.a and its id", i, re, ex)
		case !errors.Is(err, rabbit.ErrReturned) || !rabbit.IsRefusal(err):
			t.Errorf("unroutable message %d: %v is not ErrReturned or not a refusal", i, err)
		}
	}
	rec.WaitIDs(t, routed)
	if n := len(rec.Deliveries()); n != len(routed) {
		t.Errorf("%d messages arrived, want the %d routable ones", n, len(routed))
	}
}

func TestNackedMessageIsRefused(t *testing.T) {
	admin := rabbittest.Admin(t)
	// A queue that holds one message and nacks further publishes.
	q := rabbittest.Queue(t, admin, amqp.Table{"x-max-length": int32(1), "x-overflow": "reject-publish"}, "")
	c := dial(t, rabbittest.URL(t), rabbit.Config{})

	errs := publish(t, c, messages("", q, 3))
	if errs[0] != nil {
		t.Errorf("first message: %v, want it accepted", errs[0])
	}
	for i, err := range errs[1:] {
		if !errors.Is(err, rabbit.ErrNacked) || !rabbit.IsRefusal(err) {
			t.Errorf("message %d beyond the queue's limit: %v, want ErrNacked", i+1, err)
		}
	}
}

func TestMessagesWithoutUniqueIDAreNotPublished(t *testing.T) {
	admin := rabbittest.Admin(t)
	ex := rabbittest.Exchange(t, admin, amqp.ExchangeTopic)
	rec := rabbittest.Record(t, admin, rabbittest.Queue(t, admin, nil, ex, "#"))
	c := dial(t, rabbittest.URL(t), rabbit.Config{})

	msgs := messages(ex, "k", 4)
	msgs[1].Publishing.MessageId = ""
	msgs[3].Publishing.MessageId = msgs[0].Publishing.MessageId
	errs := publish(t, c, msgs)
	if errs[0] != nil || errs[2] != nil {
		t.Errorf("valid messages: %v, %v; want nil", errs[0], errs[2])
	}
	if !errors.Is(errs[1], rabbit.ErrNoMessageID) {
		t.Errorf("message without id: %v, want ErrNoMessageID", errs[1])
	}
	if !errors.Is(errs[3], rabbit.ErrDuplicateMessageID) {
		t.Errorf("repeated id: %v, want ErrDuplicateMessageID", errs[3])
	}
	rec.WaitIDs(t, []string{msgs[0].Publishing.MessageId, msgs[2].Publishing.MessageId})
	if n := len(rec.Deliveries()); n != 2 {
		t.Errorf("%d messages arrived, want 2", n)
	}
}

func TestConcurrentPublishers(t *testing.T) {
	admin := rabbittest.Admin(t)
	ex := rabbittest.Exchange(t, admin, amqp.ExchangeTopic)
	rec := rabbittest.Record(t, admin, rabbittest.Queue(t, admin, nil, ex, "ok.#"))
	c := dial(t, rabbittest.URL(t), rabbit.Config{PublishChannels: 3})

	const publishers, batches, size = 8, 5, 20
	var mu sync.Mutex
	var all []string
	var wg sync.WaitGroup
	for p := range publishers {
		wg.Go(func() {
			for b := range batches {
				// Every third batch has an unroutable message, whose return
				// must not be taken for another batch's.
				msgs := messages(ex, "ok.a", size)
				if b%3 == 0 {
					msgs[p%size].RoutingKey = "lost.a"
				}
				for i, err := range c.Publish(context.Background(), msgs) {
					switch {
					case msgs[i].RoutingKey == "lost.a" && !errors.Is(err, rabbit.ErrReturned):
						t.Errorf("unroutable message: %v, want ErrReturned", err)
					case msgs[i].RoutingKey != "lost.a" && err != nil:
						t.Errorf("message %s: %v", msgs[i].Publishing.MessageId, err)
					case err == nil:
						mu.Lock()
						all = append(all, msgs[i].Publishing.MessageId)
						mu.Unlock()
					}
				}
			}
		})
	}
	wg.Wait()
	if want := publishers * (batches*size - (batches+2)/3); len(all) != want { // one unroutable in batches 0, 3, …
		t.Fatalf("%d messages confirmed, want %d", len(all), want)
	}
	rec.WaitIDs(t, all)
}

func TestPublishReturnsWhenContextEnds(t *testing.T) {
	admin := rabbittest.Admin(t)
	ex := rabbittest.Exchange(t, admin, amqp.ExchangeTopic)
	rec := rabbittest.Record(t, admin, rabbittest.Queue(t, admin, nil, ex, "ok.#"))
	proxy := rabbittest.NewProxy(t, rabbittest.URL(t))
	c := dial(t, proxy.URL, rabbit.Config{PublishChannels: 1})

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for i, err := range c.Publish(ctx, messages(ex, "ok.a", 3)) {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("message %d with a cancelled context: %v, want context.Canceled", i, err)
		}
	}

	// Confirms slower than the context: the batch is abandoned unconfirmed.
	// Its messages are unroutable, and their late returns must not be taken
	// for those of the next batch, which has the same ids. (A first batch
	// opens the pool's one channel before the broker is slowed.)
	mustPublish(t, c, messages(ex, "ok.a", 1))
	proxy.Slow(t, 2*time.Second)
	msgs := messages(ex, "lost.a", 5)
	ctx, cancel = context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	errs := c.Publish(ctx, msgs)
	if took := time.Since(start); took > 1500*time.Millisecond {
		t.Errorf("Publish returned %s after its context ended", took-300*time.Millisecond)
	}
	for i, err := range errs {
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("message %d unconfirmed at the deadline: %v, want context.DeadlineExceeded", i, err)
		}
	}
	proxy.Fast(t)
	for i := range msgs {
		msgs[i].RoutingKey = "ok.a"
	}
	mustPublish(t, c, msgs)
	rec.WaitIDs(t, ids(msgs))
}

func TestPublishReturnsWhenContextEndsDuringABlockedWrite(t *testing.T) {
	admin := rabbittest.Admin(t)
	ex := rabbittest.Exchange(t, admin, amqp.ExchangeTopic)
	rabbittest.Queue(t, admin, nil, ex, "#")
	proxy := rabbittest.NewProxy(t, rabbittest.URL(t))
	c := dial(t, proxy.URL, rabbit.Config{PublishChannels: 1})
	mustPublish(t, c, messages(ex, "k", 1)) // the channel, opened at full speed

	// 8 MB at 1 KB/s: the writes block, as they do when the broker blocks
	// publishers during a resource alarm.
	proxy.Throttle(t, 1)
	msgs := messages(ex, "k", 128)
	for i := range msgs {
		msgs[i].Publishing.Body = make([]byte, 64<<10)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	errs := c.Publish(ctx, msgs)
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Publish returned %s after its context ended", took-300*time.Millisecond)
	}
	for i, err := range errs {
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("message %d: %v, want context.DeadlineExceeded", i, err)
		}
	}
	proxy.Cut() // ends the blocked write, so that Close need not wait for it
}

func TestConnectionCutMidBatch(t *testing.T) {
	admin := rabbittest.Admin(t)
	ex := rabbittest.Exchange(t, admin, amqp.ExchangeTopic)
	rec := rabbittest.Record(t, admin, rabbittest.Queue(t, admin, nil, ex, "#"))
	proxy := rabbittest.NewProxy(t, rabbittest.URL(t))
	c := dial(t, proxy.URL, rabbit.Config{PublishChannels: 1})
	mustPublish(t, c, messages(ex, "k", 1)) // the channel, opened at full speed

	// The batch trickles to the broker, which confirms its first messages
	// while the rest are on their way or still being written; the cut comes
	// once some have been routed.
	proxy.Throttle(t, 50)
	msgs := messages(ex, "k", 2000)
	done := make(chan []error, 1)
	go func() { done <- c.Publish(context.Background(), msgs) }()
	rabbittest.Eventually(t, 10*time.Second, func() bool { return len(rec.Deliveries()) > 100 },
		func() string { return "no message reached the queue" })
	proxy.Cut()
	var errs []error
	select {
	case errs = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Publish did not return after the connection was cut")
	}

	var confirmed, failed []rabbit.Message
	for i, err := range errs {
		switch {
		case err == nil:
			confirmed = append(confirmed, msgs[i])
		case rabbit.IsRefusal(err):
			t.Errorf("message %d: %v: a lost connection is no refusal", i, err)
		case !errors.Is(err, rabbit.ErrUnconfirmed):
			t.Errorf("message %d: %v, want ErrUnconfirmed", i, err)
		default:
			failed = append(failed, msgs[i])
		}
	}
	if len(failed) == 0 {
		t.Fatal("every message was confirmed although the connection was cut mid-batch")
	}
	rec.WaitIDs(t, ids(confirmed)) // never a false nil

	rabbittest.Eventually(t, 5*time.Second, func() bool { return !c.Connected() },
		func() string { return "still connected with the proxy cut" })
	if err := c.Ping(context.Background()); !errors.Is(err, rabbit.ErrNotConnected) {
		t.Errorf("Ping while cut: %v, want ErrNotConnected", err)
	}
	for _, err := range publish(t, c, failed[:1]) {
		if !errors.Is(err, rabbit.ErrNotConnected) {
			t.Errorf("Publish while cut: %v, want ErrNotConnected", err)
		}
	}

	proxy.Restore(t)
	rabbittest.Eventually(t, 10*time.Second, c.Connected, func() string { return "did not reconnect" })
	mustPublish(t, c, failed)
	rec.WaitIDs(t, ids(msgs)) // nothing lost
	t.Logf("%d confirmed before the cut, %d republished", len(confirmed), len(failed))
}

func TestReconnectDeclaresTheTopologyAgain(t *testing.T) {
	admin := rabbittest.Admin(t)
	ex := rabbittest.Exchange(t, admin, amqp.ExchangeTopic)
	queue := rabbittest.Name("exclusive")
	var declared atomic.Int32
	proxy := rabbittest.NewProxy(t, rabbittest.URL(t))
	c := dial(t, proxy.URL, rabbit.Config{Topology: func(ch *amqp.Channel) error {
		declared.Add(1)
		// An exclusive queue dies with the connection that declared it.
		if _, err := ch.QueueDeclare(queue, false, false, true, false, nil); err != nil {
			return err
		}
		return ch.QueueBind(queue, "#", ex, false, nil)
	}})
	mustPublish(t, c, messages(ex, "k", 1))

	proxy.Cut()
	rabbittest.Eventually(t, 5*time.Second, func() bool { return !c.Connected() }, func() string { return "still connected" })
	proxy.Restore(t)
	rabbittest.Eventually(t, 10*time.Second, c.Connected, func() string { return "did not reconnect" })
	if n := declared.Load(); n != 2 {
		t.Errorf("Topology ran %d times, want 2 (connect, reconnect)", n)
	}
	mustPublish(t, c, messages(ex, "k", 1)) // routed: the queue is back
}

func TestConsumeSubscribesAgainAfterReconnect(t *testing.T) {
	admin := rabbittest.Admin(t)
	q := rabbittest.Queue(t, admin, nil, "")
	proxy := rabbittest.NewProxy(t, rabbittest.URL(t))
	c := dial(t, proxy.URL, rabbit.Config{})

	var mu sync.Mutex
	seen := map[string][]bool{} // id → Redelivered of each delivery
	hold := messages("", q, 1)  // not acked the first time
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	consumed := make(chan error, 1)
	go func() {
		consumed <- c.Consume(ctx, q, 10, func(_ context.Context, d amqp.Delivery) {
			mu.Lock()
			seen[d.MessageId] = append(seen[d.MessageId], d.Redelivered)
			mu.Unlock()
			if d.MessageId == hold[0].Publishing.MessageId && !d.Redelivered {
				return // left unsettled: the broker must deliver it again
			}
			if err := d.Ack(false); err != nil {
				t.Errorf("ack %s: %v", d.MessageId, err)
			}
		})
	}()
	has := func(ids ...string) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			for _, id := range ids {
				if len(seen[id]) == 0 {
					return false
				}
			}
			return true
		}
	}

	before := append(messages("", q, 3), hold...)
	mustPublish(t, c, before)
	rabbittest.Eventually(t, 10*time.Second, has(ids(before)...), func() string { return "messages before the cut not consumed" })

	proxy.Cut()
	rabbittest.Eventually(t, 5*time.Second, func() bool { return !c.Connected() }, func() string { return "still connected" })
	proxy.Restore(t)
	rabbittest.Eventually(t, 10*time.Second, c.Connected, func() string { return "did not reconnect" })
	after := messages("", q, 3)
	mustPublish(t, c, after)
	rabbittest.Eventually(t, 10*time.Second, has(ids(after)...), func() string { return "messages after the reconnect not consumed" })
	rabbittest.Eventually(t, 10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		d := seen[hold[0].Publishing.MessageId]
		return len(d) == 2 && d[1]
	}, func() string { return "the unsettled message was not delivered again, marked redelivered" })

	cancel()
	select {
	case err := <-consumed:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Consume returned %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Consume did not return when its context ended")
	}
}

func TestConsumeRejectsNoPrefetch(t *testing.T) {
	c := dial(t, rabbittest.URL(t), rabbit.Config{})
	if err := c.Consume(context.Background(), "q", 0, func(context.Context, amqp.Delivery) {}); err == nil {
		t.Error("Consume with prefetch 0 (unbounded) returned nil")
	}
}

func TestDialErrorsHideThePassword(t *testing.T) {
	base := rabbittest.URL(t)
	wrong := strings.Replace(base, "guest:guest@", "guest:sEcReT-pw@", 1)
	if wrong == base {
		t.Skip("the broker URL does not hold guest:guest")
	}
	for _, tc := range []struct {
		name, url string
		timeout   time.Duration
		want      func(error) bool
	}{
		{"wrong password, given up at once", wrong, 20 * time.Second, func(err error) bool {
			var ae *amqp.Error
			return errors.As(err, &ae) && ae.Code == amqp.AccessRefused
		}},
		{"unknown parameter", wrong + "?exchange=x", time.Second, func(err error) bool {
			return strings.Contains(err.Error(), `"exchange"`)
		}},
		{"other scheme", strings.Replace(wrong, "amqp://", "http://", 1), time.Second, func(err error) bool { return err != nil }},
		{"nothing listening, until the context ends", "amqp://guest:sEcReT-pw@127.0.0.1:1/", 500 * time.Millisecond, func(err error) bool {
			return errors.Is(err, context.DeadlineExceeded)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), tc.timeout)
			defer cancel()
			c, err := rabbit.Dial(ctx, tc.url, rabbit.Config{Logger: slog.New(slog.DiscardHandler)})
			if err == nil {
				_ = c.Close()
				t.Fatal("Dial succeeded")
			}
			if !tc.want(err) {
				t.Errorf("Dial: %v: not the error wanted", err)
			}
			if strings.Contains(err.Error(), "sEcReT") {
				t.Errorf("Dial's error shows the password: %v", err)
			}
			if ctx.Err() != nil && tc.timeout > time.Second {
				t.Errorf("Dial retried until its context ended: %v", err)
			}
		})
	}
}

func TestCloseEndsEverything(t *testing.T) {
	admin := rabbittest.Admin(t)
	q := rabbittest.Queue(t, admin, nil, "")
	c := dial(t, rabbittest.URL(t), rabbit.Config{})
	consumed := make(chan error, 1)
	go func() {
		consumed <- c.Consume(context.Background(), q, 1, func(_ context.Context, d amqp.Delivery) { _ = d.Ack(false) })
	}()
	mustPublish(t, c, messages("", q, 1))

	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	select {
	case err := <-consumed:
		if !errors.Is(err, rabbit.ErrClosed) {
			t.Errorf("Consume after Close: %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Consume did not return after Close")
	}
	for _, err := range c.Publish(context.Background(), messages("", q, 2)) {
		if !errors.Is(err, rabbit.ErrClosed) {
			t.Errorf("Publish after Close: %v, want ErrClosed", err)
		}
	}
	if err := c.Ping(context.Background()); !errors.Is(err, rabbit.ErrClosed) || c.Connected() {
		t.Errorf("Ping after Close: %v, want ErrClosed", err)
	}
}

func Example() {
	ctx := context.Background()
	c, err := rabbit.Dial(ctx, "amqp://guest:guest@127.0.0.1:5672/", rabbit.Config{
		Topology: func(ch *amqp.Channel) error {
			return ch.ExchangeDeclare("example", amqp.ExchangeTopic, true, false, false, false, nil)
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	errs := c.Publish(ctx, []rabbit.Message{{
		Exchange: "example", RoutingKey: "order.cancelled",
		Publishing: amqp.Publishing{MessageId: "1", Body: []byte("{}")},
	}})
	// No queue is bound to the exchange: the broker returns the message.
	fmt.Println(errors.Is(errs[0], rabbit.ErrReturned))
}

func TestTopologyDeclaredAgainWhenTheBrokerLostPartOfIt(t *testing.T) {
	admin := rabbittest.Admin(t)
	ex, q := rabbittest.Name("x"), rabbittest.Name("q")
	rabbittest.DeleteExchangeAtEnd(t, admin, ex)
	t.Cleanup(func() {
		if ch, err := admin.Channel(); err == nil {
			_, _ = ch.QueueDelete(q, false, false, false)
			_ = ch.Close()
		}
	})
	c := dial(t, rabbittest.URL(t), rabbit.Config{Topology: func(ch *amqp.Channel) error {
		if err := ch.ExchangeDeclare(ex, amqp.ExchangeTopic, false, false, false, false, nil); err != nil {
			return err
		}
		if _, err := ch.QueueDeclare(q, false, false, false, false, nil); err != nil {
			return err
		}
		return ch.QueueBind(q, "#", ex, false, nil)
	}})
	ch := rabbittest.Channel(t, admin)

	t.Run("an exchange deleted under a publisher", func(t *testing.T) {
		mustPublish(t, c, messages(ex, "k", 1))
		if err := ch.ExchangeDelete(ex, false, false); err != nil {
			t.Fatal(err)
		}
		for i, err := range publish(t, c, messages(ex, "k", 3)) {
			var ae *amqp.Error
			if !errors.Is(err, rabbit.ErrUnconfirmed) || !errors.As(err, &ae) || ae.Code != amqp.NotFound || rabbit.IsRefusal(err) {
				t.Errorf("message %d to a deleted exchange: %v, want ErrUnconfirmed with 404 NOT_FOUND", i, err)
			}
		}
		mustPublish(t, c, messages(ex, "k", 3)) // declared and bound again
	})

	t.Run("a queue deleted under a consumer", func(t *testing.T) {
		got := make(chan string, 100)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			_ = c.Consume(ctx, q, 10, func(_ context.Context, d amqp.Delivery) {
				_ = d.Ack(false)
				got <- d.MessageId
			})
		}()
		consumed := func(id string) {
			t.Helper()
			for {
				select {
				case got := <-got:
					if got == id {
						return
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("message %s not consumed", id)
				}
			}
		}
		first := messages("", q, 1)
		mustPublish(t, c, first)
		consumed(first[0].Publishing.MessageId)
		if _, err := ch.QueueDelete(q, false, false, false); err != nil {
			t.Fatal(err)
		}
		// Publishing to the queue by name is returned until the consumer,
		// cancelled by the broker, has declared the queue again.
		var last []rabbit.Message
		rabbittest.Eventually(t, 10*time.Second, func() bool {
			last = messages("", q, 1)
			return publish(t, c, last)[0] == nil
		}, func() string { return "the queue was not declared again" })
		consumed(last[0].Publishing.MessageId) // it subscribed again
	})
}
