package storetest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse/internal/clock"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/store"
)

// testHookFailures: a failing hook's record counts its attempts and keeps
// its first failure, the error cut to MaxHookError; until its next_at the
// claim of due orders leaves the order alone and the next deadline a poller
// sleeps until is that next_at (the two agree); the dashboard counts it and
// the audit warns of it instead of calling the order lost; once the order is
// cancelled the record is no longer listed.
func testHookFailures(t *testing.T, newStore Factory) {
	clk := clock.NewFake(t0)
	s := newStore(t, clk)
	ctx := context.Background()
	Stock(t, s, 10, "a")
	Create(t, s, "f", "a")
	clk.Advance(time.Second)
	g := Create(t, s, "g", "a")
	clk.Set(g.CancelAfter.Add(time.Second)) // both due

	backoff := func(n int) time.Duration { return time.Duration(n) * 10 * time.Second }
	failed := clk.Now()
	first, err := s.RecordHookFailure(ctx, &store.HookError{OrderID: "f", Event: store.HookCancelled, Err: errors.New("the shop said no")}, backoff)
	if err != nil {
		t.Fatal(err)
	}
	if first.Attempts != 1 || !first.FirstFailedAt.Equal(failed) || !first.NextAt.Equal(failed.Add(10*time.Second)) || first.LastError != "the shop said no" {
		t.Fatalf("first record %+v, want 1 attempt at %v, next at +10s", first, failed)
	}
	clk.Advance(time.Second)
	long := strings.Repeat("é", store.MaxHookError) // 2 bytes each: cut on a character
	again, err := s.RecordHookFailure(ctx, &store.HookError{OrderID: "f", Event: store.HookCancelled, Err: errors.New(long)}, backoff)
	if err != nil {
		t.Fatal(err)
	}
	if again.Attempts != 2 || !again.FirstFailedAt.Equal(failed) || !again.LastFailedAt.Equal(clk.Now()) ||
		!again.NextAt.Equal(clk.Now().Add(20*time.Second)) || len(again.LastError) > store.MaxHookError || !strings.HasPrefix(long, again.LastError) {
		t.Fatalf("second record %+v (error of %d bytes), want 2 attempts since %v, next at now+20s, the error cut", again, len(again.LastError), failed)
	}
	listed, err := s.ListHookFailures(ctx, 10)
	if err != nil || len(listed) != 1 || listed[0] != again {
		t.Fatalf("listed %+v %v, want %+v", listed, err, again)
	}
	ov, err := s.Overview(ctx, store.OverviewParams{})
	if err != nil || ov.HookFailing != 1 {
		t.Fatalf("overview counts %d failing hooks (%v), want 1", ov.HookFailing, err)
	}
	rep, err := s.Audit(ctx, store.AuditParams{AllowedLag: 0})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range rep.Checks {
		switch c.Name {
		case "hook_failing":
			if !c.Warning || c.Count != 1 || !strings.Contains(c.Examples[0], "order f") || !strings.Contains(c.Examples[0], "2 attempts") {
				t.Fatalf("audit hook_failing %+v, want a warning naming order f and its 2 attempts", c)
			}
		case "pending_past_deadline":
			if c.Count != 1 || !strings.Contains(c.Examples[0], "order g") {
				t.Fatalf("audit pending_past_deadline %+v, want g alone (f's hook is failing, not its timer lost)", c)
			}
		}
	}

	next := func() time.Time {
		t.Helper()
		at, ok, err := s.NextDeadline(ctx, false)
		if err != nil || !ok {
			t.Fatalf("next deadline: %v %v", ok, err)
		}
		return at
	}
	if got := next(); !got.Equal(g.CancelAfter) {
		t.Fatalf("next deadline %v, want g's %v (f waits for its hook's retry)", got, g.CancelAfter)
	}
	res, err := s.CancelDue(ctx, store.CancelDueParams{Claim: 10})
	if err != nil || len(res.Cancelled) != 1 || res.Cancelled[0].ID != "g" {
		t.Fatalf("claim before f's retry: %+v %v, want g alone", res, err)
	}
	if got := next(); !got.Equal(again.NextAt) {
		t.Fatalf("next deadline %v, want f's retry at %v", got, again.NextAt)
	}
	clk.Set(again.NextAt)
	res, err = s.CancelDue(ctx, store.CancelDueParams{Claim: 10})
	if err != nil || len(res.Cancelled) != 1 || res.Cancelled[0].ID != "f" {
		t.Fatalf("claim at f's retry: %+v %v, want f", res, err)
	}
	if _, ok, err := s.NextDeadline(ctx, false); err != nil || ok {
		t.Fatalf("next deadline with nothing pending: %v %v", ok, err)
	}
	if listed, err := s.ListHookFailures(ctx, 10); err != nil || len(listed) != 0 {
		t.Fatalf("records listed once f is cancelled: %+v %v", listed, err)
	}
	if get(t, s, "f").Status != order.Cancelled {
		t.Fatal("f not cancelled")
	}
	AuditOK(t, s)
}
