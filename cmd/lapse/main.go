// Command lapse is the order-timeout service: `lapse serve` runs it, `lapse
// audit` checks its invariants, `lapse migrate` prepares a database.
//
// Every flag can also be set with an environment variable LAPSE_<NAME>
// (upper case, dashes as underscores): --callback-secret is LAPSE_CALLBACK_SECRET,
// or in the --config file (config.go). A flag on the command line wins over
// the environment, the environment over the file. The command tree, help and
// completion are cobra's (cli.go).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/lapsehq/lapse/store"
)

// command is a command of lapse: its run function parses its flags
// (parseFlags) and does the work. A command whose run is nil groups the
// subcommands of groups (cli.go).
type command struct {
	name, summary string
	run           func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

var commands = []command{
	{"serve", "run the HTTP API and cancel unpaid orders at their deadline", runServe},
	{"migrate", "apply the schema migrations to the store", runMigrate},
	{"audit", "check every invariant over the store; exit 1 on a violation", runAudit},
	{"bench", "create a burst of orders and measure how late their cancels land", runBench},
	{"events", "list the outbox's undelivered events, retry or purge dead ones, forget a sink, tail a server's", nil},
	{"orders", "get, list, cancel or extend a running lapse's orders (through its HTTP API)", nil},
	{"tasks", "list the stock tasks a remote inventory has not applied, retry dead ones", nil},
	{"commands", "list the cancel commands the order service has not answered, retry or purge dead ones", nil},
	{"refunds", "list the refunds a running lapse has not made yet, retry dead ones (through its HTTP API)", nil},
	{"payments", "refund a payment attempt that owes money back, or record a refund made by hand (through a running lapse's HTTP API)", nil},
	{"reconcile", "compare orders with the payment gateway's records, or with the inventory's ledger; exit 1 on a mismatch", runReconcile},
	{"mockpay", "run a mock payment gateway (for trying lapse out and for tests)", runMockpay},
	{"inventory", "run a reference inventory service (stock held in another service; for trying it out and for tests)", runInventory},
	{"version", "print the version, the commit and the Go version it was built from (--json)", runVersion},
}

// exitError carries a specific exit status (audit: 1 for a violation, 2 when
// it could not run) and, when err is set, the message to print with it.
type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string {
	if e.err != nil {
		return e.err.Error()
	}
	return fmt.Sprintf("exit status %d", e.code)
}

func (e exitError) Unwrap() error { return e.err }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return execute(ctx, args, stdout, stderr)
}

// exitCode prints the error of the command name, if it has one to print,
// and returns the exit status it means.
func exitCode(name string, err error, stderr io.Writer) int {
	suffix := ""
	if errors.Is(err, store.ErrSchemaTooNew) {
		// The store names the schema's versions; the binary's own
		// version is what the operator compares them with.
		suffix = fmt.Sprintf(" (this binary: lapse %s)", readBuildInfo().Version)
	}
	var ee exitError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ee):
		if ee.err != nil {
			fmt.Fprintf(stderr, "lapse %s: %v%s\n", name, ee.err, suffix)
		}
		return ee.code
	case errors.Is(err, errUsage):
		if _, ok := errors.AsType[usageError](err); ok {
			fmt.Fprintf(stderr, "lapse %s: %v\n", name, err)
		}
		return 2
	default:
		fmt.Fprintf(stderr, "lapse %s: %v%s\n", name, err, suffix)
		return 1
	}
}
