package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/lapsehq/lapse/timer"
)

const (
	// markerOK starts a seed marker's value once a complete seed covered its
	// shard: "ok:<run id>", the run id (INFO server) of the Redis process
	// that held the shard when the seed began. While an instance seeds, the
	// markers hold its lock token.
	markerOK = "ok:"
	// seedLockTTL is how long the seed lock outlives an instance that died
	// while seeding; the seeding instance extends it every third of that.
	seedLockTTL = 15 * time.Second
)

// watch checks the seed markers every LossCheck until ctx ends, and seeds
// when one is missing. It runs beside the workers: a seed blocks neither
// Schedule nor deliveries.
func (s *Scheduler) watch(ctx context.Context) {
	timer.Watch(ctx, s.cfg.LossCheck, nil, func(ctx context.Context) error {
		if seed := s.seedFunc(); seed != nil {
			return s.checkSeeded(ctx, seed)
		}
		return nil
	}, func(err error, _ int, next time.Duration) {
		s.log.Error("redis timers: data-loss check or seed failed; retrying", "in", next, "err", err)
	})
}

// checkSeeded seeds the timers from the store if a shard's seed marker is
// missing and no other instance is seeding.
func (s *Scheduler) checkSeeded(ctx context.Context, seed func(context.Context) error) error {
	unseeded, _, err := s.unseeded(ctx)
	if err != nil || len(unseeded) == 0 {
		return err
	}
	token := s.id + "-" + randomID()
	ok, err := s.rdb.SetNX(ctx, s.keys.seedLock, token, seedLockTTL).Result()
	if err != nil {
		return fmt.Errorf("take the seed lock: %w", err)
	}
	if !ok {
		s.log.Debug("redis timers: seed markers missing; another instance is seeding", "shards", unseeded)
		return nil
	}
	defer func() {
		bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := lockScript.Run(bg, s.rdb, []string{s.keys.seedLock}, token, 0).Err(); err != nil {
			s.log.Warn("redis timers: release the seed lock failed; it expires by itself", "in", seedLockTTL, "err", err)
		}
	}()
	// Look again, holding the lock: the markers read above may predate a
	// seed that another instance finished, and released the lock, since.
	// The marker values to set come from this read, made before the seed:
	// should Redis change process while the seed runs, they name the one
	// before, and the next check seeds again.
	unseeded, want, err := s.unseeded(ctx)
	if err != nil || len(unseeded) == 0 {
		return err
	}
	if lost := unseeded.missing(); len(lost) > 0 {
		s.log.Warn("redis timers: seed markers missing (a new Redis, or one that lost its data: FLUSHALL, "+
			"a restart without persistence); seeding the timers from the store", "shards", lost)
	}
	if moved := unseeded.moved(); len(moved) > 0 {
		s.log.Warn("redis timers: the timers were seeded on another Redis process than the one that holds them now "+
			"(a failover to a replica, or a restart: the writes of the last moments before it may be lost); "+
			"seeding the timers from the store", "shards", moved)
	}
	// Every marker holds the token while the seed runs: the fence. A loss
	// during the seed removes it, and another instance that takes the seed
	// over (the lock went with the loss) replaces it with its own token;
	// either way markSeeded then leaves it as it is, not "ok", and the
	// shard is seeded again.
	if err := s.setMarkers(ctx, token); err != nil {
		return err
	}
	start := time.Now()
	if err := s.runSeed(ctx, seed, token); err != nil {
		return fmt.Errorf("seed from the store: %w", err)
	}
	fenced, err := s.markSeeded(ctx, token, want)
	if err != nil {
		return err
	}
	if fenced > 0 {
		s.log.Warn("redis timers: seed markers changed during the seed (Redis lost data, or another instance "+
			"took the seed over); seeding again", "shards", fenced)
		return nil
	}
	s.log.Info("redis timers: seeded from the store", "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// runSeed calls seed, extending the seed lock while it runs.
func (s *Scheduler) runSeed(ctx context.Context, seed func(context.Context) error, token string) error {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(seedLockTTL / 3)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
				held, err := lockScript.Run(ctx, s.rdb, []string{s.keys.seedLock}, token, seedLockTTL.Milliseconds()).Int()
				if err == nil && held == 0 {
					err = errors.New("lost to another instance")
				}
				if err != nil && ctx.Err() == nil {
					s.log.Warn("redis timers: extend the seed lock failed; another instance may seed too (harmless)", "err", err)
				}
			}
		}
	})
	defer func() {
		close(done)
		wg.Wait()
	}()
	return seed(ctx)
}

// unseededShard is a shard whose seed marker does not vouch for it: missing
// (or holding a seed's token), or saying "ok:" for another Redis process.
type unseededShard struct {
	shard int
	moved bool // the marker says "ok" for another Redis process
}

type unseededShards []unseededShard

func (u unseededShards) missing() []int { return u.pick(false) }
func (u unseededShards) moved() []int   { return u.pick(true) }

func (u unseededShards) pick(moved bool) []int {
	var out []int
	for _, st := range u {
		if st.moved == moved {
			out = append(out, st.shard)
		}
	}
	return out
}

// unseeded returns the shards whose seed marker is not "ok:" and the run id
// of the Redis process that holds the shard now, and, per shard, the marker
// value that would say so.
//
// The run id is what notices a failover. Replication is asynchronous: a
// replica promoted to master may not have received the last writes of the
// master it replaces (timers scheduled, a seed's last pages), while the
// markers, written long before, came through. A new process answering for a
// shard (a failover, or a restart that reloaded a snapshot older than the
// last writes) is so taken for a loss of unknown extent, and the shard is
// seeded again.
func (s *Scheduler) unseeded(ctx context.Context) (unseededShards, []string, error) {
	ids, err := s.runIDs(ctx)
	if err != nil {
		return nil, nil, err
	}
	cmds := make([]*goredis.StringCmd, len(s.keys.shards))
	_, err = s.rdb.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i, k := range s.keys.shards {
			cmds[i] = p.Get(ctx, k.seeded)
		}
		return nil
	})
	if err != nil && !errors.Is(err, goredis.Nil) {
		return nil, nil, fmt.Errorf("read the seed markers: %w", err)
	}
	var unseeded unseededShards
	want := make([]string, len(cmds))
	for i, c := range cmds {
		v, err := c.Result()
		if err != nil && !errors.Is(err, goredis.Nil) {
			return nil, nil, fmt.Errorf("read the seed marker of shard %d: %w", i, err)
		}
		want[i] = markerOK + ids[i]
		if v != want[i] {
			// "ok" alone is the marker of a lapse before run ids: the
			// process it was seeded on is unknown.
			unseeded = append(unseeded, unseededShard{shard: i, moved: strings.HasPrefix(v, markerOK) || v == "ok"})
		}
	}
	return unseeded, want, nil
}

// runIDs returns, per shard, the run id of the Redis process that holds its
// keys (INFO server): one for a standalone or Sentinel-managed Redis, the
// shard's master's in a Cluster.
func (s *Scheduler) runIDs(ctx context.Context) ([]string, error) {
	ids := make([]string, len(s.keys.shards))
	c, ok := s.rdb.(*goredis.ClusterClient)
	if !ok {
		id, err := s.runID(ctx, s.rdb)
		if err != nil {
			return nil, err
		}
		for i := range ids {
			ids[i] = id
		}
		return ids, nil
	}
	byNode := map[string]string{}
	for i, k := range s.keys.shards {
		node, err := c.MasterForKey(ctx, k.seeded)
		if err != nil {
			return nil, fmt.Errorf("the Cluster node of shard %d: %w", i, err)
		}
		addr := node.Options().Addr
		id, ok := byNode[addr]
		if !ok {
			if id, err = s.runID(ctx, node); err != nil {
				return nil, err
			}
			byNode[addr] = id
		}
		ids[i] = id
	}
	return ids, nil
}

// runID is the run id of the Redis process c talks to: a random id each
// process draws at its start. A Redis that refuses INFO, or answers it
// without a run id (some proxies and managed services), has none: "", and
// the markers then say "ok:" whatever process answers, so that a loss that
// keeps them is left to the fallback sweep, as before run ids were read.
func (s *Scheduler) runID(ctx context.Context, c goredis.Cmdable) (string, error) {
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		if refusesInfo(err) {
			s.noRunID.Do(func() {
				s.log.Warn("redis timers: Redis refuses INFO server, so lapse cannot tell a failover or a restart "+
					"that lost the last writes; the fallback sweep covers those", "err", err)
			})
			return "", nil
		}
		return "", fmt.Errorf("read the Redis run id (INFO server): %w", err)
	}
	for line := range strings.Lines(info) {
		if id, ok := strings.CutPrefix(strings.TrimSpace(line), "run_id:"); ok {
			return id, nil
		}
	}
	s.noRunID.Do(func() {
		s.log.Warn("redis timers: INFO server has no run_id, so lapse cannot tell a failover or a restart " +
			"that lost the last writes; the fallback sweep covers those")
	})
	return "", nil
}

// refusesInfo reports whether err is Redis (or a proxy) refusing INFO for
// good: an unknown, renamed or unsupported command, or an ACL without it.
// Anything else (a connection lost, BUSY, LOADING) is an error of the check,
// retried, not a Redis without run ids: taking it for one would set the
// markers to "ok:" and reseed twice for nothing.
func refusesInfo(err error) bool {
	if _, ok := errors.AsType[goredis.Error](err); !ok {
		return false
	}
	msg := strings.ToLower(err.Error())
	return goredis.HasErrorPrefix(err, "NOPERM") || strings.Contains(msg, "unknown command") || strings.Contains(msg, "unsupported")
}

// setMarkers sets every shard's seed marker to the token of the seed about
// to run.
func (s *Scheduler) setMarkers(ctx context.Context, token string) error {
	_, err := s.rdb.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for _, k := range s.keys.shards {
			p.Set(ctx, k.seeded, token, 0)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("set the seed markers: %w", err)
	}
	return nil
}

// markSeeded sets every shard's seed marker that still holds token to its
// value in want, "ok:<run id>" (lua/seeded.lua), and returns how many did not. One script call per shard
// (the markers are on as many Cluster slots), all in one pipeline; a call
// that finds the script missing from the server's cache (a restart, SCRIPT
// FLUSH) is run again on its own, which loads it.
func (s *Scheduler) markSeeded(ctx context.Context, token string, want []string) (fenced int, err error) {
	cmds := make([]*goredis.Cmd, len(s.keys.shards))
	_, _ = s.rdb.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i, k := range s.keys.shards {
			cmds[i] = seededScript.EvalSha(ctx, p, []string{k.seeded}, token, want[i])
		}
		return nil
	})
	for i, k := range s.keys.shards {
		set, err := cmds[i].Int()
		if err != nil && goredis.HasErrorPrefix(err, "NOSCRIPT") {
			set, err = seededScript.Run(ctx, s.rdb, []string{k.seeded}, token, want[i]).Int()
		}
		if err != nil {
			return 0, fmt.Errorf("mark shard %d seeded: %w", i, err)
		}
		if set == 0 {
			fenced++
		}
	}
	return fenced, nil
}
