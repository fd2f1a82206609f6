package bench

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/ordersvc"
	"github.com/lapsehq/lapse/store"
)

// OrderService puts a run in order-service mode (lapse bench
// --order-service, docs/order-service.md): the service runs with an order
// service as its Config.OrderService, each timeout moves the order to
// CANCELLING and writes its cancel command, the dispatcher sends it, and the
// order service's answer decides the order. The service holds no stock then.
//
// The run waits for every order it did not pay to have its command
// answered, then reads each order and its command from Store, and reports
// the command lag — cancel_after to the answer recorded (the command's
// done_at), both on the store's clock — and whether each order ended as its
// answer decides.
type OrderService struct {
	Store store.Store
}

// CommandsResult is what the order service answered in a run, as the store
// recorded it (Config.OrderService).
type CommandsResult struct {
	// Answered counts the run's commands DONE with a final answer.
	Answered int `json:"answered"`
	// Results counts them by answer (cancelled, already_paid, …).
	Results map[string]int `json:"results"`
	// LagMS is from each command's cancel_after to its answer recorded
	// (done_at): the timer, the claim, the round trip to the order
	// service, its signature check and its answer, and the settle's commit.
	LagMS Percentiles `json:"lag_ms"`
	// PerS is Answered over the time from the first answer recorded to the
	// last.
	PerS float64 `json:"per_s"`
	// Resent counts commands sent more than once (answered paying, or not
	// answered in time).
	Resent int `json:"resent"`
	// Unanswered counts the orders the run did not pay whose command was
	// not DONE at the end (missing, PENDING or DEAD); Dead those DEAD.
	Unanswered int `json:"unanswered"`
	Dead       int `json:"dead"`
	// EndedPaid counts commands ended DONE without an answer because lapse
	// recorded their order PAID before they went out again (answered
	// paying, then the run's payment landed): the order was paid, not left
	// unanswered.
	EndedPaid int `json:"ended_paid"`
	// Mismatched counts orders whose status is not what their command's
	// answer decides (cancelled and already_cancelled: CANCELLED;
	// already_paid: PAID): must be 0.
	Mismatched int `json:"mismatched"`
	// OwedBack counts orders answered cancelled that lapse had recorded
	// PAID (the run's payment reached lapse while the command was out, and
	// the receiver, which answers from the command's attempts, cancelled):
	// left PAID with the payment owed back (refund_required), not a
	// mismatch.
	OwedBack int `json:"owed_back"`
	// HandoffsHeld and HandoffsBusy count the cancel batches whose
	// commands the dispatcher took as they were written (sent as the batch
	// committed) and those it was too busy to take (sent by a later claim).
	HandoffsHeld int `json:"handoffs_held"`
	HandoffsBusy int `json:"handoffs_busy"`
	// Commands counts every command row of the run's orders (one per
	// order and deadline).
	Commands int `json:"commands"`
}

// readCommands reads each order of the run and its commands, with a few
// reads in flight at once.
func (r *run) readCommands(ctx context.Context) (CommandsResult, error) {
	st := r.cfg.OrderService.Store
	n := int(r.created.Load())
	type one struct {
		o  order.Order
		cs []order.Command
	}
	got := make([]one, n)
	next := atomic.Int64{}
	var (
		wg      sync.WaitGroup
		errOnce sync.Once
		firstE  error
	)
	for range 8 {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				id := fmt.Sprintf("%s%07d", r.prefix, i)
				err := r.retry(ctx, func() (err error) {
					if got[i].o, err = st.GetOrder(ctx, id); err != nil {
						return err
					}
					got[i].cs, err = st.ListCommands(ctx, store.ListTasksParams{OrderID: id, Limit: 10})
					return err
				})
				if err != nil {
					errOnce.Do(func() { firstE = fmt.Errorf("bench: read order %s and its commands: %w", id, err) })
					return
				}
			}
		})
	}
	wg.Wait()
	if firstE != nil {
		return CommandsResult{}, firstE
	}
	res := CommandsResult{Results: map[string]int{}}
	var lags []float64
	var first, last time.Time
	for _, g := range got {
		res.Commands += len(g.cs)
		if len(g.cs) == 0 {
			if g.o.Status != order.Paid {
				res.Unanswered++ // due, or past due, and never commanded
			}
			continue // paid by the run before its deadline
		}
		// The command of the order's deadline (a run never moves one).
		c := g.cs[0]
		for _, x := range g.cs[1:] {
			if x.CancelAfter.After(c.CancelAfter) {
				c = x
			}
		}
		if c.Attempts > 1 {
			res.Resent++
		}
		switch {
		case c.Status == order.TaskDone && c.Result == "" && g.o.Status == order.Paid:
			res.EndedPaid++
			continue
		case c.Status == order.TaskDead:
			res.Dead++
			res.Unanswered++
			continue
		case c.Status != order.TaskDone || !ordersvc.Result(c.Result).Final():
			res.Unanswered++
			continue
		}
		res.Answered++
		res.Results[c.Result]++
		lags = append(lags, float64(c.DoneAt.Sub(c.CancelAfter).Microseconds())/1000)
		if first.IsZero() || c.DoneAt.Before(first) {
			first = c.DoneAt
		}
		last = later(last, c.DoneAt)
		want := order.Cancelled
		if ordersvc.Result(c.Result) == ordersvc.AlreadyPaid {
			want = order.Paid
		}
		switch {
		case g.o.Status == want:
		case want == order.Cancelled && g.o.Status == order.Paid && owesBack(g.o):
			res.OwedBack++
		default:
			res.Mismatched++
		}
	}
	res.LagMS = percentiles(lags)
	if d := last.Sub(first); d > 0 {
		res.PerS = float64(res.Answered) / d.Seconds()
	}
	return res, nil
}

// waitCommands waits until the order service has answered every order the
// run did not pay, or Wait has passed since the last deadline, then reads
// the record: res.Commands, and the orders cancelled, for the lateness.
//
// The service's metrics say when to look: once they count as many final
// answers as orders the run did not pay. They are not the proof: an order
// the run paid while its command was out (the payment in flight at the
// deadline) has a final answer too, so the count can be reached with an
// unpaid order still unanswered. The store's record is read then, and read
// again, while any unpaid order is unanswered and Wait has not passed.
func (r *run) waitCommands(ctx context.Context, res *Result) ([]order.Order, error) {
	want := r.created.Load() - r.paid.Load()
	r.mu.Lock()
	lastDue := r.lastDue
	r.mu.Unlock()
	deadline := later(lastDue, time.Now()).Add(r.cfg.Wait)
	for {
		c, err := r.t.counts(ctx)
		if err != nil {
			return nil, err
		}
		late := time.Now().After(deadline)
		if int64(c.minus(r.base).commandsFinal) >= want || late {
			cr, err := r.readCommands(ctx)
			if err != nil {
				return nil, err
			}
			if cr.Unanswered == cr.Dead || late {
				d := c.minus(r.base)
				cr.HandoffsHeld, cr.HandoffsBusy = int(d.handoffsHeld), int(d.handoffsBusy)
				res.Commands = &cr
				break
			}
		}
		if !sleepUntil(ctx, time.Now().Add(20*time.Millisecond)) {
			return nil, ctx.Err()
		}
	}
	return r.listCancelledRetrying(ctx)
}

// ReceiverConfig is a reference order service for a run: a Go order
// service's ordersvc.Receiver, signature check and memory deduper included,
// whose orders live in memory. It knows the payments lapse knows (the
// command's attempts): an order with a payment that succeeded is
// already_paid, one with a payment open is paying. Otherwise it answers
// cancelled, except for the fractions below, chosen by a hash of the order
// id (so every delivery of a command, and every run, answers an order
// alike).
type ReceiverConfig struct {
	// Secrets verify the commands (lapse's --order-service-secret).
	Secrets []string
	// AlreadyPaidShare is the fraction of orders answered already_paid: the
	// order service saw the payment lapse did not.
	AlreadyPaidShare float64
	// PayingShare is the fraction answered paying (retry in 1 s) on their
	// first delivery, then cancelled: a payment that was in flight, and
	// failed.
	PayingShare float64
}

// Receiver is the reference order service of a run.
type Receiver struct {
	http.Handler
	cfg      ReceiverConfig
	mu       sync.Mutex
	asked    map[string]bool // commands answered paying once
	answered atomic.Int64
}

// NewReceiver returns the reference order service of cfg.
func NewReceiver(cfg ReceiverConfig) (*Receiver, error) {
	switch {
	case !(cfg.AlreadyPaidShare >= 0 && cfg.AlreadyPaidShare <= 1):
		return nil, configError("AlreadyPaidShare", "%v: want a fraction from 0 to 1", cfg.AlreadyPaidShare)
	case !(cfg.PayingShare >= 0 && cfg.PayingShare <= 1):
		return nil, configError("PayingShare", "%v: want a fraction from 0 to 1", cfg.PayingShare)
	case cfg.AlreadyPaidShare+cfg.PayingShare > 1:
		return nil, configError("PayingShare", "%v with AlreadyPaidShare %v: the two fractions add up to more than 1", cfg.PayingShare, cfg.AlreadyPaidShare)
	}
	rc := &Receiver{cfg: cfg, asked: map[string]bool{}}
	h, err := ordersvc.NewReceiver(ordersvc.ReceiverConfig{Secrets: cfg.Secrets, Apply: rc.apply, Dedupe: ordersvc.NewMemoryDeduper()})
	if err != nil {
		return nil, err
	}
	rc.Handler = h
	return rc, nil
}

// Answered counts the final answers the receiver computed (deliveries the
// deduper answered not included).
func (rc *Receiver) Answered() int64 { return rc.answered.Load() }

func (rc *Receiver) apply(_ context.Context, c ordersvc.Command, commandID string) (ordersvc.Answer, error) {
	if c.OrderID == "" {
		return ordersvc.Answer{}, errors.New("bench: a command without an order id")
	}
	for _, at := range c.Attempts {
		switch order.PaymentStatus(at.Status) {
		case order.PaymentSucceeded:
			rc.answered.Add(1)
			return ordersvc.Answer{Result: ordersvc.AlreadyPaid}, nil
		case order.PaymentPending, order.PaymentSuperseded:
			return ordersvc.Answer{Result: ordersvc.Paying, RetryAfterSeconds: 1}, nil
		}
	}
	h := fnv.New64a()
	h.Write([]byte(c.OrderID))
	u := unit(int64(h.Sum64()), 7)
	switch {
	case u < rc.cfg.AlreadyPaidShare:
		rc.answered.Add(1)
		return ordersvc.Answer{Result: ordersvc.AlreadyPaid}, nil
	case u < rc.cfg.AlreadyPaidShare+rc.cfg.PayingShare:
		rc.mu.Lock()
		again := rc.asked[commandID]
		rc.asked[commandID] = true
		rc.mu.Unlock()
		if !again {
			return ordersvc.Answer{Result: ordersvc.Paying, RetryAfterSeconds: 1}, nil
		}
	}
	rc.answered.Add(1)
	return ordersvc.Answer{Result: ordersvc.Cancelled}, nil
}

// owesBack says whether o's paying attempt owes its money back (or gave it
// back since): REFUND_REQUIRED or REFUNDED.
func owesBack(o order.Order) bool {
	for _, p := range o.Payments {
		if p.PaymentID == o.PaymentID {
			return p.Status == order.PaymentRefundRequired || p.Status == order.PaymentRefunded
		}
	}
	return false
}
