package core

import (
	"context"
	"fmt"
	"time"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
)

// The outbox's operations: sinks, fan-out, claims, settles, listings and
// retention. The per-order rule (one event of an order in flight per sink,
// in seq order) lives in ClaimDeliveries' statement; what is decided here is
// the order of steps and their transactions.

// UnpublishedEvents implements store.Outbox.
func (s *Store) UnpublishedEvents(ctx context.Context, limit int) ([]order.Event, error) {
	out, err := s.d.UnpublishedEvents(ctx, limit)
	if err != nil {
		return nil, fmt.Errorf("read outbox: %w", err)
	}
	return out, nil
}

// RegisterSinks implements store.Outbox.
func (s *Store) RegisterSinks(ctx context.Context, names []string) error {
	if len(names) == 0 {
		return nil
	}
	err := s.withTx(ctx, TxOptions{}, func(tx *Tx) error {
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		return tx.RegisterSinks(ctx, unique(names), now)
	})
	if err != nil {
		return fmt.Errorf("register sinks %v: %w", names, err)
	}
	return nil
}

// ClaimEvents implements store.Outbox: in one transaction, the fan-out (if
// no other transaction is fanning out) and the claim, so the claim sees the
// events it just fanned out.
func (s *Store) ClaimEvents(ctx context.Context, p store.ClaimEventsParams) ([]store.Delivery, error) {
	if p.Sink == "" || p.Limit < 1 || p.Lease <= 0 {
		return nil, fmt.Errorf("claim events: sink %q, limit %d, lease %s: %w", p.Sink, p.Limit, p.Lease, store.ErrInvalid)
	}
	if p.FanOut <= 0 {
		p.FanOut = 1000
	}
	var out []store.Delivery
	err := s.withTx(ctx, TxOptions{}, func(tx *Tx) error {
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		turn, err := tx.LockFanOut(ctx)
		if err != nil {
			return fmt.Errorf("lock fan-out: %w", err)
		}
		if turn {
			if _, err := tx.FanOut(ctx, p.FanOut, now); err != nil {
				return fmt.Errorf("fan out: %w", err)
			}
		}
		out, err = tx.ClaimDeliveries(ctx, p.Sink, p.Limit, now, now.Add(p.Lease))
		for i := range out {
			out[i].ClaimedAt = now
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("claim events for %s: %w", p.Sink, err)
	}
	return out, nil
}

// SettleEvents implements store.Outbox: one transaction for the batch.
func (s *Store) SettleEvents(ctx context.Context, sink string, outcomes []store.Outcome) error {
	if len(outcomes) == 0 {
		return nil
	}
	var seqs []int64
	var attempts []int
	for _, o := range outcomes {
		if o.Delivered {
			seqs, attempts = append(seqs, o.Seq), append(attempts, o.Attempts)
		}
	}
	err := s.withTx(ctx, TxOptions{}, func(tx *Tx) error {
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		if len(seqs) > 0 {
			if err := tx.DeleteDeliveries(ctx, sink, seqs, attempts); err != nil {
				return fmt.Errorf("delete %d deliveries: %w", len(seqs), err)
			}
			if err := tx.MarkPublished(ctx, seqs, now); err != nil {
				return fmt.Errorf("mark published: %w", err)
			}
		}
		for _, o := range outcomes {
			if o.Delivered {
				continue
			}
			if err := tx.FailDelivery(ctx, sink, o, now, now.Add(max(o.RetryIn, 0))); err != nil {
				return fmt.Errorf("record failed delivery of seq %d: %w", o.Seq, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("settle %d events for %s: %w", len(outcomes), sink, err)
	}
	return nil
}

// ListEvents implements store.Outbox.
func (s *Store) ListEvents(ctx context.Context, p store.ListEventsParams) ([]store.EventDelivery, error) {
	if p.Limit <= 0 {
		p.Limit = 100
	}
	out, err := s.d.ListDeliveries(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	return out, nil
}

// RetryEvents implements store.Outbox.
func (s *Store) RetryEvents(ctx context.Context, p store.RetryEventsParams) (int64, error) {
	if len(p.IDs) == 0 && !p.AllDead {
		return 0, fmt.Errorf("retry events: name event ids or all dead ones: %w", store.ErrInvalid)
	}
	var n int64
	err := s.withTx(ctx, TxOptions{}, func(tx *Tx) error {
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		n, err = tx.RetryDeliveries(ctx, p, now)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("retry events: %w", err)
	}
	return n, nil
}

// PurgeEvents implements store.Outbox.
func (s *Store) PurgeEvents(ctx context.Context, p store.PurgeEventsParams) (int64, error) {
	if p.Before.IsZero() {
		return 0, fmt.Errorf("purge events: a time before which dead events go is required: %w", store.ErrInvalid)
	}
	var n int64
	err := s.withTx(ctx, TxOptions{}, func(tx *Tx) error {
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		seqs, err := tx.PurgeDeliveries(ctx, p)
		if err != nil || len(seqs) == 0 {
			return err
		}
		n = int64(len(seqs))
		return tx.MarkPublished(ctx, seqs, now)
	})
	if err != nil {
		return 0, fmt.Errorf("purge dead events: %w", err)
	}
	return n, nil
}

// PruneOutbox implements store.Outbox: first events whose deliveries are
// all gone are marked published (mending a settle that raced another
// sink's), then the published ones past retention are deleted. Each step is
// its own short transaction of at most limit rows.
func (s *Store) PruneOutbox(ctx context.Context, before time.Time, limit int) (int64, error) {
	if limit < 1 {
		return 0, fmt.Errorf("prune outbox: limit %d: %w", limit, store.ErrInvalid)
	}
	err := s.withTx(ctx, TxOptions{}, func(tx *Tx) error {
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		_, err = tx.MarkDrained(ctx, limit, now)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("prune outbox: mark drained events published: %w", err)
	}
	var n int64
	err = s.withTx(ctx, TxOptions{}, func(tx *Tx) error {
		var err error
		n, err = tx.DeleteOutbox(ctx, before, limit)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("prune outbox: %w", err)
	}
	return n, nil
}

// ForgetSink implements store.Outbox.
func (s *Store) ForgetSink(ctx context.Context, name string) (int64, error) {
	if name == "" {
		return 0, fmt.Errorf("forget sink: no name: %w", store.ErrInvalid)
	}
	var n int64
	err := s.withTx(ctx, TxOptions{}, func(tx *Tx) error {
		var err error
		n, err = tx.ForgetSink(ctx, name)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("forget sink %s: %w", name, err)
	}
	return n, nil
}

// OutboxStats implements store.Outbox.
func (s *Store) OutboxStats(ctx context.Context) (store.OutboxStats, error) {
	var out store.OutboxStats
	err := s.withTx(ctx, TxOptions{ReadOnly: true}, func(tx *Tx) error {
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		out, err = tx.OutboxStats(ctx)
		out.Now = now
		return err
	})
	if err != nil {
		return store.OutboxStats{}, fmt.Errorf("outbox stats: %w", err)
	}
	return out, nil
}
