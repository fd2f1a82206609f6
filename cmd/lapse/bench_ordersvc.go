package main

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/lapsehq/lapse"
	"github.com/lapsehq/lapse/bench"
	"github.com/lapsehq/lapse/ordersvc"
	"github.com/lapsehq/lapse/outbox/webhook"
	"github.com/lapsehq/lapse/redact"
)

// orderServiceFlag is bench's --order-service: given alone, a reference
// order service runs in this process (bench.Receiver, on a loopback
// listener); given a URL (--order-service URL or --order-service=URL), the
// commands go to that order service, as lapse serve --order-service sends
// them.
type orderServiceFlag struct {
	on  bool
	url string
}

func (f *orderServiceFlag) String() string {
	if f == nil {
		return ""
	}
	return f.url
}

func (f *orderServiceFlag) Set(s string) error {
	switch s {
	case "true", "":
		f.on, f.url = true, ""
	case "false":
		f.on, f.url = false, ""
	default:
		f.on, f.url = true, s
	}
	return nil
}

// IsBoolFlag lets --order-service stand alone, for the reference receiver.
func (f *orderServiceFlag) IsBoolFlag() bool { return true }

// joinOrderServiceURL rewrites `--order-service URL` as
// `--order-service=URL`: the flag stands alone for the reference receiver,
// so the flag package would take the URL for an argument (bench takes
// none, so a word after it is its URL).
func joinOrderServiceURL(args []string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(out, args[i:]...)
		}
		if (a == "--order-service" || a == "-order-service") && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
			out = append(out, a+"="+args[i+1])
			i++
			continue
		}
		out = append(out, a)
	}
	return out
}

// benchOrderServiceFlags are bench's order-service flags.
type benchOrderServiceFlags struct {
	svc         orderServiceFlag
	secret      *string
	paidShare   *float64
	payingShare *float64
	workers     *int
	concurrency *int
}

func addBenchOrderServiceFlags(fs *flagSet) *benchOrderServiceFlags {
	f := &benchOrderServiceFlags{}
	fs.Var(&f.svc, "order-service", "order-service mode (docs/order-service.md): orders are registered for an order service, and each deadline sends it a signed "+
		"cancel command; reports the command lag, cancel_after → the answer recorded. Alone: a reference order service in this process "+
		"(Go's ordersvc.Receiver on a loopback port: signature check, memory deduper); --order-service URL: the order service at URL (http[s]://…)")
	fs.commandLineOnly("order-service") // LAPSE_ORDER_SERVICE is lapse serve's: a bench must not command a real order service unasked
	f.secret = fs.String("order-service-secret", "", "with --order-service URL: the Standard Webhooks secret(s) the order service verifies (whsec_…); the reference receiver makes its own")
	f.paidShare = fs.Float64("already-paid-share", 0, "with the reference order service: fraction of orders it answers already_paid (they end PAID)")
	f.payingShare = fs.Float64("paying-share", 0, "with the reference order service: fraction of orders it answers paying (retry in 1 s) once, then cancelled")
	f.workers = fs.Int("order-service-workers", 2, "with --order-service: batches of commands sent at once (lapse serve --order-service-workers; 1 to 64)")
	f.concurrency = fs.Int("order-service-concurrency", 16, "with --order-service: commands one batch has in flight at once (lapse serve --order-service-concurrency; 1 to 1000)")
	return f
}

// check validates the flags without connecting anywhere.
func (f *benchOrderServiceFlags) check(given map[string]bool, target bool, invURL string) error {
	if !f.svc.on {
		for _, name := range []string{"order-service-secret", "already-paid-share", "paying-share", "order-service-workers", "order-service-concurrency"} {
			if given[name] {
				return fmt.Errorf("--%s goes with --order-service", name)
			}
		}
		return nil
	}
	switch {
	case target:
		return errors.New("--order-service is the in-process service's; with --target the server's own runs (lapse serve --order-service)")
	case invURL != "":
		return errors.New("--order-service and --inventory: with an order service lapse holds no stock, local or remote")
	case *f.workers < 1 || *f.workers > 64:
		return fmt.Errorf("--order-service-workers %d: want 1 to 64", *f.workers)
	case *f.concurrency < 1 || *f.concurrency > 1000:
		return fmt.Errorf("--order-service-concurrency %d: want 1 to 1000", *f.concurrency)
	}
	if f.svc.url != "" {
		if given["already-paid-share"] || given["paying-share"] {
			return errors.New("--already-paid-share and --paying-share set the reference order service's answers; an order service at a URL answers as it does")
		}
		if _, err := webhook.ReadSecretsOf("--order-service-secret", *f.secret, ""); err != nil {
			return err
		}
		if *f.secret == "" {
			return fmt.Errorf("--order-service %s needs --order-service-secret (the order service's)", redact.URL(f.svc.url))
		}
		if _, err := ordersvc.NewHTTP(ordersvc.HTTPConfig{URL: f.svc.url, Secrets: []string{newBenchSecret()}}); err != nil {
			return err
		}
	}
	_, err := bench.NewReceiver(bench.ReceiverConfig{Secrets: []string{newBenchSecret()}, AlreadyPaidShare: *f.paidShare, PayingShare: *f.payingShare})
	var ce *bench.ConfigError
	if errors.As(err, &ce) {
		name := map[string]string{"AlreadyPaidShare": "--already-paid-share", "PayingShare": "--paying-share"}[ce.Field]
		return fmt.Errorf("%s %s", name, ce.Message)
	}
	return err
}

// newBenchSecret is a fresh whsec_ secret, shared by the run's sender and
// its reference receiver.
func newBenchSecret() string {
	key := make([]byte, 32)
	_, _ = rand.Read(key) // never fails (crypto/rand)
	return webhook.SecretPrefix + base64.StdEncoding.EncodeToString(key)
}

// open starts the reference order service when no URL is given, and returns
// the sender of the run's commands (shared by every worker of the run),
// what the run's description says, and what stops them.
func (f *benchOrderServiceFlags) open(logger *slog.Logger) (ordersvc.Client, string, func(), error) {
	target, secrets := f.svc.url, []string(nil)
	var stop func()
	if target == "" {
		secrets = []string{newBenchSecret()}
		rc, err := bench.NewReceiver(bench.ReceiverConfig{Secrets: secrets, AlreadyPaidShare: *f.paidShare, PayingShare: *f.payingShare})
		if err != nil {
			return nil, "", nil, err
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, "", nil, fmt.Errorf("the reference order service: %w", err)
		}
		srv := &http.Server{Handler: rc, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelError)}
		go func() { _ = srv.Serve(ln) }()
		stop = func() { _ = srv.Close() }
		target = "http://" + ln.Addr().String() + "/lapse"
	} else {
		var err error
		if secrets, err = webhook.ReadSecretsOf("--order-service-secret", *f.secret, ""); err != nil {
			return nil, "", nil, err
		}
		stop = func() {}
	}
	c, err := ordersvc.NewHTTP(ordersvc.HTTPConfig{URL: target, Secrets: secrets})
	if err != nil {
		stop()
		return nil, "", nil, err
	}
	what := "the order service at " + redact.URL(target)
	if f.svc.url == "" {
		what = "the reference order service at " + target + " (signatures checked)"
		if *f.paidShare > 0 || *f.payingShare > 0 {
			what += fmt.Sprintf(": %g%% answered already_paid, %g%% paying once", *f.paidShare*100, *f.payingShare*100)
		}
	}
	return c, what, func() { c.Close(); stop() }, nil
}

// withBenchOrderService puts c in order-service mode with client, tuned
// as lapse serve's flags would.
func (f *benchOrderServiceFlags) configure(c *lapse.Config, client ordersvc.Client) {
	if client == nil {
		return
	}
	c.OrderService = client
	c.Commands = ordersvc.DispatcherConfig{Workers: *f.workers, Concurrency: *f.concurrency, Logger: c.Logger}
}

// printBenchCommands prints what the order service answered in a run with
// --order-service.
func printBenchCommands(w io.Writer, res bench.Result) {
	cr := res.Commands
	if cr == nil {
		return
	}
	results := make([]string, 0, len(cr.Results))
	for r, n := range cr.Results {
		results = append(results, fmt.Sprintf("%s %d", r, n))
	}
	sort.Strings(results)
	fmt.Fprintf(w, "commands      %d answered (%.0f/s): %s; %d sent more than once\n", cr.Answered, cr.PerS, strings.Join(results, ", "), cr.Resent)
	fmt.Fprintf(w, "command lag   ms p50 %.1f  p90 %.1f  p99 %.1f  max %.1f (cancel_after → the answer recorded, store clock)\n",
		cr.LagMS.P50, cr.LagMS.P90, cr.LagMS.P99, cr.LagMS.Max)
	if cr.EndedPaid > 0 {
		fmt.Fprintf(w, "commands      %d not sent again: lapse recorded their order PAID first (answered paying, then paid)\n", cr.EndedPaid)
	}
	if cr.OwedBack > 0 {
		fmt.Fprintf(w, "commands      %d answered cancelled for an order lapse saw paid (the payment landed while the command was out): left PAID, the payment owed back\n", cr.OwedBack)
	}
	if cr.Unanswered > 0 || cr.Mismatched > 0 {
		fmt.Fprintf(w, "commands      %d orders without an answer (%d DEAD), %d orders not as answered\n", cr.Unanswered, cr.Dead, cr.Mismatched)
	}
}
