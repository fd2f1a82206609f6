package lapse

import (
	"testing"
	"time"
)

// An order that keeps coming back early waits longer each time, up to the
// cap; another order starts from the floor; a cancelled one is forgotten.
func TestEarlyBackoffDoublesPerOrder(t *testing.T) {
	var b earlyBackoff
	want := []time.Duration{earlyFloor, 2 * earlyFloor, 4 * earlyFloor, 8 * earlyFloor}
	for i, w := range want {
		if got := b.floor("o"); got != w {
			t.Fatalf("early #%d: floor %v, want %v", i+1, got, w)
		}
	}
	if got := b.floor("other"); got != earlyFloor {
		t.Fatalf("another order: %v, want %v", got, earlyFloor)
	}
	for range 30 {
		b.floor("o")
	}
	if got := b.floor("o"); got != earlyMaxFloor {
		t.Fatalf("after many: %v, want the cap %v", got, earlyMaxFloor)
	}
	b.forget("o")
	if got := b.floor("o"); got != earlyFloor {
		t.Fatalf("after forget: %v, want %v", got, earlyFloor)
	}
}
