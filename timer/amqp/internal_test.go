package amqp

import (
	"strings"
	"testing"
	"time"
)

func TestRoutingKey(t *testing.T) {
	n := names{prefix: "p", levels: 23}
	// 1.3 s = 13 units = 1101.
	if got, want := n.routingKey(13, "o-42"), "0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.1.1.0.1.o-42"; got != want {
		t.Errorf("routingKey(13) = %q, want %q", got, want)
	}
	if got := n.routingKey(0, "a.b"); got != strings.Repeat("0.", 23)+"a.b" {
		t.Errorf("routingKey(0) = %q", got)
	}
	long := strings.Repeat("é", 200) // 400 bytes
	got := n.routingKey(1<<23-1, long)
	if len(got) > maxRoutingKey || !strings.HasPrefix(got, strings.Repeat("1.", 23)+"é") {
		t.Errorf("routingKey of a long key: %d bytes, %q…", len(got), got[:50])
	}
	if !strings.HasSuffix(got, "é") {
		t.Errorf("routingKey cut a character in two: %q", got[len(got)-4:])
	}
	// Level 20's bindings: its bit is the third token.
	if got, want := n.pattern(20, '1'), "*.*.1.#"; got != want {
		t.Errorf("pattern(20, 1) = %q, want %q", got, want)
	}
	if got, want := n.pattern(22, '0'), "0.#"; got != want {
		t.Errorf("pattern(22, 0) = %q, want %q", got, want)
	}
	if n.below(0) != "p.ready" || n.below(5) != "p.delay.04" {
		t.Errorf("below(0) %s, below(5) %s", n.below(0), n.below(5))
	}
	for units, want := range map[uint64]string{0: "p.ready", 1: "p.delay.00", 13: "p.delay.03", 1<<23 - 1: "p.delay.22"} {
		if got := n.entry(units); got != want {
			t.Errorf("entry(%d) = %s, want %s", units, got, want)
		}
	}
}

func TestUnits(t *testing.T) {
	s := &Scheduler{cfg: Config{Base: 100 * time.Millisecond}, maxUnits: 1<<23 - 1}
	now := time.Now()
	for _, c := range []struct {
		d    time.Duration
		want uint64
	}{
		{-time.Second, 0}, {0, 0}, {time.Nanosecond, 1}, {100 * time.Millisecond, 1},
		{100*time.Millisecond + 1, 2}, {time.Second, 10}, {15 * time.Minute, 9000},
		{7 * 24 * time.Hour, 6_048_000}, {30 * 24 * time.Hour, 1<<23 - 1},
	} {
		if got := s.units(now, now.Add(c.d)); got != c.want {
			t.Errorf("units(%v) = %d, want %d", c.d, got, c.want)
		}
	}
}

// A timer of 1.3 s (13 units: levels 3, 2 and 0) is, on its earliest
// course, in level 3 from its confirm until 799 ms after it was sent, in
// level 2 until 1.198 s, in level 0 until 1.297 s.
func TestLedger(t *testing.T) {
	l := newLedger(100*time.Millisecond, 23, nil)
	sent := time.Now()
	confirmed := sent.Add(5 * time.Millisecond)
	l.add(13, sent, confirmed)
	at := func(d time.Duration) []int {
		var in []int
		for k := range 23 {
			if l.expected(k, sent.Add(d), sent.Add(d)) > 0 {
				in = append(in, k)
			}
		}
		return in
	}
	for _, c := range []struct {
		d    time.Duration
		want []int
	}{
		{time.Millisecond, nil}, // not confirmed yet
		{10 * time.Millisecond, []int{3}},
		{798 * time.Millisecond, []int{3}},
		{800 * time.Millisecond, []int{2}},
		{1197 * time.Millisecond, []int{2}},
		{1200 * time.Millisecond, []int{0}},
		{1296 * time.Millisecond, []int{0}},
		{1297 * time.Millisecond, nil}, // may be in the ready queue
	} {
		if got := at(c.d); !equal(got, c.want) {
			t.Errorf("at %v: in levels %v, want %v", c.d, got, c.want)
		}
	}
	l.reset()
	if got := at(10 * time.Millisecond); got != nil {
		t.Errorf("after reset: in levels %v", got)
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestParseURL(t *testing.T) {
	if _, cfg, err := ParseURL("amqp://rabbit/?lead=0"); err != nil || cfg.Lead >= 0 {
		t.Errorf("lead=0: Lead %v, %v; want negative (none), not the default", cfg.Lead, err)
	}
	broker, cfg, err := ParseURL("amqp://lapse:s3cret@rabbit:5672/shop?prefix=shop.timers&base=50ms&levels=24&queue_type=quorum&batch=100&lead=250ms&prefetch=900&heartbeat=5")
	if err != nil {
		t.Fatal(err)
	}
	if broker != "amqp://lapse:s3cret@rabbit:5672/shop?heartbeat=5" {
		t.Errorf("broker URL %q", broker)
	}
	want := Config{Prefix: "shop.timers", Base: 50 * time.Millisecond, Levels: 24, QueueType: QueueQuorum, BatchSize: 100, Lead: 250 * time.Millisecond, Prefetch: 900}
	if cfg.Prefix != want.Prefix || cfg.Base != want.Base || cfg.Levels != want.Levels || cfg.QueueType != want.QueueType ||
		cfg.BatchSize != want.BatchSize || cfg.Lead != want.Lead || cfg.Prefetch != want.Prefetch {
		t.Errorf("config %+v, want %+v", cfg, want)
	}
	for _, bad := range []string{
		"amqp://lapse:s3cret@rabbit/?prefx=typo",
		"amqp://lapse:s3cret@rabbit/?queue_type=stream",
		"amqp://lapse:s3cret@rabbit/?base=fast",
		"amqp://lapse:s3cret@rabbit/?levels=x",
		"amqp://lapse:s3cret@rabbit/?batch=0",
		"amqp://lapse:s3cret@rabbit/?lead=soon",
		"amqp://lapse:s3cret@rabbit/?prefetch=-1",
		"amqp://lapse:s3cret@rabbit/?prefix=amq.x",
		"amqp://lapse:s3cret@rabbit/?prefix=a&prefix=b",
		"http://lapse:s3cret@rabbit/",
		"amqp:///vhost",
	} {
		_, _, err := ParseURL(bad)
		if err == nil {
			t.Errorf("ParseURL(%s): no error", bad)
			continue
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("ParseURL(%s): the error shows the password: %v", bad, err)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string // in the error; "" for none
	}{
		{Config{}, ""},
		{Config{Base: 1500 * time.Microsecond}, "whole number of milliseconds"},
		{Config{Levels: 33}, "1 to 32"},
		{Config{Levels: 32, Base: 2 * time.Millisecond}, "2^32-1 ms"},
		{Config{Levels: 32, Base: time.Millisecond}, ""},
		{Config{QueueType: "stream"}, "classic or quorum"},
		{Config{BatchSize: 20_000}, "1 to 10000"},
		{Config{Prefix: "a b"}, "A-Z"},
		{Config{Lead: 2 * time.Minute}, "at most 1m0s"},
		{Config{Lead: -1}, ""},
		{Config{BatchSize: 500, Prefetch: 100}, "want BatchSize (500) to 65535"},
		{Config{Prefetch: 70_000}, "to 65535"},
		{Config{BatchSize: 5000}, ""}, // the default prefetch grows with it
	} {
		c.cfg.setDefaults()
		err := c.cfg.validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%+v: %v", c.cfg, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%+v: error %v, want one saying %q", c.cfg, err, c.want)
		}
	}
}
