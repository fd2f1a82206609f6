package redis

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/lapsehq/lapse/timer"
)

// recoverLimit bounds one recover script call: it takes expired claims
// whole until it looked at this many timers.
const recoverLimit = 1000

// Run implements timer.Scheduler: Config.Workers workers claim and deliver due
// timers, and a watcher reseeds Redis when it lost its data, until ctx ends.
// Then Run finishes the batches in hand (their handlers get a context that
// is not cancelled with ctx), acknowledges or requeues them, and returns
// ctx's error. Redis errors are logged and retried; they do not end Run.
func (s *Scheduler) Run(ctx context.Context, h timer.Handler) error {
	if !s.run.TryLock() {
		return errors.New("redis: Run is already running")
	}
	defer s.run.Unlock()
	for i := range s.plans {
		s.plans[i].Store(0) // know nothing yet: look at every shard
	}
	var wg sync.WaitGroup
	wg.Go(func() { s.watch(ctx) })
	for w := range s.cfg.Workers {
		wg.Go(func() { s.work(ctx, w, h) })
	}
	wg.Wait()
	return ctx.Err()
}

// work is worker w's loop over the shards it owns.
func (s *Scheduler) work(ctx context.Context, w int, h timer.Handler) {
	var mine []int
	for sh := w; sh < len(s.plans); sh += s.cfg.Workers {
		mine = append(mine, sh)
	}
	sleep := time.NewTimer(time.Hour)
	defer sleep.Stop()
	var lastScan, nextRecover time.Time
	round := 0
	// Batches handled and not yet acknowledged: their acknowledgement goes
	// in the round trip of this worker's next claim, or alone before it
	// sleeps or stops.
	var handled []claimed
	defer func() { s.ackAll(context.WithoutCancel(ctx), handled) }()
	failing := false // the last Redis call failed (logged once until one succeeds)
	report := func(what string, sh int, err error) {
		if err == nil {
			if failing {
				s.log.Info("redis timers: Redis answers again", "worker", w)
			}
			failing = false
			return
		}
		if !failing && ctx.Err() == nil {
			s.log.Error("redis timers: "+what+" failed; retrying", "worker", w, "shard", sh, "err", err)
		}
		failing = true
	}
	for ctx.Err() == nil {
		now := time.Now()
		if !now.Before(nextRecover) {
			for _, sh := range mine {
				report("recover expired leases", sh, s.recover(ctx, sh))
			}
			nextRecover = now.Add(s.cfg.Lease / 2)
		}
		// Every MaxSleep, look at every shard: timers set by other instances
		// are not in the plans.
		if now.Sub(lastScan) >= s.cfg.MaxSleep {
			lastScan = now
			report("look at the shards", mine[0], s.peek(ctx, mine))
		}
		// Claim from every due shard of this worker, up to BatchSize timers
		// in all, and hand them over together: one handler call (one cancel
		// transaction) per round rather than one per shard. The first shard
		// looked at turns round, so a full batch never starves the others.
		var batch []claimed
		room := s.cfg.BatchSize
		for i := range mine {
			sh := mine[(round+i)%len(mine)]
			if ctx.Err() != nil || room == 0 {
				break
			}
			if s.plans[sh].Load() > time.Now().UnixMilli() {
				continue
			}
			c, err := s.claim(ctx, sh, time.Now(), room, handled)
			handled = nil
			report("claim", sh, err)
			if err != nil {
				s.lower(sh, time.Now().Add(s.cfg.MaxSleep).UnixMilli(), false)
				continue
			}
			if len(c.timers) > 0 {
				batch = append(batch, c)
				room -= len(c.timers)
			}
		}
		round++
		if len(batch) > 0 {
			if s.deliver(ctx, batch, h) {
				handled = batch
			}
			continue // while timers are due
		}
		s.ackAll(context.WithoutCancel(ctx), handled)
		handled = nil
		wake := lastScan.Add(s.cfg.MaxSleep)
		if nextRecover.Before(wake) {
			wake = nextRecover
		}
		for _, sh := range mine {
			if p := s.plans[sh].Load(); p < wake.UnixMilli() {
				wake = time.UnixMilli(p)
			}
		}
		d := time.Until(wake)
		if d <= 0 {
			continue
		}
		sleep.Reset(d)
		select {
		case <-ctx.Done():
		case <-s.wake[w]:
		case <-sleep.C:
		}
		sleep.Stop()
	}
}

// peek sets the plans of shards to their earliest due timer, read in one
// round trip (per Cluster node). On an error the plans are left as they were.
func (s *Scheduler) peek(ctx context.Context, shards []int) error {
	cmds := make([]*goredis.ZSliceCmd, len(shards))
	old := make([]int64, len(shards))
	for i, sh := range shards {
		// As in claim: a Schedule from here on lowers the plan again.
		old[i] = s.plans[sh].Swap(math.MaxInt64)
	}
	_, err := s.rdb.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i, sh := range shards {
			cmds[i] = p.ZRangeWithScores(ctx, s.keys.shards[sh].due, 0, 0)
		}
		return nil
	})
	for i, sh := range shards {
		if err != nil {
			s.lower(sh, old[i], false)
			continue
		}
		if first := cmds[i].Val(); len(first) > 0 {
			s.lower(sh, int64(first[0].Score), false)
		}
	}
	if err != nil {
		return fmt.Errorf("peek at shards %v: %w", shards, err)
	}
	return nil
}

// claimed is one claimed batch.
type claimed struct {
	shard  int
	id     string
	timers []timer.Timer
}

// claim runs the claim script on shard sh at now for at most limit timers and
// sets the shard's plan to the earliest timer left. The acknowledgements of
// the claims in acks go first in the same round trip.
func (s *Scheduler) claim(ctx context.Context, sh int, now time.Time, limit int, acks []claimed) (claimed, error) {
	k := s.keys.shards[sh]
	c := claimed{shard: sh, id: fmt.Sprintf("%s-%x", s.id, s.claims.Add(1))}
	// From here on, a Schedule lowers the plan again; the script's answer
	// only lowers it too, so a timer set while the script runs is not missed.
	s.plans[sh].Store(math.MaxInt64)
	nowMs := now.UnixMilli()
	// Cancelled with ctx, so that Run returns promptly even while Redis does
	// not answer; not when acknowledgements go with it, which are sent
	// whatever happens to ctx. A claim the server ran but whose answer was
	// dropped holds its timers until the lease runs out; then they are
	// delivered again.
	calls := s.ackCalls(acks)
	call := &scriptCall{script: claimScript, keys: []string{k.due, k.lease, k.meta, k.claims},
		args: []any{nowMs, nowMs + s.cfg.Lease.Milliseconds(), limit, c.id}}
	calls = append(calls, call)
	if len(acks) > 0 {
		ctx = context.WithoutCancel(ctx)
	}
	s.evalAll(ctx, calls)
	s.ackDone(acks, calls)
	res, err := call.cmd.Slice()
	if err != nil {
		return c, fmt.Errorf("claim shard %d: %w", sh, err)
	}
	if len(res) == 0 || (len(res)-1)%3 != 0 {
		return c, fmt.Errorf("claim shard %d: %d values in the answer of claim.lua", sh, len(res))
	}
	if next, ok := res[0].(string); ok && next != "" {
		ms, err := parseMs(next)
		if err != nil {
			return c, fmt.Errorf("claim shard %d: next due time: %w", sh, err)
		}
		s.lower(sh, ms, false)
	}
	c.timers = make([]timer.Timer, 0, (len(res)-1)/3)
	for i := 1; i < len(res); i += 3 {
		key, _ := res[i].(string)
		attempt, _ := res[i+1].(int64)
		dueStr, _ := res[i+2].(string)
		due, err := parseMs(dueStr)
		if err != nil || key == "" || attempt < 1 {
			// Unreachable with claim.lua; the lease brings the batch back.
			return c, fmt.Errorf("claim shard %d: malformed answer %v %v %v", sh, res[i], res[i+1], res[i+2])
		}
		c.timers = append(c.timers, timer.Timer{Key: key, Due: time.UnixMilli(due), Attempt: int(attempt)})
	}
	return c, nil
}

// deliver hands the timers of the claims cs to h in one call, keeping their
// leases while h runs. When h fails it puts each claim back after its
// backoff; when h succeeds it reports true, and the caller acknowledges the
// claims (ackAll, or with its next claim).
func (s *Scheduler) deliver(ctx context.Context, cs []claimed, h timer.Handler) (ok bool) {
	bg := context.WithoutCancel(ctx)
	var all []timer.Timer
	stops := make([]func(), len(cs))
	for i, c := range cs {
		all = append(all, c.timers...)
		stops[i] = s.keepLease(ctx, c)
	}
	err := h(bg, all)
	for _, stop := range stops {
		stop()
	}
	if err == nil {
		return true
	}
	now := time.Now() // one backoff origin: the batch comes back together
	for _, c := range cs {
		s.retry(bg, c, now)
	}
	return false
}

// ackAll acknowledges the claims cs in one round trip: their timers are done.
func (s *Scheduler) ackAll(ctx context.Context, cs []claimed) {
	calls := s.ackCalls(cs)
	s.evalAll(ctx, calls)
	s.ackDone(cs, calls)
}

// ackCalls are the ack script calls of the claims cs, one each: the claim
// id alone, since Redis keeps the claim's keys.
func (s *Scheduler) ackCalls(cs []claimed) []*scriptCall {
	calls := make([]*scriptCall, len(cs), len(cs)+1)
	for i, c := range cs {
		k := s.keys.shards[c.shard]
		calls[i] = &scriptCall{script: ackScript, keys: []string{k.lease, k.meta, k.claims}, args: []any{c.id}}
	}
	return calls
}

// ackDone logs the acknowledgements of cs (the first len(cs) of calls, sent)
// that failed.
func (s *Scheduler) ackDone(cs []claimed, calls []*scriptCall) {
	for i, c := range cs {
		if err := calls[i].cmd.Err(); err != nil {
			s.log.Error("redis timers: acknowledge a batch failed; it will be delivered again after its lease",
				"shard", c.shard, "timers", len(c.timers), "err", err)
		}
	}
}

// retry puts the timers of claim c back in due, each its backoff after now.
func (s *Scheduler) retry(ctx context.Context, c claimed, now time.Time) {
	k := s.keys.shards[c.shard]
	args := make([]any, 0, 1+2*len(c.timers))
	args = append(args, c.id)
	earliest := int64(math.MaxInt64)
	for _, t := range c.timers {
		at := ceilMs(now.Add(s.cfg.Backoff(t.Attempt)))
		earliest = min(earliest, at)
		args = append(args, t.Key, at)
	}
	if err := retryScript.Run(ctx, s.rdb, []string{k.due, k.lease, k.meta, k.claims}, args...).Err(); err != nil {
		s.log.Error("redis timers: requeue a failed batch failed; it will be delivered again after its lease",
			"shard", c.shard, "timers", len(c.timers), "err", err)
		return
	}
	s.lower(c.shard, earliest, false)
}

// keepLease extends the lease of c every Lease/3 while ctx is alive, until
// the returned stop is called. Once ctx ends (the process is shutting down)
// the lease runs out, so a batch whose handler never returns is delivered
// again elsewhere.
func (s *Scheduler) keepLease(ctx context.Context, c claimed) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(s.cfg.Lease / 3)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case now := <-tick.C:
				if err := s.extend(ctx, c, now.Add(s.cfg.Lease)); err != nil && ctx.Err() == nil {
					s.log.Warn("redis timers: extend the lease of a batch in hand failed", "shard", c.shard, "err", err)
				}
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

// extend moves the lease deadline of claim c to until, if c still holds a
// lease (it was not recovered meanwhile): one lease entry, whatever c's size.
func (s *Scheduler) extend(ctx context.Context, c claimed, until time.Time) error {
	k := s.keys.shards[c.shard]
	if err := extendScript.Run(ctx, s.rdb, []string{k.lease}, c.id, until.UnixMilli()).Err(); err != nil {
		return fmt.Errorf("extend the lease of claim %s: %w", c.id, err)
	}
	return nil
}

// recover moves the timers of shard sh's expired claims back to due.
func (s *Scheduler) recover(ctx context.Context, sh int) error {
	k := s.keys.shards[sh]
	total := 0
	for {
		now := time.Now().UnixMilli()
		res, err := recoverScript.Run(ctx, s.rdb, []string{k.due, k.lease, k.meta, k.claims}, now, recoverLimit).Int64Slice()
		if err != nil {
			return fmt.Errorf("recover shard %d: %w", sh, err)
		}
		if len(res) != 2 {
			return fmt.Errorf("recover shard %d: %d values in the answer of recover.lua, want 2", sh, len(res))
		}
		n, more := int(res[0]), res[1] == 1
		total += n
		if n > 0 {
			s.lower(sh, now, false)
		}
		if !more || ctx.Err() != nil {
			break
		}
	}
	if total > 0 {
		s.log.Warn("redis timers: leases expired (a consumer died or hung); their timers are delivered again",
			"shard", sh, "timers", total)
	}
	return nil
}

// parseMs parses a score as Redis prints it.
func parseMs(s string) (int64, error) {
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		return ms, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, err
	}
	return int64(f), nil
}
