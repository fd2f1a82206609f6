package sqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/lapsehq/lapse/internal/sqlrows"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
)

// RegisterSinks implements core.Executor.
func (e executor) RegisterSinks(ctx context.Context, names []string, now time.Time) error {
	_, err := e.exec(ctx, "register_sinks", jsonArray(names), ms(now))
	return err
}

// LockFanOut implements core.Executor: the single writer is the turn.
func (e executor) LockFanOut(context.Context) (bool, error) { return true, nil }

// FanOut implements core.Executor: two statements over the same lowest
// unfanned rows, which no one else can change in between (one writer).
func (e executor) FanOut(ctx context.Context, limit int, now time.Time) (int64, error) {
	if _, err := e.exec(ctx, "fan_out_deliveries", limit, ms(now)); err != nil {
		return 0, err
	}
	return e.exec(ctx, "fan_out_mark", limit)
}

// ClaimDeliveries implements core.Executor.
func (e executor) ClaimDeliveries(ctx context.Context, sink string, limit int, now, leaseUntil time.Time) ([]store.Delivery, error) {
	claimed := map[int64]store.Delivery{}
	var seqs []int64
	err := sqlrows.Each(ctx, e.db, q.Get("claim_deliveries"), []any{sink, limit, ms(now), ms(leaseUntil)}, func(r *sql.Rows) error {
		d := store.Delivery{Sink: sink}
		var refused sql.NullInt64
		if err := r.Scan(&d.Seq, &d.Attempts, &d.Refusals, &refused); err != nil {
			return err
		}
		if refused.Valid {
			d.FirstRefused = fromMS(refused.Int64)
		}
		claimed[d.Seq] = d
		seqs = append(seqs, d.Seq)
		return nil
	})
	if err != nil || len(seqs) == 0 {
		return nil, err
	}
	evs, err := e.events(ctx, "events_by_seq", jsonArray(seqs))
	if err != nil {
		return nil, err
	}
	out := make([]store.Delivery, 0, len(evs))
	for _, ev := range evs {
		d := claimed[ev.Seq]
		d.Event = ev
		out = append(out, d)
	}
	return out, nil
}

// events runs a query returning outbox rows.
func (e executor) events(ctx context.Context, name string, args ...any) ([]order.Event, error) {
	return sqlrows.Collect(ctx, e.db, q.Get(name), args, scanEvent)
}

func scanEvent(r *sql.Rows) (order.Event, error) {
	var ev order.Event
	var payload string
	var created int64
	err := r.Scan(&ev.Seq, &ev.ID, &ev.Type, &ev.OrderID, &payload, &created)
	ev.Payload, ev.CreatedAt = []byte(payload), fromMS(created)
	return ev, err
}

// DeleteDeliveries implements core.Executor.
func (e executor) DeleteDeliveries(ctx context.Context, sink string, seqs []int64, attempts []int) error {
	pairs := make([][2]int64, len(seqs))
	for i := range seqs {
		pairs[i] = [2]int64{seqs[i], int64(attempts[i])}
	}
	_, err := e.exec(ctx, "delete_deliveries", sink, jsonArray(pairs))
	return err
}

// FailDelivery implements core.Executor.
func (e executor) FailDelivery(ctx context.Context, sink string, o store.Outcome, now, nextAt time.Time) error {
	_, err := e.exec(ctx, "fail_delivery", sink, o.Seq, o.Attempts, ms(now), ms(nextAt), o.Error, o.Refused, o.Dead)
	return err
}

// ListDeliveries implements core.Executor.
func (e executor) ListDeliveries(ctx context.Context, p store.ListEventsParams) ([]store.EventDelivery, error) {
	return sqlrows.Collect(ctx, e.db, q.Get("list_deliveries"), []any{p.Sink, p.Dead, p.After, p.Limit}, func(r *sql.Rows) (store.EventDelivery, error) {
		var d store.EventDelivery
		var next, created int64
		var deadAt sql.NullInt64
		var payload string
		err := r.Scan(&d.Sink, &d.Dead, &d.Attempts, &d.Refusals, &next, &d.LastError, &deadAt,
			&d.Seq, &d.ID, &d.Type, &d.OrderID, &payload, &created)
		d.Payload, d.CreatedAt, d.NextAt = []byte(payload), fromMS(created), fromMS(next)
		if deadAt.Valid {
			d.DeadAt = fromMS(deadAt.Int64)
		}
		return d, err
	})
}

// RetryDeliveries implements core.Executor.
func (e executor) RetryDeliveries(ctx context.Context, p store.RetryEventsParams, now time.Time) (int64, error) {
	var ids any
	if !p.AllDead {
		ids = jsonArray(p.IDs)
	}
	return e.exec(ctx, "retry_deliveries", ids, p.Sink, ms(now))
}

// PurgeDeliveries implements core.Executor.
func (e executor) PurgeDeliveries(ctx context.Context, p store.PurgeEventsParams) ([]int64, error) {
	return sqlrows.Collect(ctx, e.db, q.Get("purge_deliveries"), []any{ms(p.Before), p.Sink}, func(r *sql.Rows) (int64, error) {
		var seq int64
		return seq, r.Scan(&seq)
	})
}

// MarkDrained implements core.Executor.
func (e executor) MarkDrained(ctx context.Context, limit int, now time.Time) (int64, error) {
	return e.exec(ctx, "mark_drained", limit, ms(now))
}

// DeleteOutbox implements core.Executor.
func (e executor) DeleteOutbox(ctx context.Context, before time.Time, limit int) (int64, error) {
	return e.exec(ctx, "delete_outbox", ms(before), limit)
}

// OutboxStats implements core.Executor.
func (e executor) OutboxStats(ctx context.Context) (store.OutboxStats, error) {
	var out store.OutboxStats
	var oldest sql.NullInt64
	if err := e.db.QueryRowContext(ctx, q.Get("outbox_unfanned")).Scan(&out.Unfanned, &oldest); err != nil {
		return out, err
	}
	if oldest.Valid {
		out.OldestUnfanned = fromMS(oldest.Int64)
	}
	var err error
	out.Sinks, err = sqlrows.Collect(ctx, e.db, q.Get("outbox_sink_stats"), nil, func(r *sql.Rows) (store.SinkStats, error) {
		var s store.SinkStats
		var oldest sql.NullInt64
		err := r.Scan(&s.Sink, &s.Pending, &s.Dead, &s.Blocked, &oldest)
		if oldest.Valid {
			s.Oldest = fromMS(oldest.Int64)
		}
		return s, err
	})
	return out, err
}

// ForgetSink implements core.Executor.
func (e executor) ForgetSink(ctx context.Context, name string) (int64, error) {
	if _, err := e.exec(ctx, "forget_sink", name); err != nil {
		return 0, err
	}
	return e.exec(ctx, "forget_sink_deliveries", name)
}
