package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
)

// SetStock implements store.Stock.
func (s *Store) SetStock(ctx context.Context, sku string, available int64) (store.SKU, error) {
	var out store.SKU
	err := s.tx(ctx, func(tx *sql.Tx) error {
		now, err := s.now(ctx, tx)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, q.Get("set_stock"), sku, available, available, now, available, available, now); err != nil {
			return err
		}
		return tx.QueryRowContext(ctx, q.Get("get_sku"), sku).Scan(&out.SKU, &out.Available, &out.Locked, &out.Sold)
	})
	if err != nil {
		return store.SKU{}, fmt.Errorf("set stock of %s: %w", sku, err)
	}
	return out, nil
}

// GetSKU implements store.Stock.
func (s *Store) GetSKU(ctx context.Context, sku string) (store.SKU, error) {
	var out store.SKU
	err := s.db.QueryRowContext(ctx, q.Get("get_sku"), sku).Scan(&out.SKU, &out.Available, &out.Locked, &out.Sold)
	if errors.Is(err, sql.ErrNoRows) {
		err = store.ErrNotFound
	}
	if err != nil {
		return store.SKU{}, fmt.Errorf("get sku %s: %w", sku, err)
	}
	return out, nil
}

// UnpublishedEvents implements store.Outbox.
func (s *Store) UnpublishedEvents(ctx context.Context, limit int) ([]order.Event, error) {
	rows, err := s.db.QueryContext(ctx, q.Get("unpublished_events"), limit)
	if err != nil {
		return nil, fmt.Errorf("read outbox: %w", err)
	}
	defer rows.Close()
	var out []order.Event
	for rows.Next() {
		var e order.Event
		if err := rows.Scan(&e.Seq, &e.ID, &e.Type, &e.OrderID, &e.Payload, &e.CreatedAt); err != nil {
			return nil, fmt.Errorf("read outbox: %w", err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read outbox: %w", err)
	}
	return out, nil
}

// MarkPublished implements store.Outbox.
func (s *Store) MarkPublished(ctx context.Context, seqs []int64) error {
	if len(seqs) == 0 {
		return nil
	}
	err := s.tx(ctx, func(tx *sql.Tx) error {
		now, err := s.now(ctx, tx)
		if err != nil {
			return err
		}
		for _, chunk := range chunks(seqs) {
			if _, err := tx.ExecContext(ctx, each(q.Get("mark_published"), len(chunk)), args([]any{now}, chunk)...); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("mark %d events published: %w", len(seqs), err)
	}
	return nil
}

// Audit implements store.Auditor: every query of audit.sql, run in one
// REPEATABLE READ transaction, so the checks see one consistent snapshot.
func (s *Store) Audit(ctx context.Context, p store.AuditParams) (store.AuditReport, error) {
	if p.MaxExamples <= 0 {
		p.MaxExamples = 10
	}
	var rep store.AuditReport
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
	if err != nil {
		return rep, fmt.Errorf("audit: %w", err)
	}
	defer tx.Rollback()
	now, err := s.now(ctx, tx)
	if err != nil {
		return rep, fmt.Errorf("audit: %w", err)
	}
	rep.At = now
	if _, err := tx.ExecContext(ctx, q.Get("audit_params"), now, p.AllowedLag.Milliseconds()); err != nil {
		return rep, fmt.Errorf("audit: %w", err)
	}
	for _, c := range auditChecks {
		check := store.AuditCheck{Name: c.Name}
		if name, ok := strings.CutPrefix(c.Name, "warn_"); ok {
			check.Name, check.Warning = name, true
		}
		if err := func() error {
			rows, err := tx.QueryContext(ctx, c.SQL)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var detail string
				if err := rows.Scan(&detail); err != nil {
					return err
				}
				check.Count++
				if len(check.Examples) < p.MaxExamples {
					check.Examples = append(check.Examples, detail)
				}
			}
			return rows.Err()
		}(); err != nil {
			return rep, fmt.Errorf("audit %s: %w", c.Name, err)
		}
		rep.Checks = append(rep.Checks, check)
	}
	return rep, nil
}
