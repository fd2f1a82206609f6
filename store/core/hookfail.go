package core

// The record of failing hooks (store.HookFailures): an OnCancelled that
// fails rolls its order's cancel back, and the batch commits without it
// (CancelDue). The record is written after that, in a transaction of its
// own — the failed one is gone — and deleted by the transaction whose hook
// holds (Effects.HooksHeld). Until its next_at, a claim of due orders leaves
// the order alone, so a hook that keeps failing is retried with growing
// gaps by every instance, not at each claim.

import (
	"context"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/lapsehq/lapse/store"
)

// RecordHookFailure implements store.HookFailures.
func (s *Store) RecordHookFailure(ctx context.Context, f *store.HookError, backoff func(attempts int) time.Duration) (store.HookFailure, error) {
	msg := cut(f.Err.Error(), store.MaxHookError)
	var out store.HookFailure
	err := s.withTx(ctx, TxOptions{}, func(tx *Tx) error {
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		n, first, err := tx.NoteHookFailure(ctx, f.OrderID, f.Event, msg, now)
		if err != nil {
			return err
		}
		next := now.Add(backoff(n)).Truncate(time.Millisecond)
		if err := tx.SetHookRetry(ctx, f.OrderID, f.Event, next); err != nil {
			return err
		}
		out = store.HookFailure{OrderID: f.OrderID, Event: f.Event, Attempts: n, LastError: msg,
			FirstFailedAt: first, LastFailedAt: now, NextAt: next}
		return nil
	})
	if err != nil {
		return store.HookFailure{}, fmt.Errorf("record the failure of hook %s of order %s: %w", f.Event, f.OrderID, err)
	}
	return out, nil
}

// ListHookFailures implements store.HookFailures.
func (s *Store) ListHookFailures(ctx context.Context, limit int) ([]store.HookFailure, error) {
	if limit <= 0 {
		limit = 100
	}
	fs, err := s.d.HookFailures(ctx, limit)
	if err != nil {
		return nil, fmt.Errorf("list hook failures: %w", err)
	}
	return fs, nil
}

// cut is s in at most n bytes, never splitting a character.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
