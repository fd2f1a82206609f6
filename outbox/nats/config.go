package nats

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/lapsehq/lapse/outbox"
)

// Defaults of a Config's zero fields.
const (
	// DefaultPrefix is the subject prefix of a URL without a path.
	DefaultPrefix = "lapse.events"
	// DefaultPort is the port of a server named without one.
	DefaultPort = "4222"
	// DefaultDedupeWindow is the duplicate window of a stream the sink
	// creates: a republish of an event within it is dropped by the server.
	DefaultDedupeWindow = 2 * time.Minute
	// DefaultPublishTimeout bounds one Publish.
	DefaultPublishTimeout = 30 * time.Second
)

// Config is a NATS sink's settings. ParseURL reads them from a --sink URL;
// Format and Logger are set by the caller.
type Config struct {
	// Servers are the NATS servers to connect to, host:port each (the
	// client also learns a cluster's other servers from them).
	Servers []string
	// User and Password, or Token, authenticate the connection.
	User, Password, Token string
	// Prefix is the subjects' prefix: an event of type T is published on
	// <Prefix>.<T>. Empty means DefaultPrefix.
	Prefix string
	// Stream is the JetStream stream that must capture <Prefix>.>. Empty
	// means the stream that already captures those subjects, if any, or
	// else a new one named after the prefix (StreamName).
	Stream string
	// DedupeWindow is the duplicate window of a stream the sink creates.
	// Zero means DefaultDedupeWindow. An existing stream keeps its own.
	DedupeWindow time.Duration
	// Format is how events are written: FormatJSON (the default) or
	// FormatCloudEvents in binary mode.
	Format outbox.Format
	// PublishTimeout bounds one Publish call, whatever its context says.
	// Zero means DefaultPublishTimeout.
	PublishTimeout time.Duration
	// Logger receives connection changes (lost, restored, closed). Nil
	// means slog.Default().
	Logger *slog.Logger
	// Options are more nats.go options, applied after the sink's own:
	// TLS (nats.RootCAs, nats.ClientCert), credentials files
	// (nats.UserCredentials), NKeys, or a shorter nats.ReconnectWait.
	Options []natsgo.Option
}

// ParseURL reads a --sink URL:
//
//	nats://[user:password@ | token@]host[:port][,host[:port]…][/prefix][?param=value&…]
//
// The port defaults to 4222 and the prefix to lapse.events. The parameters
// are:
//
//   - stream: the JetStream stream (default: the one capturing
//     <prefix>.>, or a new one named after the prefix, LAPSE_EVENTS for
//     lapse.events).
//   - dedupe_window: the duplicate window of a stream the sink creates
//     (default 2m).
//   - timeout: how long one Publish may take (default 30s).
//
// Any other parameter is an error. Errors never quote the URL, which may
// hold a password or token.
func ParseURL(rawURL string) (Config, error) {
	rest, ok := strings.CutPrefix(rawURL, "nats://")
	if !ok {
		return Config{}, errors.New("nats sink: want a nats://host:port/prefix URL")
	}
	// Several hosts are not a valid URL host: the authority is taken apart
	// by hand, the rest by net/url.
	authority, pathQuery := rest, ""
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		authority, pathQuery = rest[:i], rest[i:]
	}
	var cfg Config
	if i := strings.LastIndex(authority, "@"); i >= 0 {
		info := authority[:i]
		authority = authority[i+1:]
		u, p, hasPass := strings.Cut(info, ":")
		u, err1 := url.PathUnescape(u)
		p, err2 := url.PathUnescape(p)
		if err1 != nil || err2 != nil {
			return Config{}, errors.New("nats sink: the credentials in the URL are not valid percent-encoding")
		}
		switch {
		case u == "":
			return Config{}, errors.New("nats sink: empty user or token before @ in the URL")
		case hasPass:
			cfg.User, cfg.Password = u, p
		default:
			cfg.Token = u
		}
	}
	if authority == "" {
		return Config{}, errors.New("nats sink: the URL names no server (want nats://host:port/prefix)")
	}
	for h := range strings.SplitSeq(authority, ",") {
		server, err := serverAddr(h)
		if err != nil {
			return Config{}, err
		}
		cfg.Servers = append(cfg.Servers, server)
	}

	u, err := url.Parse("nats://host" + pathQuery)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return Config{}, fmt.Errorf("nats sink: the URL's prefix or parameters: %w", err)
	}
	if u.Fragment != "" {
		return Config{}, errors.New("nats sink: the URL has a #fragment; want nats://host:port/prefix")
	}
	cfg.Prefix = strings.TrimPrefix(u.Path, "/")
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if err := validPrefix(cfg.Prefix); err != nil {
		return Config{}, err
	}
	for name, values := range u.Query() {
		if len(values) != 1 {
			return Config{}, fmt.Errorf("nats sink: parameter %s given %d times", name, len(values))
		}
		v := values[0]
		switch name {
		case "stream":
			if err := validStream(v); err != nil {
				return Config{}, err
			}
			cfg.Stream = v
		case "dedupe_window":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return Config{}, fmt.Errorf("nats sink: dedupe_window=%q: want a positive duration such as 2m", v)
			}
			cfg.DedupeWindow = d
		case "timeout":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return Config{}, fmt.Errorf("nats sink: timeout=%q: want a positive duration such as 30s", v)
			}
			cfg.PublishTimeout = d
		default:
			return Config{}, fmt.Errorf("nats sink: unknown parameter %q (want stream, dedupe_window or timeout)", name)
		}
	}
	return cfg, nil
}

// serverAddr is one host of the URL as host:port, the port defaulted.
func serverAddr(h string) (string, error) {
	h = strings.TrimSpace(h)
	if h == "" {
		return "", errors.New("nats sink: an empty server in the URL's host list")
	}
	host, port, err := net.SplitHostPort(h)
	if err != nil {
		host, port = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]"), DefaultPort
		if strings.ContainsAny(host, "[]") || (strings.Contains(host, ":") && !strings.HasPrefix(h, "[")) {
			return "", fmt.Errorf("nats sink: server %q: want host:port", h)
		}
	}
	if host == "" {
		return "", fmt.Errorf("nats sink: server %q has no host", h)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("nats sink: server %q: port %q is not a number from 1 to 65535", h, port)
	}
	return net.JoinHostPort(strings.ToLower(host), port), nil
}

// validPrefix holds the prefix to NATS's subject rules: dot-separated
// tokens, none empty, without wildcards or white space.
func validPrefix(p string) error {
	if err := validSubject(p); err != nil {
		return fmt.Errorf("nats sink: prefix %q: %w", p, err)
	}
	return nil
}

func validSubject(s string) error {
	for tok := range strings.SplitSeq(s, ".") {
		switch {
		case tok == "":
			return errors.New("an empty token (two dots, or a dot at an end)")
		case tok == "*" || tok == ">":
			return errors.New("a wildcard token")
		case strings.ContainsFunc(tok, func(r rune) bool { return r <= ' ' || r == 0x7f }):
			return errors.New("white space or a control character")
		}
	}
	return nil
}

// validStream holds a stream name to JetStream's rules.
func validStream(name string) error {
	if name == "" || strings.ContainsAny(name, ".*>/\\") || strings.ContainsFunc(name, func(r rune) bool { return r <= ' ' || r == 0x7f }) || len(name) > 255 {
		return fmt.Errorf("nats sink: stream %q: want a name without '.', '*', '>', slashes or white space", name)
	}
	return nil
}

// StreamName is the name of the stream the sink creates for prefix when
// none is named: the prefix upper-cased, dots made underscores
// (lapse.events → LAPSE_EVENTS).
func StreamName(prefix string) string {
	return strings.Map(func(r rune) rune {
		switch r {
		case '.', '/', '\\':
			return '_'
		}
		return r
	}, strings.ToUpper(prefix))
}

// SinkName is the Name of the sink a --sink nats:// URL makes, without
// connecting: for checking, before opening anything, that two configured
// sinks are not one (URLs that differ only in parameters publish to one
// subject prefix, so one sink).
func SinkName(rawURL string) (string, error) {
	cfg, err := ParseURL(rawURL)
	if err != nil {
		return "", err
	}
	return cfg.name(), nil
}

// name is the sink's Name: servers (sorted) and prefix, no credentials.
func (c Config) name() string {
	servers := slices.Clone(c.Servers)
	slices.Sort(servers)
	return "nats://" + strings.Join(servers, ",") + "/" + c.prefix()
}

func (c Config) prefix() string {
	if c.Prefix == "" {
		return DefaultPrefix
	}
	return c.Prefix
}
