// Package rabbit is lapse's one connection to RabbitMQ, shared by everything
// that talks AMQP 0-9-1 (the outbox's event sink, and later the RabbitMQ
// timer backend and stock commands), so that those features agree on how a
// connection is kept, how a publish is confirmed and how a lost connection
// surfaces.
//
// # Connection
//
// Dial connects, runs Config.Topology on the new connection (declaring the
// exchanges, queues and bindings its users need) and returns a Conn. When the
// connection closes — the broker restarts, the network drops it, a heartbeat
// times out — the Conn connects again by itself, waiting between attempts
// from Config.MinBackoff doubling up to Config.MaxBackoff with jitter, and
// runs Topology again before anything uses the new connection. When the
// broker says a channel used a missing exchange or queue (404 NOT_FOUND:
// someone deleted it), Topology runs again before the next channel is
// opened, so that the Conn heals without a reconnect. While it is
// disconnected Publish fails at once (ErrNotConnected) rather than waiting,
// so that a caller with retries of its own (the outbox relay) backs off and
// reports the outage; Ping and Connected tell a readiness check. The URL's
// password is never logged nor put in an error: logs show it redacted.
//
// # Publishing
//
// Publish sends a batch of messages with publisher confirms and the mandatory
// flag, and returns one error per message. nil means the broker confirmed the
// message (basic.ack) and did not return it: it is in every queue its
// routing reached, on disk if the message is persistent and the queue
// durable. A message the broker could not route is returned (basic.return,
// which RabbitMQ sends before the ack): its error is a *ReturnError (also
// ErrReturned) although it is acked afterwards. A nacked message gets
// ErrNacked. Both are the broker's refusals (IsRefusal). A message that was
// not confirmed when the channel or connection closed gets a transport error
// (ErrUnconfirmed): it may or may not have reached its queues, and
// publishing it again is safe only for consumers that deduplicate by message
// id. Publish never answers nil for a message the broker did not confirm.
//
// Each batch is published on a confirm-mode channel of its own, taken from a
// small pool (Config.PublishChannels), and waits for every confirm before the
// channel goes back to the pool: concurrent Publish calls run in parallel on
// different channels, up to the pool's size, and the next wait for one.
// Because a channel holds one batch at a time, a basic.return is matched to
// its message by message id within that batch, and every message must carry
// a MessageId unique in its batch. A batch abandoned when its context ends
// leaves its channel closed, so that late acks and returns can never be
// taken for those of the next batch.
//
// # Consuming
//
// Consume subscribes to a queue with manual acknowledgements and a prefetch
// limit, and hands each delivery to a handler that settles it; when the
// channel or the connection is lost it subscribes again on the next
// connection. Deliveries not acknowledged when a channel is lost go back to
// the queue and are delivered again (with Redelivered set), so handlers must
// tolerate seeing a message twice.
//
// # Request and reply
//
// Requester is the asking side of request/reply (lapse's commands to the
// inventory and to the order service): a confirmed publish with reply_to a
// private reply queue that outlives reconnects, and the reply matched to
// its request by correlation id. The answering side consumes with
// Conn.Serve (handlers run concurrently, and a stop lets those in hand
// settle) and answers with Conn.Reply; what to do with a request and how
// to settle it stays the responder's.
package rabbit

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lapsehq/lapse/redact"
)

// Config configures a Conn. Zero fields take the defaults named below.
type Config struct {
	// Topology declares what the Conn's users need (exchanges, queues,
	// bindings) on a fresh channel of every new connection, before the
	// connection is used: after a broker restart, non-durable entities are
	// gone, and durable ones may have been deleted. It must be idempotent.
	// An error fails the connection attempt: Dial returns it, and a
	// reconnect is tried again later. Nil declares nothing.
	Topology func(ch *amqp.Channel) error
	// PublishChannels is how many confirm-mode channels publish at once,
	// one batch each: the most concurrent Publish calls that proceed in
	// parallel (further calls wait for a free channel). Defaults to 4.
	PublishChannels int
	// MinBackoff is the wait before the first reconnect attempt; it doubles
	// with each failed attempt up to MaxBackoff. Each wait is drawn between
	// half and all of that (jitter), so that many instances cut off at once
	// do not reconnect in step. Default 100 ms and 5 s.
	MinBackoff, MaxBackoff time.Duration
	// Heartbeat is the AMQP heartbeat interval, which bounds how long a dead
	// connection that the network did not report goes unnoticed (about
	// twice the interval). Defaults to amqp091's 10 s; the URL's heartbeat
	// parameter takes precedence.
	Heartbeat time.Duration
	// TLS configures amqps:// connections. Nil uses the URL's TLS
	// parameters (cacertfile, certfile, keyfile, server_name_indication) and
	// the system's roots.
	TLS *tls.Config
	// ConnectionName is shown in RabbitMQ's management UI and
	// rabbitmqctl list_connections, telling lapse's connections from
	// others'. Defaults to "lapse".
	ConnectionName string
	// Logger receives connection losses, reconnects and consumer
	// re-subscriptions. Defaults to slog.Default().
	Logger *slog.Logger
}

// Config defaults.
const (
	DefaultPublishChannels = 4
	DefaultMinBackoff      = 100 * time.Millisecond
	DefaultMaxBackoff      = 5 * time.Second
)

func (cfg Config) withDefaults() (Config, error) {
	if cfg.PublishChannels == 0 {
		cfg.PublishChannels = DefaultPublishChannels
	}
	if cfg.MinBackoff == 0 {
		cfg.MinBackoff = DefaultMinBackoff
	}
	if cfg.MaxBackoff == 0 {
		cfg.MaxBackoff = max(DefaultMaxBackoff, cfg.MinBackoff)
	}
	if cfg.ConnectionName == "" {
		cfg.ConnectionName = "lapse"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	switch {
	case cfg.PublishChannels < 0:
		return cfg, fmt.Errorf("PublishChannels %d: want at least 1", cfg.PublishChannels)
	case cfg.MinBackoff < 0 || cfg.MaxBackoff < cfg.MinBackoff:
		return cfg, fmt.Errorf("backoff %s to %s: want 0 < MinBackoff <= MaxBackoff", cfg.MinBackoff, cfg.MaxBackoff)
	}
	return cfg, nil
}

// Errors of a Conn.
var (
	// ErrClosed: the Conn was closed.
	ErrClosed = errors.New("rabbit: connection closed")
	// ErrNotConnected: the Conn is between connections (reconnecting).
	ErrNotConnected = errors.New("rabbit: not connected")
)

// Conn is a connection to RabbitMQ that reconnects by itself. It is safe
// for concurrent use. Close it when done.
type Conn struct {
	url   string // holds the password: given to amqp091 only
	shown string // the URL with its password hidden, for logs and errors
	cfg   Config
	log   *slog.Logger

	mu      sync.Mutex
	conn    *amqp.Connection // nil while disconnected
	lastErr error            // why the connection was lost or the last attempt failed
	changed chan struct{}    // closed and replaced whenever conn changes
	closed  bool
	idle    []*pubChannel // publishing channels not in use

	// stale: the broker said an exchange or queue is missing (404 on a
	// channel), so the Topology is declared again before the next channel
	// is used: someone deleted what it declares, and the connection alone
	// would never bring it back.
	stale atomic.Bool

	pool chan struct{} // a token per publishing channel in use
	done chan struct{} // closed by Close
	wg   sync.WaitGroup
}

// Dial connects to the broker at rawURL
// (amqp[s]://user:password@host:port/vhost?heartbeat=…, see URLParams) and
// runs cfg.Topology. It keeps trying, with backoff, until ctx ends; it gives
// up at once on an error that retrying cannot fix (wrong credentials, an
// unknown vhost, a Topology the broker refuses). Once connected, the Conn
// reconnects by itself whenever the connection is lost, until Close.
func Dial(ctx context.Context, rawURL string, cfg Config) (*Conn, error) {
	shown := redact.URL(rawURL)
	if err := CheckURL(rawURL); err != nil {
		return nil, fmt.Errorf("rabbit: URL %s: %w", shown, err)
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("rabbit: config: %w", err)
	}
	c := &Conn{
		url: rawURL, shown: shown, cfg: cfg, log: cfg.Logger,
		changed: make(chan struct{}),
		pool:    make(chan struct{}, cfg.PublishChannels),
		done:    make(chan struct{}),
	}
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			if attempt > 1 {
				return nil, fmt.Errorf("rabbit: connect to %s: %w (gave up: %w)", shown, c.lastErr, err)
			}
			return nil, fmt.Errorf("rabbit: connect to %s: %w", shown, err)
		}
		conn, closes, err := c.connect()
		if err == nil {
			c.conn = conn
			c.wg.Add(1)
			go c.supervise(closes)
			return c, nil
		}
		c.lastErr = err
		if permanent(err) {
			return nil, fmt.Errorf("rabbit: connect to %s: %w", shown, err)
		}
		wait := c.backoff(attempt)
		c.log.Warn("rabbitmq: connect failed; retrying", "url", shown, "attempt", attempt, "retry_in", wait, "err", err)
		_ = c.sleep(ctx, wait) // ctx's end is seen above
	}
}

// connect opens a connection and declares the topology on it. closes
// reports the connection's end.
func (c *Conn) connect() (_ *amqp.Connection, closes <-chan *amqp.Error, _ error) {
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName(c.cfg.ConnectionName)
	acfg := amqp.Config{Properties: props, Heartbeat: c.cfg.Heartbeat}
	if c.cfg.TLS != nil {
		acfg.TLSClientConfig = c.cfg.TLS.Clone() // amqp091 sets its ServerName
	}
	conn, err := amqp.DialConfig(c.url, acfg)
	if err != nil {
		return nil, nil, err
	}
	// Buffered: amqp091 delivers the close error synchronously.
	closes = conn.NotifyClose(make(chan *amqp.Error, 1))
	go c.watchBlocked(conn.NotifyBlocked(make(chan amqp.Blocking, 1)))
	if err := c.declare(conn); err != nil {
		_ = conn.Close()
		return nil, nil, err
	}
	return conn, closes, nil
}

// declare runs the Topology on a channel of its own, so that an error that
// closes the channel (406 PRECONDITION_FAILED) leaves no broken channel
// behind.
func (c *Conn) declare(conn *amqp.Connection) error {
	if c.cfg.Topology == nil {
		return nil
	}
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("open a channel for the topology: %w", err)
	}
	defer func() { _ = ch.Close() }()
	if err := c.cfg.Topology(ch); err != nil {
		return fmt.Errorf("topology: %w", err)
	}
	return nil
}

// noteMissing marks the Topology stale when err is the broker's 404
// NOT_FOUND (a channel used a missing exchange or queue).
func (c *Conn) noteMissing(err error) {
	var ae *amqp.Error
	if c.cfg.Topology != nil && errors.As(err, &ae) && ae.Code == amqp.NotFound {
		c.stale.Store(true)
	}
}

// redeclare declares the Topology on conn again if it is stale.
func (c *Conn) redeclare(conn *amqp.Connection) error {
	if !c.stale.CompareAndSwap(true, false) {
		return nil
	}
	if err := c.declare(conn); err != nil {
		c.stale.Store(true)
		return err
	}
	c.log.Info("rabbitmq: declared the topology again after the broker said part of it was missing", "url", c.shown)
	return nil
}

// watchBlocked logs the broker's connection.blocked notices (a memory or
// disk alarm): publishes stall until it unblocks, which would otherwise look
// like a hang.
func (c *Conn) watchBlocked(blocked <-chan amqp.Blocking) {
	for b := range blocked {
		if b.Active {
			c.log.Warn("rabbitmq: broker blocked publishing (resource alarm); publishes wait", "url", c.shown, "reason", b.Reason)
		} else {
			c.log.Info("rabbitmq: broker unblocked publishing", "url", c.shown)
		}
	}
}

// supervise waits for the connection's end and reconnects, until Close.
func (c *Conn) supervise(closes <-chan *amqp.Error) {
	defer c.wg.Done()
	for {
		var lost error = errors.New("connection closed")
		select {
		case <-c.done:
			return
		case e := <-closes:
			if e != nil {
				lost = e
			}
		}
		if !c.set(nil, lost) {
			return // Close closed it
		}
		c.log.Warn("rabbitmq: connection lost; reconnecting", "url", c.shown, "err", lost)
		if closes = c.reconnect(); closes == nil {
			return
		}
	}
}

// reconnect connects again, with backoff, until it succeeds (it returns the
// new connection's close notices) or the Conn is closed (nil).
func (c *Conn) reconnect() <-chan *amqp.Error {
	for attempt := 1; ; attempt++ {
		t := time.NewTimer(c.backoff(attempt))
		select {
		case <-c.done:
			t.Stop()
			return nil
		case <-t.C:
		}
		conn, closes, err := c.connect()
		if err != nil {
			c.set(nil, err)
			c.log.Warn("rabbitmq: reconnect failed; retrying", "url", c.shown, "attempt", attempt, "err", err)
			continue
		}
		if !c.set(conn, nil) {
			_ = conn.Close()
			return nil
		}
		c.log.Info("rabbitmq: reconnected", "url", c.shown, "attempts", attempt)
		return closes
	}
}

// set records the current connection (nil while disconnected) and why there
// is none, and wakes the waiters of Consume. It returns false, changing
// nothing, once the Conn is closed.
func (c *Conn) set(conn *amqp.Connection, err error) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.lastErr = err
	if c.conn != conn {
		c.conn = conn
		close(c.changed)
		c.changed = make(chan struct{})
	}
	return true
}

// current returns the open connection, or why there is none.
func (c *Conn) current() (*amqp.Connection, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.currentLocked()
}

func (c *Conn) currentLocked() (*amqp.Connection, error) {
	switch {
	case c.closed:
		return nil, ErrClosed
	case c.conn == nil || c.conn.IsClosed():
		if c.lastErr != nil {
			return nil, fmt.Errorf("%w to %s: %w", ErrNotConnected, c.shown, c.lastErr)
		}
		return nil, fmt.Errorf("%w to %s", ErrNotConnected, c.shown)
	}
	return c.conn, nil
}

// waitConnected returns the open connection, waiting for a reconnect if
// there is none, until ctx ends or the Conn is closed.
func (c *Conn) waitConnected(ctx context.Context) (*amqp.Connection, error) {
	for {
		c.mu.Lock()
		conn, err := c.currentLocked()
		changed := c.changed
		c.mu.Unlock()
		if err == nil || errors.Is(err, ErrClosed) {
			return conn, err
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-c.done:
			return nil, ErrClosed
		}
	}
}

// Connected reports whether the Conn holds an open connection now.
func (c *Conn) Connected() bool {
	_, err := c.current()
	return err == nil
}

// Ping returns nil while the Conn holds an open connection, and otherwise
// why not (ErrNotConnected wrapping the last connection error, or
// ErrClosed): a readiness check. It costs no round trip: a connection that
// died without the network saying so is noticed by its heartbeats.
func (c *Conn) Ping(context.Context) error {
	_, err := c.current()
	return err
}

// Close closes the connection and stops reconnecting. Publish calls in
// flight return transport errors for what was unconfirmed; Consume calls
// return ErrClosed. Close is idempotent.
func (c *Conn) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	close(c.done)
	conn := c.conn
	c.conn, c.idle = nil, nil
	close(c.changed)
	c.mu.Unlock()
	var err error
	if conn != nil && !conn.IsClosed() {
		if err = conn.Close(); errors.Is(err, amqp.ErrClosed) {
			err = nil
		}
	}
	c.wg.Wait()
	if err != nil {
		return fmt.Errorf("rabbit: close connection to %s: %w", c.shown, err)
	}
	return nil
}

// backoff is the wait before reconnect attempt n (from 1): MinBackoff
// doubling up to MaxBackoff, and from half of that to all of it.
func (c *Conn) backoff(attempt int) time.Duration {
	return Backoff(attempt, c.cfg.MinBackoff, c.cfg.MaxBackoff)
}

// permanent reports whether a connection error is one that retrying cannot
// fix: wrong credentials or no access to the vhost, an unknown vhost, a
// Topology the broker refuses (an exchange redeclared with another type).
func permanent(err error) bool {
	var ae *amqp.Error
	if !errors.As(err, &ae) {
		return false
	}
	switch ae.Code {
	case amqp.AccessRefused, amqp.NotFound, amqp.PreconditionFailed, amqp.NotAllowed, amqp.InvalidPath, amqp.NotImplemented:
		return true
	}
	return false
}

// urlParams are the query parameters amqp091 reads from a URL (see
// amqp091.ParseURI).
var urlParams = []string{
	"auth_mechanism", "cacertfile", "certfile", "channel_max", "connection_timeout",
	"heartbeat", "keyfile", "server_name_indication",
}

// URLParams returns the query parameters a URL given to Dial may carry:
// heartbeat (seconds), connection_timeout (milliseconds), channel_max,
// auth_mechanism, and for amqps the TLS files cacertfile, certfile, keyfile
// and server_name_indication.
func URLParams() []string { return slices.Clone(urlParams) }

// CheckURL rejects what Dial would refuse without connecting, and what
// amqp091 would misread or silently ignore: another scheme, an unknown query
// parameter (a typo would go unnoticed). Its errors do not quote the URL,
// which holds a password: a flag's check can say what is wrong before
// anything connects.
func CheckURL(rawURL string) error {
	uri, err := amqp.ParseURI(rawURL)
	if err != nil {
		if ue, ok := errors.AsType[*url.Error](err); ok {
			err = ue.Err // without the URL
		}
		return err
	}
	if uri.Scheme != "amqp" && uri.Scheme != "amqps" {
		return fmt.Errorf("scheme %q: want amqp or amqps", uri.Scheme)
	}
	u, err := url.Parse(rawURL) // ParseURI parsed it already
	if err != nil {
		return errors.New("unparsable")
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return fmt.Errorf("query: %w", err)
	}
	for k := range q {
		if !slices.Contains(urlParams, k) {
			return fmt.Errorf("unknown query parameter %q (want %s)", k, strings.Join(urlParams, ", "))
		}
	}
	return nil
}
