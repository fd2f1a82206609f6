package main

import (
	"strings"
	"testing"
	"time"
)

func TestWorkloadSpreadsDueTimesEvenly(t *testing.T) {
	t.Parallel()
	w := workload{n: 4, over: 4 * time.Second, lead: 10 * time.Second}
	for i, want := range []time.Duration{10 * time.Second, 11 * time.Second, 12 * time.Second, 13 * time.Second} {
		if got := w.dueAt(i); got != want {
			t.Errorf("dueAt(%d) = %s, want %s", i, got, want)
		}
	}
	for _, tc := range []struct {
		at   time.Duration
		want int
	}{{-time.Millisecond, 0}, {0, 1}, {999 * time.Millisecond, 1}, {time.Second, 2}, {3 * time.Second, 4}, {time.Hour, 4}} {
		if got := w.scheduledBy(tc.at); got != tc.want {
			t.Errorf("scheduledBy(%s) = %d, want %d", tc.at, got, tc.want)
		}
	}
}

func TestBurstSchedulesEverythingAtOnce(t *testing.T) {
	t.Parallel()
	w := workload{n: 1000, over: 0, lead: time.Second}
	if got := w.scheduledBy(0); got != 1000 {
		t.Errorf("scheduledBy(0) = %d, want 1000", got)
	}
	if w.dueAt(0) != w.dueAt(999) {
		t.Errorf("due times differ: %s and %s", w.dueAt(0), w.dueAt(999))
	}
}

func TestScheduledByMatchesSchedAtForOddSizes(t *testing.T) {
	t.Parallel()
	w := workload{n: 7, over: 1000*time.Millisecond + 3, lead: time.Second}
	for d := time.Duration(0); d <= w.over; d += time.Millisecond {
		n := w.scheduledBy(d)
		if n > 0 && w.schedAt(n-1) > d {
			t.Fatalf("at %s: %d scheduled, but timer %d is due to be scheduled at %s", d, n, n-1, w.schedAt(n-1))
		}
		if n < w.n && w.schedAt(n) <= d {
			t.Fatalf("at %s: %d scheduled, but timer %d was due to be scheduled at %s", d, n, n, w.schedAt(n))
		}
	}
}

func TestKeyIndexReadsTimerKey(t *testing.T) {
	t.Parallel()
	if got := keyIndex(timerKey("ab12-lapse_redis", 4711)); got != 4711 {
		t.Errorf("keyIndex = %d, want 4711", got)
	}
	if got := keyIndex("no-number-here"); got != -1 {
		t.Errorf("keyIndex of a foreign key = %d, want -1", got)
	}
}

func TestSummarizeCountsLateEarlyDuplicateAndMissing(t *testing.T) {
	t.Parallel()
	base := time.Unix(1000, 0)
	r := newRecorder(5)
	for i := range 5 {
		r.due[i] = base.Add(time.Duration(i) * time.Second).UnixNano()
	}
	r.deliver(0, base.Add(10*time.Millisecond), time.Time{})
	r.deliver(0, base.Add(20*time.Millisecond), time.Time{})                                               // a duplicate
	r.deliver(1, base.Add(time.Second-300*time.Millisecond), time.Time{})                                  // 300 ms early
	r.deliver(2, base.Add(2*time.Second+5*time.Millisecond), time.Time{})                                  // 5 ms late
	r.deliver(3, base.Add(3*time.Second+40*time.Millisecond), base.Add(3*time.Second+30*time.Millisecond)) // held due: 10 ms late
	r.deliver(99, base, time.Time{})
	s := r.summarize()
	if s.Delivered != 4 || s.Missing != 1 || s.Duplicates != 1 || s.Unknown != 1 {
		t.Errorf("delivered %d missing %d duplicates %d unknown %d, want 4 1 1 1", s.Delivered, s.Missing, s.Duplicates, s.Unknown)
	}
	if s.Early != 1 || s.EarliestMs != 300 {
		t.Errorf("early %d (most %v ms), want 1 (300 ms)", s.Early, s.EarliestMs)
	}
	if s.LateP50Ms != 5 || s.LateMaxMs != 10 {
		t.Errorf("p50 %v max %v, want 5 and 10", s.LateP50Ms, s.LateMaxMs)
	}
	select {
	case <-r.done:
		t.Error("done closed with a timer missing")
	default:
	}
	r.deliver(4, base.Add(4*time.Second), time.Time{})
	select {
	case <-r.done:
	default:
		t.Error("done not closed with every timer delivered")
	}
}

func TestMarkdownNamesEveryColumnAndNote(t *testing.T) {
	t.Parallel()
	rep := report{
		Params: params{Timers: 10, Over: "1s", OverSec: 1, Lead: "1s", CPUs: 2, GoVersion: "go", Run: "x"},
		Results: []result{
			{spec: spec{Name: "asynq", Insert: "Enqueue"}, stats: stats{Delivered: 10, Early: 3, EarliestMs: 900, TimersPerSec: 1234}, ServerCPUSec: 0.5},
			{spec: spec{Name: "river"}, stats: stats{Missing: 10}, ServerCPUSec: -1, Error: "start: boom"},
		},
	}
	md := markdown(rep)
	for _, want := range []string{"10 scheduled and due per second", "| asynq |", "1,234", "3 (900)", "| river |", "river: start: boom."} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
}
