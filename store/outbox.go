package store

import (
	"context"
	"time"

	"github.com/lapsehq/lapse/order"
)

// Outbox holds the events transitions write, and each sink's progress
// through them. Any number of relays (one per sink per instance) share it:
// a relay claims a batch with a lease, publishes it, then settles it.
//
// Each sink has one delivery row per event, made when the event is fanned
// out to the sinks registered at that moment. A claim takes only the first
// pending delivery of each order (for that sink), so the events of one order
// go out in their order, one at a time, across instances and crashes: a
// lease that runs out makes the delivery claimable again (a duplicate is
// possible, a reorder is not). There is no "seq > last" cursor anywhere:
// seq order is not commit order.
type Outbox interface {
	// UnpublishedEvents returns up to limit events not yet published to
	// every sink, oldest first (tests and tools).
	UnpublishedEvents(ctx context.Context, limit int) ([]order.Event, error)
	// RegisterSinks records sink names, so events fanned out from now on get
	// a delivery row for each. Registering again is harmless.
	RegisterSinks(ctx context.Context, names []string) error
	// ClaimEvents fans new events out to the registered sinks, then leases up
	// to Limit of the sink's deliveries that are due, not dead, and first
	// pending of their order; lowest seq first.
	ClaimEvents(ctx context.Context, p ClaimEventsParams) ([]Delivery, error)
	// SettleEvents records what became of claimed deliveries. An outcome
	// whose Attempts no longer match the row (its lease ran out and another
	// relay claimed it) is ignored: that relay settles it.
	SettleEvents(ctx context.Context, sink string, outcomes []Outcome) error
	// ListEvents pages pending deliveries (with Dead, only dead ones).
	ListEvents(ctx context.Context, p ListEventsParams) ([]EventDelivery, error)
	// RetryEvents makes dead deliveries due again now (those of IDs, or with
	// AllDead every dead one; Sink narrows either) and returns how many.
	RetryEvents(ctx context.Context, p RetryEventsParams) (int64, error)
	// PurgeEvents deletes dead deliveries that died before Before (Sink
	// narrows) and returns how many.
	PurgeEvents(ctx context.Context, p PurgeEventsParams) (int64, error)
	// PruneOutbox deletes up to limit events published to every sink before
	// before, in one short transaction, and returns how many. Callers loop
	// while it returns limit.
	PruneOutbox(ctx context.Context, before time.Time, limit int) (int64, error)
	// ForgetSink unregisters a sink that no relay runs any more and deletes
	// its deliveries, pending and dead, so its events can be pruned; it
	// returns how many deliveries went. A relay still running it registers
	// it again (for new events only).
	ForgetSink(ctx context.Context, name string) (int64, error)
	// OutboxStats reports each registered sink's backlog (metrics).
	OutboxStats(ctx context.Context) (OutboxStats, error)
}

// ClaimEventsParams says what a relay claims.
type ClaimEventsParams struct {
	Sink  string
	Limit int
	// Lease is how long the claim holds the deliveries: past it they are
	// claimable again. The relay stops publishing a batch before its lease
	// ends.
	Lease time.Duration
	// FanOut is the most new events fanned out to the sinks first. Defaults
	// to 1,000.
	FanOut int
}

// Delivery is one event claimed for one sink.
type Delivery struct {
	order.Event
	Sink string
	// Attempts counts claims of this delivery, this one included; settling
	// names it, so a stale relay cannot settle another's claim.
	Attempts int
	// Refusals counts the sink's refusals so far.
	Refusals int
	// FirstRefused is when the sink first refused the event (zero if never).
	FirstRefused time.Time
	// ClaimedAt is the store's time of the claim: with FirstRefused, how long
	// the event has been refused, on the store's clock.
	ClaimedAt time.Time
}

// Outcome is what became of one claimed delivery.
type Outcome struct {
	Seq      int64
	Attempts int
	// Delivered: the sink confirmed it; the delivery row goes.
	Delivered bool
	// Otherwise the attempt failed: Error says why (stored, shown by
	// `lapse events list`), Refused says the destination answered no
	// (counted toward the sink's policy), Dead parks it, and RetryIn is when
	// it is due again.
	Error   string
	Refused bool
	Dead    bool
	RetryIn time.Duration
}

// ListEventsParams filters ListEvents.
type ListEventsParams struct {
	// Sink, when set, lists that sink's deliveries only.
	Sink string
	// Dead lists dead deliveries only.
	Dead bool
	// After is the cursor: list deliveries of events with seq > After (in
	// seq order). It pages a listing, it does not drive the relay.
	After int64
	// Limit defaults to 100.
	Limit int
}

// EventDelivery is one pending delivery, as `lapse events list` shows it.
type EventDelivery struct {
	order.Event
	Sink      string
	Dead      bool
	Attempts  int
	Refusals  int
	NextAt    time.Time
	LastError string
	// DeadAt is when it died (zero unless Dead).
	DeadAt time.Time
}

// RetryEventsParams selects dead deliveries to try again.
type RetryEventsParams struct {
	IDs     []string // event ids
	AllDead bool
	Sink    string
}

// PurgeEventsParams selects dead deliveries to delete.
type PurgeEventsParams struct {
	Before time.Time
	Sink   string
}

// OutboxStats is the outbox's backlog at Now (the store's clock).
type OutboxStats struct {
	Now time.Time
	// Unfanned counts events no sink has a delivery row for yet; Oldest
	// unfanned is the oldest one's created_at (zero if none).
	Unfanned       int64
	OldestUnfanned time.Time
	Sinks          []SinkStats
}

// SinkStats is one sink's backlog.
type SinkStats struct {
	Sink string
	// Pending counts deliveries not yet made and not dead.
	Pending int64
	// Dead counts dead deliveries; Blocked counts pending ones of orders
	// with a dead event before them (they wait behind it).
	Dead    int64
	Blocked int64
	// Oldest is the created_at of the oldest pending (not dead) event, zero
	// if none.
	Oldest time.Time
}
