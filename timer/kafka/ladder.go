package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// tp is a topic's partition.
type tp struct {
	topic     string
	partition int32
}

// ladder forwards the level topics' records at their exits: one consumer
// in the group <prefix>.ladder.
type ladder struct {
	s  *Scheduler
	cl *kgo.Client

	// fwd is held while records are forwarded and committed, and by the
	// rebalance callbacks: a partition is not handed over mid-forward.
	fwd sync.Mutex

	mu       sync.Mutex
	assigned map[tp]bool
	queues   map[tp][]*kgo.Record // polled, not forwarded, in offset order
	paused   map[tp]bool
	changed  chan struct{} // a poll added records
}

func (s *Scheduler) newLadder() (*ladder, error) {
	l := &ladder{s: s, assigned: map[tp]bool{}, queues: map[tp][]*kgo.Record{}, paused: map[tp]bool{}, changed: make(chan struct{}, 1)}
	cl, err := kgo.NewClient(s.clientOpts(
		kgo.ConsumerGroup(s.ladderGroup()),
		kgo.ConsumeTopics(s.levelTopics()...),
		kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(100*time.Millisecond),
		kgo.SessionTimeout(s.cfg.SessionTimeout),
		kgo.HeartbeatInterval(min(500*time.Millisecond, s.cfg.SessionTimeout/3)),
		kgo.OnPartitionsAssigned(l.assign),
		kgo.OnPartitionsRevoked(l.revoke),
		kgo.OnPartitionsLost(l.revoke),
	)...)
	if err != nil {
		return nil, fmt.Errorf("kafka timers: the ladder's consumer: %w", err)
	}
	l.cl = cl
	return l, nil
}

func (l *ladder) close() { l.cl.Close() }

func (l *ladder) assign(_ context.Context, _ *kgo.Client, ps map[string][]int32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for t, parts := range ps {
		for _, p := range parts {
			l.assigned[tp{t, p}] = true
		}
	}
}

// revoke forgets the records of partitions taken away, once a forward in
// progress has committed: the next owner forwards them from the committed
// offset.
func (l *ladder) revoke(_ context.Context, _ *kgo.Client, ps map[string][]int32) {
	l.fwd.Lock()
	defer l.fwd.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	for t, parts := range ps {
		for _, p := range parts {
			k := tp{t, p}
			delete(l.assigned, k)
			delete(l.queues, k)
			delete(l.paused, k)
		}
	}
	l.cl.ResumeFetchPartitions(ps)
}

// run polls and forwards until ctx ends.
func (l *ladder) run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { l.poll(ctx) })
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.changed:
		case <-t.C:
		}
		next, dead := l.forwardDue(ctx)
		if dead {
			return
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(time.Until(next))
	}
}

// poll adds what the consumer fetches to the partitions' queues.
func (l *ladder) poll(ctx context.Context) {
	for {
		fs := l.cl.PollRecords(ctx, 5000)
		if ctx.Err() != nil || fs.IsClientClosed() {
			return
		}
		fs.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.Canceled) {
				l.s.log.Warn("kafka timers: fetch from the ladder", "topic", t, "partition", p, "err", err)
			}
		})
		l.mu.Lock()
		fs.EachRecord(func(r *kgo.Record) {
			k := tp{r.Topic, r.Partition}
			if l.assigned[k] {
				l.queues[k] = append(l.queues[k], r)
			}
		})
		l.mu.Unlock()
		select {
		case l.changed <- struct{}{}:
		default:
		}
	}
}

// forwardDue forwards every queued record at its exit, commits, pauses the
// partitions that hold enough ahead and resumes the others. It returns when
// to look again, and whether the ladder died (in tests).
func (l *ladder) forwardDue(ctx context.Context) (next time.Time, dead bool) {
	l.fwd.Lock()
	defer l.fwd.Unlock()
	now := time.Now()
	type item struct{ src, out *kgo.Record } // out nil: not a timer, skipped
	var items []item
	l.mu.Lock()
	for _, q := range l.queues {
		for n := 0; n < len(q) && !exitOf(q[n]).After(now) && len(items) < 5000; n++ {
			rec, err := l.s.forward(q[n], now)
			if err != nil {
				l.s.log.Error("kafka timers: skipping a record of the ladder that is not a timer", "err", err)
			}
			items = append(items, item{src: q[n], out: rec})
		}
	}
	l.mu.Unlock()

	var out []*kgo.Record
	for _, it := range items {
		if it.out != nil {
			out = append(out, it.out)
		}
	}
	errs := l.s.produceEach(ctx, out)
	done := map[tp]*kgo.Record{} // the last record forwarded, per partition
	failed := map[tp]bool{}
	i := 0
	for _, it := range items {
		k := tp{it.src.Topic, it.src.Partition}
		ok := true
		if it.out != nil {
			if err := errs[i]; err != nil {
				ok = false
				if !failed[k] && ctx.Err() == nil {
					l.s.log.Warn("kafka timers: forward a timer failed; trying again", "topic", k.topic, "partition", k.partition, "err", err)
				}
			}
			i++
		}
		if !ok {
			failed[k] = true
		}
		if ok && !failed[k] {
			done[k] = it.src
			if it.out != nil {
				l.s.stats.forwarded.Add(1)
			}
		}
	}
	if kill := l.s.killAfterForward; kill != nil && len(out) > 0 && kill() {
		return now, true
	}
	if len(done) > 0 {
		offsets := map[string]map[int32]kgo.EpochOffset{}
		for k, r := range done {
			if offsets[k.topic] == nil {
				offsets[k.topic] = map[int32]kgo.EpochOffset{}
			}
			offsets[k.topic][k.partition] = kgo.EpochOffset{Epoch: r.LeaderEpoch, Offset: r.Offset + 1}
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
		l.cl.CommitOffsetsSync(cctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, _ *kmsg.OffsetCommitResponse, err error) {
			if err != nil && ctx.Err() == nil {
				l.s.log.Warn("kafka timers: commit the ladder's forwarded offsets failed (they are forwarded again: twice, not lost)", "err", err)
			}
		})
		cancel()
	}

	// Drop what was forwarded (and committed, or to be forwarded again by
	// whoever reads the partition next), then pause or resume.
	l.mu.Lock()
	defer l.mu.Unlock()
	next = now.Add(time.Minute)
	var pause, resume map[string][]int32
	for k, r := range done {
		q := l.queues[k]
		for len(q) > 0 && q[0].Offset <= r.Offset {
			q = q[1:]
		}
		l.queues[k] = q
	}
	for k := range l.assigned {
		q := l.queues[k]
		wantPause := len(q) >= maxQueued || len(q) > 0 && exitOf(q[len(q)-1]).After(now.Add(ahead))
		if len(q) > 0 {
			if e := exitOf(q[0]); e.Before(next) {
				next = e
			}
		}
		switch {
		case wantPause && !l.paused[k]:
			pause = addTP(pause, k)
		case !wantPause && l.paused[k]:
			resume = addTP(resume, k)
		}
		l.paused[k] = wantPause
	}
	if len(pause) > 0 {
		for _, ps := range pause {
			l.s.stats.paused.Add(uint64(len(ps)))
		}
		l.cl.PauseFetchPartitions(pause)
	}
	if len(resume) > 0 {
		l.cl.ResumeFetchPartitions(resume)
	}
	if len(failed) > 0 {
		// A produce failed: try again shortly.
		next = earlier(next, time.Now().Add(100*time.Millisecond))
	}
	return next, false
}

func addTP(m map[string][]int32, k tp) map[string][]int32 {
	if m == nil {
		m = map[string][]int32{}
	}
	m[k.topic] = append(m[k.topic], k.partition)
	return m
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
