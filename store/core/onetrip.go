package core

// A create in one round trip (CreateExecutor, PostgreSQL).
//
// createIn's steps — read the clock, take the idempotency key, insert the
// order, reserve each SKU, write the ledger and the event — cost a round
// trip each, and a shop's checkout pays for every one of them inside its own
// transaction (docs/embedding.md, Cost). A driver that can send them as one
// statement writes the create as if every check passed and reports what it
// found; the checks themselves stay here, decided by Admit — the function
// that already gives a group's creates the answers lone creates would get —
// from that report. A create Admit refuses is undone: in lapse's own
// transaction by its rollback, in a caller's by a savepoint the driver sent
// in the same round trip (the caller's transaction goes on, holding nothing
// of the create). Only a refusal pays one more round trip.
//
// The clock: the statement reads the database's clock itself when the
// transaction has none yet, and writes every time as that now plus an
// offset computed here. The offsets come from NewOrder at any millisecond,
// so the order written is exactly NewOrder(now). The event's payload, the
// order as the API shows it, is encoded here at that millisecond and cut
// around its three times, which the statement writes in order.TimeFormat.
//
// The trade-off: what the driver's statement holds besides its SQL is the
// order of the steps — the lock order createIn's statements take one by
// one: key, order, SKU rows in byte order — and the rendering of three
// times in order.TimeFormat. No decision is in it: it never refuses, it
// reports. TestCreateOrderTxWritesWhatItAnswers (store/postgres) holds its
// rows and payload to createIn's byte for byte, and the conformance suite
// runs it in callers' transactions, in groups of one and alone.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
)

// errReserveMismatch is a reservation that changed fewer SKU rows than the
// create holds, although Admit found the units: it should not happen.
var errReserveMismatch = errors.New("store: the reservation changed fewer SKU rows than the order holds")

// createSent is createIn on a driver that sends a whole create at once.
func (s *Store) createSent(ctx context.Context, tx *Tx, ce CreateExecutor, p store.CreateOrderParams) (store.CreateOrderResult, error) {
	// The transaction's now if it has one without asking the database
	// (read already, or the configured clock); zero: the statement reads it.
	now := tx.now
	if now.IsZero() && s.clock != nil {
		var err error
		if now, err = tx.Now(ctx); err != nil {
			return store.CreateOrderResult{}, err
		}
	}
	a, err := createArgs(p, now, tx.guard)
	a.Tell = s.tellDue
	if err != nil {
		return store.CreateOrderResult{}, err
	}
	a.Group = tx.group
	st, err := ce.SendCreate(ctx, a)
	if err != nil {
		return store.CreateOrderResult{}, undo(ctx, ce, a, fmt.Errorf("create in one round trip: %w", err))
	}
	tx.now = st.Now
	vs, _ := Admit([]store.CreateOrderParams{p}, st.GroupState)
	switch v := vs[0]; {
	case v.Alone:
		// Another request holds the key: nothing was written but the
		// (empty) savepoint. Its order is the answer.
		return s.replayKey(ctx, tx, p)
	case v.Err != nil:
		return store.CreateOrderResult{}, undo(ctx, ce, a, v.Err)
	case a.Reserve && st.Reserved != len(p.Items):
		return store.CreateOrderResult{}, undo(ctx, ce, a, fmt.Errorf("%w: %d of %d", errReserveMismatch, st.Reserved, len(p.Items)))
	}
	return store.CreateOrderResult{Order: p.NewOrder(st.Now)}, nil
}

// undo has a guarded create undone and returns err (with the undo's own
// failure, if any). An unguarded one is left to the rollback of lapse's own
// transaction, which follows every error.
func undo(ctx context.Context, ce CreateExecutor, a CreateArgs, err error) error {
	if !a.Guard {
		return err
	}
	if uerr := ce.UndoCreate(context.WithoutCancel(ctx)); uerr != nil {
		return errors.Join(err, fmt.Errorf("roll back to the create's savepoint: %w", uerr))
	}
	return err
}

// createBase is the millisecond the offsets and the payload of a create are
// computed at when the statement reads the clock: any will do.
var createBase = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// createArgs describes the create of p (items in SKU order) for SendCreate:
// the order at now (or, when zero, at createBase, every time then moved to
// the statement's now), the effects NewEffects gives it, and its event's
// payload cut around its times.
func createArgs(p store.CreateOrderParams, now time.Time, guard bool) (CreateArgs, error) {
	base := now
	if base.IsZero() {
		base = createBase
	}
	o := p.NewOrder(base)
	e, err := NewEffects(base, MoveReserve, order.EventCreated, o)
	if err != nil {
		return CreateArgs{}, err
	}
	parts, err := payloadParts(e.Events[0].Payload, o)
	if err != nil {
		return CreateArgs{}, fmt.Errorf("encode %s event: %w", e.Type, err)
	}
	ev := e.Events[0]
	ev.Payload = nil
	return CreateArgs{
		Now: now, Guard: guard,
		Key:   Key{Key: p.IdempotencyKey, RequestHash: p.RequestHash, OrderID: p.ID},
		Order: o, ExpiresIn: o.ExpiresAt.Sub(base), CancelIn: o.CancelAfter.Sub(base),
		Reserve: e.Move == MoveReserve,
		Event:   ev, EventType: e.Type, PayloadParts: parts,
	}, nil
}

// payloadParts cuts payload, the JSON of o, around the values of its
// created_at, expires_at and cancel_after, in that order (order.Order's).
// Each key is found exactly once: a JSON string escapes its quotes, so
// `"created_at":"` can only be the key.
func payloadParts(payload []byte, o order.Order) ([4]string, error) {
	var parts [4]string
	rest := payload
	for i, f := range []struct {
		key string
		at  time.Time
	}{{"created_at", o.CreatedAt}, {"expires_at", o.ExpiresAt}, {"cancel_after", o.CancelAfter}} {
		key := []byte(`"` + f.key + `":"`)
		value := order.FormatTime(f.at)
		j := bytes.Index(rest, key)
		if bytes.Count(payload, key) != 1 || j < 0 || !bytes.HasPrefix(rest[j+len(key):], []byte(value+`"`)) {
			return parts, fmt.Errorf("the payload does not hold %s %s once", f.key, value)
		}
		parts[i] = string(rest[:j+len(key)])
		rest = rest[j+len(key)+len(value):]
	}
	parts[3] = string(rest)
	return parts, nil
}
