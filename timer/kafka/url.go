package kafka

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	kafkasink "github.com/lapsehq/lapse/outbox/kafka"
)

// urlParams are the query parameters of a --timers URL that configure the
// scheduler; the connection's own (sasl, tls, tls_ca, client_id) are the
// Kafka sink's, read by the same parser (outbox/kafka.ParseURL).
var urlParams = []string{"levels", "lead", "batch", "partitions", "replication", "session_timeout", "loss_check"}

// connParams are the connection's parameters, shared with the Kafka sink.
var connParams = []string{"sasl", "tls", "tls_ca", "client_id"}

// ParseURL reads a --timers URL:
//
//	kafka://[user:password@]host:9092[,host:9092…]/prefix?levels=1s,10s,100s,1000s,10000s&lead=200ms&batch=200&partitions=12&replication=3
//
// The path is Config.Prefix (DefaultPrefix when empty). The scheduler's
// parameters: levels (Config.Levels, Go durations in increasing order,
// whole milliseconds), lead (Config.Lead; 0 for none), batch
// (Config.BatchSize), partitions and replication (of the topics Open
// creates), session_timeout (Config.SessionTimeout) and loss_check
// (Config.LossCheck). The connection's parameters are those of the Kafka
// sink: sasl (plain, scram-sha-256, scram-sha-512, with the URL's user and
// password), tls, tls_ca and client_id. Any other parameter is refused, so
// that a misspelt one is not silently ignored. Errors never show the URL's
// password.
func ParseURL(rawURL string) (Config, error) {
	var cfg Config
	rest, ok := strings.CutPrefix(rawURL, "kafka://")
	if !ok {
		return cfg, errors.New("kafka timers: want a kafka://host:9092[,host:9092…]/prefix URL")
	}
	authority, pathQuery := rest, ""
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		authority, pathQuery = rest[:i], rest[i:]
	}
	if host := authority[strings.LastIndex(authority, "@")+1:]; strings.Trim(host, ", ") == "" {
		return cfg, errors.New("kafka timers: the URL names no broker (want kafka://host:9092[,host:9092…]/prefix)")
	}
	u, err := url.Parse("kafka://host" + pathQuery)
	if err != nil {
		return cfg, errors.New("kafka timers: the URL's prefix or parameters: malformed")
	}
	prefix := strings.TrimPrefix(u.Path, "/")
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if strings.Contains(prefix, "/") {
		return cfg, fmt.Errorf("kafka timers: prefix %q: one path segment (it starts every topic's name)", prefix)
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return cfg, errors.New("kafka timers: URL query: malformed")
	}
	conn := url.Values{}
	for k, vs := range q {
		if len(vs) != 1 {
			return cfg, fmt.Errorf("kafka timers: URL query parameter %q given %d times", k, len(vs))
		}
		v := vs[0]
		if slices.Contains(connParams, k) {
			conn.Set(k, v)
			continue
		}
		switch k {
		case "levels":
			levels, err := parseLevels(v)
			if err != nil {
				return cfg, err
			}
			cfg.Levels = levels
		case "lead":
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 {
				return cfg, fmt.Errorf("kafka timers: URL lead %q: want a duration such as 200ms (0 for none)", v)
			}
			if d == 0 {
				d = -1 // 0 in a URL means none, not the default
			}
			cfg.Lead = d
		case "batch":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > maxBatchSize {
				return cfg, fmt.Errorf("kafka timers: URL batch %q: want a number from 1 to %d", v, maxBatchSize)
			}
			cfg.BatchSize = n
		case "partitions":
			n, err := strconv.ParseInt(v, 10, 32)
			if err != nil || n < 1 || n > 10_000 {
				return cfg, fmt.Errorf("kafka timers: URL partitions %q: want a number from 1 to 10000", v)
			}
			cfg.Partitions = int32(n)
		case "replication":
			n, err := strconv.ParseInt(v, 10, 16)
			if err != nil || n < 1 {
				return cfg, fmt.Errorf("kafka timers: URL replication %q: want a replication factor from 1 (the broker's default when absent)", v)
			}
			cfg.Replication = int16(n)
		case "session_timeout":
			d, err := time.ParseDuration(v)
			if err != nil || d < time.Second {
				return cfg, fmt.Errorf("kafka timers: URL session_timeout %q: want a duration of at least 1s, such as 10s", v)
			}
			cfg.SessionTimeout = d
		case "loss_check":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return cfg, fmt.Errorf("kafka timers: URL loss_check %q: want a duration such as 30s", v)
			}
			cfg.LossCheck = d
		default:
			return cfg, fmt.Errorf("kafka timers: URL query parameter %q: unknown (want %s, or the connection's %s)",
				k, strings.Join(urlParams, ", "), strings.Join(connParams, ", "))
		}
	}
	// The connection (brokers, SASL, TLS, client id) is read as the Kafka
	// sink reads it, the prefix standing for its topic.
	sinkURL := "kafka://" + authority + "/" + prefix
	if len(conn) > 0 {
		sinkURL += "?" + conn.Encode()
	}
	sc, err := kafkasink.ParseURL(sinkURL)
	if err != nil {
		msg := strings.Replace(err.Error(), "kafka sink: ", "", 1)
		msg = strings.ReplaceAll(msg, "topic", "prefix")
		return cfg, errors.New("kafka timers: " + msg)
	}
	cfg.Brokers, cfg.TLS, cfg.SASL, cfg.ClientID, cfg.Prefix = sc.Brokers, sc.TLS, sc.SASL, sc.ClientID, prefix
	return cfg, nil
}

// parseLevels reads a comma-separated list of level durations.
func parseLevels(v string) ([]time.Duration, error) {
	var levels []time.Duration
	for s := range strings.SplitSeq(v, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("kafka timers: URL levels %q: %q is not a duration (want increasing durations such as 1s,10s,100s)", v, s)
		}
		levels = append(levels, d)
	}
	if err := validLevels(levels); err != nil {
		return nil, fmt.Errorf("kafka timers: URL levels %q: %w", v, err)
	}
	return levels, nil
}

// validLevels says what is wrong with a level list.
func validLevels(levels []time.Duration) error {
	if len(levels) == 0 {
		return errors.New("no level (want increasing durations such as 1s,10s,100s)")
	}
	if len(levels) > maxLevels {
		return fmt.Errorf("%d levels; at most %d", len(levels), maxLevels)
	}
	for i, d := range levels {
		switch {
		case d < time.Millisecond || d%time.Millisecond != 0:
			return fmt.Errorf("level %v: want a whole number of milliseconds, at least 1ms", d)
		case i > 0 && d <= levels[i-1]:
			return fmt.Errorf("level %v after %v: want increasing durations", d, levels[i-1])
		}
	}
	return nil
}
