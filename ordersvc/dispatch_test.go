package ordersvc_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/lapsehq/lapse/ordersvc"
	"github.com/lapsehq/lapse/store/sqlite"
)

// A cancel may hand its commands to a running dispatcher (Hold): at most
// Workers batches at once, none before Run or after it returned, and Run
// returns only once the batches it was handed are settled.
func TestHoldIsBoundedAndOnlyWhileRunning(t *testing.T) {
	st, err := sqlite.Open(context.Background(), sqlite.Config{Path: filepath.Join(t.TempDir(), "lapse.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	client, err := ordersvc.NewHTTP(ordersvc.HTTPConfig{URL: "http://127.0.0.1:1/lapse", Secrets: []string{secretNew}})
	if err != nil {
		t.Fatal(err)
	}
	d := &ordersvc.Dispatcher{Store: st, Client: client, DispatcherConfig: ordersvc.DispatcherConfig{Workers: 2, Lease: 7 * time.Second}}
	if _, ok := d.Hold(); ok {
		t.Fatal("Hold before Run: ok, want refused")
	}
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- d.Run(ctx) }()
	var first *ordersvc.Handoff
	for deadline := time.Now().Add(10 * time.Second); ; {
		var ok bool
		if first, ok = d.Hold(); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Hold never succeeded on a running dispatcher")
		}
		time.Sleep(time.Millisecond)
	}
	if first.Lease() != 7*time.Second {
		t.Fatalf("Lease %v, want the dispatcher's 7s", first.Lease())
	}
	second, ok := d.Hold()
	if !ok {
		t.Fatal("a second Hold refused with Workers 2")
	}
	if _, ok := d.Hold(); ok {
		t.Fatal("a third Hold granted with Workers 2 in flight")
	}
	first.Release()
	first.Release() // a second Release is a no-op, not a second slot
	third, ok := d.Hold()
	if !ok {
		t.Fatal("Hold refused after a Release")
	}
	if _, ok := d.Hold(); ok {
		t.Fatal("a Release freed more than one slot")
	}
	third.Deliver(nil) // an empty batch frees its slot
	stop()
	select {
	case <-ran:
		t.Fatal("Run returned while a handed-over batch was still held")
	case <-time.After(50 * time.Millisecond):
	}
	second.Release()
	select {
	case err := <-ran:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return once its handed-over batches were done")
	}
	if _, ok := d.Hold(); ok {
		t.Fatal("Hold after Run returned: ok, want refused")
	}
}
