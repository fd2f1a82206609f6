package core

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
)

// effects writes what a transition of os (items loaded) leaves besides the
// order rows: the ledger rows of move, the counters it moves, and one event
// of type typ per order (none when typ is "").
func (s *Store) effects(ctx context.Context, tx *Tx, now time.Time, move Move, typ string, os ...order.Order) error {
	if len(os) == 0 {
		return nil
	}
	e, err := NewEffects(now, move, typ, os...)
	if err != nil {
		return err
	}
	return writeEffects(ctx, tx, s.told(e))
}

// told is e as this store writes it: without the deadlines to tell when
// the store tells none (Config.TellDeadlines).
func (s *Store) told(e Effects) Effects {
	if !s.tellDue {
		e.Due = nil
	}
	return e
}

// writeEffects writes e now.
func writeEffects(ctx context.Context, tx *Tx, e Effects) error {
	if err := tx.WriteEffects(ctx, e); err != nil {
		return fmt.Errorf("write %s effects (stock %s): %w", e.Type, cmpOr(string(e.Move), "unchanged"), err)
	}
	return nil
}

// effectsAtCommit is effects for a transaction's last write: a driver that
// can (EffectsCommitter) sends them with the COMMIT, in one round trip; any
// other writes them now. The caller runs no statement after it. why, when
// set, goes into each event as cancel_detail. held says the transaction ran
// a hook for os and it held: their hook failure records go with it.
func (s *Store) effectsAtCommit(ctx context.Context, tx *Tx, now time.Time, move Move, typ, why string, held bool, os ...order.Order) error {
	if len(os) == 0 {
		return nil
	}
	e, err := NewEffects(now, move, typ, os...)
	if err != nil {
		return err
	}
	if held {
		e.HooksHeld = orderIDs(os)
	}
	if why != "" {
		detail, _ := json.Marshal(why)
		for i, ev := range e.Events {
			// The payload is a JSON object: one more member before its end.
			p := append(ev.Payload[:len(ev.Payload)-1:len(ev.Payload)-1], `,"cancel_detail":`...)
			e.Events[i].Payload = append(append(p, detail...), '}')
		}
	}
	if _, ok := tx.ExecutorTx.(EffectsCommitter); !ok {
		return writeEffects(ctx, tx, e)
	}
	tx.atCommit = &e
	return nil
}

// refundEvent writes order.refund_required for o: the order as the API shows
// it, and the payment to give back ("refund": its payment_id and amount).
func (s *Store) refundEvent(ctx context.Context, tx *Tx, now time.Time, o order.Order, p store.PaymentParams) error {
	base, err := json.Marshal(o)
	if err != nil {
		return fmt.Errorf("encode %s event: %w", order.EventRefundRequired, err)
	}
	var payload map[string]json.RawMessage
	if err := json.Unmarshal(base, &payload); err != nil {
		return fmt.Errorf("encode %s event: %w", order.EventRefundRequired, err)
	}
	refund, err := json.Marshal(struct {
		PaymentID   string `json:"payment_id"`
		AmountCents int64  `json:"amount_cents"`
		Currency    string `json:"currency"`
	}{p.PaymentID, p.AmountCents, cmpOr(p.Currency, o.Currency)})
	if err != nil {
		return fmt.Errorf("encode %s event: %w", order.EventRefundRequired, err)
	}
	payload["refund"] = refund
	payload["schema_version"] = json.RawMessage(strconv.Itoa(order.EventSchemaVersion))
	b, err := json.Marshal(payload)
	if err != nil {
		return fmt.Errorf("encode %s event: %w", order.EventRefundRequired, err)
	}
	e := Effects{Now: now, Type: order.EventRefundRequired, Events: []NewEvent{{ID: uuid.Must(uuid.NewV7()).String(), OrderID: o.ID, Payload: b}}}
	if err := tx.WriteEffects(ctx, e); err != nil {
		return fmt.Errorf("write %s effects: %w", order.EventRefundRequired, err)
	}
	return nil
}

// NewEffects describes the effects of a transition of os: the ledger and
// counters of move for orders whose stock lapse holds, a stock task for
// those whose stock a remote inventory holds, one event of type typ per
// order, its payload the order as the API shows it, and for a create or an
// extend the deadlines it sets (Effects.Due).
func NewEffects(now time.Time, move Move, typ string, os ...order.Order) (Effects, error) {
	e := Effects{Now: now, Move: move, Type: typ}
	local := os
	if slices.ContainsFunc(os, order.Order.RemoteStock) {
		local = nil
		for _, o := range os {
			if !o.RemoteStock() {
				local = append(local, o)
				continue
			}
			if t, ok, err := newTask(move, o); err != nil {
				return Effects{}, err
			} else if ok {
				e.Tasks = append(e.Tasks, t)
			}
		}
		if len(local) == 0 {
			e.Move = MoveNone
		}
	}
	if e.Move != MoveNone {
		e.IDs = orderIDs(local)
	}
	if e.Move == MoveRelease || e.Move == MoveCommit {
		e.SKUs, e.Qtys = PerSKU(local)
	}
	if typ == order.EventCreated || typ == order.EventExtended {
		e.Due = make([]store.Deadline, len(os))
		for i, o := range os {
			e.Due[i] = store.Deadline{OrderID: o.ID, CancelAfter: o.CancelAfter}
		}
	}
	if typ != "" {
		e.Events = make([]NewEvent, len(os))
		for i, o := range os {
			payload, err := EventPayload(o)
			if err != nil {
				return Effects{}, fmt.Errorf("encode %s event: %w", typ, err)
			}
			e.Events[i] = NewEvent{ID: uuid.Must(uuid.NewV7()).String(), OrderID: o.ID, Payload: payload}
		}
	}
	return e, nil
}

// taskActions is the stock task a movement of remote stock needs. A reserve
// the caller made at the inventory needs none.
var taskActions = map[Move]order.TaskAction{MoveRelease: order.TaskRelease, MoveCommit: order.TaskConfirm}

// newTask is the stock task that move of o's remote stock writes, if any.
func newTask(move Move, o order.Order) (NewTask, bool, error) {
	action, ok := taskActions[move]
	if !ok {
		return NewTask{}, false, nil
	}
	items, err := json.Marshal(o.Items)
	if err != nil {
		return NewTask{}, false, fmt.Errorf("encode items of %s task for %s: %w", action, o.ID, err)
	}
	return NewTask{ID: uuid.Must(uuid.NewV7()).String(), OrderID: o.ID, Action: action, ReservationID: o.ReservationID, Items: items}, true, nil
}

// EventPayload is the payload of an event about o: schema_version first,
// then the order as the API shows it (docs/events).
func EventPayload(o order.Order) ([]byte, error) {
	b, err := json.Marshal(o)
	if err != nil || len(b) < 2 || b[0] != '{' {
		return b, err
	}
	head := `{"schema_version":` + strconv.Itoa(order.EventSchemaVersion)
	if b[1] != '}' {
		head += ","
	}
	return append([]byte(head), b[1:]...), nil
}

// PerSKU sums the items of os by SKU, SKUs in byte order (the lock order).
func PerSKU(os []order.Order) ([]string, []int64) {
	sum := map[string]int64{}
	for _, o := range os {
		for _, it := range o.Items {
			sum[it.SKU] += it.Qty
		}
	}
	skus := slices.Sorted(maps.Keys(sum))
	qtys := make([]int64, len(skus))
	for i, sku := range skus {
		qtys[i] = sum[sku]
	}
	return skus, qtys
}

func orderIDs(os []order.Order) []string {
	ids := make([]string, len(os))
	for i, o := range os {
		ids[i] = o.ID
	}
	return ids
}

// unique is ids without repeats, first occurrences in order: a duplicate id
// in a batch is reported once.
func unique(ids []string) []string {
	seen := make(map[string]bool, len(ids))
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// notIn is ids without those of os, in the order of ids.
func notIn(ids []string, os []order.Order) []string {
	if len(ids) == 0 {
		return nil
	}
	done := make(map[string]bool, len(os))
	for _, o := range os {
		done[o.ID] = true
	}
	var rest []string
	for _, id := range ids {
		if !done[id] {
			rest = append(rest, id)
		}
	}
	return rest
}

func cancelledRows(os []order.Order) []store.Cancelled {
	var out []store.Cancelled
	for _, o := range os {
		out = append(out, store.Cancelled{
			ID: o.ID, CancelAfter: o.CancelAfter, CancelledAt: o.CancelledAt, PaymentAttempts: o.PaymentAttempts,
		})
	}
	return out
}

// skippedRows says why each of ids, left by a batch, was left: its row as
// found in others, or Missing.
func skippedRows(ids []string, others []order.Order) []store.Skipped {
	found := make(map[string]order.Order, len(others))
	for _, o := range others {
		found[o.ID] = o
	}
	out := make([]store.Skipped, 0, len(ids))
	for _, id := range ids {
		o, ok := found[id]
		out = append(out, store.Skipped{
			ID: id, Status: o.Status, CancelAfter: o.CancelAfter, PaymentAttempts: o.PaymentAttempts, Missing: !ok,
		})
	}
	return out
}

func cmpOr(s, dflt string) string {
	if s == "" {
		return dflt
	}
	return s
}
