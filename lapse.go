package lapse

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lapsehq/lapse/inventory"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/ordersvc"
	"github.com/lapsehq/lapse/outbox"
	"github.com/lapsehq/lapse/payment"
	"github.com/lapsehq/lapse/refund"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/timer"
	"github.com/lapsehq/lapse/timer/memory"
)

// Errors the service returns, re-exported from store so that callers of the
// Go API need one import. Test with errors.Is.
var (
	ErrNotFound            = store.ErrNotFound
	ErrInsufficientStock   = store.ErrInsufficientStock
	ErrOrderExists         = store.ErrOrderExists
	ErrIdempotencyMismatch = store.ErrIdempotencyMismatch
	ErrOrderExpired        = store.ErrOrderExpired
	ErrNotPending          = store.ErrNotPending
	ErrAmountMismatch      = store.ErrAmountMismatch
	ErrInvalidCursor       = store.ErrInvalidCursor
	ErrPaymentIDUsed       = store.ErrPaymentIDUsed
	// ErrRemoteStock: the stock is held by a remote inventory
	// (Config.Inventory), so lapse keeps no SKU counters to set or read.
	ErrRemoteStock = errors.New("lapse: the stock is held by the inventory service, not by lapse")
	// ErrReservationUsed: another order holds the reservation_id given.
	ErrReservationUsed = store.ErrReservationUsed
	// ErrReservationReleased: with InventoryReserve, the stock reserved for
	// this order id was given back before the order was created (an earlier
	// try failed); create the order under a new id.
	ErrReservationReleased = store.ErrReservationReleased
	// ErrReservationUnknown: with InventoryReserve, the inventory did not
	// answer the reserve in time. Nothing is lost: the reserve is resolved
	// by the dispatcher (its stock given back if the order is not created),
	// and a retry of the create with the same Idempotency-Key picks it up.
	ErrReservationUnknown = errors.New("lapse: the inventory did not answer the reservation; retry the create with the same Idempotency-Key")
	// ErrReservationNotHeld: the inventory reports the caller's reservation
	// as not holding stock — unknown to it, released, or confirmed (sold,
	// for another order perhaps). Matched by a *ReservationError.
	ErrReservationNotHeld = errors.New("lapse: the inventory holds no stock under this reservation")
	// ErrReservationMismatch: the caller's reservation holds other items
	// than the order's, or names another order. Matched by a
	// *ReservationError.
	ErrReservationMismatch = errors.New("lapse: the reservation is not this order's")
)

// ReservationError refuses a caller's reservation for what the inventory
// reports of it (Service.CreateOrder). Err is ErrReservationNotHeld or
// ErrReservationMismatch; Detail says what the inventory holds.
type ReservationError struct {
	Err           error
	ReservationID string
	Detail        string
}

func (e *ReservationError) Error() string {
	return fmt.Sprintf("reservation %q: %s", e.ReservationID, e.Detail)
}

// Unwrap returns Err.
func (e *ReservationError) Unwrap() error { return e.Err }

// InvalidError is a request that fails validation. Code is stable (clients
// may switch on it); Field names the offending input.
type InvalidError struct {
	Code    string
	Field   string
	Message string
}

func (e *InvalidError) Error() string {
	if e.Field == "" {
		return "invalid request: " + e.Message
	}
	return "invalid " + e.Field + ": " + e.Message
}

func invalid(field, format string, args ...any) error {
	return &InvalidError{Code: "invalid_field", Field: field, Message: fmt.Sprintf(format, args...)}
}

// Config configures a Service. Zero fields take the defaults named below.
type Config struct {
	// Store owns orders and stock. Required.
	Store store.Store
	// Scheduler keeps the cancel timers. Defaults to an in-process memory
	// scheduler, unless PollStore is set.
	Scheduler timer.Scheduler
	// PollStore makes the store itself the timer index (--timers sql): no
	// Scheduler; due orders are claimed from the orders table with FOR UPDATE
	// SKIP LOCKED, sleeping until the next deadline (at most PollMaxSleep).
	PollStore bool
	// PollMaxSleep bounds the sql poller's sleep, so orders created by other
	// instances are seen. Defaults to 1 s.
	PollMaxSleep time.Duration
	// SweepInterval is how often the fallback sweep looks for orders a timer
	// backend lost. Defaults to 30 s; negative disables it.
	SweepInterval time.Duration
	// SweepLag is how overdue an order must be before the sweep takes it,
	// leaving the primary backend its chance first. Defaults to 10 s; a
	// negative value means no lag (zero asks for the default, as everywhere
	// in Config): the sweep takes an order once cancel_after has passed, and
	// never before, whatever the value.
	SweepLag time.Duration
	// BatchSize is the most orders cancelled in one transaction. Defaults to 200.
	BatchSize int
	// Gateway, when set, is asked before cancelling an order that had a
	// payment attempt (see checker). Without one, a PAYING order waits for its
	// callback and a PENDING order is cancelled at cancel_after.
	Gateway payment.Gateway
	// GatewayTimeout bounds one gateway call. Defaults to 5 s.
	GatewayTimeout time.Duration
	// GatewayPendingMax is how long lapse waits while the gateway reports a
	// payment in progress before it closes the trade. Defaults to 5 minutes.
	GatewayPendingMax time.Duration
	// AutoRefund (--auto-refund) gives back, through Gateway, the money of
	// every payment attempt that ends REFUND_REQUIRED — a success for an
	// order already cancelled, a second success for a paid one, a wrong
	// amount or currency: a refund task is written with the attempt, and a
	// dispatcher (package refund) refunds it at the gateway with a key
	// derived from the attempt, retrying until the gateway has; the attempt
	// is then REFUNDED (order.refunded) and refund_required clears once no
	// attempt of the order owes money. Needs a Gateway that refunds
	// (payment.Refunder). Off by default: a person refunds by hand.
	AutoRefund bool
	// Refunds tunes the refund dispatcher (with AutoRefund).
	Refunds refund.Config
	// GatewayConcurrency bounds the gateway checks in flight. Defaults to 8.
	GatewayConcurrency int
	// ConfirmAfter is when an order cancelled after a payment attempt is
	// queried once more (paid after all → refund_required). Defaults to 60 s.
	ConfirmAfter time.Duration
	// RemindBefore, when positive, sends an order.expiring event to the Sink
	// this long before expires_at for orders still unpaid. Best effort: it
	// rides on the Scheduler (not with PollStore), is not written to the
	// outbox, is not rebuilt after a timer backend loses its data, and is
	// never used to cancel anything.
	RemindBefore time.Duration
	// Sinks receive the outbox events, each at its own pace (see package
	// outbox). Defaults to a log sink on Logger.
	Sinks []outbox.Sink
	// Outbox tunes the relay (batch, lease, retries, retention).
	Outbox outbox.Config
	// Retention bounds the tables: finished orders and finished work rows
	// are deleted once old enough (see RetentionConfig). Off by default.
	Retention RetentionConfig
	// Inventory, when set, is the remote inventory that holds the stock
	// (docs/sagas.md): lapse keeps no counters, every create carries the
	// reservation the caller made there, and each cancel or payment writes
	// a stock task that a dispatcher sends to it. Nil: lapse holds the stock
	// in its own store (--inventory local).
	Inventory inventory.Client
	// Tasks tunes the stock-task dispatcher (with Inventory).
	Tasks inventory.DispatcherConfig
	// InventoryReserve makes lapse reserve each order's stock at the
	// Inventory itself (reservation id = order id) instead of taking the
	// caller's reservation_id; see Service.CreateOrder. Needs Inventory.
	InventoryReserve bool
	// OrderService, when set, is the shop's order service that owns the
	// orders (order-service mode, docs/order-service.md): lapse holds no
	// stock and does not decide their cancel. At an order's cancel_after
	// (after grace, and after the gateway check of an open attempt) the
	// order moves to CANCELLING and a signed order.cancel_if_pending
	// command goes to the order service; its answer decides the order's
	// transition. Orders need an id (the order service's); their items
	// are optional and not stored.
	OrderService ordersvc.Client
	// Commands tunes the command dispatcher (with OrderService).
	Commands ordersvc.DispatcherConfig
	// DefaultTimeout is the payment window of an order that names none. Defaults to 15 minutes.
	DefaultTimeout time.Duration
	// MaxTimeout bounds timeout_seconds. Defaults to 7 days.
	MaxTimeout time.Duration
	// Grace is added to expires_at to give late payment callbacks time to
	// arrive before the cancel (cancel_after = expires_at + Grace). Zero means
	// no grace; the CLI defaults to 60 s.
	Grace time.Duration
	// DefaultCurrency is the currency of an order that names none. Defaults to "USD".
	DefaultCurrency string
	// CancelTimeout bounds one cancel batch's transaction. Defaults to 30 s.
	CancelTimeout time.Duration
	// Logger receives structured logs. Defaults to slog.Default().
	Logger *slog.Logger
	// Registerer receives the Prometheus metrics. Defaults to a new registry,
	// available from Service.Registry.
	Registerer prometheus.Registerer
}

func (c *Config) setDefaults() {
	if c.Scheduler == nil && !c.PollStore {
		c.Scheduler = memory.New(memory.Config{Gather: memory.DefaultGather})
	}
	if c.PollMaxSleep == 0 {
		c.PollMaxSleep = time.Second
	}
	if c.SweepInterval == 0 {
		c.SweepInterval = 30 * time.Second
	}
	if c.SweepLag == 0 {
		c.SweepLag = 10 * time.Second
	}
	if c.SweepLag < 0 {
		c.SweepLag = 0 // the store claims cancel_after <= now - lag: a negative lag would cancel early
	}
	if c.BatchSize == 0 {
		c.BatchSize = 200
	}
	if c.GatewayTimeout == 0 {
		c.GatewayTimeout = 5 * time.Second
	}
	if c.GatewayPendingMax == 0 {
		c.GatewayPendingMax = 5 * time.Minute
	}
	if c.GatewayConcurrency == 0 {
		c.GatewayConcurrency = 8
	}
	if c.ConfirmAfter == 0 {
		c.ConfirmAfter = time.Minute
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if len(c.Sinks) == 0 {
		c.Sinks = []outbox.Sink{outbox.LogSink{Logger: c.Logger}}
	}
	if c.Outbox.Logger == nil {
		c.Outbox.Logger = c.Logger
	}
	if c.DefaultTimeout == 0 {
		c.DefaultTimeout = 15 * time.Minute
	}
	if c.MaxTimeout == 0 {
		c.MaxTimeout = 7 * 24 * time.Hour
	}
	if c.DefaultCurrency == "" {
		c.DefaultCurrency = "USD"
	}
	if c.CancelTimeout == 0 {
		c.CancelTimeout = 30 * time.Second
	}
	c.Retention.setDefaults()
}

func (c *Config) validate() error {
	if c.Store == nil {
		return errors.New("lapse: Config.Store is required")
	}
	if c.InventoryReserve && c.Inventory == nil {
		return errors.New("lapse: Config.InventoryReserve needs an Inventory to reserve at")
	}
	if _, ok := c.Gateway.(payment.Refunder); c.AutoRefund && !ok {
		return errors.New("lapse: Config.AutoRefund needs a Gateway that refunds (payment.Refunder)")
	}
	if c.OrderService != nil && c.Inventory != nil {
		return errors.New("lapse: Config.OrderService and Config.Inventory: with an order service lapse holds no stock, local or remote")
	}
	if c.DefaultTimeout < time.Millisecond {
		return fmt.Errorf("lapse: Config.DefaultTimeout %s: want at least 1ms", c.DefaultTimeout)
	}
	if c.MaxTimeout < c.DefaultTimeout {
		return fmt.Errorf("lapse: Config.MaxTimeout %s is below DefaultTimeout %s", c.MaxTimeout, c.DefaultTimeout)
	}
	if c.RemindBefore < 0 {
		return fmt.Errorf("lapse: Config.RemindBefore %s: must not be negative", c.RemindBefore)
	}
	if c.PollStore && c.Scheduler != nil {
		return errors.New("lapse: Config.PollStore and Config.Scheduler are exclusive: the store is the timer index")
	}
	if c.BatchSize < 1 || c.BatchSize > 10000 {
		return fmt.Errorf("lapse: Config.BatchSize %d: want 1 to 10000", c.BatchSize)
	}
	if err := c.Retention.validate(); err != nil {
		return err
	}
	if c.Grace < 0 {
		return fmt.Errorf("lapse: Config.Grace %s: must not be negative", c.Grace)
	}
	if !currencyRE.MatchString(c.DefaultCurrency) {
		return fmt.Errorf("lapse: Config.DefaultCurrency %q: want three capital letters (ISO 4217)", c.DefaultCurrency)
	}
	if cg, ok := c.Gateway.(payment.CurrencyGateway); ok && !cg.AcceptsCurrency(c.DefaultCurrency) {
		return fmt.Errorf("lapse: Config.DefaultCurrency %s: the payment gateway cannot take it (set the default currency to one it takes)", c.DefaultCurrency)
	}
	return nil
}

// Service is lapse: it takes orders, starts and settles payments, and cancels
// what is not paid in time. It is safe for concurrent use; any number of HTTP
// handlers call it while Run cancels due orders.
type Service struct {
	cfg     Config
	store   store.Store
	timers  timer.Scheduler // nil with PollStore
	poll    *poller         // with PollStore
	checks  *checker        // with a Gateway
	log     *slog.Logger
	metrics *metrics
	relay   *outbox.Relay
	// relayStopped holds why the relay stopped for good, while Run runs
	// on: Ready reports it.
	relayStopped atomic.Pointer[error]
	// dispatch sends stock tasks to Config.Inventory; nil when lapse holds
	// the stock itself.
	dispatch *inventory.Dispatcher
	// refunds refunds at the gateway the attempts that owe money
	// (Config.AutoRefund); nil when off.
	refunds *refund.Dispatcher
	// commands sends cancel commands to Config.OrderService; nil when
	// lapse owns the orders.
	commands *ordersvc.Dispatcher
	// retain deletes finished orders and work rows (Config.Retention); nil
	// when off.
	retain *retention

	// burstUntil: until when (Unix ns) the service counts as cancelling a
	// burst of due orders (bursting, cancel.go).
	burstUntil atomic.Int64

	early     earlyBackoff   // early timers set again (clock.go)
	hookTries tries          // orders whose OnCancelled hook failed, when the store could not record it (recordHookFailure)
	reminding sync.WaitGroup // reminders in flight (remind.go)
	remindSem chan struct{}
}

// New checks cfg and returns a Service. Call Run to start cancelling.
func New(cfg Config) (*Service, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Service{cfg: cfg, timers: cfg.Scheduler, log: cfg.Logger, remindSem: make(chan struct{}, remindSlots)}
	m, err := newMetrics(cfg.Registerer, s)
	if err != nil {
		return nil, err
	}
	s.metrics = m
	s.retain = m.retention
	rc := cfg.Outbox
	rc.Metrics = m.outbox
	if rc.Yield == nil {
		rc.Yield = s.bursting
	}
	s.relay = &outbox.Relay{Store: cfg.Store, Sinks: cfg.Sinks, Config: rc}
	wake := []interface{ Notify() }{s.relay}
	if cfg.Inventory != nil {
		tc := cfg.Tasks
		tc.Metrics = m.tasks
		if tc.Logger == nil {
			tc.Logger = cfg.Logger
		}
		s.dispatch = &inventory.Dispatcher{Store: cfg.Store, Client: cfg.Inventory, DispatcherConfig: tc}
		wake = append(wake, s.dispatch)
	}
	if cfg.OrderService != nil {
		cc := cfg.Commands
		cc.Metrics = m.commands
		if cc.Logger == nil {
			cc.Logger = cfg.Logger
		}
		cc.OnSettled = s.commandsSettled
		cc.AutoRefund = cfg.AutoRefund
		s.commands = &ordersvc.Dispatcher{Store: cfg.Store, Client: cfg.OrderService, DispatcherConfig: cc}
	}
	if cfg.AutoRefund {
		rc := cfg.Refunds
		rc.Metrics = m.refunds
		if rc.Logger == nil {
			rc.Logger = cfg.Logger
		}
		rc.OnSettled = s.refundsSettled
		s.refunds = &refund.Dispatcher{Store: cfg.Store, Refunder: cfg.Gateway.(payment.Refunder), Config: rc}
	}
	ns := notifying{Store: cfg.Store, wake: wake}
	if s.commands != nil {
		ns.commands = s.commands
	}
	if s.refunds != nil {
		ns.refunds = s.refunds
	}
	s.store = ns
	if cfg.PollStore {
		s.poll = newPoller(s, 0, cfg.PollMaxSleep, true, nil)
	}
	if cfg.Gateway != nil {
		s.checks = newChecker(s, cfg.Gateway)
	}
	return s, nil
}

// Registry is where the metrics live (Config.Registerer's Gatherer, or the
// registry the Service made).
func (s *Service) Registry() prometheus.Gatherer { return s.metrics.gatherer }

// Config returns the configuration the service runs with: New's, with every
// default filled in, so that a start-up log shows what is actually used.
func (s *Service) Config() Config { return s.cfg }

// Store returns the store the service runs on.
func (s *Service) Store() store.Store { return s.store }

// Run seeds the scheduler (unless it is durable; waiting for a store that does
// not answer yet, see seedRetrying), listens for the deadlines other
// instances commit (where the store tells them: listen.go), relays outbox
// events, runs the fallback sweep and retention (Config.Retention) and
// cancels due orders until ctx ends.
// When ctx ends it stops claiming timers, finishes the batch in hand and
// returns nil.
func (s *Service) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	if dl, ok := s.dueListener(); ok {
		// Listening first: an order committed between the seed and the
		// listen would be neither seeded nor heard.
		started := make(chan struct{})
		wg.Go(func() { s.listen(ctx, dl, started) })
		select {
		case <-started:
		case <-ctx.Done():
		}
	}
	if s.timers != nil {
		if sd, ok := s.timers.(timer.Seeder); ok {
			sd.SetSeed(s.seed) // the scheduler seeds itself when it finds its index empty
		} else if d, ok := s.timers.(timer.Durable); !ok || !d.Durable() {
			if err := s.seedRetrying(ctx); err != nil {
				wg.Wait()
				return nil // stopped while seeding
			}
		}
	}
	wg.Go(func() {
		if err := s.relay.Run(ctx); err != nil {
			s.relayStopped.Store(&err)
			s.log.Error("outbox relay stopped: no event reaches any sink until lapse restarts; /readyz answers not ready", "err", err)
		}
	})
	if s.dispatch != nil {
		wg.Go(func() {
			if err := s.dispatch.Run(ctx); err != nil {
				s.log.Error("stock task dispatcher stopped", "err", err)
			}
		})
	}
	if s.refunds != nil {
		wg.Go(func() {
			if err := s.refunds.Run(ctx); err != nil {
				s.log.Error("refund dispatcher stopped", "err", err)
			}
		})
		wg.Go(func() { s.metrics.refunds.RunStats(ctx, s.cfg.Store, 5*time.Second) })
	}
	if s.commands != nil {
		wg.Go(func() {
			if err := s.commands.Run(ctx); err != nil {
				s.log.Error("order-service command dispatcher stopped", "err", err)
			}
		})
	}
	if s.checks != nil {
		wg.Go(func() { s.checks.run(ctx) })
	}
	if s.retain != nil {
		wg.Go(func() { s.retain.run(ctx) })
	}
	if s.cfg.SweepInterval > 0 {
		sweep := newPoller(s, s.cfg.SweepLag, s.cfg.SweepInterval, false, func(n int) {
			s.metrics.sweepCaught.Add(float64(n))
			s.log.Warn("fallback sweep cancelled orders whose timers were lost", "orders", n)
		})
		wg.Go(func() { sweep.run(ctx) })
	}
	var err error
	if s.poll != nil {
		s.poll.run(ctx)
	} else {
		err = s.timers.Run(ctx, s.handleDue)
	}
	wg.Wait()
	s.reminding.Wait() // each bounded by remindTimeout
	if ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("lapse: scheduler stopped: %w", err)
}

// seedRetrying seeds until it succeeds or ctx ends (its only error). A store
// that does not answer at start — a database restarting along with lapse —
// delays the timers, it does not stop the service: the orders wait in the
// store, and a seed is an upsert, so starting it again loses nothing. Each
// failure is logged, with backoff from 100 ms to 5 s.
func (s *Service) seedRetrying(ctx context.Context) error {
	wait := 100 * time.Millisecond
	for {
		err := s.seed(ctx)
		if err == nil || ctx.Err() != nil {
			return ctx.Err()
		}
		s.log.Error("seeding timers from the store failed; retrying", "err", err, "retry_in", wait)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// seed schedules every pending order's timer, earliest first, so a
// scheduler that forgets everything on a crash starts from the database.
func (s *Service) seed(ctx context.Context) error {
	start := time.Now()
	var after store.Deadline
	n := 0
	for {
		page, err := s.store.PendingDeadlines(ctx, after, 1000)
		if err != nil {
			return fmt.Errorf("lapse: seed timers: %w", err)
		}
		if bs, ok := s.timers.(timer.BatchScheduler); ok {
			ts := make([]timer.Timer, len(page))
			for i, d := range page {
				ts[i] = timer.Timer{Key: d.OrderID, Due: d.CancelAfter}
			}
			if err := bs.ScheduleMany(ctx, ts); err != nil {
				return fmt.Errorf("lapse: seed %d timers: %w", len(ts), err)
			}
		} else {
			for _, d := range page {
				if err := s.timers.Schedule(ctx, d.OrderID, d.CancelAfter); err != nil {
					return fmt.Errorf("lapse: seed timer of %s: %w", d.OrderID, err)
				}
			}
		}
		n += len(page)
		if len(page) < 1000 {
			break
		}
		after = page[len(page)-1]
	}
	s.log.Info("timers seeded from the store", "pending_orders", n, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// schedule sets an order's cancel timer. The order is already committed, so a
// failure here loses no order: it is logged and counted, and the timer comes
// back from the store at the next start (and from the fallback sweep).
func (s *Service) schedule(ctx context.Context, id string, due time.Time) {
	if s.poll != nil {
		s.poll.nudge(due)
		return
	}
	if err := s.timers.Schedule(ctx, id, due); err != nil {
		s.metrics.scheduleErrors.Inc()
		s.log.Error("schedule cancel timer", "order_id", id, "due", due, "err", err)
	}
}

func (s *Service) unschedule(ctx context.Context, id string) {
	if s.timers == nil {
		return
	}
	if err := s.timers.Unschedule(ctx, id); err != nil {
		s.log.Warn("unschedule cancel timer (harmless: the store guards the cancel)", "order_id", id, "err", err)
	}
}

// Get returns one order.
func (s *Service) Get(ctx context.Context, id string) (order.Order, error) {
	return s.store.GetOrder(ctx, id)
}

// List returns a page of orders, newest first.
func (s *Service) List(ctx context.Context, p store.ListOrdersParams) (store.ListOrdersResult, error) {
	if p.Status != "" && !p.Status.Valid() {
		return store.ListOrdersResult{}, invalid("status", "%q is not one of PENDING, PAYING, PAID, CANCELLED", p.Status)
	}
	if p.Limit < 0 || p.Limit > 500 {
		return store.ListOrdersResult{}, invalid("limit", "must be between 1 and 500")
	}
	if p.Limit == 0 {
		p.Limit = 50
	}
	return s.store.ListOrders(ctx, p)
}

// SetStock sets a SKU's available quantity.
func (s *Service) SetStock(ctx context.Context, sku string, available int64) (store.SKU, error) {
	if err := validSKU("sku", sku); err != nil {
		return store.SKU{}, err
	}
	if available < 0 || available > MaxAvailable {
		return store.SKU{}, invalid("available", "must be between 0 and %d", int64(MaxAvailable))
	}
	if s.dispatch != nil {
		return store.SKU{}, ErrRemoteStock
	}
	return s.store.SetStock(ctx, sku, available)
}

// GetSKU returns a SKU's counters (ErrRemoteStock when the inventory
// service holds them).
func (s *Service) GetSKU(ctx context.Context, sku string) (store.SKU, error) {
	if s.dispatch != nil {
		return store.SKU{}, ErrRemoteStock
	}
	return s.store.GetSKU(ctx, sku)
}

// Audit checks the invariants over the whole store.
func (s *Service) Audit(ctx context.Context, p store.AuditParams) (store.AuditReport, error) {
	return s.store.Audit(ctx, p)
}
