package mysql

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"time"

	"github.com/lapsehq/lapse/internal/sqlrows"
	"github.com/lapsehq/lapse/store"
)

// RegisterSinks implements core.Executor.
func (e executor) RegisterSinks(ctx context.Context, names []string, now time.Time) error {
	for _, chunk := range chunks(names) {
		pairs := make([]any, 0, 2*len(chunk))
		for _, n := range chunk {
			pairs = append(pairs, now, n)
		}
		if _, err := e.db.ExecContext(ctx, each(q.Get("register_sinks"), len(chunk)), pairs...); err != nil {
			return err
		}
	}
	return nil
}

// LockFanOut implements core.Executor.
func (e executor) LockFanOut(ctx context.Context) (bool, error) {
	var id int
	err := e.db.QueryRowContext(ctx, q.Get("lock_fanout")).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// FanOut implements core.Executor: the lowest unfanned seqs, read holding
// the fan-out turn, then their delivery rows and their mark.
func (e executor) FanOut(ctx context.Context, limit int, now time.Time) (int64, error) {
	seqs, err := sqlrows.Collect(ctx, e.db, q.Get("unfanned"), []any{limit}, func(r *sql.Rows) (int64, error) {
		var seq int64
		return seq, r.Scan(&seq)
	})
	if err != nil || len(seqs) == 0 {
		return 0, err
	}
	for _, chunk := range chunks(seqs) {
		if _, err := e.db.ExecContext(ctx, each(q.Get("fan_out_deliveries"), len(chunk)), args([]any{now}, chunk)...); err != nil {
			return 0, err
		}
		if _, err := e.db.ExecContext(ctx, each(q.Get("fan_out_mark"), len(chunk)), args(nil, chunk)...); err != nil {
			return 0, err
		}
	}
	return int64(len(seqs)), nil
}

// ClaimDeliveries implements core.Executor: lock the heads (SKIP LOCKED),
// drop the candidates a fresh read finds behind another event of their
// order (see claim_select), lease the rest, read them back with their
// events (no RETURNING).
func (e executor) ClaimDeliveries(ctx context.Context, sink string, limit int, now, leaseUntil time.Time) ([]store.Delivery, error) {
	scanSeq := func(r *sql.Rows) (int64, error) {
		var seq int64
		return seq, r.Scan(&seq)
	}
	seqs, err := sqlrows.Collect(ctx, e.db, q.Get("claim_select"), []any{sink, now, limit}, scanSeq)
	if err != nil || len(seqs) == 0 {
		return nil, err
	}
	behind, err := sqlrows.Collect(ctx, e.db, each(q.Get("claim_behind"), len(seqs)), args([]any{sink}, seqs), scanSeq)
	if err != nil {
		return nil, err
	}
	seqs = slices.DeleteFunc(seqs, func(seq int64) bool { return slices.Contains(behind, seq) })
	if len(seqs) == 0 {
		return nil, nil
	}
	if _, err := e.db.ExecContext(ctx, each(q.Get("claim_lease"), len(seqs)), args([]any{leaseUntil, sink}, seqs)...); err != nil {
		return nil, err
	}
	return sqlrows.Collect(ctx, e.db, each(q.Get("claimed"), len(seqs)), args([]any{sink}, seqs), func(r *sql.Rows) (store.Delivery, error) {
		d := store.Delivery{Sink: sink}
		var refused sql.NullTime
		err := r.Scan(&d.Seq, &d.Attempts, &d.Refusals, &refused, &d.ID, &d.Type, &d.OrderID, &d.Payload, &d.CreatedAt)
		if refused.Valid {
			d.FirstRefused = refused.Time.UTC()
		}
		d.CreatedAt = d.CreatedAt.UTC()
		return d, err
	})
}

// DeleteDeliveries implements core.Executor.
func (e executor) DeleteDeliveries(ctx context.Context, sink string, seqs []int64, attempts []int) error {
	pairs := make([]any, 0, 2*len(seqs))
	for i := range seqs {
		pairs = append(pairs, seqs[i], attempts[i])
	}
	for len(pairs) > 0 {
		n := min(len(pairs)/2, maxList)
		if _, err := e.db.ExecContext(ctx, each(q.Get("delete_deliveries"), n), append([]any{sink}, pairs[:2*n]...)...); err != nil {
			return err
		}
		pairs = pairs[2*n:]
	}
	return nil
}

// FailDelivery implements core.Executor.
func (e executor) FailDelivery(ctx context.Context, sink string, o store.Outcome, now, nextAt time.Time) error {
	refused := 0
	if o.Refused {
		refused = 1
	}
	_, err := e.db.ExecContext(ctx, q.Get("fail_delivery"), nextAt, o.Error, refused, o.Refused, now, o.Dead, o.Dead, now, sink, o.Seq, o.Attempts)
	return err
}

// ListDeliveries implements core.Executor.
func (e executor) ListDeliveries(ctx context.Context, p store.ListEventsParams) ([]store.EventDelivery, error) {
	return sqlrows.Collect(ctx, e.db, q.Get("list_deliveries"), []any{p.Sink, p.Sink, p.Dead, p.After, p.Limit}, func(r *sql.Rows) (store.EventDelivery, error) {
		var d store.EventDelivery
		var deadAt sql.NullTime
		err := r.Scan(&d.Sink, &d.Dead, &d.Attempts, &d.Refusals, &d.NextAt, &d.LastError, &deadAt,
			&d.Seq, &d.ID, &d.Type, &d.OrderID, &d.Payload, &d.CreatedAt)
		d.CreatedAt, d.NextAt = d.CreatedAt.UTC(), d.NextAt.UTC()
		if deadAt.Valid {
			d.DeadAt = deadAt.Time.UTC()
		}
		return d, err
	})
}

// RetryDeliveries implements core.Executor.
func (e executor) RetryDeliveries(ctx context.Context, p store.RetryEventsParams, now time.Time) (int64, error) {
	if p.AllDead {
		return e.affected(ctx, q.Get("retry_dead"), now, p.Sink, p.Sink)
	}
	var n int64
	for _, chunk := range chunks(p.IDs) {
		m, err := e.affected(ctx, each(q.Get("retry_events"), len(chunk)), args([]any{now, p.Sink, p.Sink}, chunk)...)
		if err != nil {
			return n, err
		}
		n += m
	}
	return n, nil
}

// PurgeDeliveries implements core.Executor.
func (e executor) PurgeDeliveries(ctx context.Context, p store.PurgeEventsParams) ([]int64, error) {
	type key struct {
		sink string
		seq  int64
	}
	keys, err := sqlrows.Collect(ctx, e.db, q.Get("purge_select"), []any{p.Before, p.Sink, p.Sink}, func(r *sql.Rows) (key, error) {
		var k key
		return k, r.Scan(&k.sink, &k.seq)
	})
	if err != nil {
		return nil, err
	}
	seqs := make([]int64, 0, len(keys))
	for _, chunk := range chunks(keys) {
		pairs := make([]any, 0, 2*len(chunk))
		for _, k := range chunk {
			pairs = append(pairs, k.sink, k.seq)
			seqs = append(seqs, k.seq)
		}
		if _, err := e.db.ExecContext(ctx, each(q.Get("purge_delete"), len(chunk)), pairs...); err != nil {
			return nil, err
		}
	}
	return seqs, nil
}

// MarkDrained implements core.Executor.
func (e executor) MarkDrained(ctx context.Context, limit int, now time.Time) (int64, error) {
	return e.affected(ctx, q.Get("mark_drained"), now, limit)
}

// DeleteOutbox implements core.Executor.
func (e executor) DeleteOutbox(ctx context.Context, before time.Time, limit int) (int64, error) {
	return e.affected(ctx, q.Get("delete_outbox"), before, limit)
}

// OutboxStats implements core.Executor.
func (e executor) OutboxStats(ctx context.Context) (store.OutboxStats, error) {
	var out store.OutboxStats
	var oldest sql.NullTime
	if err := e.db.QueryRowContext(ctx, q.Get("outbox_unfanned")).Scan(&out.Unfanned, &oldest); err != nil {
		return out, err
	}
	if oldest.Valid {
		out.OldestUnfanned = oldest.Time.UTC()
	}
	var err error
	out.Sinks, err = sqlrows.Collect(ctx, e.db, q.Get("outbox_sink_stats"), nil, func(r *sql.Rows) (store.SinkStats, error) {
		var s store.SinkStats
		var oldest sql.NullTime
		err := r.Scan(&s.Sink, &s.Pending, &s.Dead, &s.Blocked, &oldest)
		if oldest.Valid {
			s.Oldest = oldest.Time.UTC()
		}
		return s, err
	})
	return out, err
}

// ForgetSink implements core.Executor.
func (e executor) ForgetSink(ctx context.Context, name string) (int64, error) {
	if _, err := e.db.ExecContext(ctx, q.Get("forget_sink"), name); err != nil {
		return 0, err
	}
	return e.affected(ctx, q.Get("forget_sink_deliveries"), name)
}
