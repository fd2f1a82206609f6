package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/redact"
	"github.com/lapsehq/lapse/store"
)

func runMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("migrate", stderr)
	storeURL := fs.String("store", "sqlite://lapse.db", storeUsage)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	st, err := openStore(ctx, *storeURL)
	if err != nil {
		return err
	}
	defer st.Close()
	if err := st.Migrate(ctx); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: schema up to date\n", redact.URL(*storeURL))
	return nil
}

func runAudit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("audit", stderr)
	storeURL := fs.String("store", "sqlite://lapse.db", storeUsage)
	lag := fs.Duration("allowed-lag", 30*time.Second, none, "how long a PENDING order may stay past cancel_after before it is a violation")
	examples := fs.Int("examples", 10, "violating rows listed per check")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	// Exit 1 says "an invariant is broken": a store that cannot be audited
	// must not say the same, nor pass for clean, to a script or a cron job.
	couldNotRun := func(err error) error { return exitError{code: 2, err: err} }
	st, err := openExistingStore(ctx, *storeURL)
	if err != nil {
		return couldNotRun(err)
	}
	defer st.Close()
	rep, err := st.Audit(ctx, store.AuditParams{AllowedLag: *lag, MaxExamples: *examples})
	if err != nil {
		return couldNotRun(fmt.Errorf("%s: %w", redact.URL(*storeURL), err))
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(auditJSON(rep)); err != nil {
			return couldNotRun(fmt.Errorf("write the report: %w", err))
		}
	} else {
		writeAudit(stdout, rep)
	}
	if !rep.OK() {
		return exitError{code: 1}
	}
	return nil
}

// writeAudit prints a report a person can read at a glance.
func writeAudit(w io.Writer, rep store.AuditReport) {
	fmt.Fprintf(w, "lapse audit at %s\n", order.FormatTime(rep.At))
	violations := 0
	for _, c := range rep.Checks {
		mark := "ok  "
		switch {
		case c.Count > 0 && c.Warning:
			mark = "warn"
		case c.Count > 0:
			mark = "FAIL"
			violations++
		}
		fmt.Fprintf(w, "  %s  %-28s %d\n", mark, c.Name, c.Count)
		for _, e := range c.Examples {
			fmt.Fprintf(w, "          %s\n", e)
		}
		if int64(len(c.Examples)) < c.Count {
			fmt.Fprintf(w, "          … and %d more\n", c.Count-int64(len(c.Examples)))
		}
	}
	if violations == 0 {
		fmt.Fprintln(w, "result: every invariant holds")
	} else {
		fmt.Fprintf(w, "result: %d invariant(s) violated\n", violations)
	}
}

func auditJSON(rep store.AuditReport) any {
	type check struct {
		Name     string   `json:"name"`
		Warning  bool     `json:"warning"`
		Count    int64    `json:"count"`
		Examples []string `json:"examples"`
	}
	out := struct {
		At     string  `json:"at"`
		OK     bool    `json:"ok"`
		Checks []check `json:"checks"`
	}{At: order.FormatTime(rep.At), OK: rep.OK()}
	for _, c := range rep.Checks {
		ex := c.Examples
		if ex == nil {
			ex = []string{}
		}
		out.Checks = append(out.Checks, check{c.Name, c.Warning, c.Count, ex})
	}
	return out
}
