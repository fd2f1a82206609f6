package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// ChaosConfig is how bad the network between lapse and its servers is made.
type ChaosConfig struct {
	// Latency delays every answer of a server (the downstream direction
	// only), so one round trip — a query and its answer — costs Latency
	// more. Whole milliseconds: toxiproxy counts in them. Zero adds none; the
	// proxies can still take a server away (Interrupt).
	Latency time.Duration
	// Jitter varies each delay by up to ± Jitter, uniformly. Whole
	// milliseconds, and only with a Latency.
	Jitter time.Duration
}

func (c ChaosConfig) validate() error {
	whole := func(d time.Duration) bool { return d >= 0 && d%time.Millisecond == 0 }
	switch {
	case !whole(c.Latency):
		return fmt.Errorf("bench: ChaosConfig.Latency %s: want whole milliseconds, 0 or more", c.Latency)
	case !whole(c.Jitter):
		return fmt.Errorf("bench: ChaosConfig.Jitter %s: want whole milliseconds, 0 or more", c.Jitter)
	case c.Jitter > 0 && c.Latency == 0:
		return fmt.Errorf("bench: ChaosConfig.Jitter %s: varies a Latency, and there is none", c.Jitter)
	}
	return nil
}

// Chaos sits between lapse and its servers: one TCP proxy per server
// (toxiproxy, in this process, each on 127.0.0.1 and a port of its own)
// that delays the server's answers and can take the server away for a
// moment, cutting every connection through it. Only the connections made to
// a proxy's address are touched, never another client of the same server.
type Chaos struct {
	cfg    ChaosConfig
	server *toxiproxy.ApiServer

	mu      sync.Mutex
	proxies map[string]*toxiproxy.Proxy
	closed  bool
}

// NewChaos returns a Chaos without proxies yet: add them with ProxyURL.
// Close stops them.
func NewChaos(cfg ChaosConfig) (*Chaos, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Chaos{
		cfg:     cfg,
		server:  toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop()),
		proxies: map[string]*toxiproxy.Proxy{},
	}, nil
}

// defaultPorts are the ports of the URL schemes a proxy can sit in front of.
var defaultPorts = map[string]string{
	"postgres": "5432", "postgresql": "5432", "mysql": "3306", "redis": "6379", "rediss": "6379",
}

// ProxyURL starts a proxy called name (Interrupt's handle, and the report's)
// in front of the server rawURL names — postgres://, postgresql://,
// mysql://, redis:// or rediss:// on host:port — and returns rawURL
// pointing at the proxy instead. A Unix socket, several hosts or a Redis
// Cluster cannot be proxied: a Cluster's redirects name its real nodes.
// A server certificate checked against the host name (sslmode=verify-full,
// rediss://) will not match the proxy's address.
func (c *Chaos) ProxyURL(name, rawURL string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the URL, which may hold a password
		}
		return "", fmt.Errorf("bench: chaos proxy %s: %w", name, err)
	}
	port, ok := defaultPorts[u.Scheme]
	switch {
	case strings.HasSuffix(u.Scheme, "-cluster"):
		return "", fmt.Errorf("bench: chaos proxy %s: a Redis Cluster's redirects name its real nodes, so a proxy cannot sit in between", name)
	case !ok:
		return "", fmt.Errorf("bench: chaos proxy %s: scheme %q: want postgres, postgresql, mysql, redis or rediss", name, u.Scheme)
	case u.Hostname() == "" || strings.Contains(u.Host, ",") || u.Query().Has("host") || u.Query().Has("socket"):
		return "", fmt.Errorf("bench: chaos proxy %s: want one server as host:port in the URL (not a Unix socket, not several hosts)", name)
	}
	if u.Port() != "" {
		port = u.Port()
	}
	upstream := net.JoinHostPort(u.Hostname(), port)

	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return "", errors.New("bench: chaos: closed")
	}
	if _, dup := c.proxies[name]; dup {
		return "", fmt.Errorf("bench: chaos proxy %s: already there", name)
	}
	p := toxiproxy.NewProxy(c.server, name, "127.0.0.1:0", upstream)
	if c.cfg.Latency > 0 {
		// Downstream only: toxiproxy's default direction, and a round trip
		// then costs exactly Latency.
		toxic := fmt.Sprintf(`{"name": "latency", "type": "latency", "stream": "downstream", "attributes": {"latency": %d, "jitter": %d}}`,
			c.cfg.Latency.Milliseconds(), c.cfg.Jitter.Milliseconds())
		if _, err := p.Toxics.AddToxicJson(strings.NewReader(toxic)); err != nil {
			return "", fmt.Errorf("bench: chaos proxy %s: latency: %w", name, err)
		}
	}
	if err := p.Start(); err != nil {
		return "", fmt.Errorf("bench: chaos proxy %s: %w", name, err)
	}
	c.proxies[name] = p
	u.Host = p.Listen // the address it listens on, port included
	return u.String(), nil
}

// Interrupt takes the server behind the proxy called name away for down,
// as a restart would: every connection through the proxy is closed at once
// and new ones are refused until down has passed; then the proxy listens
// again on the same address. It returns when the server is back (also when
// ctx ends first, with ctx's error).
func (c *Chaos) Interrupt(ctx context.Context, name string, down time.Duration) error {
	c.mu.Lock()
	p, ok := c.proxies[name]
	closed := c.closed
	c.mu.Unlock()
	switch {
	case closed:
		return errors.New("bench: chaos: closed")
	case !ok:
		return fmt.Errorf("bench: chaos: no proxy called %s", name)
	}
	p.Stop()
	var err error
	if !sleepUntil(ctx, time.Now().Add(down)) {
		err = ctx.Err()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return err
	}
	if serr := p.Start(); serr != nil {
		return fmt.Errorf("bench: chaos proxy %s: listen again on %s: %w", name, p.Listen, serr)
	}
	return err
}

// Result says what the proxies did, for a run's report.
func (c *Chaos) Result() ChaosResult {
	c.mu.Lock()
	defer c.mu.Unlock()
	res := ChaosResult{
		LatencyMS: float64(c.cfg.Latency.Milliseconds()),
		JitterMS:  float64(c.cfg.Jitter.Milliseconds()),
		Proxied:   []string{},
	}
	for name := range c.proxies {
		res.Proxied = append(res.Proxied, name)
	}
	slices.Sort(res.Proxied)
	return res
}

// Close stops every proxy and closes the connections through them.
func (c *Chaos) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for _, p := range c.proxies {
		p.Stop()
	}
	return nil
}

// ChaosResult is the network a run went through (Config.Chaos).
type ChaosResult struct {
	// LatencyMS is added to every round trip to a proxied server.
	LatencyMS float64 `json:"latency_ms"`
	// JitterMS varies it by up to ± JitterMS.
	JitterMS float64 `json:"jitter_ms"`
	// Proxied names the servers behind a proxy ("store", "redis").
	Proxied []string `json:"proxied"`
}
