package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

var errUsage = errors.New("usage")

// usageError is a flag whose value is wrong in itself — a URL of a scheme
// lapse does not know, a malformed URL or query — found where the value is
// read, as opening what it names begins: lapse exits 2 with its message, as
// for any other bad flag, not 1 as for a store or broker that does not
// answer.
type usageError struct{ err error }

func (e usageError) Error() string        { return e.err.Error() }
func (e usageError) Unwrap() error        { return e.err }
func (e usageError) Is(target error) bool { return target == errUsage }

// badFlag marks err, which names the flag, as a usageError (nil stays nil).
func badFlag(err error) error {
	if err == nil {
		return nil
	}
	return usageError{err}
}

// flagSet is a command's flags. It is a flag.FlagSet whose Duration also
// takes the range the flag accepts, so that every duration flag of every
// command is checked in one place, parseFlags, after the command line and
// the environment are read: a negative --sweep-lag used to cancel orders
// before their deadline, and a 0 that meant nothing used to stand silently
// for the default.
type flagSet struct {
	*flag.FlagSet
	spans map[string]span
	// args, when set, lets the command take arguments after its flags and
	// names them in its usage line ("ID…"); parseFlags leaves them in
	// Args. Unset, as for most commands, any argument is refused.
	args string
	// cmdLineOnly are the flags not read from the environment (see
	// commandLineOnly).
	cmdLineOnly map[string]bool
}

// span is the range of a duration flag: never negative; 0 only where it
// means something (zero says what, for the messages); and, above 0, at
// least min, where a smaller value would make a loop spin.
type span struct {
	zero string        // what 0 means ("off", "none"); "" refuses 0 given explicitly
	min  time.Duration // the least positive value; 0: any
}

var (
	// positive is a duration that must be more than 0 (a timeout, a window).
	positive = span{}
	// none is a duration that may be 0 for "none" (a grace, a lag, a delay).
	none = span{zero: "none"}
	// off is a duration that may be 0 to turn its feature off.
	off = span{zero: "off"}
)

// check says what is wrong with d for a flag given as shown, or "". An
// unset flag whose default is 0 (bench's "pick one for me") passes.
func (s span) check(d time.Duration, set bool) string {
	switch {
	case d < 0:
		return "must not be negative"
	case d == 0 && (s.zero != "" || !set):
		return ""
	case d == 0 && s.min == 0:
		return "want more than 0"
	case d < s.min && s.zero != "":
		return fmt.Sprintf("want 0 (%s) or at least %s", s.zero, s.min)
	case d < s.min:
		return fmt.Sprintf("want at least %s", s.min)
	}
	return ""
}

// newFlagSet returns a flagSet that reports errors to stderr and exits with
// status 2 on a bad flag (through errUsage).
func newFlagSet(name string, stderr io.Writer) *flagSet {
	fs := flag.NewFlagSet("lapse "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return &flagSet{FlagSet: fs, spans: map[string]span{}, cmdLineOnly: map[string]bool{}}
}

// commandLineOnly exempts the flag name, already defined, from LAPSE_<NAME>:
// for a flag whose variable another command reads with another meaning,
// which an operator's environment may well hold. lapse events --sink is one
// sink's name, LAPSE_SINK lapse serve's list of sink URLs: read from the
// environment it would narrow every listing to a sink that does not exist,
// and the dead letters would look gone.
func (fs *flagSet) commandLineOnly(name string) {
	fs.cmdLineOnly[name] = true
	f := fs.Lookup(name)
	f.Usage += " (command line only: " + envName(name) + " is not read)"
}

// Duration defines a duration flag that accepts the values s allows. It
// shadows flag.FlagSet.Duration, so that no duration flag goes unchecked.
func (fs *flagSet) Duration(name string, value time.Duration, s span, usage string) *time.Duration {
	fs.spans[name] = s
	return fs.FlagSet.Duration(name, value, usage)
}

// parseFlags parses args, then fills every flag not given on the command line
// from LAPSE_<NAME> if set, then checks every duration flag against its span.
func parseFlags(fs *flagSet, args []string) error {
	fs.Usage = func() {
		usage := fs.Name()
		if fs.args != "" {
			usage += " [flags] " + fs.args
		}
		env := "each flag also reads LAPSE_<NAME>"
		if len(fs.cmdLineOnly) > 0 {
			env = "each flag not marked command line only also reads LAPSE_<NAME>"
		}
		fmt.Fprintf(fs.Output(), "Usage of %s (%s):\n", usage, env)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if fs.NArg() > 0 && fs.args == "" {
		fmt.Fprintf(fs.Output(), "%s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		return errUsage
	}
	// Parsing stops at the first argument, so a flag written after one
	// would silently become an argument itself (`retry ID --sink hook`
	// retrying for every sink): refused, since no argument starts with a
	// dash.
	for _, a := range fs.Args() {
		if strings.HasPrefix(a, "-") {
			fmt.Fprintf(fs.Output(), "%s: %q after the arguments: flags go first\n", fs.Name(), a)
			return errUsage
		}
	}
	onCommandLine := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { onCommandLine[f.Name] = true })
	fromEnv := map[string]bool{}
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if onCommandLine[f.Name] || fs.cmdLineOnly[f.Name] || err != nil {
			return
		}
		env := envName(f.Name)
		if v, ok := os.LookupEnv(env); ok {
			if e := fs.Set(f.Name, v); e != nil {
				err = fmt.Errorf("%s=%q: %w", env, v, e)
			}
			fromEnv[f.Name] = true
		}
	})
	if err != nil {
		return err
	}
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil {
			return
		}
		g, ok := f.Value.(flag.Getter)
		if !ok {
			return
		}
		d, ok := g.Get().(time.Duration)
		if !ok {
			return
		}
		s, ok := fs.spans[f.Name]
		if !ok {
			err = fmt.Errorf("internal error: duration flag --%s has no span (define it with flagSet.Duration)", f.Name)
			return
		}
		if msg := s.check(d, onCommandLine[f.Name] || fromEnv[f.Name]); msg != "" {
			shown := fmt.Sprintf("--%s %s", f.Name, d)
			if fromEnv[f.Name] {
				shown = fmt.Sprintf("%s=%s (--%s)", envName(f.Name), os.Getenv(envName(f.Name)), f.Name)
			}
			fmt.Fprintf(fs.Output(), "%s: %s: %s\n", fs.Name(), shown, msg)
			err = errUsage
		}
	})
	return err
}

func envName(flagName string) string {
	return "LAPSE_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}
