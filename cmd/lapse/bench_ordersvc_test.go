package main

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// lapse bench --order-service: the run's orders are registered for the
// reference order service in the bench (signatures checked), each deadline
// sends its command, and the report says, from the store, that every order
// the run did not pay was answered, ended as answered, and how long the
// answers took from cancel_after.
func TestBenchOrderService(t *testing.T) {
	t.Parallel()
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		// Some orders answered already_paid (they end PAID), some paying
		// once (asked again after 1 s, then cancelled), some paid by the run
		// before their deadline (no command).
		res := benchJSON(t, "--store", sqliteTemp(t), "--order-service", "--orders", "200", "--rate", "200", "--timeout", "500ms",
			"--pay-ratio", "0.2", "--already-paid-share", "0.2", "--paying-share", "0.1")
		cr := checkCommands(t, res, 200)
		results := cr["results"].(map[string]any)
		if results["already_paid"] == nil || results["cancelled"] == nil {
			t.Errorf("results %v: want already_paid and cancelled answers", results)
		}
		if cr["resent"].(float64) == 0 {
			t.Errorf("resent = 0: the paying answers were not asked again")
		}
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		storeURL := postgresURL(t)
		res := benchJSON(t, "--store", storeURL, "--timers", "sql", "--order-service", "--orders", "300", "--rate", "300", "--timeout", "500ms",
			"--pay-ratio", "0.1")
		checkSettled(t, res, 300)
		checkCommands(t, res, 300)
		// The store agrees, read apart from the bench: one DONE command per
		// cancelled order, answered cancelled, none left over.
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, storeURL)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		var cancelled, done, other, open int
		if err := conn.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM lapse_orders WHERE status = 'CANCELLED'),
			(SELECT count(*) FROM lapse_order_commands c JOIN lapse_orders o ON o.id = c.order_id
			 WHERE c.status = 'DONE' AND c.result = 'cancelled' AND o.status = 'CANCELLED' AND c.done_at = o.cancelled_at),
			(SELECT count(*) FROM lapse_order_commands WHERE status <> 'DONE' OR result NOT IN ('cancelled', 'already_paid')),
			(SELECT count(*) FROM lapse_orders WHERE status NOT IN ('CANCELLED', 'PAID'))`).Scan(&cancelled, &done, &other, &open); err != nil {
			t.Fatal(err)
		}
		if cancelled == 0 || done != cancelled || other != 0 || open != 0 || float64(cancelled) != res["cancelled"].(float64) {
			t.Errorf("store: %d orders CANCELLED, %d commands DONE answered cancelled at that time, %d commands otherwise, %d orders neither CANCELLED nor PAID; report: %v cancelled",
				cancelled, done, other, open, res["cancelled"])
		}
	})
}

// checkCommands checks the report's commands of a run of orders with the
// reference order service: every order the run did not pay answered, each
// as answered, the lag's percentiles in order, and returns them.
func checkCommands(t *testing.T, res map[string]any, orders int) map[string]any {
	t.Helper()
	cr, ok := res["commands"].(map[string]any)
	if !ok {
		t.Fatalf("no commands in %v", res)
	}
	for _, k := range []string{"answered", "results", "lag_ms", "per_s", "resent", "unanswered", "dead", "ended_paid", "mismatched", "commands"} {
		if _, ok := cr[k]; !ok {
			t.Errorf("commands has no %q: %v", k, cr)
		}
	}
	if cr["unanswered"] != 0.0 || cr["mismatched"] != 0.0 || cr["dead"] != 0.0 {
		t.Errorf("commands %v: want every order answered, as answered", cr)
	}
	results := cr["results"].(map[string]any)
	var answered float64
	for _, n := range results {
		answered += n.(float64)
	}
	// Only an answer cancels in this mode; a payment the run started may
	// still be in flight at the deadline, and its order commanded (the
	// reference order service answers it paying, then already_paid).
	paidByRun, cancelled := res["paid"].(float64), res["cancelled"].(float64)
	cancels, _ := results["cancelled"].(float64)
	// A command answered paying whose order the run then paid ends DONE
	// unsent (ended_paid): lapse recorded the payment first.
	if answered != cr["answered"] || answered+cr["ended_paid"].(float64) != cr["commands"] || answered+paidByRun < float64(orders) ||
		cancelled+paidByRun > float64(orders) || cancelled != cancels {
		t.Errorf("%d orders, %v paid by the run, %v cancelled; commands %v: want an answer for every order not paid by the run, "+
			"each cancelled order answered cancelled", orders, paidByRun, cancelled, cr)
	}
	lag := cr["lag_ms"].(map[string]any)
	prev := 0.0
	for _, k := range []string{"p50", "p90", "p99", "max"} {
		v, ok := lag[k].(float64)
		if !ok || v < prev {
			t.Errorf("lag_ms.%s = %v (after %v): want a number, not below the previous percentile", k, lag[k], prev)
		}
		prev = v
	}
	if cr["per_s"].(float64) <= 0 {
		t.Errorf("per_s = %v", cr["per_s"])
	}
	return cr
}

func TestBenchOrderServiceRefusesBadFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--already-paid-share", "0.1"}, "goes with --order-service"},
		{[]string{"--order-service-secret", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}, "goes with --order-service"},
		{[]string{"--order-service", "--target", "http://127.0.0.1:1"}, "with --target the server's own runs"},
		{[]string{"--order-service", "--inventory", "http://127.0.0.1:1"}, "lapse holds no stock"},
		{[]string{"--order-service", "http://127.0.0.1:1/lapse"}, "needs --order-service-secret"},
		{[]string{"--order-service=http://127.0.0.1:1/lapse", "--order-service-secret", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "--paying-share", "0.1"}, "reference order service"},
		{[]string{"--order-service", "--already-paid-share", "0.7", "--paying-share", "0.5"}, "--paying-share"},
		{[]string{"--order-service", "--paying-share", "2"}, "--paying-share 2"},
		{[]string{"--order-service", "--order-service-workers", "0"}, "--order-service-workers"},
	} {
		stdout, stderr, code := benchCmd(t, tc.args...)
		if code != 2 || !strings.Contains(stderr, tc.want) || stdout != "" {
			t.Errorf("lapse bench %v: exit %d, stderr %q; want exit 2 and %q", tc.args, code, stderr, tc.want)
		}
	}
}
