package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/order"
	"github.com/lapsehq/lapse/redact"
	"github.com/lapsehq/lapse/store"
	"github.com/lapsehq/lapse/store/sqlite"
)

func runEventsList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("events list", stderr)
	storeURL := fs.String("store", "sqlite://lapse.db", storeUsage)
	dead := fs.Bool("dead", false, "only dead events (a sink refused them for good)")
	sink := addSinkFilter(fs, "only this sink's deliveries")
	limit := fs.Int("limit", lapse.DefaultEventsLimit, "most deliveries listed (a page ends after a whole event)")
	after := fs.Int64("after", 0, "list the events after this seq: the cursor the previous page printed")
	asJSON := fs.Bool("json", false, "one JSON object per line (GET /v1/events's shape) instead of a table")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *limit < 1 {
		fmt.Fprintf(stderr, "lapse events list: --limit %d: want at least 1\n", *limit)
		return errUsage
	}
	if *after < 0 {
		fmt.Fprintf(stderr, "lapse events list: --after %d: want a seq, 0 or more\n", *after)
		return errUsage
	}
	st, err := openEventsStore(ctx, *storeURL, true)
	if err != nil {
		return err
	}
	defer st.Close()
	page, err := lapse.PageEvents(ctx, st, store.ListEventsParams{Sink: *sink, Dead: *dead, After: *after, Limit: *limit})
	if err != nil {
		return fmt.Errorf("%s: %w", redact.URL(*storeURL), err)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		for _, d := range page.Events {
			v, err := lapse.ViewEvent(d)
			if err != nil {
				return err
			}
			if err := enc.Encode(v); err != nil {
				return fmt.Errorf("write the list: %w", err)
			}
		}
	} else if len(page.Events) > 0 {
		if err := writeEventsTable(stdout, page.Events); err != nil {
			return fmt.Errorf("write the list: %w", err)
		}
	}
	if len(page.Events) == 0 {
		what := "no undelivered events"
		if *dead {
			what = "no dead events"
		}
		if *sink != "" {
			what += " for sink " + *sink
		}
		if *after > 0 {
			what += fmt.Sprintf(" after seq %d", *after)
		}
		fmt.Fprintln(stderr, what)
	}
	if page.NextAfter != 0 {
		fmt.Fprintf(stderr, "more after seq %d: run again with --after %d\n", page.NextAfter, page.NextAfter)
	}
	return nil
}

// lastErrorWidth is how much of an attempt's error the table shows; --json
// has all of it.
const lastErrorWidth = 60

// writeEventsTable prints deliveries a person can read at a glance: for a
// dead one when it died, for another when it is next due.
func writeEventsTable(w io.Writer, ds []store.EventDelivery) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tEVENT ID\tTYPE\tORDER ID\tSINK\tSTATE\tATTEMPTS\tREFUSALS\tNEXT ATTEMPT / DIED\tLAST ERROR")
	for _, d := range ds {
		state, when := "pending", order.FormatTime(d.NextAt)
		if d.Dead {
			state, when = "dead", "-"
			if !d.DeadAt.IsZero() {
				when = order.FormatTime(d.DeadAt)
			}
		}
		lastErr := "-"
		if d.LastError != "" {
			lastErr = clip(cell(d.LastError), lastErrorWidth)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", d.Seq, cell(d.ID), cell(d.Type), cell(d.OrderID),
			cell(d.Sink), state, d.Attempts, d.Refusals, when, lastErr)
	}
	return tw.Flush()
}

// cell makes s one table cell that is safe in a terminal: what the store
// or a server holds may come from anyone who can create an order, so every
// control character (C0, DEL and C1: ESC starts a terminal escape, CR
// rewrites the line, a newline or a tab breaks the row), every invisible
// format character (a bidi override reorders what follows it) and every
// byte that is not UTF-8 is written as a Go escape: \x1b, \u202e, \xff.
func cell(s string) string {
	if !strings.ContainsFunc(s, unprintable) && utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r < utf8.RuneSelf && unprintable(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case unprintable(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// unprintable says whether a terminal would act on r, or r would change how
// the text around it shows, rather than r showing as itself.
func unprintable(r rune) bool {
	return unicode.IsControl(r) || unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp)
}

// encodeJSON writes v as one line of JSON, as json.Encoder does, with the
// characters cell escapes that JSON allows raw (C1 controls, format
// characters) written as \u escapes too: the same JSON, decoding to the
// same strings, that does not drive the terminal it is printed on. Such
// characters can only stand inside JSON strings, where an escape means the
// same.
func encodeJSON(w io.Writer, v any) error {
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(v); err != nil {
		return err
	}
	b := buf.Bytes()
	if !bytes.ContainsFunc(b, unprintable) {
		_, err := w.Write(b)
		return err
	}
	var out bytes.Buffer
	for _, r := range string(b) {
		if r == '\n' || !unprintable(r) {
			out.WriteRune(r)
			continue
		}
		for _, u := range utf16.Encode([]rune{r}) {
			fmt.Fprintf(&out, `\u%04x`, u)
		}
	}
	_, err := w.Write(out.Bytes())
	return err
}

// clip cuts s to n characters, marking the cut.
func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}

func runEventsRetry(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("events retry", stderr)
	fs.args = "[ID…]"
	storeURL := fs.String("store", "sqlite://lapse.db", storeUsage)
	dead := fs.Bool("dead", false, "retry every dead event, instead of naming event ids (one of the two is required)")
	sink := addSinkFilter(fs, "only this sink's dead events")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	ids := fs.Args()
	switch {
	case len(ids) == 0 && !*dead:
		fmt.Fprintln(stderr, "lapse events retry: name the events to retry (their ids, as lapse events list --dead shows them), or give --dead to retry every dead one")
		return errUsage
	case len(ids) > 0 && *dead:
		fmt.Fprintln(stderr, "lapse events retry: give event ids or --dead, not both")
		return errUsage
	}
	st, err := openEventsStore(ctx, *storeURL, false)
	if err != nil {
		return err
	}
	defer st.Close()
	n, err := st.RetryEvents(ctx, store.RetryEventsParams{IDs: ids, AllDead: *dead, Sink: *sink})
	if err != nil {
		return fmt.Errorf("%s: %w", redact.URL(*storeURL), err)
	}
	fmt.Fprintf(stdout, "retried %d %s\n", n, deadDeliveries(n))
	if n == 0 && len(ids) > 0 {
		fmt.Fprintln(stderr, "none of these ids names a dead delivery"+forSink(*sink)+": delivered since, purged, or not an event id (lapse events list --dead shows them)")
	}
	return nil
}

func runEventsPurge(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("events purge", stderr)
	storeURL := fs.String("store", "sqlite://lapse.db", storeUsage)
	dead := fs.Bool("dead", false, "required: purge deletes dead events only, and says so")
	before := fs.String("before", "", "delete the dead events that died before this RFC 3339 time (or date), or more than this duration ago (72h)")
	sink := addSinkFilter(fs, "only this sink's dead events")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if !*dead {
		fmt.Fprintln(stderr, "lapse events purge: --dead is required: purge deletes only dead events (those a sink refused for good), and the command line says so")
		return errUsage
	}
	if *before == "" {
		fmt.Fprintln(stderr, "lapse events purge: --before is required: an RFC 3339 time (2026-11-29T08:00:00Z), a date (2026-11-29) or a duration (72h: dead for longer than that)")
		return errUsage
	}
	cutoff, err := parseBefore(*before, time.Now())
	if err != nil {
		fmt.Fprintf(stderr, "lapse events purge: --before %v\n", err)
		return errUsage
	}
	st, err := openEventsStore(ctx, *storeURL, false)
	if err != nil {
		return err
	}
	defer st.Close()
	n, err := st.PurgeEvents(ctx, store.PurgeEventsParams{Before: cutoff, Sink: *sink})
	if err != nil {
		return fmt.Errorf("%s: %w", redact.URL(*storeURL), err)
	}
	fmt.Fprintf(stdout, "purged %d %s%s that died before %s\n", n, deadDeliveries(n), forSink(*sink), order.FormatTime(cutoff))
	return nil
}

func runEventsForgetSink(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("events forget-sink", stderr)
	fs.args = "NAME"
	storeURL := fs.String("store", "sqlite://lapse.db", storeUsage)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "lapse events forget-sink: name one sink, as lapse events list shows it")
		return errUsage
	}
	name := fs.Arg(0)
	st, err := openEventsStore(ctx, *storeURL, false)
	if err != nil {
		return err
	}
	defer st.Close()
	// A typo must not pass for a sink forgotten: the name is one the store
	// has registered.
	stats, err := st.OutboxStats(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", redact.URL(*storeURL), err)
	}
	var names []string
	for _, s := range stats.Sinks {
		names = append(names, s.Sink)
	}
	if !slices.Contains(names, name) {
		return fmt.Errorf("no sink %q is registered (registered: %s)", name, strings.Join(names, ", "))
	}
	n, err := st.ForgetSink(ctx, name)
	if err != nil {
		return fmt.Errorf("%s: %w", redact.URL(*storeURL), err)
	}
	fmt.Fprintf(stdout, "forgot sink %s and its %d undelivered %s\n", name, n, plural(n, "event", "events"))
	fmt.Fprintln(stderr, "an instance still running this sink registers it again within a minute, for new events only")
	return nil
}

// addSinkFilter defines --sink, the one sink a subcommand is narrowed to,
// read from the command line only: LAPSE_SINK is lapse serve's list of
// sinks (see flagSet.commandLineOnly).
func addSinkFilter(fs *flagSet, usage string) *string {
	sink := fs.String("sink", "", usage)
	fs.commandLineOnly("sink")
	return sink
}

// parseBefore reads purge's --before: a duration d is "dead for longer than
// d", so the time d before now; otherwise an RFC 3339 time or a date.
func parseBefore(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		if d <= 0 {
			return time.Time{}, fmt.Errorf("%s: want a duration above 0 (dead for longer than that)", s)
		}
		return now.Add(-d).UTC(), nil
	}
	t, err := parseWhen(s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q: want an RFC 3339 time (2026-11-29T08:00:00Z), a date (2026-11-29) or a duration (72h)", s)
	}
	return t, nil
}

// deadDeliveries counts n dead deliveries: an event dead for two sinks is
// two.
func deadDeliveries(n int64) string {
	return plural(n, "dead delivery", "dead deliveries")
}

func plural(n int64, one, more string) string {
	if n == 1 {
		return one
	}
	return more
}

func forSink(sink string) string {
	if sink == "" {
		return ""
	}
	return " for sink " + sink
}

// openEventsStore is openStore for the events subcommands, which work on an
// existing store: a SQLite file that does not exist is an error (opening it
// would create an empty database, and a typo in the path would list nothing
// or retry nothing as if all were well), and list opens it read-only.
func openEventsStore(ctx context.Context, url string, readOnly bool) (store.Store, error) {
	st, err := openEventsStoreUnchecked(ctx, url, readOnly)
	if err != nil {
		return nil, err
	}
	return checkMigrated(ctx, url, st)
}

func openEventsStoreUnchecked(ctx context.Context, url string, readOnly bool) (store.Store, error) {
	if !strings.HasPrefix(url, "sqlite://") {
		return openStore(ctx, url)
	}
	path, err := sqlite.ParseURL(url)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(path); errors.Is(err, iofs.ErrNotExist) {
		return nil, fmt.Errorf("--store %s: no such database file (check the path; lapse migrate or lapse serve creates it)", redact.URL(url))
	} else if err != nil {
		return nil, fmt.Errorf("--store %s: %w", redact.URL(url), err)
	}
	return sqlite.Open(ctx, sqlite.Config{Path: path, ReadOnly: readOnly})
}
