package core

import (
	"context"
	"fmt"
	"strings"

	"github.com/lapsehq/lapse/store"
)

// SetStock implements store.Stock.
func (s *Store) SetStock(ctx context.Context, sku string, available int64) (store.SKU, error) {
	var out store.SKU
	err := s.withTx(ctx, TxOptions{}, func(tx *Tx) error {
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		out, err = tx.SetStock(ctx, sku, available, now)
		return err
	})
	if err != nil {
		return store.SKU{}, fmt.Errorf("set stock of %s: %w", sku, err)
	}
	return out, nil
}

// GetSKU implements store.Stock.
func (s *Store) GetSKU(ctx context.Context, sku string) (store.SKU, error) {
	out, err := s.d.GetSKU(ctx, sku)
	if err != nil {
		return store.SKU{}, fmt.Errorf("get sku %s: %w", sku, err)
	}
	return out, nil
}

// Audit implements store.Auditor: every check of the driver's audit file,
// run in one read-only snapshot so the checks see one consistent database.
// A check named warn_… reports a warning, not a violation.
func (s *Store) Audit(ctx context.Context, p store.AuditParams) (store.AuditReport, error) {
	if p.MaxExamples <= 0 {
		p.MaxExamples = 10
	}
	var rep store.AuditReport
	etx, err := s.d.Begin(ctx, TxOptions{ReadOnly: true})
	if err != nil {
		return rep, fmt.Errorf("audit: %w", err)
	}
	defer etx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // read-only; nothing to undo
	tx := &Tx{ExecutorTx: etx, s: s}
	if rep.At, err = tx.Now(ctx); err != nil {
		return rep, fmt.Errorf("audit: %w", err)
	}
	for _, c := range s.d.AuditChecks() {
		check := store.AuditCheck{Name: c.Name}
		if name, ok := strings.CutPrefix(c.Name, "warn_"); ok {
			check.Name, check.Warning = name, true
		}
		err := tx.AuditRows(ctx, c, rep.At, p.AllowedLag, func(detail string) {
			check.Count++
			if len(check.Examples) < p.MaxExamples {
				check.Examples = append(check.Examples, detail)
			}
		})
		if err != nil {
			return rep, fmt.Errorf("audit %s: %w", c.Name, err)
		}
		rep.Checks = append(rep.Checks, check)
	}
	return rep, nil
}
