package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/lapsehq/lapse/store"
)

// RegisterSinks implements core.Executor.
func (e executor) RegisterSinks(ctx context.Context, names []string, now time.Time) error {
	_, err := e.exec(ctx, "register_sinks", names, now)
	return err
}

// LockFanOut implements core.Executor.
func (e executor) LockFanOut(ctx context.Context) (bool, error) {
	var id int
	err := e.scan(ctx, "lock_fanout", nil, &id)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// FanOut implements core.Executor.
func (e executor) FanOut(ctx context.Context, limit int, now time.Time) (int64, error) {
	tag, err := e.exec(ctx, "fan_out", limit, now)
	return tag.RowsAffected(), err
}

// ClaimDeliveries implements core.Executor.
func (e executor) ClaimDeliveries(ctx context.Context, sink string, limit int, now, leaseUntil time.Time) ([]store.Delivery, error) {
	rows, err := e.db.Query(ctx, q.Get("claim_deliveries"), sink, limit, now, leaseUntil)
	if err != nil {
		return nil, interpretError(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Delivery, error) {
		d := store.Delivery{Sink: sink}
		var refused *time.Time
		var payload string
		err := r.Scan(&d.Seq, &d.Attempts, &d.Refusals, &refused, &d.ID, &d.Type, &d.OrderID, &payload, &d.CreatedAt)
		d.Payload, d.CreatedAt = []byte(payload), d.CreatedAt.UTC()
		if refused != nil {
			d.FirstRefused = refused.UTC()
		}
		return d, err
	})
	return out, interpretError(err)
}

// DeleteDeliveries implements core.Executor.
func (e executor) DeleteDeliveries(ctx context.Context, sink string, seqs []int64, attempts []int) error {
	_, err := e.exec(ctx, "delete_deliveries", sink, seqs, attempts)
	return err
}

// FailDelivery implements core.Executor.
func (e executor) FailDelivery(ctx context.Context, sink string, o store.Outcome, now, nextAt time.Time) error {
	_, err := e.exec(ctx, "fail_delivery", sink, o.Seq, o.Attempts, now, nextAt, o.Error, o.Refused, o.Dead)
	return err
}

// ListDeliveries implements core.Executor.
func (e executor) ListDeliveries(ctx context.Context, p store.ListEventsParams) ([]store.EventDelivery, error) {
	rows, err := e.db.Query(ctx, q.Get("list_deliveries"), p.Sink, p.Dead, p.After, p.Limit)
	if err != nil {
		return nil, interpretError(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.EventDelivery, error) {
		var d store.EventDelivery
		var deadAt *time.Time
		var payload string
		err := r.Scan(&d.Sink, &d.Dead, &d.Attempts, &d.Refusals, &d.NextAt, &d.LastError, &deadAt,
			&d.Seq, &d.ID, &d.Type, &d.OrderID, &payload, &d.CreatedAt)
		d.Payload, d.CreatedAt, d.NextAt = []byte(payload), d.CreatedAt.UTC(), d.NextAt.UTC()
		if deadAt != nil {
			d.DeadAt = deadAt.UTC()
		}
		return d, err
	})
	return out, interpretError(err)
}

// RetryDeliveries implements core.Executor. Event ids that are not UUIDs
// name no event.
func (e executor) RetryDeliveries(ctx context.Context, p store.RetryEventsParams, now time.Time) (int64, error) {
	var ids []string
	if !p.AllDead {
		ids = make([]string, 0, len(p.IDs))
		for _, id := range p.IDs {
			if _, err := uuid.Parse(id); err == nil {
				ids = append(ids, id)
			}
		}
		if len(ids) == 0 {
			return 0, nil
		}
	}
	tag, err := e.exec(ctx, "retry_deliveries", ids, p.Sink, now)
	return tag.RowsAffected(), err
}

// PurgeDeliveries implements core.Executor.
func (e executor) PurgeDeliveries(ctx context.Context, p store.PurgeEventsParams) ([]int64, error) {
	rows, err := e.db.Query(ctx, q.Get("purge_deliveries"), p.Before, p.Sink)
	if err != nil {
		return nil, interpretError(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	return out, interpretError(err)
}

// MarkDrained implements core.Executor.
func (e executor) MarkDrained(ctx context.Context, limit int, now time.Time) (int64, error) {
	tag, err := e.exec(ctx, "mark_drained", limit, now)
	return tag.RowsAffected(), err
}

// DeleteOutbox implements core.Executor.
func (e executor) DeleteOutbox(ctx context.Context, before time.Time, limit int) (int64, error) {
	tag, err := e.exec(ctx, "delete_outbox", before, limit)
	return tag.RowsAffected(), err
}

// OutboxStats implements core.Executor.
func (e executor) OutboxStats(ctx context.Context) (store.OutboxStats, error) {
	var out store.OutboxStats
	var oldest *time.Time
	if err := e.scan(ctx, "outbox_unfanned", nil, &out.Unfanned, &oldest); err != nil {
		return out, err
	}
	if oldest != nil {
		out.OldestUnfanned = oldest.UTC()
	}
	rows, err := e.db.Query(ctx, q.Get("outbox_sink_stats"))
	if err != nil {
		return out, interpretError(err)
	}
	out.Sinks, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.SinkStats, error) {
		var s store.SinkStats
		var oldest *time.Time
		err := r.Scan(&s.Sink, &s.Pending, &s.Dead, &s.Blocked, &oldest)
		if oldest != nil {
			s.Oldest = oldest.UTC()
		}
		return s, err
	})
	return out, interpretError(err)
}

// ForgetSink implements core.Executor.
func (e executor) ForgetSink(ctx context.Context, name string) (int64, error) {
	if _, err := e.exec(ctx, "forget_sink", name); err != nil {
		return 0, err
	}
	tag, err := e.exec(ctx, "forget_sink_deliveries", name)
	return tag.RowsAffected(), err
}
