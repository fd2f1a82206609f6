package kafka

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/lapsehq/lapse/timer"
)

// delivery consumes the due topic (group <prefix>.due), holds each timer
// until its due time, hands it to the handler and commits.
type delivery struct {
	s        *Scheduler
	h        timer.Handler
	cl       *kgo.Client
	holdUpTo time.Duration // the earliest a timer is expected in the due topic
	maxHeld  int

	mu       sync.Mutex
	cond     *sync.Cond // progress made: a timer finished, or closing
	closing  bool
	parts    map[tp]*progress // the assigned partitions
	incoming []*pending       // polled, not yet seen by the loop
	held     int              // polled and not finished
	changed  chan struct{}    // incoming grew
	room     chan struct{}    // held shrank
}

// progress is what became of a partition's polled records.
type progress struct {
	entries   []entry // unfinished, or finished behind an unfinished one; in offset order
	next      int64   // the offset after the last polled record
	epoch     int32
	known     bool  // a record was polled: next is meaningful
	committed int64 // the last offset committed
}

type entry struct {
	offset int64
	done   bool
}

// point is the offset to commit: the first unfinished record's, or the
// next one's.
func (p *progress) point() int64 {
	if len(p.entries) > 0 {
		return p.entries[0].offset
	}
	return p.next
}

// finish marks offset done and drops the finished prefix.
func (p *progress) finish(offset int64) {
	i := sort.Search(len(p.entries), func(i int) bool { return p.entries[i].offset >= offset })
	if i < len(p.entries) && p.entries[i].offset == offset {
		p.entries[i].done = true
	}
	n := 0
	for n < len(p.entries) && p.entries[n].done {
		n++
	}
	p.entries = p.entries[n:]
}

// pending is one polled timer.
type pending struct {
	rec  *kgo.Record
	k    tp
	prog *progress // its partition's, when polled: stale after a rebalance
	t    timer.Timer
	at   time.Time
}

func (s *Scheduler) newDelivery(h timer.Handler) (*delivery, error) {
	d := &delivery{
		s: s, h: h,
		holdUpTo: s.levels[0].d + max(s.cfg.Lead, 0) + 50*time.Millisecond,
		maxHeld:  max(20*s.cfg.BatchSize, 5000),
		parts:    map[tp]*progress{},
		changed:  make(chan struct{}, 1),
		room:     make(chan struct{}, 1),
	}
	d.cond = sync.NewCond(&d.mu)
	cl, err := kgo.NewClient(s.clientOpts(
		kgo.ConsumerGroup(s.dueGroup()),
		kgo.ConsumeTopics(s.dueTopic),
		kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(100*time.Millisecond),
		kgo.SessionTimeout(s.cfg.SessionTimeout),
		kgo.HeartbeatInterval(min(500*time.Millisecond, s.cfg.SessionTimeout/3)),
		kgo.OnPartitionsAssigned(d.assign),
		kgo.OnPartitionsRevoked(d.revoke),
		kgo.OnPartitionsLost(d.lost),
	)...)
	if err != nil {
		return nil, fmt.Errorf("kafka timers: the due topic's consumer: %w", err)
	}
	d.cl = cl
	return d, nil
}

func (d *delivery) assign(_ context.Context, _ *kgo.Client, ps map[string][]int32) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for t, parts := range ps {
		for _, p := range parts {
			d.parts[tp{t, p}] = &progress{committed: -1}
		}
	}
}

// revoke hands partitions over: it waits until the timers polled from them
// are finished (the held ones come due within holdUpTo), commits, and
// forgets them. Without the wait, a timer handed over out of offset order
// (an earlier one still held) would be delivered again by the next owner.
// When Run is ending it does not wait.
func (d *delivery) revoke(ctx context.Context, _ *kgo.Client, ps map[string][]int32) {
	deadline := time.AfterFunc(d.holdUpTo+settleTimeout, func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		d.cond.Broadcast()
	})
	defer deadline.Stop()
	start := time.Now()
	d.mu.Lock()
	for !d.closing && time.Since(start) < d.holdUpTo+settleTimeout && d.unfinished(ps) {
		d.cond.Wait()
	}
	// Committed here even where a commit of the loop is in flight: the
	// partition's next owner reads the offset once this returns.
	offsets := d.points(ps, true)
	for t, parts := range ps {
		for _, p := range parts {
			delete(d.parts, tp{t, p})
		}
	}
	d.mu.Unlock()
	d.commit(ctx, offsets)
}

// lost forgets partitions taken away without a chance to commit.
func (d *delivery) lost(_ context.Context, _ *kgo.Client, ps map[string][]int32) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for t, parts := range ps {
		for _, p := range parts {
			delete(d.parts, tp{t, p})
		}
	}
}

// unfinished reports whether any of ps has a timer polled and not
// finished; call under d.mu.
func (d *delivery) unfinished(ps map[string][]int32) bool {
	for t, parts := range ps {
		for _, p := range parts {
			if pr := d.parts[tp{t, p}]; pr != nil && len(pr.entries) > 0 {
				return true
			}
		}
	}
	return false
}

// points are the offsets to commit of ps (every partition when nil) that
// moved since their last commit, or all of them with force; call under d.mu.
func (d *delivery) points(ps map[string][]int32, force bool) map[string]map[int32]kgo.EpochOffset {
	offsets := map[string]map[int32]kgo.EpochOffset{}
	for k, pr := range d.parts {
		if ps != nil && !containsTP(ps, k) {
			continue
		}
		if !pr.known || !force && pr.point() <= pr.committed {
			continue
		}
		if offsets[k.topic] == nil {
			offsets[k.topic] = map[int32]kgo.EpochOffset{}
		}
		offsets[k.topic][k.partition] = kgo.EpochOffset{Epoch: pr.epoch, Offset: pr.point()}
		pr.committed = pr.point()
	}
	return offsets
}

func containsTP(ps map[string][]int32, k tp) bool {
	for _, p := range ps[k.topic] {
		if p == k.partition {
			return true
		}
	}
	return false
}

// commit commits offsets, bounded by settleTimeout whatever ctx says.
func (d *delivery) commit(ctx context.Context, offsets map[string]map[int32]kgo.EpochOffset) {
	if len(offsets) == 0 {
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	d.cl.CommitOffsetsSync(cctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, _ *kmsg.OffsetCommitResponse, err error) {
		if err == nil {
			return
		}
		d.s.log.Warn("kafka timers: commit the due topic's offsets failed (its delivered timers may be delivered again)", "err", err)
		// Committed again with the next points, moved or not.
		d.mu.Lock()
		defer d.mu.Unlock()
		for t, ps := range offsets {
			for p := range ps {
				if pr := d.parts[tp{t, p}]; pr != nil {
					pr.committed = -1
				}
			}
		}
	})
}

// commitMoved commits the partitions whose point moved.
func (d *delivery) commitMoved(ctx context.Context) {
	d.mu.Lock()
	offsets := d.points(nil, false)
	d.mu.Unlock()
	d.commit(ctx, offsets)
}

func (d *delivery) close() {
	d.mu.Lock()
	d.closing = true
	d.cond.Broadcast()
	offsets := d.points(nil, true)
	d.mu.Unlock()
	d.commit(context.Background(), offsets)
	d.cl.Close()
}

// poll adds what the consumer fetches to incoming, while fewer than
// maxHeld timers are held.
func (d *delivery) poll(ctx context.Context) {
	for {
		for {
			d.mu.Lock()
			full := d.held >= d.maxHeld
			d.mu.Unlock()
			if !full {
				break
			}
			select {
			case <-ctx.Done():
				return
			case <-d.room:
			}
		}
		fs := d.cl.PollRecords(ctx, 2000)
		if ctx.Err() != nil || fs.IsClientClosed() {
			return
		}
		fs.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.Canceled) {
				d.s.log.Warn("kafka timers: fetch from the due topic", "topic", t, "partition", p, "err", err)
			}
		})
		d.mu.Lock()
		fs.EachRecord(func(r *kgo.Record) {
			k := tp{r.Topic, r.Partition}
			pr := d.parts[k]
			if pr == nil {
				return // revoked meanwhile: the next owner reads it
			}
			pr.entries = append(pr.entries, entry{offset: r.Offset})
			pr.next, pr.epoch, pr.known = r.Offset+1, r.LeaderEpoch, true
			d.incoming = append(d.incoming, &pending{rec: r, k: k, prog: pr})
			d.held++
		})
		d.mu.Unlock()
		select {
		case d.changed <- struct{}{}:
		default:
		}
	}
}

// finish marks timers done in their partitions.
func (d *delivery) finish(ps ...*pending) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, p := range ps {
		p.prog.finish(p.rec.Offset)
		d.held--
	}
	d.cond.Broadcast()
	select {
	case d.room <- struct{}{}:
	default:
	}
}

// current reports whether p's partition is still assigned as when it was polled.
func (d *delivery) current(p *pending) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.parts[p.k] == p.prog
}

// run delivers until ctx ends; a batch in hand then is finished.
func (d *delivery) run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wg.Go(func() { d.poll(pctx) })
	var held byAt
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		d.mu.Lock()
		in := d.incoming
		d.incoming = nil
		d.mu.Unlock()
		now := time.Now()
		var early []*pending
		for _, p := range in {
			tm, at, err := decode(p.rec)
			if err != nil {
				d.s.log.Error("kafka timers: skipping a record of the due topic that is not a timer", "err", err)
				d.finish(p)
				continue
			}
			p.t, p.at = tm, at
			if at.Sub(now) > d.holdUpTo {
				early = append(early, p)
				continue
			}
			heap.Push(&held, p)
		}
		if len(early) > 0 {
			d.sendBack(ctx, early, &held)
		}
		for ctx.Err() == nil && len(held) > 0 && !held[0].at.After(time.Now()) {
			var batch []*pending
			for len(held) > 0 && !held[0].at.After(time.Now()) && len(batch) < d.s.cfg.BatchSize {
				p := heap.Pop(&held).(*pending)
				if !d.current(p) {
					d.finish(p) // its partition moved: the next owner delivers it
					continue
				}
				batch = append(batch, p)
			}
			if len(batch) > 0 {
				d.handle(ctx, batch, &held)
				d.commitMoved(ctx) // a burst is committed batch by batch: a crash redelivers one batch
			}
		}
		d.commitMoved(ctx)

		wait := time.Hour
		if len(held) > 0 {
			wait = time.Until(held[0].at)
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-d.changed:
		case <-t.C:
		}
	}
}

// handle hands a batch to the handler; a refused batch goes back into the
// ladder for a backoff, with Attempt + 1.
func (d *delivery) handle(ctx context.Context, batch []*pending, held *byAt) {
	ts := make([]timer.Timer, len(batch))
	for i, p := range batch {
		ts[i] = p.t
	}
	err := d.h(context.WithoutCancel(ctx), ts)
	if err == nil {
		d.s.stats.delivered.Add(uint64(len(batch)))
		d.finish(batch...)
		return
	}
	maxAttempt := 0
	for _, p := range batch {
		maxAttempt = max(maxAttempt, p.t.Attempt)
	}
	d.s.log.Warn("kafka timers: handler refused a batch; delivering it again after a backoff",
		"timers", len(batch), "attempt", maxAttempt, "retry_in", timer.Backoff(maxAttempt), "err", err)
	now := time.Now()
	recs := make([]*kgo.Record, len(batch))
	for i, p := range batch {
		recs[i] = d.s.record(p.t.Key, p.t.Due, now.Add(timer.Backoff(p.t.Attempt)), p.t.Attempt+1, now)
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	var sent []*pending
	for i, err := range d.s.produceEach(sctx, recs) {
		p := batch[i]
		if err == nil {
			sent = append(sent, p)
			d.s.stats.retried.Add(1)
			continue
		}
		// Not in the ladder: held here for the backoff instead.
		p.t.Attempt++
		p.at = now.Add(timer.Backoff(p.t.Attempt - 1))
		heap.Push(held, p)
	}
	d.finish(sent...)
}

// sendBack produces timers that reached the due topic well before their
// time (a clock ahead of this one) into the ladder again for the rest.
func (d *delivery) sendBack(ctx context.Context, early []*pending, held *byAt) {
	now := time.Now()
	recs := make([]*kgo.Record, len(early))
	for i, p := range early {
		recs[i] = d.s.record(p.t.Key, p.t.Due, p.at, p.t.Attempt, now)
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	var sent []*pending
	for i, err := range d.s.produceEach(sctx, recs) {
		if err == nil {
			sent = append(sent, early[i])
			d.s.stats.sentBack.Add(1)
			continue
		}
		heap.Push(held, early[i]) // held here instead
	}
	d.finish(sent...)
}

// byAt is a heap of pending timers, earliest first.
type byAt []*pending

func (b byAt) Len() int           { return len(b) }
func (b byAt) Less(i, j int) bool { return b[i].at.Before(b[j].at) }
func (b byAt) Swap(i, j int)      { b[i], b[j] = b[j], b[i] }
func (b *byAt) Push(x any)        { *b = append(*b, x.(*pending)) }
func (b *byAt) Pop() any {
	old := *b
	p := old[len(old)-1]
	*b = old[:len(old)-1]
	return p
}
