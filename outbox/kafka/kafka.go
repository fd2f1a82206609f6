// Package kafka is the outbox sink that produces events to a Kafka topic
// (--sink kafka://host:9092/topic), with franz-go.
//
// Each event is one record: its key is the order id, so every event of an
// order lands in the same partition (Kafka's murmur2 hash of the key, as the
// Java client computes it); its headers "id" and "type" are the event id and
// type, and "content-type" is the body's. In FormatCloudEvents the record is
// a binary-mode CloudEvent: the payload is the value and the attributes are
// "ce_" headers.
//
// What the sink guarantees:
//
//   - Acknowledged means replicated: the producer asks for acks=all, so
//     Publish reports an event delivered only once every in-sync replica has
//     it.
//   - Order within an order: the producer is idempotent (franz-go's default,
//     which this package never turns off) with unlimited internal retries,
//     so the records of a partition are written in the order produced, once
//     each, even when a request is retried. The relay gives the sink an
//     order's next event only after the previous one was acknowledged, so
//     an order's events reach its partition in order. Adding partitions to
//     the topic moves keys to other partitions: events of one order produced
//     before and after the change may then be read out of order.
//   - At least once: an event whose acknowledgement did not arrive in time
//     (a timeout, a lost connection) is reported as failed and published
//     again by the relay, with the same event id, as a new record. Consumers
//     dedupe by the "id" header (or the envelope's id).
package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/outbox"
)

// HeaderPrefix is the prefix of the CloudEvents attributes among a record's
// headers (the Kafka protocol binding of CloudEvents).
const HeaderPrefix = "ce_"

// Sink produces events to one Kafka topic. It is safe for concurrent use.
type Sink struct {
	client  *kgo.Client
	topic   string
	name    string
	format  outbox.Format
	timeout time.Duration
	// maxBytes is the largest record batch the topic accepts (its
	// max.message.bytes, read at start). The producer never builds a
	// larger batch, so a record too large on its own is failed before it
	// is sent, alone, rather than in a batch with events that would fit.
	maxBytes atomic.Int32
	// conns remembers why the last connection to a broker failed, for
	// errors that would otherwise only say "deadline exceeded".
	conns *connHook
}

var _ outbox.Sink = (*Sink)(nil)

// New connects to the brokers of cfg and checks that its topic exists and is
// visible to this client, so that a wrong address, credential or topic fails
// at start rather than on every event. Close releases the client.
func New(ctx context.Context, cfg Config) (*Sink, error) {
	if len(cfg.Brokers) == 0 {
		return nil, errors.New("kafka sink: no broker")
	}
	if err := validTopic(cfg.Topic); err != nil {
		return nil, err
	}
	format, err := outbox.ParseFormat(string(cfg.Format))
	if err != nil {
		return nil, fmt.Errorf("kafka sink: %w", err)
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	timeout := cfg.PublishTimeout
	if timeout <= 0 {
		timeout = DefaultPublishTimeout
	}
	clientID := cfg.ClientID
	if clientID == "" {
		clientID = "lapse"
	}
	s := &Sink{topic: cfg.Topic, name: cfg.name(), format: format, timeout: timeout, conns: &connHook{}}
	s.maxBytes.Store(defaultMaxBytes)
	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ClientID(clientID),
		kgo.DefaultProduceTopic(cfg.Topic),
		// acks=all: an acknowledged event is on every in-sync replica.
		// Idempotence stays franz-go's default (on): together they keep a
		// partition's records in order and without duplicates across the
		// client's own retries, with up to 5 requests in flight per broker.
		// Nothing here may set DisableIdempotentWrite,
		// AllowIdempotentProduceCancellation or RecordRetries, each of
		// which gives up some of that.
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.WithLogger(slogLogger{logger.With("sink", cfg.name())}),
		// Read when a partition is first produced to, after New has
		// learnt the topic's limit.
		kgo.ProducerBatchMaxBytesFn(func(string) int32 { return s.maxBytes.Load() }),
		kgo.WithHooks(s.conns),
		// No linger: every Publish waits for its records, so holding a
		// partition's batch open for more (franz-go's default 10 ms)
		// only adds that wait to each call. Records produced while a
		// request is in flight still go out together.
		kgo.ProducerLinger(0),
	}
	if cfg.TLS != nil {
		opts = append(opts, kgo.DialTLSConfig(cfg.TLS))
	}
	if cfg.SASL != nil {
		if cfg.TLS == nil && cfg.SASL.Name() == "PLAIN" {
			logger.Warn("kafka sink: SASL PLAIN without TLS sends the password in the clear", "sink", cfg.name())
		}
		opts = append(opts, kgo.SASL(cfg.SASL))
	}
	client, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka sink %s: %w", cfg.name(), err)
	}
	s.client = client
	if err := s.checkTopic(ctx); err != nil {
		client.Close()
		return nil, fmt.Errorf("kafka sink %s: %w", s.name, err)
	}
	if err := s.readMaxBytes(ctx); err != nil {
		// Not fatal: a client may be allowed to write a topic without
		// being allowed to describe its configuration. Then a record
		// the broker finds too large is refused under the policy.
		logger.Warn("kafka sink: cannot read the topic's max.message.bytes; assuming the default",
			"sink", s.name, "default", defaultMaxBytes, "err", err)
	}
	return s, nil
}

// defaultMaxBytes is franz-go's default batch limit, just under Kafka's
// default max.message.bytes (1048588).
const defaultMaxBytes = 1_000_012

// readMaxBytes sets maxBytes to the topic's max.message.bytes.
func (s *Sink) readMaxBytes(ctx context.Context) error {
	req := kmsg.NewPtrDescribeConfigsRequest()
	res := kmsg.NewDescribeConfigsRequestResource()
	res.ResourceType = kmsg.ConfigResourceTypeTopic
	res.ResourceName = s.topic
	res.ConfigNames = []string{"max.message.bytes"}
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(ctx, s.client)
	if err != nil {
		return err
	}
	for _, r := range resp.Resources {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			return err
		}
		for _, c := range r.Configs {
			if c.Name != "max.message.bytes" || c.Value == nil {
				continue
			}
			n, err := strconv.ParseInt(*c.Value, 10, 32)
			if err != nil {
				return fmt.Errorf("max.message.bytes %q: %w", *c.Value, err)
			}
			// franz-go accepts limits from 512 bytes to 1 GiB.
			s.maxBytes.Store(int32(min(max(n, 512), 1<<30)))
			return nil
		}
	}
	return errors.New("the broker did not answer with max.message.bytes")
}

// checkTopic asks the cluster for the topic's metadata.
func (s *Sink) checkTopic(ctx context.Context) error {
	req := kmsg.NewPtrMetadataRequest()
	t := kmsg.NewMetadataRequestTopic()
	t.Topic = kmsg.StringPtr(s.topic)
	req.Topics = append(req.Topics, t)
	resp, err := req.RequestWith(ctx, s.client)
	if err != nil {
		return fmt.Errorf("ask the brokers about topic %s: %w%s", s.topic, err, s.conns.hint())
	}
	for _, rt := range resp.Topics {
		if rt.Topic == nil || *rt.Topic != s.topic {
			continue
		}
		switch err := kerr.ErrorForCode(rt.ErrorCode); {
		case errors.Is(err, kerr.UnknownTopicOrPartition):
			return fmt.Errorf("topic %s does not exist; create it (the sink does not)", s.topic)
		case err != nil:
			return fmt.Errorf("topic %s: %w", s.topic, err)
		case len(rt.Partitions) == 0:
			return fmt.Errorf("topic %s has no partitions", s.topic)
		}
		return nil
	}
	return fmt.Errorf("the brokers' metadata does not mention topic %s", s.topic)
}

// Name implements outbox.Sink: kafka://<brokers, sorted>/<topic>, without
// credentials. Changing the broker list changes the name, and so the sink's
// progress in the store.
func (s *Sink) Name() string { return s.name }

// Publish implements outbox.Sink. It produces every event, then waits for
// each one's acknowledgement; it returns when all have answered, when ctx
// ends, or when the sink's PublishTimeout has passed, whichever is first.
// An event still unanswered then gets the context's error: the relay
// publishes it again (the record may yet be written: at least once).
//
// A broker's definite rejection is an outbox.RefusedError: a record too
// large for the topic is refused for good; a denied write, a missing topic
// and the broker's other non-retriable answers are refused under the relay's
// policy (an operator can fix them). Everything else — a timeout, a lost
// connection, an unavailable leader — is a plain error, retried.
func (s *Sink) Publish(ctx context.Context, events []order.Event) []error {
	if len(events) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		// Produce would buffer and might still send a record whose
		// context has ended; report it unconfirmed without sending.
		return outbox.ErrorsFor(len(events), fmt.Errorf("kafka: publish to %s: %w", s.name, err))
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()

	w := newWaiter(len(events))
	for i, e := range events {
		rec, err := s.record(e)
		if err != nil {
			w.settle(i, err)
			continue
		}
		// Cancelling ctx (its end, or the timeout) makes franz-go fail
		// this record if it has not been sent yet; a record in flight
		// is answered by the broker, as idempotence requires.
		s.client.Produce(ctx, rec, func(_ *kgo.Record, err error) {
			if err != nil {
				err = s.classify(e, rec, err)
			}
			w.settle(i, err)
		})
	}
	return w.wait(ctx, func(i int) error {
		return fmt.Errorf("kafka: event %s not acknowledged by %s: %w%s", events[i].ID, s.name, context.Cause(ctx), s.conns.hint())
	})
}

// record is e as a Kafka record for the sink's topic.
func (s *Sink) record(e order.Event) (*kgo.Record, error) {
	body, contentType, ceHeaders, err := s.format.Binary(e, HeaderPrefix)
	if err != nil {
		// The event cannot be written in this format at all (a payload
		// that is not JSON): no retry can help, so it is refused for
		// good rather than retried forever.
		return nil, outbox.RefusedForGood(fmt.Errorf("kafka: %w", err))
	}
	headers := make([]kgo.RecordHeader, 0, 3+len(ceHeaders))
	headers = append(headers,
		kgo.RecordHeader{Key: "id", Value: []byte(e.ID)},
		kgo.RecordHeader{Key: "type", Value: []byte(e.Type)},
		kgo.RecordHeader{Key: "content-type", Value: []byte(contentType)},
	)
	for _, k := range slices.Sorted(maps.Keys(ceHeaders)) {
		headers = append(headers, kgo.RecordHeader{Key: k, Value: []byte(ceHeaders[k])})
	}
	// The record's timestamp is left to the producer (now), not the
	// event's creation time: a backlog relayed late would otherwise be
	// born already past the topic's retention.
	return &kgo.Record{Topic: s.topic, Key: []byte(e.OrderID), Value: body, Headers: headers}, nil
}

// classify turns franz-go's answer for e into the outbox's kinds of error.
func (s *Sink) classify(e order.Event, rec *kgo.Record, err error) error {
	wrapped := fmt.Errorf("kafka: event %s to %s: %w", e.ID, s.name, err)
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, kgo.ErrRecordTimeout), errors.Is(err, kgo.ErrRecordRetries),
		errors.Is(err, kgo.ErrClientClosed), errors.Is(err, kgo.ErrAborting):
		// Checked first: franz-go wraps the last broker error into its
		// timeouts, and a timeout is not a refusal.
		return wrapped
	case errors.Is(err, kerr.MessageTooLarge), errors.Is(err, kerr.RecordListTooLarge):
		// The broker refuses a whole batch, which may hold events of
		// other orders that fit: only a record too large on its own is
		// refused for good; the others are tried again, alone or in
		// another batch.
		if recordSize(rec) > int(s.maxBytes.Load()) {
			return outbox.RefusedForGood(wrapped)
		}
		return outbox.Refused(wrapped)
	case errors.Is(err, kerr.InvalidRecord):
		// The broker's validation of these bytes (a topic that requires
		// keys or a timestamp within bounds): they will be refused again.
		return outbox.RefusedForGood(wrapped)
	case errors.Is(err, kerr.UnknownTopicOrPartition), errors.Is(err, kerr.UnknownTopicID):
		// franz-go gave up on the topic after its UnknownTopicRetries:
		// the topic is gone, and an operator may bring it back.
		return outbox.Refused(wrapped)
	}
	var ke *kerr.Error
	if errors.As(err, &ke) && !ke.Retriable {
		// A broker's definite answer: a denied write
		// (TOPIC_AUTHORIZATION_FAILED), a policy violation, an invalid
		// request.
		return outbox.Refused(wrapped)
	}
	return wrapped
}

// Ping returns nil when a broker answers, and why not otherwise: the
// sink's part of a readiness check.
func (s *Sink) Ping(ctx context.Context) error {
	if err := s.client.Ping(ctx); err != nil {
		return fmt.Errorf("kafka sink %s: %w%s", s.name, err, s.conns.hint())
	}
	return nil
}

// recordSize is a lower bound of the bytes rec takes in a batch of its own:
// its key, value and headers, the batch's 61 bytes of framing and the
// smallest framing of a record (7 bytes) and of a header (2). A record it
// finds larger than the topic's limit cannot be written, whatever else is
// batched with it.
func recordSize(rec *kgo.Record) int {
	n := 61 + 7 + len(rec.Key) + len(rec.Value)
	for _, h := range rec.Headers {
		n += 2 + len(h.Key) + len(h.Value)
	}
	return n
}

// Close closes the client. Publish has waited for every answer it reported,
// so what may still be in flight belongs to calls that timed out, and the
// relay publishes those events again. Publish must not be called after
// Close.
func (s *Sink) Close() error {
	s.client.Close()
	return nil
}

// connHook is a kgo.HookBrokerConnect that keeps the outcome of the latest
// connection attempt: a refused dial, a TLS or SASL failure.
type connHook struct {
	mu  sync.Mutex
	err error
}

// OnBrokerConnect implements kgo.HookBrokerConnect.
func (h *connHook) OnBrokerConnect(meta kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err != nil {
		err = fmt.Errorf("broker %s:%d: %w", meta.Host, meta.Port, err)
	}
	h.err = err
}

// hint is ", last connection error: …" when the latest attempt failed.
func (h *connHook) hint() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err == nil {
		return ""
	}
	return " (last connection error: " + h.err.Error() + ")"
}

// waiter collects one result per event from promises that may answer
// after Publish has returned.
type waiter struct {
	mu      sync.Mutex
	results []error
	settled []bool
	pending int
	done    chan struct{} // closed when pending reaches 0
	closed  bool          // wait returned: later answers are dropped
}

func newWaiter(n int) *waiter {
	return &waiter{results: make([]error, n), settled: make([]bool, n), pending: n, done: make(chan struct{})}
}

// settle records event i's result; the first answer counts.
func (w *waiter) settle(i int, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || w.settled[i] {
		return
	}
	w.results[i], w.settled[i] = err, true
	w.pending--
	if w.pending == 0 {
		close(w.done)
	}
}

// wait returns the results once every event has answered or ctx has ended;
// then an unanswered event's result is unanswered(i).
func (w *waiter) wait(ctx context.Context, unanswered func(i int) error) []error {
	select {
	case <-w.done:
	case <-ctx.Done():
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	out := slices.Clone(w.results)
	for i, ok := range w.settled {
		if !ok {
			out[i] = unanswered(i)
		}
	}
	return out
}
