package redis

import (
	"context"

	goredis "github.com/redis/go-redis/v9"
)

// scriptCall is one script call of a round trip.
type scriptCall struct {
	script *goredis.Script
	keys   []string
	args   []any
	cmd    *goredis.Cmd // its answer, set by evalAll
}

// evalAll sends calls in one round trip (one pipeline; a Cluster client
// splits it by node), or alone when there is one. A call whose script the
// server had not cached (NOSCRIPT) is sent again with EVAL. Each call's
// answer or error is in its cmd.
func (s *Scheduler) evalAll(ctx context.Context, calls []*scriptCall) {
	switch len(calls) {
	case 0:
		return
	case 1:
		c := calls[0]
		c.cmd = c.script.Run(ctx, s.rdb, c.keys, c.args...)
		return
	}
	_, _ = s.rdb.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for _, c := range calls {
			c.cmd = c.script.EvalSha(ctx, p, c.keys, c.args...)
		}
		return nil
	})
	for _, c := range calls {
		if err := c.cmd.Err(); err != nil && goredis.HasErrorPrefix(err, "NOSCRIPT") {
			c.cmd = c.script.Eval(ctx, s.rdb, c.keys, c.args...)
		}
	}
}
