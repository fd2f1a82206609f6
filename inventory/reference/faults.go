package reference

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/lapsehq/lapse/inventory"
)

// Faults are the switches of a Faulty applier, as GET and POST /faults
// read and write them.
type Faults struct {
	// Fail answers every command with a failure of the inventory itself,
	// without applying it: HTTP 503, AMQP a requeue. lapse must retry.
	Fail bool `json:"fail"`
	// DelayMS holds every command this long before it is applied (or
	// failed, or rejected): a slow inventory, or one slower than lapse's
	// timeout.
	DelayMS int64 `json:"delay_ms"`
	// DropAnswers applies every command, then gives no answer: HTTP closes
	// the connection without a response, AMQP publishes nothing. lapse
	// must send again and be told ALREADY_DONE.
	DropAnswers bool `json:"drop_answers"`
	// Reject answers every command REJECTED (reason ReasonFault) without
	// applying it: lapse parks the task as DEAD for an operator.
	Reject bool `json:"reject"`
}

// ReasonFault is the reason of the answers the Reject switch makes.
const ReasonFault = "rejected_by_fault_switch"

// ErrFail is the error a Faulty applier returns while its Fail switch is on.
var ErrFail = errors.New("reference: failing on purpose (fault switch fail)")

// Faulty wraps an Applier with fault switches, so that one switch works
// the same on every transport. It is safe for concurrent use.
type Faulty struct {
	next inventory.Applier

	mu sync.Mutex
	f  Faults
}

// NewFaulty returns next behind the switches f.
func NewFaulty(next inventory.Applier, f Faults) *Faulty {
	return &Faulty{next: next, f: f}
}

// Faults returns the current switches.
func (a *Faulty) Faults() Faults {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.f
}

// SetFaults replaces the switches; commands already past them are not
// affected.
func (a *Faulty) SetFaults(f Faults) {
	a.mu.Lock()
	a.f = f
	a.mu.Unlock()
}

// update changes the switches under the lock and returns them.
func (a *Faulty) update(change func(*Faults)) Faults {
	a.mu.Lock()
	defer a.mu.Unlock()
	change(&a.f)
	return a.f
}

// Apply implements inventory.Applier: the delay, then a failure or a
// rejection without applying, or the command applied and its answer
// withheld (inventory.ErrWithhold), or the command applied.
func (a *Faulty) Apply(ctx context.Context, c inventory.Command) (inventory.Answer, error) {
	f := a.Faults()
	if f.DelayMS > 0 {
		t := time.NewTimer(time.Duration(f.DelayMS) * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return inventory.Answer{}, ctx.Err()
		}
	}
	switch {
	case f.Fail:
		return inventory.Answer{}, ErrFail
	case f.Reject:
		return inventory.Answer{TaskID: c.TaskID, Result: inventory.Rejected, Reason: ReasonFault}, nil
	}
	ans, err := a.next.Apply(ctx, c)
	if err == nil && f.DropAnswers {
		return ans, inventory.ErrWithhold
	}
	return ans, err
}
