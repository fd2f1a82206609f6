package core

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/lapsehq/lapse/internal/clock"
	"github.com/lapsehq/lapse/store"
)

// Config configures a Store.
type Config struct {
	// Driver runs the statements. Required.
	Driver Driver
	// Clock is the one clock the guards compare against. Defaults to nil:
	// the database's clock (Driver.DBNow), read once per transaction, so
	// instances whose clocks drift can fire a timer early but never cancel
	// an order early.
	Clock clock.Clock
	// Retries is how many times a transaction the driver classes ClassRetry
	// is run again, after a short randomised pause. Defaults to 0.
	Retries int
	// CreateGroup is the most creates committed in one transaction when
	// they arrive together (group.go). 0 or 1: every create alone.
	CreateGroup int
	// PaymentGroup is the most payment starts and reports (StartPayment,
	// CompletePayment, FailPayment) committed in one transaction when they
	// arrive together (paygroup.go). 0 or 1: every one alone.
	PaymentGroup int
	// Hooks, when set, run an embedding service's code inside the
	// transactions that cancel or pay orders (hooks.go).
	Hooks Hooks
	// TellDeadlines makes a create's or an extend's effects carry the
	// deadlines it sets (Effects.Due), for a driver that tells the other
	// instances at commit (PostgreSQL's NOTIFY). Defaults to false.
	TellDeadlines bool
}

// Store implements store.Store but for Migrate, Ping and Close, which the
// driver's own Store adds.
type Store struct {
	d       Driver
	clock   clock.Clock
	retries int
	groups  *grouper    // nil: every create alone
	pays    *payGrouper // nil: every payment operation alone
	hooks   Hooks       // nil: none
	tellDue bool        // Config.TellDeadlines
}

// New returns a Store running its transactions on cfg.Driver.
func New(cfg Config) *Store {
	if cfg.Driver == nil {
		panic("core: Config.Driver is required")
	}
	s := &Store{d: cfg.Driver, clock: cfg.Clock, retries: max(0, cfg.Retries), hooks: cfg.Hooks, tellDue: cfg.TellDeadlines}
	if cfg.CreateGroup > 1 {
		s.groups = newGrouper(s, cfg.CreateGroup)
	}
	if cfg.PaymentGroup > 1 {
		s.pays = newPayGrouper(s, cfg.PaymentGroup)
	}
	return s
}

// GroupStats is what group commit did: groups committed, the orders they
// held, and groups that fell back to one transaction per order.
func (s *Store) GroupStats() (groups, orders, fallbacks int64) {
	if s.groups == nil {
		return 0, 0, 0
	}
	return s.groups.groups.Load(), s.groups.grouped.Load(), s.groups.fallbacks.Load()
}

// PaymentGroupStats is what group commit of payments did: groups of two or
// more operations committed, the operations they held, groups run again
// behind savepoints because an operation failed, and groups that fell back
// to one transaction per operation.
func (s *Store) PaymentGroupStats() (groups, calls, isolated, fallbacks int64) {
	if s.pays == nil {
		return 0, 0, 0, 0
	}
	return s.pays.groups.Load(), s.pays.grouped.Load(), s.pays.isolated.Load(), s.pays.fallbacks.Load()
}

// PaymentsWaiting is how many payment operations wait for their group's
// COMMIT (queued, or in the group running).
func (s *Store) PaymentsWaiting() int64 {
	if s.pays == nil {
		return 0
	}
	return s.pays.waiting.Load()
}

// Tx is one transaction of the core: the driver's ExecutorTx and the time
// its guards compare against, read at most once.
type Tx struct {
	ExecutorTx
	s   *Store
	now time.Time
	// atCommit, when set, is written with the COMMIT (EffectsCommitter).
	atCommit *Effects
	// guard: a caller's transaction, which lapse never rolls back: a create
	// sent in one round trip (CreateExecutor) is undone to a savepoint when
	// refused, so that the caller's transaction goes on.
	guard bool
	// group: the transaction of a group of one (group.go's one).
	group bool
}

// Now is the transaction's "now": the configured clock's, or the
// database's, read on first use and kept for the rest of the transaction.
func (tx *Tx) Now(ctx context.Context) (time.Time, error) {
	if !tx.now.IsZero() {
		return tx.now, nil
	}
	t, err := tx.s.nowOn(ctx, tx.ExecutorTx)
	if err != nil {
		return time.Time{}, err
	}
	tx.now = t
	return t, nil
}

// nowOn reads the clock of a transaction or, for a read outside one, of the pool.
func (s *Store) nowOn(ctx context.Context, e Executor) (time.Time, error) {
	if s.clock != nil {
		return s.clock.Now().UTC().Truncate(time.Millisecond), nil
	}
	t, err := e.DBNow(ctx)
	if err != nil {
		return time.Time{}, fmt.Errorf("read the database clock: %w", err)
	}
	return t, nil
}

// WithTx runs fn in one transaction of the store, as the store runs its own
// (retries included): for a driver's maintenance (migrations) and its tests.
func (s *Store) WithTx(ctx context.Context, o TxOptions, fn func(tx *Tx) error) error {
	return s.withTx(ctx, o, fn)
}

// withTx runs fn in one transaction, committed if fn returns nil. A
// transaction the driver classes ClassRetry is rolled back and fn runs again
// from the start, up to Config.Retries times, so fn must set its results
// afresh on every run.
func (s *Store) withTx(ctx context.Context, o TxOptions, fn func(tx *Tx) error) error {
	for attempt := 0; ; attempt++ {
		err := s.tryTx(ctx, o, fn)
		if err == nil || attempt >= s.retries || s.d.Class(err) != ClassRetry {
			return err
		}
		// 1–2 ms, then 2–4 ms, 4–8 ms…: enough for the winner to commit, and
		// randomised so the losers do not collide again in step.
		base := time.Millisecond << min(attempt, 6)
		pause := time.NewTimer(base + rand.N(base))
		select {
		case <-ctx.Done():
			pause.Stop()
			return errors.Join(err, ctx.Err())
		case <-pause.C:
		}
	}
}

func (s *Store) tryTx(ctx context.Context, o TxOptions, fn func(tx *Tx) error) error {
	etx, err := s.d.Begin(ctx, o)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	tx := &Tx{ExecutorTx: etx, s: s}
	if err := fn(tx); err != nil {
		_ = etx.Rollback(context.WithoutCancel(ctx))
		return err
	}
	if e := tx.atCommit; e != nil {
		if err := etx.(EffectsCommitter).CommitEffects(ctx, *e); err != nil {
			_ = etx.Rollback(context.WithoutCancel(ctx))
			return fmt.Errorf("write %s effects (stock %s) and commit: %w", e.Type, cmpOr(string(e.Move), "unchanged"), err)
		}
		return nil
	}
	if err := etx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

var _ interface {
	store.Orders
	store.Stock
	store.Outbox
	store.Auditor
} = (*Store)(nil)
