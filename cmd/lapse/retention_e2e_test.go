package main

import (
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lapsehq/lapse/client"
	"github.com/lapsehq/lapse/order"
)

// retentionEndToEnd runs `lapse serve --order-retention 20s` (retention
// every second) on storeURL: a paid and a buyer-cancelled order answer 404
// once 20 s have passed since they finished; an open order and one that
// owes money (a success reported after its cancel) are kept; the SKU's
// counters are unchanged; the metrics count what went; and `lapse audit`
// passes on the trimmed database.
func retentionEndToEnd(t *testing.T, storeURL string) {
	const secret = "e2e-secret"
	run := fmt.Sprintf("%d", time.Now().UnixNano())
	env := []string{"LAPSE_STORE=" + storeURL, "LAPSE_CALLBACK_SECRET=" + secret}
	s := startServe(t, env, "--order-retention", "20s", "--retention-interval", "1s", "--grace", "0s")
	c, ctx := s.api(), t.Context()
	sku := "ret-" + run
	must(c.SetStock(ctx, sku, 10))(t)
	item := []order.Item{{SKU: sku, Qty: 1}}
	paid, cancelled, open, flagged := "pd-"+run, "bc-"+run, "op-"+run, "fl-"+run
	for _, id := range []string{paid, cancelled, open, flagged} {
		must(c.CreateOrder(ctx, client.CreateOrder{ID: id, Items: item, AmountCents: 999, Timeout: time.Hour}))(t)
	}
	must(c.Pay(ctx, paid, ""))(t)
	notify := func(id string) client.NotifyResult {
		return must(c.NotifyPayment(ctx, client.Notification{OrderID: id, PaymentID: "pay-" + id, Succeeded: true, AmountCents: 999}, []byte(secret)))(t)
	}
	if got := notify(paid); got.Result != "paid" {
		t.Fatalf("pay %s: %+v", paid, got)
	}
	must(c.Cancel(ctx, cancelled))(t)
	must(c.Cancel(ctx, flagged))(t)
	if got := notify(flagged); got.Result != "refund_required" {
		t.Fatalf("late success of %s: %+v", flagged, got)
	}
	finished := time.Now()
	before := must(c.GetSKU(ctx, sku))(t)

	status := func(id string) int {
		t.Helper()
		resp, err := http.Get(s.url + "/v1/orders/" + id)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	deadline := time.Now().Add(90 * time.Second)
	for status(paid) != http.StatusNotFound || status(cancelled) != http.StatusNotFound {
		if time.Now().After(deadline) {
			t.Fatalf("finished orders still there %s after they finished: %s %d, %s %d", time.Since(finished).Round(time.Second),
				paid, status(paid), cancelled, status(cancelled))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if gone := time.Since(finished); gone < 20*time.Second {
		t.Errorf("finished orders deleted %s after they finished, before the retention of 20s", gone.Round(time.Millisecond))
	}
	if o := must(c.GetOrder(ctx, open))(t); o.Status != order.Pending {
		t.Errorf("the open order after retention: %+v", o)
	}
	if o := must(c.GetOrder(ctx, flagged))(t); !o.RefundRequired {
		t.Errorf("the order owing money after retention: %+v", o)
	}
	if got := must(c.GetSKU(ctx, sku))(t); got != before {
		t.Errorf("the SKU after retention: %+v, want %+v unchanged", got, before)
	}
	resp, err := http.Get(s.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !regexp.MustCompile(`(?m)^lapse_retention_deleted_total\{table="orders"\} 2$`).Match(body) {
		t.Errorf("metrics: no lapse_retention_deleted_total{table=\"orders\"} 2 in\n%s", grepLines(string(body), "lapse_retention"))
	}
	if !strings.Contains(string(body), "lapse_retention_oldest_seconds ") {
		t.Errorf("metrics: no lapse_retention_oldest_seconds")
	}
	s.stop()
	out, code := lapseCmd(t, nil, "audit", "--store", storeURL)
	if code != 0 || !strings.Contains(out, "every invariant holds") {
		t.Fatalf("audit of the trimmed database: exit %d:\n%s", code, out)
	}
}

// grepLines is the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func TestRetentionEndToEndOnSQLite(t *testing.T) {
	t.Parallel()
	retentionEndToEnd(t, "sqlite://"+filepath.Join(t.TempDir(), "lapse.db"))
}

func TestRetentionEndToEndOnPostgres(t *testing.T) {
	t.Parallel()
	retentionEndToEnd(t, postgresURL(t))
}
