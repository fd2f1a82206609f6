package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
	"github.com/spf13/pflag"
)

//go:generate go run . gen-docs ../../docs/cli

// The command tree is cobra's: help, `lapse help CMD`, completion and the
// generated docs/cli come from it. Each command's flags stay where the code
// that reads them is, in its run function (newFlagSet … parseFlags), which
// also parses them: a leaf of the tree runs with cobra's flag parsing off
// and hands its raw arguments to the run function. The tree learns a
// leaf's flags, for help, docs and completion, by a describe pass (see
// describer in flags.go).

// group is a command that only groups others.
type group struct {
	long string
	subs []command
}

// groups are the commands of main.go's table that have subcommands.
var groups = map[string]group{
	// lapse events: the outbox as an operator needs it. Each event waits in
	// the store, one delivery per sink, until its sink takes it; one a sink
	// refused for good is dead for that sink, and the later events of its
	// order wait behind it (package outbox). The subcommands but tail work
	// on the store directly, running lapse or not (the API has list and
	// retry too: GET /v1/events, POST /v1/events/retry).
	"events": {
		long: `The outbox's events not yet delivered to a sink, and the dead ones: events a sink
refused for good, which hold back the later events of their order for that sink.

tail takes --server URL (LAPSE_SERVER) and --api-token or --api-token-file, as
lapse orders does; the others take --store URL (LAPSE_STORE), like the other
commands. --sink NAME is one sink's name as list shows it, and is not read from
LAPSE_SINK (lapse serve's sinks).`,
		subs: []command{
			{"list", "the undelivered events, one line per event and sink, oldest first (--dead: only the dead ones)", runEventsList},
			{"retry", "make dead events due again at once: these event ids, or every dead one (--dead)", runEventsRetry},
			{"purge", "delete dead events that died before --before TIME, or more than DURATION (72h) ago; the later events of their order then go out", runEventsPurge},
			{"forget-sink", "unregister a sink no instance runs any more, deleting its undelivered events", runEventsForgetSink},
			{"tail", "follow a running lapse's outbox through its API (GET /v1/events): each delivery as it appears among the undelivered ones, and again when it dies", runEventsTail},
		},
	},
	// lapse orders: a running lapse's orders, through its HTTP API
	// (package client), as an operator looks them up.
	"orders": {
		long: `A running lapse's orders, read and changed through its HTTP API.

Each takes --server URL (LAPSE_SERVER, default http://127.0.0.1:8080), --api-token
or --api-token-file (LAPSE_API_TOKEN, LAPSE_API_TOKEN_FILE) and --json. Exit status
1 when the API refuses (its error code and message are printed), 2 on a usage error.`,
		subs: []command{
			{"get", "one order: its fields, payment attempts and stock tasks", runOrdersGet},
			{"list", "orders, newest first (--status PENDING, PAYING, PAID or CANCELLED)", runOrdersList},
			{"cancel", "the buyer's cancel of a PENDING order (its stock released at once); with --force --reason operator, an operator's cancel of a PENDING or PAYING order, past its deadline or not: its trade is closed at the gateway first and the order cancelled only if the close succeeded (--no-close: you closed it by hand)", runOrdersCancel},
			{"check", "run the gateway check of a PAYING order now (or a PENDING one with a payment attempt): past its deadline a payment is recorded, an unpaid trade closed and the order cancelled; before it the gateway is only asked", runOrdersCheck},
			{"extend", "move a PENDING order's deadline, later or earlier: to the RFC 3339 time --expires-at T, or --timeout D (such as 30m) from now; its grace and timer follow", runOrdersExtend},
		},
	},
	// lapse tasks: the stock tasks — the commands lapse owes a remote
	// inventory (docs/sagas.md) — as an operator needs them. Like lapse
	// events, the subcommands open the store directly, running lapse or
	// not (the API has the same: GET /v1/tasks, POST /v1/tasks/retry).
	"tasks": {
		long: `The stock tasks: the reserve, release and confirm commands lapse sends a remote
inventory (--inventory amqp://… or http://…), each until the inventory answers.
A task the inventory rejected, or that kept failing, is DEAD until an operator
retries it.

Each takes --store URL (LAPSE_STORE), like the other commands.`,
		subs: []command{
			{"list", "the tasks not DONE yet, in id order (--dead: only the DEAD ones; --order ID: every task of that order, DONE ones too)", runTasksList},
			{"retry", "make DEAD tasks PENDING and due at once: these task ids, or every DEAD one (--dead)", runTasksRetry},
		},
	},
	// lapse commands: order-service mode's cancel commands
	// (docs/order-service.md) as an operator needs them. Like lapse tasks,
	// the subcommands open the store directly, running lapse or not (the
	// API has the same: GET /v1/commands, POST /v1/commands/retry, POST
	// /v1/commands/purge).
	"commands": {
		long: `The cancel commands of order-service mode (lapse serve --order-service URL): the
order.cancel_if_pending lapse sends the shop's order service at each deadline, until
it answers. A command the order service refused (a 4xx), or that kept failing, is
DEAD until an operator retries or purges it; its order stays CANCELLING meanwhile.

Each takes --store URL (LAPSE_STORE), like the other commands.`,
		subs: []command{
			{"list", "the commands not DONE yet, in id order (--dead: only the DEAD ones; --order ID: every command of that order, DONE ones too)", runCommandsList},
			{"retry", "make DEAD commands PENDING and due at once, with the same command id: these command ids, or every DEAD one (--dead)", runCommandsRetry},
			{"purge", "delete DEAD commands: these ids, or every DEAD one (--dead). lapse gives up asking: their orders stay CANCELLING (lapse does not decide an order the order service owns), and lapse audit reports each (commanded_unanswered) until it is settled another way", runCommandsPurge},
		},
	},
	// lapse refunds: the refunds of payment attempts that owe money back
	// (--auto-refund, and those an operator asked for), through a running
	// lapse's API, so that a retry wakes that instance's refund dispatcher
	// (GET /v1/refunds, POST /v1/refunds/retry).
	"refunds": {
		long: `The refunds of payment attempts that owe money back (REFUND_REQUIRED): with lapse
serve --auto-refund each is asked of the gateway until it has refunded. A refund the
gateway refused for good (it does not know the payment, holds no money of it, failed
the refund), or that kept failing, is DEAD until an operator retries it, or gives
the money back by hand and records it (lapse payments refund --manual).

Each takes --server URL (LAPSE_SERVER, default http://127.0.0.1:8080) and --api-token
or --api-token-file (LAPSE_API_TOKEN, LAPSE_API_TOKEN_FILE), as lapse orders does.
Exit status 1 when the API refuses (its error code and message are printed), 2 on a
usage error.`,
		subs: []command{
			{"list", "the refunds not DONE yet, in payment id order (--dead: only the DEAD ones; --order ID: every refund of that order, DONE ones too)", runRefundsList},
			{"retry", "make DEAD refunds PENDING and due at once, asked under the same key: these payment ids, or every DEAD one (--dead)", runRefundsRetry},
		},
	},
	// lapse payments: an operator's actions on one payment attempt, through
	// a running lapse's API.
	"payments": {
		long: `An operator's actions on one payment attempt of a running lapse, through its HTTP API.

Each takes --server URL (LAPSE_SERVER, default http://127.0.0.1:8080), --api-token
or --api-token-file (LAPSE_API_TOKEN, LAPSE_API_TOKEN_FILE) and --json. Exit status
1 when the API refuses (its error code and message are printed), 2 on a usage error.`,
		subs: []command{
			{"refund", "give back the money of a REFUND_REQUIRED payment attempt now, through the gateway (once, however often asked: the attempt's key); with --manual --note TEXT, record a refund made outside lapse instead", runPaymentsRefund},
		},
	},
}

const rootLong = `lapse cancels unpaid orders at their deadline, exactly once, and releases their stock.

Every flag can also be set with an environment variable LAPSE_<NAME> (upper case,
dashes as underscores: --callback-secret is LAPSE_CALLBACK_SECRET), or in the
--config file (YAML or TOML, keys the flags' names; lapse.example.yaml). A flag
on the command line wins, then the environment, then the file. Flags go anywhere
among the arguments; -- ends them.

Exit status: 0 done (or help), 1 failed, 2 a usage error.`

// commandError is the error of a command that ran, with the name lapse
// prints it under.
type commandError struct {
	name string
	err  error
}

func (e commandError) Error() string { return e.err.Error() }
func (e commandError) Unwrap() error { return e.err }

// newRoot builds the tree: main.go's commands, the groups' subcommands,
// completion, and the hidden gen-docs.
func newRoot(ctx context.Context, stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "lapse",
		Short:         "cancels unpaid orders at their deadline, exactly once, and releases their stock",
		Long:          rootLong,
		SilenceErrors: true,
		SilenceUsage:  true,
		// No arguments: the usage, on stderr, and exit 2, as before.
		RunE: func(cmd *cobra.Command, args []string) error {
			if v, _ := cmd.Flags().GetBool("version"); v {
				fmt.Fprintln(stdout, readBuildInfo())
				return nil
			}
			cmd.SetOut(stderr)
			_ = cmd.Help()
			return errUsage
		},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.PersistentFlags().String(configFlag, "", "a YAML or TOML file of flag values, keys the flags' names (lapse.example.yaml); the command line and LAPSE_* win over it (LAPSE_CONFIG)")
	root.Flags().Bool("version", false, "print the version (lapse version --json for more)")
	root.CompletionOptions.HiddenDefaultCmd = false
	for _, c := range commands {
		if c.run != nil {
			root.AddCommand(leaf(ctx, c, c.name, stdout, stderr))
			continue
		}
		g, ok := groups[c.name]
		if !ok {
			panic("lapse " + c.name + ": no run function and no group")
		}
		gc := &cobra.Command{
			Use:   c.name,
			Short: c.summary,
			Long:  g.long,
			Args:  cobra.ArbitraryArgs,
			RunE: func(cmd *cobra.Command, args []string) error {
				if len(args) > 0 && args[0] == "help" {
					return cmd.Help()
				}
				cmd.SetOut(stderr)
				if len(args) > 0 {
					fmt.Fprintf(stderr, "lapse %s: unknown subcommand %q\n\n", c.name, args[0])
				}
				_ = cmd.Help()
				return errUsage
			},
		}
		for _, s := range g.subs {
			gc.AddCommand(leaf(ctx, s, c.name, stdout, stderr))
		}
		root.AddCommand(gc)
	}
	root.AddCommand(&cobra.Command{
		Use:    "gen-docs DIR",
		Short:  "write docs/cli: a Markdown page per command (go generate ./cmd/lapse)",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := genDocs(cmd.Root(), args[0]); err != nil {
				return commandError{"gen-docs", err}
			}
			return nil
		},
	})
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		if c.Name() != "help" {
			continue
		}
		// cobra's prints "Unknown help topic" and exits 0.
		c.Run = nil
		c.RunE = func(_ *cobra.Command, args []string) error {
			cmd, _, err := root.Find(args)
			if err != nil || cmd == root && len(args) > 0 {
				fmt.Fprintf(stderr, "lapse help: unknown command %q\nRun 'lapse --help' for the commands.\n", strings.Join(args, " "))
				return errUsage
			}
			return cmd.Help()
		}
	}
	addHelpFlags(root)
	return root
}

// addHelpFlags gives c and every command under it the -h/--help flag
// cobra would, but shown as "-h, --help" (pflag 1.1.0 shows cobra's own
// as "--help[=true|false]").
func addHelpFlags(c *cobra.Command) {
	if c.Flags().Lookup("help") == nil {
		v := plainBool(false)
		c.Flags().AddFlag(&pflag.Flag{Name: "help", Shorthand: "h", Usage: "help for " + c.Name(), Value: &v, DefValue: "false", NoOptDefVal: "true"})
	}
	for _, s := range c.Commands() {
		addHelpFlags(s)
	}
}

// plainBool is a bool flag value that pflag does not mark [=true|false].
type plainBool bool

func (b *plainBool) String() string { return strconv.FormatBool(bool(*b)) }
func (b *plainBool) Type() string   { return "bool" }

func (b *plainBool) Set(s string) error {
	v, err := strconv.ParseBool(s)
	*b = plainBool(v)
	return err
}

// leaf is the cobra command of c, a command that parses its own flags;
// name is what its errors are printed under (the top command's name).
func leaf(ctx context.Context, c command, name string, stdout, stderr io.Writer) *cobra.Command {
	d := &describer{Writer: io.Discard}
	if err := c.run(context.Background(), nil, io.Discard, d); !errors.Is(err, errDescribed) || d.fs == nil {
		panic(fmt.Sprintf("lapse %s %s: its run function returned %v on the describe pass: it must define its flags and call parseFlags before anything else", name, c.name, err))
	}
	use := c.name
	if d.fs.args != "" {
		use += " " + d.fs.args
	}
	cmd := &cobra.Command{
		Use:                use,
		Short:              c.summary,
		DisableFlagParsing: true,
		Args:               cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			err := c.run(ctx, args, stdout, stderr)
			if errors.Is(err, flag.ErrHelp) {
				return cmd.Help()
			}
			if err != nil {
				return commandError{name, err}
			}
			return nil
		},
	}
	pfs := d.fs.pflags()
	cmd.Flags().AddFlagSet(pfs)
	// Completing an enum flag's value: cobra leaves a command that parses
	// its own flags to complete them itself, from its arguments.
	enums := map[string][]string{}
	pfs.VisitAll(func(f *pflag.Flag) {
		if e, ok := f.Value.(goFlag).f.Value.(*enumValue); ok {
			enums[f.Name] = e.values
		}
	})
	cmd.ValidArgsFunction = func(_ *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 && strings.HasPrefix(args[len(args)-1], "-") {
			if values, ok := enums[strings.TrimLeft(args[len(args)-1], "-")]; ok {
				return values, cobra.ShellCompDirectiveNoFileComp
			}
		}
		return nil, cobra.ShellCompDirectiveDefault
	}
	if usage := flagGroups[name+" "+c.name]; usage != nil {
		cmd.SetUsageFunc(groupedUsage(usage))
	}
	return cmd
}

func init() { knownFlagNames = knownFlags }

// knownFlags are the names of every command's flags: a --config key none
// of them has is a mistake.
func knownFlags() map[string]bool {
	known := map[string]bool{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.LocalNonPersistentFlags().VisitAll(func(f *pflag.Flag) { known[f.Name] = true })
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(newRoot(context.Background(), io.Discard, io.Discard))
	delete(known, "help")
	delete(known, "version")
	return known
}

// flagGroup is one heading of a command's help and the flags under it.
type flagGroup struct {
	title string
	// names are flags; a name ending in "-" is a prefix (stripe-: every
	// --stripe-… flag).
	names []string
}

func (g flagGroup) has(name string) bool {
	for _, n := range g.names {
		if n == name || strings.HasSuffix(n, "-") && strings.HasPrefix(name, n) {
			return true
		}
	}
	return false
}

// flagGroups are the headings of the commands whose help groups their
// flags, by command path: serve has some sixty flags.
var flagGroups = map[string][]flagGroup{
	"serve serve": {
		{"Server", []string{"addr", "api-token", "api-token-file", "default-timeout", "max-timeout", "default-currency", "shutdown-timeout", "log-level", "log-format"}},
		{"Store and timers", []string{"store", "no-migrate", "timers", "redis-prefix", "grace", "sweep-interval", "sweep-lag", "remind-before"}},
		{"Payments and gateways", []string{"callback-secret", "callback-secret-file", "previous-callback-secret", "gateway", "gateway-", "confirm-after", "auto-refund", "refund-", "stripe-", "alipay-", "wechatpay-"}},
		{"Events", []string{"sink", "event-format", "webhook-", "outbox-"}},
		{"Retention", []string{"order-retention", "task-retention", "retention-"}},
		{"Inventory", []string{"inventory", "inventory-", "task-"}},
		{"Order service", []string{"order-service", "order-service-"}},
	},
}

// groupedUsage prints a command's usage with its flags under the groups'
// headings; a flag no group has is listed under Flags, never dropped
// (TestServeHelpGroupsEveryFlag keeps serve's all in groups).
func groupedUsage(groups []flagGroup) func(*cobra.Command) error {
	return func(c *cobra.Command) error {
		w := c.OutOrStderr()
		fmt.Fprintf(w, "Usage:\n  %s\n", c.UseLine())
		sets := make([]*pflag.FlagSet, len(groups)+1)
		for i := range sets {
			sets[i] = pflag.NewFlagSet("", pflag.ContinueOnError)
		}
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			i := len(groups)
			for j, g := range groups {
				if g.has(f.Name) {
					i = j
					break
				}
			}
			sets[i].AddFlag(f)
		})
		for i, g := range groups {
			if sets[i].HasFlags() {
				fmt.Fprintf(w, "\n%s flags:\n%s", g.title, sets[i].FlagUsages())
			}
		}
		if other := sets[len(groups)]; other.HasFlags() {
			fmt.Fprintf(w, "\nFlags:\n%s", other.FlagUsages())
		}
		if c.HasAvailableInheritedFlags() {
			fmt.Fprintf(w, "\nGlobal Flags:\n%s", c.InheritedFlags().FlagUsages())
		}
		return nil
	}
}

// docsHeader starts every page of docs/cli: no date, so that the pages
// change only when the commands do (TestDocsAreUpToDate).
const docsHeader = "<!-- Generated from the commands by `go generate ./cmd/lapse`: do not edit. -->\n\n"

// genDocs writes a Markdown page per command of root into dir, after
// removing the pages there (a command removed loses its page).
func genDocs(root *cobra.Command, dir string) error {
	root.DisableAutoGenTag = true
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	old, err := filepath.Glob(filepath.Join(dir, "*.md"))
	if err != nil {
		return err
	}
	for _, f := range old {
		if err := os.Remove(f); err != nil {
			return err
		}
	}
	return doc.GenMarkdownTreeCustom(root, dir, func(string) string { return docsHeader }, func(s string) string { return s })
}

// execute runs the command line args and returns the exit status.
func execute(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRoot(ctx, stdout, stderr)
	if args == nil {
		args = []string{} // cobra reads os.Args for nil
	}
	root.SetArgs(args)
	err := root.Execute()
	var ce commandError
	if err != nil && !errors.As(err, &ce) {
		// cobra's: an unknown command or flag.
		if !errors.Is(err, errUsage) {
			fmt.Fprintf(stderr, "lapse: %v\nRun 'lapse --help' for the commands.\n", err)
		}
		return 2
	}
	if err == nil {
		return 0
	}
	return exitCode(ce.name, ce.err, stderr)
}
