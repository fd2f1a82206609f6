package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"sync"
	"time"
)

// line is the progress line: created, paid, cancelled, due but not cancelled,
// and the lateness p99 so far (from the lateness histogram of the service).
func (r *run) line() string {
	var b strings.Builder
	if r.cfg.Orders > 0 {
		fmt.Fprintf(&b, "created %d/%d", r.created.Load(), r.cfg.Orders)
	} else {
		fmt.Fprintf(&b, "created %d", r.created.Load())
	}
	now := time.Now().UnixNano()
	r.mu.Lock()
	due := 0
	for _, d := range r.dues {
		if d <= now {
			due++
		}
	}
	r.mu.Unlock()
	fmt.Fprintf(&b, "  paid %d", r.paid.Load())
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	c, err := r.t.counts(ctx)
	if err != nil {
		fmt.Fprintf(&b, "  (metrics: %v)", err)
	} else {
		c = c.minus(r.base)
		fmt.Fprintf(&b, "  cancelled %.0f  due-not-cancelled %d", c.cancelled, max(0, due-int(c.cancelled)))
		if p99 := c.lateness.quantile(0.99); !math.IsNaN(p99) {
			fmt.Fprintf(&b, "  lateness p99 %.1fms", p99*1000)
		}
	}
	if r.cfg.KillEvery > 0 {
		fmt.Fprintf(&b, "  restarts %d", r.restarts.Load())
	}
	return b.String()
}

// progress prints line() every 500 ms until the returned stop is called: on
// one line rewritten in place on a terminal, one line each otherwise.
func progress(w io.Writer, line func() string) (stop func()) {
	if w == nil {
		return func() {}
	}
	start, end := "", "\n"
	if isTerminal(w) {
		start, end = "\r\033[K", ""
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				fmt.Fprintf(w, "%s%s\n", start, line())
				return
			case <-t.C:
				fmt.Fprintf(w, "%s%s%s", start, line(), end)
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
