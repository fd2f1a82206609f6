package kafka

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/lapsehq/lapse/outbox"
)

// DefaultPort is the port of a broker named without one.
const DefaultPort = "9092"

// DefaultPublishTimeout bounds one Publish when Config.PublishTimeout is zero.
const DefaultPublishTimeout = 30 * time.Second

// Config is a Kafka sink's settings. ParseURL reads them from a --sink URL;
// Format and Logger are set by the caller.
type Config struct {
	// Brokers are the seed brokers, host:port each. The client learns the
	// rest of the cluster from them.
	Brokers []string
	// Topic receives every event. It must exist: the sink never creates it
	// (its partition count and replication are the operator's choice).
	Topic string
	// Format is how events are written: FormatJSON (the default) or
	// FormatCloudEvents in binary mode.
	Format outbox.Format
	// PublishTimeout bounds one Publish call, whatever its context says: an
	// event not acknowledged by then is reported as a transport failure and
	// retried by the relay. Zero means DefaultPublishTimeout.
	PublishTimeout time.Duration
	// ClientID is the Kafka client id (broker logs, quotas). Empty means
	// "lapse".
	ClientID string
	// TLS, when set, is used to dial every broker.
	TLS *tls.Config
	// SASL, when set, authenticates every connection.
	SASL sasl.Mechanism
	// Logger receives the client's warnings and errors. Nil means
	// slog.Default().
	Logger *slog.Logger
}

// ParseURL reads a --sink URL:
//
//	kafka://[user:password@]host[:port][,host[:port]…]/topic[?param=value&…]
//
// The port defaults to 9092. The parameters are:
//
//   - sasl: plain, scram-sha-256 or scram-sha-512; needs the user and
//     password of the URL (and the URL needs it).
//   - tls: true to dial the brokers over TLS, verified against the system's
//     roots.
//   - tls_ca: a PEM file of the CA certificates to verify the brokers
//     against instead (implies tls=true).
//   - client_id: the Kafka client id (default lapse).
//   - timeout: how long one Publish may take (default 30s).
//
// Any other parameter is an error, so a misspelt one is not silently
// ignored. Errors never quote the URL, which may hold a password.
func ParseURL(rawURL string) (Config, error) {
	rest, ok := strings.CutPrefix(rawURL, "kafka://")
	if !ok {
		return Config{}, errors.New("kafka sink: want a kafka://host:port/topic URL")
	}
	// Several hosts ("h1:9092,h2:9092") are not a valid URL host, so the
	// authority is taken apart by hand and only the rest goes to net/url.
	authority, pathQuery := rest, ""
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		authority, pathQuery = rest[:i], rest[i:]
	}
	var cfg Config
	var user, pass string
	hasUser := false
	if i := strings.LastIndex(authority, "@"); i >= 0 {
		info := authority[:i]
		authority = authority[i+1:]
		u, p, _ := strings.Cut(info, ":")
		var err error
		if user, err = url.PathUnescape(u); err != nil {
			return Config{}, errors.New("kafka sink: the user name in the URL is not valid percent-encoding")
		}
		if pass, err = url.PathUnescape(p); err != nil {
			return Config{}, errors.New("kafka sink: the password in the URL is not valid percent-encoding")
		}
		hasUser = true
	}
	if authority == "" {
		return Config{}, errors.New("kafka sink: the URL names no broker (want kafka://host:port/topic)")
	}
	for h := range strings.SplitSeq(authority, ",") {
		broker, err := brokerAddr(h)
		if err != nil {
			return Config{}, err
		}
		cfg.Brokers = append(cfg.Brokers, broker)
	}

	u, err := url.Parse("kafka://host" + pathQuery)
	if err != nil {
		return Config{}, fmt.Errorf("kafka sink: the URL's topic or parameters: %w", unwrapURLError(err))
	}
	if u.Fragment != "" {
		return Config{}, errors.New("kafka sink: the URL has a #fragment; want kafka://host:port/topic")
	}
	cfg.Topic = strings.TrimPrefix(u.Path, "/")
	if err := validTopic(cfg.Topic); err != nil {
		return Config{}, err
	}

	q := u.Query()
	var mechanism, caFile string
	useTLS := false
	for name, values := range q {
		if len(values) != 1 {
			return Config{}, fmt.Errorf("kafka sink: parameter %s given %d times", name, len(values))
		}
		v := values[0]
		switch name {
		case "sasl":
			mechanism = strings.ToLower(v)
		case "tls":
			if useTLS, err = strconv.ParseBool(v); err != nil {
				return Config{}, fmt.Errorf("kafka sink: tls=%q: want true or false", v)
			}
		case "tls_ca":
			if v == "" {
				return Config{}, errors.New("kafka sink: tls_ca is empty; want the path of a PEM file")
			}
			caFile = v
		case "client_id":
			cfg.ClientID = v
		case "timeout":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return Config{}, fmt.Errorf("kafka sink: timeout=%q: want a positive duration such as 30s", v)
			}
			cfg.PublishTimeout = d
		default:
			return Config{}, fmt.Errorf("kafka sink: unknown parameter %q (want sasl, tls, tls_ca, client_id or timeout)", name)
		}
	}

	switch {
	case mechanism == "" && hasUser:
		return Config{}, errors.New("kafka sink: the URL has a user name but no ?sasl= (plain, scram-sha-256 or scram-sha-512)")
	case mechanism != "" && !hasUser:
		return Config{}, fmt.Errorf("kafka sink: sasl=%s needs a user and password in the URL (kafka://user:password@host/topic)", mechanism)
	case mechanism == "plain":
		cfg.SASL = plain.Auth{User: user, Pass: pass}.AsMechanism()
	case mechanism == "scram-sha-256":
		cfg.SASL = scram.Auth{User: user, Pass: pass}.AsSha256Mechanism()
	case mechanism == "scram-sha-512":
		cfg.SASL = scram.Auth{User: user, Pass: pass}.AsSha512Mechanism()
	case mechanism != "":
		return Config{}, fmt.Errorf("kafka sink: sasl=%q: want plain, scram-sha-256 or scram-sha-512", mechanism)
	}

	if useTLS || caFile != "" {
		cfg.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return Config{}, fmt.Errorf("kafka sink: tls_ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return Config{}, fmt.Errorf("kafka sink: tls_ca %s holds no PEM certificate", caFile)
		}
		cfg.TLS.RootCAs = pool
	}
	return cfg, nil
}

// brokerAddr is one host of the URL as host:port, the port defaulted.
func brokerAddr(h string) (string, error) {
	h = strings.TrimSpace(h)
	if h == "" {
		return "", errors.New("kafka sink: an empty broker in the URL's host list")
	}
	host, port, err := net.SplitHostPort(h)
	if err != nil {
		// No port: "host" or "[::1]".
		host, port = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]"), DefaultPort
		if strings.ContainsAny(host, "[]") || (strings.Contains(host, ":") && !strings.HasPrefix(h, "[")) {
			return "", fmt.Errorf("kafka sink: broker %q: want host:port", h)
		}
	}
	if host == "" {
		return "", fmt.Errorf("kafka sink: broker %q has no host", h)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("kafka sink: broker %q: port %q is not a number from 1 to 65535", h, port)
	}
	return net.JoinHostPort(strings.ToLower(host), port), nil
}

// validTopic holds a topic name to Kafka's rules, so a typo fails at start
// rather than as a broker's INVALID_TOPIC_EXCEPTION on every event.
func validTopic(t string) error {
	switch {
	case t == "":
		return errors.New("kafka sink: the URL names no topic (want kafka://host:port/topic)")
	case t == "." || t == "..":
		return fmt.Errorf("kafka sink: topic %q is not allowed by Kafka", t)
	case len(t) > 249:
		return fmt.Errorf("kafka sink: topic of %d characters; Kafka allows 249", len(t))
	}
	for _, r := range t {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("kafka sink: topic %q: Kafka allows only letters, digits, '.', '_' and '-'", t)
		}
	}
	return nil
}

// SinkName is the Name of the sink a --sink kafka:// URL makes, without
// connecting: for checking, before opening anything, that two configured
// sinks are not one (URLs that differ only in client parameters name one
// topic, so one sink).
func SinkName(rawURL string) (string, error) {
	cfg, err := ParseURL(rawURL)
	if err != nil {
		return "", err
	}
	return cfg.name(), nil
}

// name is the sink's Name: its brokers (sorted, so their order in the URL
// does not matter) and topic, never the credentials.
func (c Config) name() string {
	brokers := slices.Clone(c.Brokers)
	slices.Sort(brokers)
	return "kafka://" + strings.Join(brokers, ",") + "/" + c.Topic
}

// unwrapURLError drops net/url's quoting of the input, which could hold a
// password.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
