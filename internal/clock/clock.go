// Package clock is the single source of "now" for stores and the service.
//
// Principle 5 of the design: one clock decides. In-process stores take their
// time from a Clock so tests can move it without sleeping; waiting itself uses
// real timers (tests of time-driven loops use testing/synctest instead).
package clock

import (
	"sync"
	"time"
)

// Clock tells the time.
type Clock interface {
	Now() time.Time
}

// Real is the wall clock, in UTC, truncated to milliseconds — the precision
// every store keeps.
type Real struct{}

// Now returns the current UTC time truncated to milliseconds.
func (Real) Now() time.Time { return time.Now().UTC().Truncate(time.Millisecond) }

// Fake is a clock that only moves when told to. Safe for concurrent use.
type Fake struct {
	mu  sync.Mutex
	now time.Time
}

// NewFake returns a Fake set to t.
func NewFake(t time.Time) *Fake { return &Fake{now: t.UTC().Truncate(time.Millisecond)} }

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Advance moves the clock forward by d.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d).Truncate(time.Millisecond)
	f.mu.Unlock()
}

// Set moves the clock to t.
func (f *Fake) Set(t time.Time) {
	f.mu.Lock()
	f.now = t.UTC().Truncate(time.Millisecond)
	f.mu.Unlock()
}
