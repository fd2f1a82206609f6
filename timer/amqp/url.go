package amqp

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lapsehq/lapse/internal/rabbit"
)

// urlParams are the query parameters of a --timers URL that configure the
// scheduler; the connection's own (heartbeat, TLS files, …) are
// rabbit.URLParams.
var urlParams = []string{"prefix", "base", "levels", "queue_type", "batch", "lead", "prefetch", "fixed"}

// ParseURL reads a --timers URL:
//
//	amqp[s]://user:password@host:5672/vhost?prefix=lapse.timers&base=100ms&levels=23&queue_type=classic&batch=200&lead=400ms&prefetch=2000&fixed=15m,30m
//
// It returns the broker's URL without the scheduler's parameters, and a
// Config holding what they set: prefix (Config.Prefix), base (Config.Base,
// a Go duration), levels (Config.Levels), queue_type (classic or quorum),
// batch (Config.BatchSize), lead (Config.Lead, a Go duration; 0 for none)
// prefetch (Config.Prefetch) and fixed (delays added to Config.Fixed, Go
// durations separated by commas). The connection's parameters (heartbeat,
// connection_timeout, channel_max, auth_mechanism, and for amqps cacertfile,
// certfile, keyfile, server_name_indication) stay in the broker's URL; any
// other parameter is refused, so that a misspelt one is not silently
// ignored. Errors never show the URL's password.
func ParseURL(rawURL string) (broker string, cfg Config, err error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", cfg, errors.New("amqp timers: URL: malformed")
	}
	if u.Scheme != "amqp" && u.Scheme != "amqps" {
		return "", cfg, fmt.Errorf("amqp timers: URL scheme %q: want amqp or amqps", u.Scheme)
	}
	if u.Host == "" {
		return "", cfg, errors.New("amqp timers: URL without a host: want amqp://user:password@host:5672/vhost")
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return "", cfg, errors.New("amqp timers: URL query: malformed")
	}
	connParams := rabbit.URLParams()
	for k, vs := range q {
		if !slices.Contains(urlParams, k) {
			if slices.Contains(connParams, k) {
				continue
			}
			return "", cfg, fmt.Errorf("amqp timers: URL query parameter %q: unknown (want %s, or the connection's %s)",
				k, strings.Join(urlParams, ", "), strings.Join(connParams, ", "))
		}
		if len(vs) != 1 {
			return "", cfg, fmt.Errorf("amqp timers: URL query parameter %q given %d times", k, len(vs))
		}
		v := vs[0]
		q.Del(k)
		switch k {
		case "prefix":
			if msg := validPrefix(v); msg != "" {
				return "", cfg, fmt.Errorf("amqp timers: URL prefix %q: %s", v, msg)
			}
			cfg.Prefix = v
		case "base":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return "", cfg, fmt.Errorf("amqp timers: URL base %q: want a duration such as 100ms", v)
			}
			cfg.Base = d
		case "levels":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return "", cfg, fmt.Errorf("amqp timers: URL levels %q: want a number from 1 to 32", v)
			}
			cfg.Levels = n
		case "queue_type":
			if v != QueueClassic && v != QueueQuorum {
				return "", cfg, fmt.Errorf("amqp timers: URL queue_type %q: want %s or %s", v, QueueClassic, QueueQuorum)
			}
			cfg.QueueType = v
		case "lead":
			d, err := time.ParseDuration(v)
			if err != nil {
				return "", cfg, fmt.Errorf("amqp timers: URL lead %q: want a duration such as 400ms (negative: none)", v)
			}
			if d == 0 {
				d = -1 // 0 in a URL means none, not the default
			}
			cfg.Lead = d
		case "prefetch":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return "", cfg, fmt.Errorf("amqp timers: URL prefetch %q: want a number from the batch size to %d", v, maxPrefetch)
			}
			cfg.Prefetch = n
		case "fixed":
			for _, f := range strings.Split(v, ",") {
				d, err := time.ParseDuration(f)
				if err != nil || d <= 0 {
					return "", cfg, fmt.Errorf("amqp timers: URL fixed %q: want delays such as 15m,30m", v)
				}
				cfg.Fixed = append(cfg.Fixed, d)
			}
		case "batch":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return "", cfg, fmt.Errorf("amqp timers: URL batch %q: want a number from 1 to %d", v, maxBatchSize)
			}
			cfg.BatchSize = n
		}
	}
	u.RawQuery = q.Encode()
	return u.String(), cfg, nil
}

// over returns base with the fields u sets (those of a URL) replaced, and
// u's fixed delays added to base's.
func (u Config) over(base Config) Config {
	base.Fixed = append(slices.Clone(base.Fixed), u.Fixed...)
	if u.Prefix != "" {
		base.Prefix = u.Prefix
	}
	if u.Base != 0 {
		base.Base = u.Base
	}
	if u.Levels != 0 {
		base.Levels = u.Levels
	}
	if u.QueueType != "" {
		base.QueueType = u.QueueType
	}
	if u.BatchSize != 0 {
		base.BatchSize = u.BatchSize
	}
	if u.Lead != 0 {
		base.Lead = u.Lead
	}
	if u.Prefetch != 0 {
		base.Prefetch = u.Prefetch
	}
	return base
}
