package postgres

// Deadlines told at commit (store.DueListener): a create or an extend sends
// its deadlines with pg_notify in its own transaction (notify_due, in the
// pipeline of its effects), PostgreSQL delivers them when that transaction
// commits and never when it rolls back, and every instance LISTENs on a
// connection of its own.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lapsehq/lapse/store"
)

// maxNotice bounds one notification's payload: PostgreSQL refuses 8000
// bytes or more.
const maxNotice = 7900

// notices packs deadlines into payloads of lines "<Unix ms> <order id>",
// each payload under maxNotice bytes: a group of 200 creates is two or
// three notifications, not 200. (Order ids are at most 64 characters of
// A-Z a-z 0-9 _ . : -, so a line is short and holds no separator.)
func notices(due []store.Deadline) []string {
	var out []string
	var b strings.Builder
	for _, d := range due {
		line := strconv.FormatInt(d.CancelAfter.UnixMilli(), 10) + " " + d.OrderID
		if b.Len() > 0 && b.Len()+1+len(line) > maxNotice {
			out = append(out, b.String())
			b.Reset()
		}
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(line)
	}
	if b.Len() > 0 {
		out = append(out, b.String())
	}
	return out
}

// readNotice calls due for each line of a payload notices made; a line it
// cannot read is skipped (a timer is only ever a hint).
func readNotice(payload string, due func(key string, at time.Time)) {
	for line := range strings.SplitSeq(payload, "\n") {
		ms, id, ok := strings.Cut(line, " ")
		if !ok || id == "" {
			continue
		}
		n, err := strconv.ParseInt(ms, 10, 64)
		if err != nil {
			continue
		}
		due(id, time.UnixMilli(n).UTC())
	}
}

// listenPing is how long the listening connection may stay quiet before it
// is pinged: a connection the network dropped without a word is found out
// within it.
const listenPing = 30 * time.Second

// ListenDue implements store.DueListener: LISTEN on a connection taken from
// the pool for good (hijacked: the pool opens another in its place, and
// never hands this one, with its LISTEN, to anyone else), until ctx ends or
// the connection fails. A quiet connection is pinged every listenPing.
func (s *Store) ListenDue(ctx context.Context, ready func(), due func(key string, at time.Time)) error {
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("postgres: listen for deadlines: connect: %w", err)
	}
	conn := pc.Hijack()
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		_ = conn.Close(cctx)
		cancel()
	}()
	var channel string
	if err := conn.QueryRow(ctx, q.Get("due_channel")).Scan(&channel); err != nil {
		return listenErr(ctx, err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		return listenErr(ctx, err)
	}
	ready()
	for {
		wctx, cancel := context.WithTimeout(ctx, listenPing)
		n, err := conn.WaitForNotification(wctx)
		quiet := wctx.Err() != nil
		cancel()
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil && quiet:
			if err := conn.Ping(ctx); err != nil {
				return listenErr(ctx, err)
			}
		case err != nil:
			return listenErr(ctx, err)
		default:
			readNotice(n.Payload, due)
		}
	}
}

// listenErr is the error ListenDue returns: none when ctx ended.
func listenErr(ctx context.Context, err error) error {
	if ctx.Err() != nil || errors.Is(err, context.Canceled) {
		return nil
	}
	return fmt.Errorf("postgres: listen for deadlines: %w", err)
}

var _ store.DueListener = (*Store)(nil)
