package drain

import (
	"context"
	"sync"
	"time"
)

// The steps every dispatcher of claimed work shares — the order-service
// commands, the stock tasks, the refunds: send a claimed batch's items
// concurrently within the claim's lease, and, for an item whose send
// failed, decide when it goes again or that it is given up. What an item
// is, how it is sent and how its outcome is settled are the dispatcher's.

// Sending bounds how a claimed batch is sent.
type Sending struct {
	// Lease is the claim's: every send ends within 4/5 of it, measured from
	// before the claim, so that it ends before the lease does on the
	// store's clock too.
	Lease time.Duration
	// Timeout bounds one item's send.
	Timeout time.Duration
	// Concurrency bounds the sends in flight at once; 0: the whole batch.
	Concurrency int
}

// SendAll sends each of items with send, concurrently as s allows, and
// returns each one's answer and error, in items' order. start is from
// before the claim. A shutdown (ctx ending) lets the batch in hand finish
// rather than abandoning it: the sends keep their deadlines.
func SendAll[T, A any](ctx context.Context, s Sending, start time.Time, items []T, send func(context.Context, T) (A, error)) ([]A, []error) {
	sctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), start.Add(s.Lease*4/5))
	defer cancel()
	answers := make([]A, len(items))
	errs := make([]error, len(items))
	slots := s.Concurrency
	if slots <= 0 {
		slots = max(len(items), 1)
	}
	sem := make(chan struct{}, slots)
	var wg sync.WaitGroup
	for i, it := range items {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			one, cancel := context.WithTimeout(sctx, s.Timeout)
			defer cancel()
			answers[i], errs[i] = send(one, it)
		})
	}
	wg.Wait()
	return answers, errs
}

// Retry is when an item whose send failed goes again, and when it is given
// up (DEAD, for an operator).
type Retry struct {
	// MaxAttempts failures make an item DEAD; MaxAge too, counted from
	// when it was written or last retried by an operator.
	MaxAttempts int
	MaxAge      time.Duration
	// Base doubled per failure, up to Max, ±20%.
	Base, Max time.Duration
}

// After decides for an item that has now failed failures times (this one
// included), age after it was written or retried (on the store's clock:
// the claim's time minus the item's since): whether it is DEAD, and
// otherwise when it goes again.
func (r Retry) After(failures int, age time.Duration) (retryIn time.Duration, dead bool) {
	return Backoff(failures, r.Base, r.Max), failures >= r.MaxAttempts || age >= r.MaxAge
}

// Truncate cuts an error text kept on a row to n bytes, on a rune
// boundary.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }
