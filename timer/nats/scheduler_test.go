package nats_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lapsehq/lapse/timer"
	natstimer "github.com/lapsehq/lapse/timer/nats"
)

// quiet is how long a test watches for something that must not happen (a
// second delivery, a delivery of a removed timer). Watching is all a sleep
// is used for.
const quiet = 400 * time.Millisecond

// lateBound is the lateness this package promises to stay under: the server
// looks at its schedules at most every 250 ms, and a loaded CI machine under
// the race detector adds the rest.
const lateBound = time.Second

func schedSubject(prefix, key string) string {
	return prefix + ".sched." + base64.RawURLEncoding.EncodeToString([]byte(key))
}

// A timer is never delivered before its due time and is delivered within
// lateBound after it. The schedule's "@at" is the due time rounded up to the
// millisecond, and the server honours the fraction: timers due early in a
// second fire before the next whole second.
func TestLateness(t *testing.T) {
	t.Parallel()
	prefix := newPrefix(t)
	s := mustNew(t, natstimer.Config{Prefix: prefix})
	ctx := context.Background()
	rec := newRecorder(nil)
	run(t, s, rec.handler(1))

	// 150 timers spread over 1.5 s from a point 300 ms ahead, each with a
	// sub-millisecond fraction, and one exactly on a millisecond.
	base := time.Now().Add(300 * time.Millisecond)
	want := map[string]time.Time{}
	var keys []string
	for i := range 150 {
		key := fmt.Sprintf("late-%03d", i)
		due := base.Add(time.Duration(i)*10*time.Millisecond + time.Duration(i*7919%1_000_000)*time.Nanosecond)
		want[key], keys = due, append(keys, key)
	}
	want["exact"], keys = base.Truncate(time.Millisecond).Add(500*time.Millisecond), append(keys, "exact")
	for _, key := range keys {
		if err := s.Schedule(ctx, key, want[key]); err != nil {
			t.Fatal(err)
		}
	}

	// The schedule as stored: "@at" with milliseconds, rounded up, Lead
	// before the due time (the process holds the timer until it is due).
	// Read on probes an hour ahead with the same sub-millisecond fractions:
	// a schedule that has fired is gone from the stream, and under load the
	// near ones above may fire before they are read.
	st := stream(t, prefix)
	for _, key := range []string{"late-001", "late-077", "exact"} {
		want["probe-"+key] = want[key].Add(time.Hour)
		if err := s.Schedule(ctx, "probe-"+key, want["probe-"+key]); err != nil {
			t.Fatal(err)
		}
	}
	for _, probe := range []string{"probe-late-001", "probe-late-077", "probe-exact"} {
		key := probe
		m, err := st.GetLastMsgForSubject(ctx, schedSubject(prefix, key))
		if err != nil {
			t.Fatalf("%s: schedule message: %v", key, err)
		}
		due := want[key]
		fire := due.Add(-natstimer.DefaultLead)
		at := fire.Truncate(time.Millisecond)
		if at.Before(fire) {
			at = at.Add(time.Millisecond)
		}
		if got, wantHdr := m.Header.Get("Nats-Schedule"), "@at "+at.UTC().Format("2006-01-02T15:04:05.000Z"); got != wantHdr {
			t.Errorf("%s (due %s): Nats-Schedule %q, want %q", key, due.UTC().Format(time.RFC3339Nano), got, wantHdr)
		}
		if got, wantTarget := m.Header.Get("Nats-Schedule-Target"), prefix+".due."+base64.RawURLEncoding.EncodeToString([]byte(key)); got != wantTarget {
			t.Errorf("%s: Nats-Schedule-Target %q, want %q", key, got, wantTarget)
		}
	}
	for _, probe := range []string{"probe-late-001", "probe-late-077", "probe-exact"} {
		if err := s.Unschedule(ctx, probe); err != nil {
			t.Fatal(err)
		}
	}

	last := base.Add(1500 * time.Millisecond)
	rec.waitDelivered(t, time.Until(last)+5*time.Second, keys...)
	var lates []time.Duration
	beforeWholeSecond := 0
	for _, key := range keys {
		ds := rec.deliveries(key)
		if len(ds) != 1 {
			t.Errorf("%s: delivered %d times, want once", key, len(ds))
			continue
		}
		d, due := ds[0], want[key]
		if d.At.Before(due) {
			t.Errorf("%s: delivered %v before its due time", key, due.Sub(d.At))
			continue
		}
		if !d.Due.Equal(due) {
			t.Errorf("%s: delivered with Due %v, scheduled %v", key, d.Due, due)
		}
		late := d.At.Sub(due)
		lates = append(lates, late)
		if late > lateBound {
			t.Errorf("%s: delivered %v after its due time, over %v", key, late, lateBound)
		}
		// A server that fired on whole seconds (rounded up) would deliver
		// nothing before the next whole second.
		if d.At.Before(due.Truncate(time.Second).Add(time.Second)) {
			beforeWholeSecond++
		}
	}
	if beforeWholeSecond == 0 {
		t.Errorf("no timer fired before the whole second after its due time: the server ignores the milliseconds")
	}
	slices.Sort(lates)
	if len(lates) > 0 {
		t.Logf("%d timers: lateness p50 %v, p99 %v, max %v; %d fired before the next whole second",
			len(lates), lates[len(lates)/2].Round(time.Millisecond), lates[len(lates)*99/100].Round(time.Millisecond),
			lates[len(lates)-1].Round(time.Millisecond), beforeWholeSecond)
	}
}

// Unschedule (an order paid) removes the schedule from the stream, and a
// fired timer waiting for its redelivery too.
func TestUnscheduleStopsATimer(t *testing.T) {
	t.Parallel()
	prefix := newPrefix(t)
	s := mustNew(t, natstimer.Config{Prefix: prefix, AckWait: time.Second})
	ctx := context.Background()
	var refused sync.Map
	rec := newRecorder(func(ctx context.Context, due []timer.Timer) error {
		for _, tm := range due {
			// The first delivery of "fired" fails, and it is unscheduled
			// while it waits for its redelivery.
			if tm.Key == "fired" {
				if _, again := refused.LoadOrStore(tm.Key, true); !again {
					if err := s.Unschedule(ctx, "fired"); err != nil {
						t.Error(err)
					}
					return errors.New("refused")
				}
			}
		}
		return nil
	})
	run(t, s, rec.handler(1))
	due := time.Now().Add(300 * time.Millisecond)
	for _, key := range []string{"paid", "kept", "fired"} {
		if err := s.Schedule(ctx, key, due); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Unschedule(ctx, "paid"); err != nil {
		t.Fatal(err)
	}
	if _, err := stream(t, prefix).GetLastMsgForSubject(ctx, schedSubject(prefix, "paid")); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Errorf("the schedule of an unscheduled timer: %v, want it purged", err)
	}
	rec.waitDelivered(t, 5*time.Second, "kept", "fired")
	time.Sleep(time.Until(due) + timer.Backoff(1) + quiet) // watch: past the due time and the redelivery's backoff
	if n := len(rec.deliveries("paid")); n != 0 {
		t.Errorf("paid: unscheduled, yet delivered %d times", n)
	}
	if n := len(rec.deliveries("fired")); n != 1 {
		t.Errorf("fired: unscheduled while waiting for its redelivery, yet delivered %d times", n)
	}
	if err := s.Unschedule(ctx, "never-scheduled"); err != nil {
		t.Errorf("Unschedule of an unknown key: %v", err)
	}
}

// A second Schedule of a key replaces the first, in the stream (one message
// on the key's subject) and in what is delivered, earlier or later.
func TestRescheduleReplaces(t *testing.T) {
	t.Parallel()
	prefix := newPrefix(t)
	s := mustNew(t, natstimer.Config{Prefix: prefix})
	ctx := context.Background()
	now := time.Now()
	plans := map[string][2]time.Time{
		"earlier": {now.Add(1500 * time.Millisecond), now.Add(200 * time.Millisecond)},
		"later":   {now.Add(200 * time.Millisecond), now.Add(700 * time.Millisecond)},
	}
	for key, p := range plans {
		for _, due := range p {
			if err := s.Schedule(ctx, key, due); err != nil {
				t.Fatal(err)
			}
		}
	}
	st := stream(t, prefix)
	for key := range plans {
		info, err := st.Info(ctx, jetstream.WithSubjectFilter(schedSubject(prefix, key)))
		if err != nil {
			t.Fatal(err)
		}
		if n := info.State.Subjects[schedSubject(prefix, key)]; n != 1 {
			t.Errorf("%s: %d messages on its schedule subject after two Schedules, want 1", key, n)
		}
	}
	rec := newRecorder(nil)
	run(t, s, rec.handler(1))
	rec.waitDelivered(t, 5*time.Second, "earlier", "later")
	time.Sleep(time.Until(plans["earlier"][0]) + quiet) // watch: past the replaced due time of "earlier"
	for key, p := range plans {
		ds := rec.deliveries(key)
		if len(ds) != 1 {
			t.Errorf("%s: delivered %d times, want once", key, len(ds))
			continue
		}
		if !ds[0].Due.Equal(p[1]) {
			t.Errorf("%s: delivered with Due %v, want the replacing %v", key, ds[0].Due, p[1])
		}
		if ds[0].At.Before(p[1]) {
			t.Errorf("%s: delivered %v before its due time", key, p[1].Sub(ds[0].At))
		}
	}
}

// Two instances on one server share the consumer: each timer goes to exactly
// one of them, is acknowledged, and is never delivered again.
func TestTwoInstances(t *testing.T) {
	t.Parallel()
	const n, ackWait = 400, time.Second
	prefix := newPrefix(t)
	a := mustNew(t, natstimer.Config{Prefix: prefix, AckWait: ackWait, BatchSize: 50})
	b := mustNew(t, natstimer.Config{Prefix: prefix, AckWait: ackWait, BatchSize: 50})
	rec := newRecorder(nil)
	run(t, a, rec.handler(1))
	run(t, b, rec.handler(2))
	ctx := context.Background()
	var keys []string
	start := time.Now()
	for i := range n {
		key := fmt.Sprintf("two-%03d", i)
		keys = append(keys, key)
		s := []*natstimer.Scheduler{a, b}[i%2]
		if err := s.Schedule(ctx, key, start.Add(time.Duration(i)*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
	}
	rec.waitDelivered(t, 10*time.Second, keys...)
	time.Sleep(ackWait + quiet) // watch: an unacknowledged timer would come back after AckWait
	per := map[int]int{}
	for _, key := range keys {
		ds := rec.deliveries(key)
		if len(ds) != 1 {
			t.Errorf("%s: delivered %d times, want once", key, len(ds))
			continue
		}
		per[ds[0].Consumer]++
	}
	if per[1] == 0 || per[2] == 0 {
		t.Errorf("timers per instance %v: one instance got none", per)
	}
	info := consumerInfo(t, prefix)
	if info.NumAckPending != 0 || info.NumRedelivered != 0 || info.NumPending != 0 {
		t.Errorf("consumer after every timer was handled: %d unacknowledged, %d redelivered, %d pending; want none",
			info.NumAckPending, info.NumRedelivered, info.NumPending)
	}
	// Acknowledged timers leave the work-queue stream.
	sinfo, err := stream(t, prefix).Info(ctx, jetstream.WithSubjectFilter(prefix+".due.*"))
	if err != nil {
		t.Fatal(err)
	}
	if len(sinfo.State.Subjects) != 0 {
		t.Errorf("%d fired timers left in the stream after their acknowledgement", len(sinfo.State.Subjects))
	}
	t.Logf("%d timers; instance 1 had %d, instance 2 had %d", n, per[1], per[2])
}

// A timer is acknowledged only once its handler returned nil; a handler
// error puts it back, after the backoff, as the next attempt.
func TestHandlerErrorRedelivers(t *testing.T) {
	t.Parallel()
	prefix := newPrefix(t)
	s := mustNew(t, natstimer.Config{Prefix: prefix})
	inHand := make(chan struct{})
	release := make(chan error)
	rec := newRecorder(func(_ context.Context, due []timer.Timer) error {
		if due[0].Attempt > 2 {
			return nil
		}
		inHand <- struct{}{}
		return <-release
	})
	run(t, s, rec.handler(1))
	due := time.Now()
	if err := s.Schedule(context.Background(), "k", due); err != nil {
		t.Fatal(err)
	}
	for attempt, result := range []error{errors.New("the store is down"), nil} {
		select {
		case <-inHand:
		case <-time.After(5 * time.Second):
			t.Fatalf("attempt %d never delivered", attempt+1)
		}
		if info := consumerInfo(t, prefix); info.NumAckPending != 1 {
			t.Errorf("attempt %d in hand: %d timers awaiting acknowledgement, want 1", attempt+1, info.NumAckPending)
		}
		release <- result
	}
	waitConsumer(t, prefix, "the timer acknowledged", func(info *jetstream.ConsumerInfo) bool { return info.NumAckPending == 0 })
	time.Sleep(quiet) // watch: acknowledged, it is not delivered again
	ds := rec.deliveries("k")
	if len(ds) != 2 {
		t.Fatalf("delivered %d times, want twice (refused, then acknowledged)", len(ds))
	}
	for i, d := range ds {
		if d.Attempt != i+1 || !d.Due.Equal(due) {
			t.Errorf("delivery %d: Attempt %d Due %v, want Attempt %d Due %v", i+1, d.Attempt, d.Due, i+1, due)
		}
	}
	if gap := ds[1].At.Sub(ds[0].At); gap < timer.Backoff(1) {
		t.Errorf("redelivered %v after the failure, before the backoff of %v", gap, timer.Backoff(1))
	}
}

// waitConsumer polls the consumer's state until cond holds, for 5 s at most.
func waitConsumer(t *testing.T, prefix, what string, cond func(*jetstream.ConsumerInfo) bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond(consumerInfo(t, prefix)) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 5s", what)
		}
		<-tick.C
	}
}

// fakeStore is the orders table a seed reads: every pending timer.
type fakeStore struct {
	mu     sync.Mutex
	due    map[string]time.Time
	seeds  atomic.Int32
	seeded chan struct{} // receives after every completed seed
}

func (f *fakeStore) seed(s *natstimer.Scheduler) func(context.Context) error {
	return func(ctx context.Context) error {
		f.mu.Lock()
		ts := make([]timer.Timer, 0, len(f.due))
		for k, d := range f.due {
			ts = append(ts, timer.Timer{Key: k, Due: d})
		}
		f.mu.Unlock()
		if err := s.ScheduleMany(ctx, ts); err != nil {
			return err
		}
		f.seeds.Add(1)
		f.seeded <- struct{}{}
		return nil
	}
}

// The stream is seeded from the store when it starts empty, and again when it
// is deleted or purged while lapse runs: the timers come back.
func TestDataLossIsReseeded(t *testing.T) {
	t.Parallel()
	prefix := newPrefix(t)
	logs := &logBuffer{}
	s, err := natstimer.New(connect(t), natstimer.Config{
		Prefix: prefix, LossCheck: 100 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	store := &fakeStore{due: map[string]time.Time{}, seeded: make(chan struct{}, 8)}
	s.SetSeed(store.seed(s))
	rec := newRecorder(nil)
	run(t, s, rec.handler(1))
	waitSeed := func(what string) {
		t.Helper()
		select {
		case <-store.seeded:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no seed within 10s", what)
		}
	}
	waitSeed("a new stream")

	js, err := jetstream.New(connect(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	losses := []struct {
		name string
		lose func() error
	}{
		{"stream deleted", func() error { return js.DeleteStream(ctx, prefix+"_timers") }},
		{"stream purged", func() error { return stream(t, prefix).Purge(ctx) }},
	}
	for _, loss := range losses {
		// Timers set, then lost before they are due; the store still has them.
		due := time.Now().Add(time.Second)
		var keys []string
		for i := range 20 {
			key := fmt.Sprintf("%s-%02d", strings.ReplaceAll(loss.name, " ", "-"), i)
			keys = append(keys, key)
			store.mu.Lock()
			store.due[key] = due
			store.mu.Unlock()
			if err := s.Schedule(ctx, key, due); err != nil {
				t.Fatal(err)
			}
		}
		if err := loss.lose(); err != nil {
			t.Fatalf("%s: %v", loss.name, err)
		}
		waitSeed(loss.name)
		rec.waitDelivered(t, time.Until(due)+5*time.Second, keys...)
		for _, key := range keys {
			ds := rec.deliveries(key)
			if ds[0].At.Before(due) {
				t.Errorf("%s: delivered %v before its due time", key, due.Sub(ds[0].At))
			}
		}
		store.mu.Lock()
		for _, key := range keys {
			delete(store.due, key) // cancelled: no longer pending
		}
		store.mu.Unlock()
	}
	if n := store.seeds.Load(); n != 3 {
		t.Errorf("%d seeds, want 3 (a new stream, a deletion, a purge)", n)
	}
	if n := logs.count("seed marker missing"); n != 3 {
		t.Errorf("the seeds were logged %d times, want 3:\n%s", n, logs.String())
	}
}

// Schedule after the stream was deleted creates it again.
func TestScheduleCreatesTheStreamAgain(t *testing.T) {
	t.Parallel()
	prefix := newPrefix(t)
	s := mustNew(t, natstimer.Config{Prefix: prefix})
	ctx := context.Background()
	if err := s.Schedule(ctx, "first", time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(connect(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteStream(ctx, prefix+"_timers"); err != nil {
		t.Fatal(err)
	}
	if err := s.Schedule(ctx, "second", time.Now().Add(time.Hour)); err != nil {
		t.Fatalf("Schedule after the stream was deleted: %v", err)
	}
	if _, err := stream(t, prefix).GetLastMsgForSubject(ctx, schedSubject(prefix, "second")); err != nil {
		t.Errorf("the schedule after the stream was created again: %v", err)
	}
}

// A stream of the same name with other subjects (another deployment's) is
// refused, never changed.
func TestAnotherStreamOfTheSameNameIsRefused(t *testing.T) {
	t.Parallel()
	prefix := newPrefix(t)
	js, err := jetstream.New(connect(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: prefix + "_timers", Subjects: []string{prefix + ".other.>"}}); err != nil {
		t.Fatal(err)
	}
	s := mustNew(t, natstimer.Config{Prefix: prefix})
	err = s.Schedule(ctx, "k", time.Now())
	if err == nil || !strings.Contains(err.Error(), "not this scheduler's") {
		t.Errorf("Schedule on another deployment's stream: %v, want a refusal", err)
	}
	runCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := s.Run(runCtx, func(context.Context, []timer.Timer) error { return nil }); err == nil || !strings.Contains(err.Error(), "not this scheduler's") {
		t.Errorf("Run on another deployment's stream returned %v, want a refusal", err)
	}
	info, err := stream(t, prefix).Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(info.Config.Subjects, []string{prefix + ".other.>"}) || info.Config.AllowMsgSchedules {
		t.Errorf("the other stream was changed: subjects %v, schedules %v", info.Config.Subjects, info.Config.AllowMsgSchedules)
	}
}

func TestOneRunAtATime(t *testing.T) {
	t.Parallel()
	s := mustNew(t, natstimer.Config{Prefix: newPrefix(t)})
	rec := newRecorder(nil)
	run(t, s, rec.handler(1))
	// A delivery shows the first Run is up.
	if err := s.Schedule(context.Background(), "up", time.Now()); err != nil {
		t.Fatal(err)
	}
	rec.waitDelivered(t, 5*time.Second, "up")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Run(ctx, rec.handler(2)); err == nil || !strings.Contains(err.Error(), "already running") {
		t.Errorf("a second Run beside the first returned %v, want a refusal", err)
	}
}

func TestPing(t *testing.T) {
	t.Parallel()
	s := mustNew(t, natstimer.Config{Prefix: newPrefix(t)})
	if err := s.Ping(context.Background()); err != nil {
		t.Errorf("Ping: %v", err)
	}
}

func TestConfigIsValidated(t *testing.T) {
	t.Parallel()
	nc := connect(t)
	for _, tc := range []struct {
		cfg  natstimer.Config
		want string
	}{
		{natstimer.Config{Prefix: "a..b"}, "Prefix"},
		{natstimer.Config{Prefix: "a.*"}, "Prefix"},
		{natstimer.Config{Prefix: "a b"}, "Prefix"},
		{natstimer.Config{Stream: "a.b"}, "Stream"},
		{natstimer.Config{BatchSize: 1001}, "BatchSize"},
		{natstimer.Config{BatchSize: -1}, "BatchSize"},
		{natstimer.Config{AckWait: 100 * time.Millisecond}, "AckWait"},
		{natstimer.Config{Replicas: 2}, "Replicas"},
		{natstimer.Config{LossCheck: time.Millisecond}, "LossCheck"},
	} {
		if _, err := natstimer.New(nc, tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v): %v, want an error about %s", tc.cfg, err, tc.want)
		}
	}
	if _, err := natstimer.New(nil, natstimer.Config{}); err == nil {
		t.Error("New with a nil connection: no error")
	}
	s, err := natstimer.New(nc, natstimer.Config{Prefix: "acme.lapse"})
	if err != nil {
		t.Fatalf("New with a dotted prefix: %v", err)
	}
	if err := s.Schedule(context.Background(), "", time.Now()); err == nil {
		t.Error("Schedule of an empty key: no error")
	}
	if err := s.Schedule(context.Background(), strings.Repeat("k", natstimer.MaxKeyLen+1), time.Now()); err == nil {
		t.Error("Schedule of an oversized key: no error")
	}
}

func TestParseURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in, servers, prefix, stream string
	}{
		{"nats://127.0.0.1:4222", "nats://127.0.0.1:4222", "", ""},
		{"nats://h:4222/", "nats://h:4222", "", ""},
		{"nats://u:p@h1:4222,h2:4223?prefix=acme.lapse&stream=ACME", "nats://u:p@h1:4222,nats://u:p@h2:4223", "acme.lapse", "ACME"},
		{"nats://tok@h:4222?stream=s1", "nats://tok@h:4222", "", "s1"},
	} {
		servers, prefix, stream, err := natstimer.ParseURL(tc.in)
		if err != nil || servers != tc.servers || prefix != tc.prefix || stream != tc.stream {
			t.Errorf("ParseURL(%q) = %q, %q, %q, %v; want %q, %q, %q", tc.in, servers, prefix, stream, err, tc.servers, tc.prefix, tc.stream)
		}
	}
	for _, in := range []string{
		"127.0.0.1:4222",
		"redis://h:6379",
		"nats://",
		"nats://h:4222?prefx=lapse",
		"nats://h:4222?prefix=a&prefix=b",
		"nats://h:4222?prefix=a.*",
		"nats://h:4222?stream=a.b",
		"nats://h1,,h2",
		"nats://s3cr3t:hunter2@h:4222?bogus=1",
	} {
		_, _, _, err := natstimer.ParseURL(in)
		if err == nil {
			t.Errorf("ParseURL(%q): no error", in)
			continue
		}
		if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("ParseURL(%q): the error shows the credentials: %v", in, err)
		}
	}
}

// Open connects, and a connection that fails does not show the credentials.
func TestOpen(t *testing.T) {
	t.Parallel()
	prefix := newPrefix(t)
	s, err := natstimer.Open(serverURL+"?prefix="+prefix, natstimer.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Schedule(context.Background(), "k", time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := stream(t, prefix).GetLastMsgForSubject(context.Background(), schedSubject(prefix, "k")); err != nil {
		t.Errorf("the URL's prefix was not used: %v", err)
	}
	_, err = natstimer.Open("nats://lapse:hunter2@127.0.0.1:1", natstimer.Config{})
	if err == nil {
		t.Fatal("Open of a port nobody listens on: no error")
	}
	if strings.Contains(err.Error(), "hunter2") {
		t.Errorf("the error shows the password: %v", err)
	}
}

// logBuffer is a concurrency-safe log sink.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuffer) count(s string) int { return strings.Count(l.String(), s) }
