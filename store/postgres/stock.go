package postgres

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
)

// SetStock implements store.Stock.
func (s *Store) SetStock(ctx context.Context, sku string, available int64) (store.SKU, error) {
	var out store.SKU
	err := s.tx(ctx, func(tx pgx.Tx) error {
		now, err := s.now(ctx, tx)
		if err != nil {
			return err
		}
		return tx.QueryRow(ctx, q.Get("set_stock"), sku, available, now).
			Scan(&out.SKU, &out.Available, &out.Locked, &out.Sold)
	})
	if err != nil {
		return store.SKU{}, fmt.Errorf("set stock of %s: %w", sku, err)
	}
	return out, nil
}

// GetSKU implements store.Stock.
func (s *Store) GetSKU(ctx context.Context, sku string) (store.SKU, error) {
	var out store.SKU
	err := s.pool.QueryRow(ctx, q.Get("get_sku"), sku).Scan(&out.SKU, &out.Available, &out.Locked, &out.Sold)
	if err != nil {
		return store.SKU{}, fmt.Errorf("get sku %s: %w", sku, interpretError(err))
	}
	return out, nil
}

// UnpublishedEvents implements store.Outbox.
func (s *Store) UnpublishedEvents(ctx context.Context, limit int) ([]order.Event, error) {
	rows, err := s.pool.Query(ctx, q.Get("unpublished_events"), limit)
	if err != nil {
		return nil, fmt.Errorf("read outbox: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (order.Event, error) {
		var e order.Event
		var payload string
		err := r.Scan(&e.Seq, &e.ID, &e.Type, &e.OrderID, &payload, &e.CreatedAt)
		e.Payload, e.CreatedAt = []byte(payload), e.CreatedAt.UTC()
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("read outbox: %w", err)
	}
	return out, nil
}

// MarkPublished implements store.Outbox.
func (s *Store) MarkPublished(ctx context.Context, seqs []int64) error {
	if len(seqs) == 0 {
		return nil
	}
	err := s.tx(ctx, func(tx pgx.Tx) error {
		now, err := s.now(ctx, tx)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, q.Get("mark_published"), now, seqs)
		return err
	})
	if err != nil {
		return fmt.Errorf("mark %d events published: %w", len(seqs), err)
	}
	return nil
}

// Audit implements store.Auditor: every query of audit.sql, run in one
// read-only REPEATABLE READ transaction so the checks see one snapshot.
func (s *Store) Audit(ctx context.Context, p store.AuditParams) (store.AuditReport, error) {
	if p.MaxExamples <= 0 {
		p.MaxExamples = 10
	}
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return store.AuditReport{}, fmt.Errorf("audit: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // read-only; nothing to undo
	now, err := s.now(ctx, tx)
	if err != nil {
		return store.AuditReport{}, fmt.Errorf("audit: %w", err)
	}
	rep := store.AuditReport{At: now}
	args := pgx.NamedArgs{"now": now, "allowed_lag_ms": p.AllowedLag.Milliseconds()}
	for _, c := range auditChecks {
		check := store.AuditCheck{Name: c.Name}
		if name, ok := strings.CutPrefix(c.Name, "warn_"); ok {
			check.Name, check.Warning = name, true
		}
		rows, err := tx.Query(ctx, c.SQL, args)
		if err != nil {
			return rep, fmt.Errorf("audit %s: %w", c.Name, err)
		}
		var detail string
		_, err = pgx.ForEachRow(rows, []any{&detail}, func() error {
			check.Count++
			if len(check.Examples) < p.MaxExamples {
				check.Examples = append(check.Examples, detail)
			}
			return nil
		})
		if err != nil {
			return rep, fmt.Errorf("audit %s: %w", c.Name, err)
		}
		rep.Checks = append(rep.Checks, check)
	}
	return rep, nil
}
