package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/lapsehq/lapse/reconcile"
)

// reconcileJSON runs `lapse reconcile --json` with args and decodes the
// report it prints; stderr is kept apart (a gateway's warnings go there).
func reconcileJSON(t *testing.T, args ...string) (reconcile.Report, string, int) {
	t.Helper()
	stdout, stderr, code := eventsCmdEnv(t, nil, append([]string{"reconcile", "--json"}, args...)...)
	var rep reconcile.Report
	if code == 0 || code == 1 {
		if err := json.NewDecoder(strings.NewReader(stdout)).Decode(&rep); err != nil {
			t.Fatalf("reconcile %q: exit %d, report not JSON: %v\n%s\n%s", args, code, err, stdout, stderr)
		}
	}
	return rep, stderr, code
}

// mismatchRows lists a report's rows as "kind order_id payment_id", sorted.
func mismatchRows(ms []reconcile.Mismatch) []string {
	out := []string{}
	for _, m := range ms {
		out = append(out, string(m.Kind)+" "+m.OrderID+" "+m.PaymentID)
	}
	slices.Sort(out)
	return out
}
