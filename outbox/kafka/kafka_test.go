package kafka_test

// No Kafka broker can run on the machines this project is built and tested
// on, so these tests run against kfake, franz-go's in-process Kafka
// cluster (three brokers, real wire protocol, real produce and fetch
// paths), never a mock of the client.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/outbox"
	"github.com/lapsehq/lapse/outbox/kafka"
	"github.com/lapsehq/lapse/outbox/sinktest"
)

// topic is the topic of every test's own cluster.
const topic = "lapse-events"

// newCluster starts a three-broker kfake cluster holding topic with the
// given partitions; it is closed when t ends.
func newCluster(t testing.TB, partitions int32, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(3), kfake.SeedTopics(partitions, topic)}, opts...)...)
	if err != nil {
		t.Fatalf("kfake cluster: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// newSink returns a sink producing to c's topic, closed when t ends.
func newSink(t testing.TB, c *kfake.Cluster, format outbox.Format, timeout time.Duration) *kafka.Sink {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := kafka.New(ctx, kafka.Config{
		Brokers: c.ListenAddrs(), Topic: topic, Format: format, PublishTimeout: timeout,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatalf("kafka.New: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// receiver is a consumer of the topic from its start, in the background.
// It keeps each offset of a partition once: a consumer that resets its
// position (after a leader moves, kfake may answer OFFSET_OUT_OF_RANGE)
// reads records again, and the test is about what the log holds.
type receiver struct {
	mu   sync.Mutex
	got  []sinktest.Delivery
	recs []*kgo.Record
	seen map[[2]int64]bool // partition, offset
}

func consume(t testing.TB, c *kfake.Cluster) *receiver {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	r := &receiver{seen: map[[2]int64]bool{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			fs.EachRecord(func(rec *kgo.Record) {
				d := sinktest.Delivery{Body: rec.Value, Key: string(rec.Key), Route: rec.Topic, Headers: map[string]string{}}
				for _, h := range rec.Headers {
					d.Headers[h.Key] = string(h.Value)
				}
				d.ContentType = d.Headers["content-type"]
				r.mu.Lock()
				defer r.mu.Unlock()
				at := [2]int64{int64(rec.Partition), rec.Offset}
				if r.seen[at] {
					return
				}
				r.seen[at] = true
				r.got = append(r.got, d)
				r.recs = append(r.recs, rec)
			})
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		cl.Close()
	})
	return r
}

// Received implements sinktest.Receiver.
func (r *receiver) Received() []sinktest.Delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

func (r *receiver) records() []*kgo.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.recs)
}

// waitRecords waits up to 30 s until r holds at least n records.
func (r *receiver) waitRecords(t testing.TB, n int) []*kgo.Record {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		recs := r.records()
		if len(recs) >= n {
			return recs
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d records arrived in 30 s", len(recs), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func header(rec *kgo.Record, key string) string {
	for _, h := range rec.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

func publish(t testing.TB, s *kafka.Sink, evs []order.Event) []error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := s.Publish(ctx, evs)
	if len(errs) != len(evs) {
		t.Fatalf("Publish: %d results for %d events", len(errs), len(evs))
	}
	return errs
}

func mustPublish(t testing.TB, s *kafka.Sink, evs []order.Event) {
	t.Helper()
	for i, err := range publish(t, s, evs) {
		if err != nil {
			t.Fatalf("Publish event %d (%s): %v", i, evs[i].ID, err)
		}
	}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	sinktest.Run(t, sinktest.Features{
		HeaderPrefix: kafka.HeaderPrefix,
		KeyIsOrderID: true,
		RouteOf:      func(string) string { return topic },
	}, func(t *testing.T, format outbox.Format) (outbox.Sink, sinktest.Receiver) {
		c := newCluster(t, 6)
		return newSink(t, c, format, 0), consume(t, c)
	})
}

func TestRecordCarriesIDTypeAndCloudEventHeaders(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3)
	s := newSink(t, c, outbox.FormatCloudEvents, 0)
	r := consume(t, c)
	evs := sinktest.Events("h", 3, order.EventCancelled)
	mustPublish(t, s, evs)
	recs := r.waitRecords(t, len(evs))
	for _, rec := range recs {
		id := header(rec, "id")
		i := slices.IndexFunc(evs, func(e order.Event) bool { return e.ID == id })
		if i < 0 {
			t.Fatalf("record with id header %q: none of the events published", id)
		}
		e := evs[i]
		checks := map[string]string{
			"type": e.Type, "content-type": "application/json",
			"ce_id": e.ID, "ce_type": e.Type, "ce_subject": e.OrderID, "ce_specversion": "1.0",
		}
		for k, want := range checks {
			if got := header(rec, k); got != want {
				t.Errorf("event %s: header %s = %q, want %q", e.ID, k, got, want)
			}
		}
		if string(rec.Key) != e.OrderID {
			t.Errorf("event %s: key %q, want the order id %q", e.ID, rec.Key, e.OrderID)
		}
		if string(rec.Value) != string(e.Payload) {
			t.Errorf("event %s: value %s, want the payload %s", e.ID, rec.Value, e.Payload)
		}
	}
}

// TestOrderHoldsAcrossPartitionsUnderRetries publishes 2,000 events of 200
// orders in 10 rounds, as the relay would (one event per order per call),
// while the brokers answer produce requests with retriable errors and the
// partition leaders move: every event arrives once, each order's in one
// partition, in the order published.
func TestOrderHoldsAcrossPartitionsUnderRetries(t *testing.T) {
	t.Parallel()
	const orders, rounds = 200, 10
	c := newCluster(t, 10)
	s := newSink(t, c, outbox.FormatJSON, 0)
	r := consume(t, c)

	// Retriable answers on some of the produce requests: franz-go retries
	// them, and the idempotent producer's sequence numbers must keep each
	// partition in order. Removed at the end (a Fault counts hits).
	faults := c.Fault(
		kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Partitions: []int32{0, 3, 7}, Err: kerr.NotEnoughReplicas, Count: 3},
		kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Partitions: []int32{1, 5}, Err: kerr.RequestTimedOut, Count: 2},
	)
	defer faults.Remove()

	ids := make([]string, orders)
	for i := range ids {
		ids[i] = fmt.Sprintf("ord-%03d", i)
	}
	published := map[string]bool{}
	for round := range rounds {
		evs := make([]order.Event, orders)
		for i, id := range ids {
			evs[i] = order.Event{
				ID: fmt.Sprintf("%s-%02d", id, round), Type: fmt.Sprintf("order.step%02d", round), OrderID: id,
				Payload: []byte(`{"schema_version":1}`), CreatedAt: time.Now().UTC(),
			}
			published[evs[i].ID] = true
		}
		mustPublish(t, s, evs)
		if round%3 == 1 {
			c.ShufflePartitionLeaders()
		}
	}
	if faults.Hits() == 0 {
		t.Fatal("no produce request was faulted: the test retried nothing")
	}

	recs := r.waitRecords(t, orders*rounds)
	seen := map[string]int{}
	partitionOf := map[string]int32{}
	steps := map[string][]string{}
	for _, rec := range recs {
		id, key := header(rec, "id"), string(rec.Key)
		seen[id]++
		if p, ok := partitionOf[key]; ok && p != rec.Partition {
			t.Errorf("order %s in partitions %d and %d", key, p, rec.Partition)
		}
		partitionOf[key] = rec.Partition
		steps[key] = append(steps[key], header(rec, "type"))
	}
	for id := range published {
		if seen[id] != 1 {
			t.Errorf("event %s arrived %d times, want once", id, seen[id])
		}
	}
	for _, id := range ids {
		if !slices.IsSorted(steps[id]) || len(steps[id]) != rounds {
			t.Errorf("order %s: events arrived as %v, want %d steps in order", id, steps[id], rounds)
		}
	}
	if parts := len(slices.Compact(slices.Sorted(mapsValues(partitionOf)))); parts < 5 {
		t.Errorf("200 orders used %d partitions of 10: keys are not spread", parts)
	}
}

func mapsValues[K comparable, V any](m map[K]V) func(func(V) bool) {
	return func(yield func(V) bool) {
		for _, v := range m {
			if !yield(v) {
				return
			}
		}
	}
}

// TestOneCallKeepsAnOrdersEventsInOrder: several events of one order in
// one call (the relay does not do this, but a sink may be given it) keep
// their order, retries included.
func TestOneCallKeepsAnOrdersEventsInOrder(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 4)
	s := newSink(t, c, outbox.FormatJSON, 0)
	r := consume(t, c)
	faults := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.NotEnoughReplicas, Count: 3})
	defer faults.Remove()
	var evs []order.Event
	for step := range 20 {
		for o := range 25 {
			evs = append(evs, order.Event{
				ID: fmt.Sprintf("e-%d-%02d", o, step), Type: fmt.Sprintf("order.step%02d", step), OrderID: fmt.Sprintf("o-%d", o),
				Payload: []byte(`{}`), CreatedAt: time.Now().UTC(),
			})
		}
	}
	mustPublish(t, s, evs)
	steps := map[string][]string{}
	for _, rec := range r.waitRecords(t, len(evs)) {
		steps[string(rec.Key)] = append(steps[string(rec.Key)], header(rec, "type"))
	}
	for o, st := range steps {
		if len(st) != 20 || !slices.IsSorted(st) {
			t.Errorf("order %s: %v, want 20 steps in order", o, st)
		}
	}
}

// TestFailureMidPublishReportsEachEvent: while the leader of one partition
// refuses writes with a retriable error, the events bound for it fail
// (transport failures, not refusals) and the others succeed in the same
// call; no event reported delivered is missing, and publishing the failed
// ones again once the partition is back delivers every event exactly once.
func TestFailureMidPublishReportsEachEvent(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 5)
	s := newSink(t, c, outbox.FormatJSON, 2*time.Second)
	r := consume(t, c)

	// Learn which orders the partition holds from a first round, then
	// break that partition for the second.
	first := sinktest.Events("m", 100, order.EventCreated)
	mustPublish(t, s, first)
	byOrder := map[string]int32{}
	for _, rec := range r.waitRecords(t, len(first)) {
		byOrder[string(rec.Key)] = rec.Partition
	}
	const broken = int32(2)
	faults := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Partitions: []int32{broken}, Err: kerr.NotEnoughReplicas, Count: -1})

	second := make([]order.Event, len(first))
	for i, e := range first {
		second[i] = e
		second[i].ID, second[i].Type = e.ID+"-paid", order.EventPaid
	}
	start := time.Now()
	errs := publish(t, s, second)
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("Publish took %s with a 2 s timeout", took)
	}
	var failed []order.Event
	for i, err := range errs {
		wantFail := byOrder[second[i].OrderID] == broken
		switch {
		case wantFail && err == nil:
			t.Errorf("event %s to the broken partition reported delivered", second[i].ID)
		case !wantFail && err != nil:
			t.Errorf("event %s to a working partition: %v", second[i].ID, err)
		case err != nil:
			var refused *outbox.RefusedError
			if errors.As(err, &refused) {
				t.Errorf("event %s: %v is a refusal; a timeout is a transport failure", second[i].ID, err)
			}
			failed = append(failed, second[i])
		}
	}
	if len(failed) == 0 {
		t.Fatal("no event went to the broken partition")
	}

	// Every event reported delivered is there (wait for them all).
	delivered := len(first) + len(second) - len(failed)
	recs := r.waitRecords(t, delivered)
	arrived := map[string]int{}
	for _, rec := range recs {
		arrived[header(rec, "id")]++
	}
	for i, err := range errs {
		if err == nil && arrived[second[i].ID] != 1 {
			t.Errorf("event %s reported delivered arrived %d times", second[i].ID, arrived[second[i].ID])
		}
	}

	faults.Remove()
	// The relay retries failed events; the first retry may still meet the
	// partition's last faulted answer, so retry until delivered (bounded).
	deadline := time.Now().Add(30 * time.Second)
	for len(failed) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d events still failing 30 s after the partition came back", len(failed))
		}
		var still []order.Event
		for i, err := range publish(t, s, failed) {
			if err != nil {
				still = append(still, failed[i])
			}
		}
		failed = still
	}
	recs = r.waitRecords(t, len(first)+len(second))
	arrived = map[string]int{}
	for _, rec := range recs {
		arrived[header(rec, "id")]++
	}
	for _, e := range append(first, second...) {
		if arrived[e.ID] < 1 {
			t.Errorf("event %s never arrived", e.ID)
		}
	}
}

// TestConnectionsCutMidPublishAreRetried: produce connections closed by the
// broker before it answers are retried by the client (idempotently): the
// call succeeds, and each event is written once.
func TestConnectionsCutMidPublishAreRetried(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3)
	s := newSink(t, c, outbox.FormatJSON, 0)
	r := consume(t, c)
	var mu sync.Mutex
	cut := 0
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		mu.Lock()
		defer mu.Unlock()
		if cut < 2 {
			cut++
			c.KeepControl()
			return nil, errors.New("connection cut by the test"), true
		}
		return nil, nil, false
	})
	evs := sinktest.Events("k", 50, order.EventCreated)
	mustPublish(t, s, evs)
	mu.Lock()
	if cut != 2 {
		t.Errorf("%d produce connections cut, want 2", cut)
	}
	mu.Unlock()
	arrived := map[string]int{}
	for _, rec := range r.waitRecords(t, len(evs)) {
		arrived[header(rec, "id")]++
	}
	for _, e := range evs {
		if arrived[e.ID] != 1 {
			t.Errorf("event %s arrived %d times, want once", e.ID, arrived[e.ID])
		}
	}
}

func TestBrokersDownTimesOut(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3)
	s := newSink(t, c, outbox.FormatJSON, 500*time.Millisecond)
	mustPublish(t, s, sinktest.Events("d", 3, order.EventCreated))
	c.Close()
	evs := sinktest.Events("d", 3, order.EventCreated)
	start := time.Now()
	errs := publish(t, s, evs)
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Publish with the cluster down took %s; the timeout is 500 ms", took)
	}
	for i, err := range errs {
		var refused *outbox.RefusedError
		switch {
		case err == nil:
			t.Errorf("event %d delivered with the cluster down", i)
		case errors.As(err, &refused):
			t.Errorf("event %d: %v is a refusal; an unreachable broker is a transport failure", i, err)
		case !errors.Is(err, context.DeadlineExceeded):
			t.Errorf("event %d: %v, want the timeout", i, err)
		}
	}
}

func TestRefusals(t *testing.T) {
	t.Parallel()
	t.Run("a denied write is refused under the policy", func(t *testing.T) {
		c := newCluster(t, 3)
		s := newSink(t, c, outbox.FormatJSON, 0)
		f := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: kerr.TopicAuthorizationFailed, Count: -1})
		defer f.Remove()
		for i, err := range publish(t, s, sinktest.Events("a", 3, order.EventCreated)) {
			var refused *outbox.RefusedError
			if !errors.As(err, &refused) || refused.Permanent || !errors.Is(err, kerr.TopicAuthorizationFailed) {
				t.Errorf("event %d: %v, want a (not permanent) refusal wrapping TOPIC_AUTHORIZATION_FAILED", i, err)
			}
		}
	})

	t.Run("a record too large for the topic is refused for good, alone", func(t *testing.T) {
		c := newCluster(t, 1)
		setTopicConfig(t, c, "max.message.bytes", "4096")
		s := newSink(t, c, outbox.FormatJSON, 0)
		r := consume(t, c)
		evs := sinktest.Events("big", 3, order.EventCreated)
		evs[1].Payload = []byte(`{"pad":"` + strings.Repeat("x", 8000) + `"}`)
		errs := publish(t, s, evs)
		var refused *outbox.RefusedError
		if !errors.As(errs[1], &refused) || !refused.Permanent || !errors.Is(errs[1], kerr.MessageTooLarge) {
			t.Errorf("large event: %v, want a permanent refusal wrapping MESSAGE_TOO_LARGE", errs[1])
		}
		// One partition: the small events share the large one's partition
		// and are still delivered.
		if errs[0] != nil || errs[2] != nil {
			t.Errorf("small events beside the large one: %v, %v; want both delivered", errs[0], errs[2])
		}
		if recs := r.waitRecords(t, 2); len(recs) != 2 {
			t.Errorf("%d records arrived, want the 2 small ones", len(recs))
		}
	})

	t.Run("a batch the broker finds too large is refused under the policy", func(t *testing.T) {
		c := newCluster(t, 3)
		s := newSink(t, c, outbox.FormatJSON, 0)
		f := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: kerr.MessageTooLarge, Count: -1})
		defer f.Remove()
		for i, err := range publish(t, s, sinktest.Events("b", 3, order.EventCreated)) {
			var refused *outbox.RefusedError
			if !errors.As(err, &refused) || refused.Permanent {
				t.Errorf("small event %d: %v, want a refusal that is not permanent (its batch was too large, not it)", i, err)
			}
		}
	})

	t.Run("a payload CloudEvents cannot encode is refused for good", func(t *testing.T) {
		c := newCluster(t, 1)
		s := newSink(t, c, outbox.FormatCloudEvents, 0)
		evs := sinktest.Events("j", 2, order.EventCreated)
		evs[0].Payload = []byte(`not json`)
		errs := publish(t, s, evs)
		var refused *outbox.RefusedError
		if !errors.As(errs[0], &refused) || !refused.Permanent {
			t.Errorf("event with a payload that is not JSON: %v, want a permanent refusal", errs[0])
		}
		if errs[1] != nil {
			t.Errorf("the other event: %v", errs[1])
		}
	})
}

// setTopicConfig sets one configuration value of topic.
func setTopicConfig(t testing.TB, c *kfake.Cluster, key, value string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeTopic, topic
	cfg := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	cfg.Name, cfg.Value, cfg.Op = key, kmsg.StringPtr(value), kmsg.IncrementalAlterConfigOpSet
	res.Configs = append(res.Configs, cfg)
	req.Resources = append(req.Resources, res)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("set %s=%s: %v", key, value, err)
	}
	for _, r := range resp.Resources {
		if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
			t.Fatalf("set %s=%s: %v", key, value, err)
		}
	}
}

func TestNewChecksTheTopic(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := kafka.New(ctx, kafka.Config{Brokers: c.ListenAddrs(), Topic: "no-such-topic"})
	if err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("New with a missing topic: %v, want an error saying it does not exist", err)
	}
}

func TestPublishWithEndedContext(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1)
	s := newSink(t, c, outbox.FormatJSON, 0)
	r := consume(t, c)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for i, err := range s.Publish(ctx, sinktest.Events("x", 3, order.EventCreated)) {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("event %d: %v, want context.Canceled", i, err)
		}
	}
	// Nothing was sent: a later event is the first record of the topic.
	evs := sinktest.Events("y", 1, order.EventCreated)
	mustPublish(t, s, evs)
	if recs := r.waitRecords(t, 1); header(recs[0], "id") != evs[0].ID {
		t.Errorf("first record is %s, want %s (the cancelled events were sent)", header(recs[0], "id"), evs[0].ID)
	}
}

func TestRawPublishRate(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3)
	r := consume(t, c)
	rate, err := kafka.RawPublishRate(context.Background(), "kafka://"+strings.Join(c.ListenAddrs(), ",")+"/"+topic, 1200, 200)
	if err != nil || rate <= 0 {
		t.Fatalf("RawPublishRate: %v, %v; want a positive rate", rate, err)
	}
	for _, rec := range r.waitRecords(t, 1200) {
		if header(rec, "type") != kafka.RawType || len(rec.Value) != 200 {
			t.Fatalf("record with type %q and %d bytes; want %s and 200", header(rec, "type"), len(rec.Value), kafka.RawType)
		}
	}
	if _, err := kafka.RawPublishRate(context.Background(), "kafka://"+c.ListenAddrs()[0]+"/"+topic, 0, 10); err == nil {
		t.Error("RawPublishRate of 0 records: no error")
	}
}

func TestPing(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1)
	s := newSink(t, c, outbox.FormatJSON, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	c.Close()
	short, cancelShort := context.WithTimeout(ctx, time.Second)
	defer cancelShort()
	if err := s.Ping(short); err == nil {
		t.Error("Ping with the cluster down: nil")
	}
}
