// Package nats is the outbox sink that publishes events to NATS JetStream
// (--sink nats://host:4222/prefix), with nats.go's jetstream package.
//
// An event of type T is published on the subject <prefix>.T (for example
// lapse.events.order.cancelled) with the header Nats-Msg-Id set to the
// event id. A JetStream stream must capture <prefix>.>: New uses the one
// that does, unchanged, or creates one (file storage, a duplicate window of
// two minutes by default). In FormatCloudEvents the message is a binary-mode
// CloudEvent: the payload is the body and the attributes are "ce-" headers.
//
// What the sink guarantees:
//
//   - Acknowledged means stored: Publish reports an event delivered only
//     once the stream's PubAck for it arrived (with file storage, written
//     to the stream's store, and replicated if the stream is).
//   - At least once, deduplicated: an event whose PubAck did not arrive in
//     time is reported as failed and published again by the relay with the
//     same id. Within the stream's duplicate window the server drops such a
//     republish (the Nats-Msg-Id header); after it, the stream holds the
//     event twice and consumers dedupe by event id.
//   - Order within an order: the relay gives the sink an order's next event
//     only after the previous one was acknowledged, so an order's events
//     enter the stream in order. An ordered or single pull consumer reads
//     them in that order.
//
// While the connection is down, nats.go reconnects by itself, forever;
// Publish fails at once meanwhile (nothing is buffered for later), and works
// again once the connection is back.
package nats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/outbox"
)

// HeaderPrefix is the prefix of the CloudEvents attributes among a
// message's headers (the NATS protocol binding of CloudEvents).
const HeaderPrefix = "ce-"

// Sink publishes events to a JetStream stream. It is safe for concurrent
// use.
type Sink struct {
	nc      *natsgo.Conn
	js      jetstream.JetStream
	name    string
	prefix  string
	stream  string
	format  outbox.Format
	timeout time.Duration
	closed  chan struct{} // closed by nats.go once the connection is closed
}

var _ outbox.Sink = (*Sink)(nil)

// New connects to the servers of cfg and makes sure a JetStream stream
// captures <prefix>.>: the stream that already does is used as it is (its
// limits and duplicate window are the operator's), and without one a stream
// is created (named cfg.Stream or StreamName(prefix), file storage,
// cfg.DedupeWindow). A stream named cfg.Stream that captures other subjects
// is an error, never changed. Close drains the connection.
func New(ctx context.Context, cfg Config) (*Sink, error) {
	if len(cfg.Servers) == 0 {
		return nil, errors.New("nats sink: no server")
	}
	prefix := cfg.prefix()
	if err := validPrefix(prefix); err != nil {
		return nil, err
	}
	if cfg.Stream != "" {
		if err := validStream(cfg.Stream); err != nil {
			return nil, err
		}
	}
	format, err := outbox.ParseFormat(string(cfg.Format))
	if err != nil {
		return nil, fmt.Errorf("nats sink: %w", err)
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	timeout := orDefault(cfg.PublishTimeout, DefaultPublishTimeout)
	name := cfg.name()
	logger = logger.With("sink", name)

	s := &Sink{name: name, prefix: prefix, format: format, timeout: timeout, closed: make(chan struct{})}
	urls := make([]string, len(cfg.Servers))
	for i, h := range cfg.Servers {
		urls[i] = "nats://" + h
	}
	opts := []natsgo.Option{
		natsgo.Name("lapse outbox " + prefix),
		// Never give up reconnecting: the relay keeps the events, and
		// a sink whose connection closed for good would fail until a
		// restart.
		natsgo.MaxReconnects(-1),
		// No reconnect buffer: a publish while disconnected fails at
		// once (the relay retries it) instead of waiting, unacknowledged,
		// in memory for a connection that may be long in coming.
		natsgo.ReconnectBufSize(-1),
		// A dead peer behind a silent network is noticed within about
		// a minute, not the default four.
		natsgo.PingInterval(20 * time.Second),
		natsgo.DisconnectErrHandler(func(_ *natsgo.Conn, err error) {
			if err != nil {
				logger.Warn("nats sink: connection lost; reconnecting", "err", err)
			}
		}),
		natsgo.ReconnectHandler(func(nc *natsgo.Conn) {
			logger.Info("nats sink: reconnected", "server", nc.ConnectedAddr())
		}),
		natsgo.ClosedHandler(func(*natsgo.Conn) { close(s.closed) }),
	}
	switch {
	case cfg.Token != "":
		opts = append(opts, natsgo.Token(cfg.Token))
	case cfg.User != "":
		opts = append(opts, natsgo.UserInfo(cfg.User, cfg.Password))
	}
	opts = append(opts, cfg.Options...)
	nc, err := natsgo.Connect(strings.Join(urls, ","), opts...)
	if err != nil {
		return nil, fmt.Errorf("nats sink %s: connect: %w", name, err)
	}
	s.nc = nc
	s.js, err = jetstream.New(nc,
		// A PubAck lost with its connection (or never sent) fails its
		// future after the publish timeout instead of never.
		jetstream.WithPublishAsyncTimeout(timeout))
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("nats sink %s: %w", name, err)
	}
	s.stream, err = s.ensureStream(ctx, cfg.Stream, orDefault(cfg.DedupeWindow, DefaultDedupeWindow), logger)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("nats sink %s: %w", name, err)
	}
	return s, nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// ensureStream returns the name of the stream capturing <prefix>.>,
// creating it if there is none.
func (s *Sink) ensureStream(ctx context.Context, want string, window time.Duration, logger *slog.Logger) (string, error) {
	all := s.prefix + ".>"
	found, err := s.js.StreamNameBySubject(ctx, all)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
	case err != nil:
		return "", fmt.Errorf("look for the stream of %s: %w", all, err)
	case want != "" && found != want:
		return "", fmt.Errorf("subjects %s go to stream %s, not to stream %s of ?stream=", all, found, want)
	default:
		st, err := s.js.Stream(ctx, found)
		if err != nil {
			return "", fmt.Errorf("stream %s: %w", found, err)
		}
		cfg := st.CachedInfo().Config
		if !slices.ContainsFunc(cfg.Subjects, func(f string) bool { return covers(f, all) }) {
			return "", fmt.Errorf("stream %s captures %v, only part of %s: events of other types would have no stream", found, cfg.Subjects, all)
		}
		if cfg.Duplicates <= 0 {
			logger.Warn("nats sink: the stream has no duplicate window; a republished event is stored twice", "stream", found)
		}
		return found, nil
	}

	name := want
	if name == "" {
		name = StreamName(s.prefix)
	}
	_, err = s.js.CreateStream(ctx, jetstream.StreamConfig{
		Name:        name,
		Description: "lapse order events (" + all + ")",
		Subjects:    []string{all},
		Storage:     jetstream.FileStorage,
		Duplicates:  window,
	})
	switch {
	case errors.Is(err, jetstream.ErrStreamNameAlreadyInUse):
		return "", fmt.Errorf("a stream %s exists but does not capture %s; name another with ?stream= or add the subjects to it", name, all)
	case err != nil:
		return "", fmt.Errorf("create stream %s for %s: %w", name, all, err)
	}
	logger.Info("nats sink: created the stream", "stream", name, "subjects", all, "dedupe_window", window)
	return name, nil
}

// covers reports whether the subject filter f matches every subject that
// the filter sub matches.
func covers(f, sub string) bool {
	ft, st := strings.Split(f, "."), strings.Split(sub, ".")
	for i, tok := range ft {
		switch {
		case tok == ">":
			return i < len(st)
		case i >= len(st), st[i] == ">":
			return false
		case tok == "*":
		case tok != st[i]:
			return false
		}
	}
	return len(ft) == len(st)
}

// Name implements outbox.Sink: nats://<servers, sorted>/<prefix>, without
// credentials.
func (s *Sink) Name() string { return s.name }

// Stream is the name of the JetStream stream the sink publishes to.
func (s *Sink) Stream() string { return s.stream }

// Publish implements outbox.Sink. It publishes every event asynchronously,
// then waits for each PubAck; it returns when all have answered, when ctx
// ends or when the sink's PublishTimeout has passed, whichever is first.
//
// A server's error reply (no stream for the subject, a stream at its limits
// with discard=new, a message larger than the stream allows) is an
// outbox.RefusedError; a message too large for the stream or the server is
// refused for good. No connection, a lost connection or a timeout is a
// plain error.
func (s *Sink) Publish(ctx context.Context, events []order.Event) []error {
	if len(events) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return outbox.ErrorsFor(len(events), fmt.Errorf("nats: publish to %s: %w", s.name, err))
	}
	if st := s.nc.Status(); st != natsgo.CONNECTED {
		return outbox.ErrorsFor(len(events), fmt.Errorf("nats: publish to %s: %w (%s)", s.name, natsgo.ErrDisconnected, st))
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	deadline, _ := ctx.Deadline()

	errs := make([]error, len(events))
	futures := make([]jetstream.PubAckFuture, len(events))
	for i, e := range events {
		msg, err := s.msg(e)
		if err != nil {
			errs[i] = err
			continue
		}
		// At the client's cap of unacknowledged messages, wait for room
		// until the deadline rather than the default 200 ms.
		f, err := s.js.PublishMsgAsync(msg, jetstream.WithStallWait(max(time.Until(deadline), time.Millisecond)))
		if err != nil {
			errs[i] = s.classify(e, err)
			continue
		}
		futures[i] = f
	}
	for i, f := range futures {
		if f == nil {
			continue
		}
		select {
		case <-f.Ok():
		case err := <-f.Err():
			errs[i] = s.classify(events[i], err)
		case <-ctx.Done():
			errs[i] = fmt.Errorf("nats: event %s not acknowledged by %s: %w", events[i].ID, s.name, context.Cause(ctx))
		}
	}
	return errs
}

// msg is e as a NATS message on its subject.
func (s *Sink) msg(e order.Event) (*natsgo.Msg, error) {
	subject := s.prefix + "." + e.Type
	if err := validSubject(e.Type); err != nil {
		return nil, outbox.RefusedForGood(fmt.Errorf("nats: event %s: type %q cannot be a subject: %w", e.ID, e.Type, err))
	}
	body, contentType, ceHeaders, err := s.format.Binary(e, HeaderPrefix)
	if err != nil {
		// Not writable in this format at all: no retry can help.
		return nil, outbox.RefusedForGood(fmt.Errorf("nats: %w", err))
	}
	m := natsgo.NewMsg(subject)
	m.Data = body
	for _, k := range slices.Sorted(maps.Keys(ceHeaders)) {
		m.Header.Set(k, ceHeaders[k])
	}
	m.Header.Set("Content-Type", contentType)
	m.Header.Set(jetstream.MsgIDHeader, e.ID)
	return m, nil
}

// classify turns nats.go's answer for e into the outbox's kinds of error.
func (s *Sink) classify(e order.Event, err error) error {
	wrapped := fmt.Errorf("nats: event %s to %s: %w", e.ID, s.name, err)
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, natsgo.ErrMaxPayload),
		errors.Is(err, jetstream.ErrStreamMessageExceedsMaximum):
		return outbox.RefusedForGood(wrapped)
	case errors.Is(err, jetstream.ErrNoStreamResponse):
		// No stream captures the subject any more (deleted, or its
		// subjects changed): the server answered "no responders".
		return outbox.Refused(wrapped)
	case errors.As(err, &apiErr):
		// The stream's error reply: limits reached with discard=new,
		// a sealed stream, and the like.
		return outbox.Refused(wrapped)
	}
	return wrapped
}

// Ping returns nil while the sink is connected and the server answers a
// round trip, and why not otherwise: the sink's part of a readiness check.
func (s *Sink) Ping(ctx context.Context) error {
	if st := s.nc.Status(); st != natsgo.CONNECTED {
		return fmt.Errorf("nats sink %s: %w (%s)", s.name, natsgo.ErrDisconnected, st)
	}
	if err := s.nc.FlushWithContext(ctx); err != nil {
		return fmt.Errorf("nats sink %s: %w", s.name, err)
	}
	return nil
}

// Close drains the connection (what was published is flushed) and waits
// for it to close, at most 10 s. Publish must not be called after Close.
func (s *Sink) Close() error {
	if err := s.nc.Drain(); err != nil {
		s.nc.Close()
		return fmt.Errorf("nats sink %s: close: %w", s.name, err)
	}
	select {
	case <-s.closed:
		return nil
	case <-time.After(10 * time.Second):
		s.nc.Close()
		return fmt.Errorf("nats sink %s: close: the connection did not drain in 10 s", s.name)
	}
}
