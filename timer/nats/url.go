package nats

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	natsgo "github.com/nats-io/nats.go"
)

// ParseURL reads a --timers URL:
//
//	nats://[user:password@]host:4222[,host2:4222…][?prefix=lapse&stream=lapse_timers]
//
// It returns the server list as nats.Connect takes it, and the Prefix and
// Stream the query sets (empty when it does not). Other query parameters
// are refused, so that a misspelt one is not silently ignored. Errors never
// repeat the URL: it may hold a password or a token.
func ParseURL(u string) (servers string, prefix, stream string, err error) {
	scheme, rest, ok := strings.Cut(u, "://")
	if !ok {
		return "", "", "", errors.New("nats: URL without a scheme: want nats://host:4222")
	}
	if scheme != "nats" {
		return "", "", "", fmt.Errorf("nats: URL scheme %q: want nats", scheme)
	}
	rest, query, _ := strings.Cut(rest, "?")
	var userinfo string
	if i := strings.LastIndex(rest, "@"); i >= 0 {
		userinfo, rest = rest[:i+1], rest[i+1:]
	}
	rest = strings.TrimSuffix(rest, "/")
	if rest == "" {
		return "", "", "", errors.New("nats: URL without a host: want nats://host:4222")
	}
	hosts := strings.Split(rest, ",")
	for i, h := range hosts {
		if h == "" || strings.ContainsAny(h, " \t/") {
			return "", "", "", fmt.Errorf("nats: URL: want host:port,host:port,… after nats://, got %d hosts with an empty or malformed one", len(hosts))
		}
		// The credentials apply to every server of the list.
		hosts[i] = "nats://" + userinfo + h
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return "", "", "", errors.New("nats: URL query: malformed")
	}
	for k, vs := range q {
		if len(vs) != 1 {
			return "", "", "", fmt.Errorf("nats: URL query parameter %q given %d times", k, len(vs))
		}
		switch k {
		case "prefix":
			prefix = vs[0]
			if msg := validPrefix(prefix); msg != "" {
				return "", "", "", fmt.Errorf("nats: URL prefix %q: %s", prefix, msg)
			}
		case "stream":
			stream = vs[0]
			if msg := validStream(stream); msg != "" {
				return "", "", "", fmt.Errorf("nats: URL stream %q: %s", stream, msg)
			}
		default:
			return "", "", "", fmt.Errorf("nats: URL query parameter %q: unknown (want prefix or stream)", k)
		}
	}
	return strings.Join(hosts, ","), prefix, stream, nil
}

// Open connects to the server a --timers URL names (see ParseURL) and
// returns a scheduler on it; the URL's prefix and stream, when given,
// replace cfg's. The connection reconnects for ever, and Close closes it.
// opts are added to the connection's options (TLS, credentials files, …).
func Open(u string, cfg Config, opts ...natsgo.Option) (*Scheduler, error) {
	servers, prefix, stream, err := ParseURL(u)
	if err != nil {
		return nil, err
	}
	if prefix != "" {
		cfg.Prefix = prefix
	}
	if stream != "" {
		cfg.Stream = stream
	}
	base := []natsgo.Option{
		natsgo.Name("lapse timers"),
		natsgo.MaxReconnects(-1),
		natsgo.ReconnectWait(time.Second),
	}
	nc, err := natsgo.Connect(servers, append(base, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("nats: connect to %s: %w", hostsOf(servers), err)
	}
	s, err := New(nc, cfg)
	if err != nil {
		nc.Close()
		return nil, err
	}
	s.ownConn = true
	return s, nil
}

// hostsOf is a server list without its credentials, for messages.
func hostsOf(servers string) string {
	var out []string
	for s := range strings.SplitSeq(servers, ",") {
		s = strings.TrimPrefix(s, "nats://")
		if i := strings.LastIndex(s, "@"); i >= 0 {
			s = s[i+1:]
		}
		out = append(out, s)
	}
	return strings.Join(out, ",")
}
