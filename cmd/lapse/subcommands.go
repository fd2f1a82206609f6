package main

import (
	"context"
	"flag"
	"fmt"
	"io"
)

// runSubcommand runs the subcommand args[0] of `lapse name` from subs, or
// prints usage: the dispatch every command with subcommands (commands,
// events, orders, tasks) shares.
func runSubcommand(ctx context.Context, name string, args []string, stdout, stderr io.Writer,
	usage func(io.Writer), subs map[string]func(ctx context.Context, args []string, stdout, stderr io.Writer) error) error {
	if len(args) == 0 {
		usage(stderr)
		return errUsage
	}
	if run, ok := subs[args[0]]; ok {
		return run(ctx, args[1:], stdout, stderr)
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		usage(stderr)
		return flag.ErrHelp
	}
	fmt.Fprintf(stderr, "lapse %s: unknown subcommand %q\n\n", name, args[0])
	usage(stderr)
	return errUsage
}
