package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
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
	// describing: the command is being described (see describer).
	describing bool
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
//
// When stderr is a *describer, the command is being described, not run: the
// flag set registers itself with it, and parseFlags returns errDescribed at
// once, before the command does anything (see describer).
func newFlagSet(name string, stderr io.Writer) *flagSet {
	fs := flag.NewFlagSet("lapse "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	f := &flagSet{FlagSet: fs, spans: map[string]span{}, cmdLineOnly: map[string]bool{}}
	if d, ok := stderr.(*describer); ok {
		d.fs = f
		f.describing = true
	}
	return f
}

// describer is how the command tree (cli.go) learns a command's flags
// without defining them twice: it calls the command's run function with a
// describer as stderr; newFlagSet registers the flag set with it, and
// parseFlags returns errDescribed before anything is opened, dialled or
// written. Every run function therefore defines its flags and calls
// parseFlags before any side effect — they all do, and the tree, built on
// every run of lapse, panics for one that does not (TestEveryCommandDescribes).
type describer struct {
	io.Writer
	fs *flagSet
}

// errDescribed is what parseFlags returns on a describe pass.
var errDescribed = errors.New("flags described")

// commandLineOnly exempts the flag name, already defined, from LAPSE_<NAME>
// and from the --config file: for a flag whose variable another command
// reads with another meaning, which an operator's environment may well
// hold. lapse events --sink is one sink's name, LAPSE_SINK lapse serve's
// list of sink URLs: read from the environment it would narrow every
// listing to a sink that does not exist, and the dead letters would look
// gone.
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

// Enum defines a string flag whose named values are taken in any case
// (--status pending is --status PENDING) and stored as written in values.
// A value none of them matches is stored as given, for the command's own
// check (so --timers redis://… passes through, and a typo gets the
// command's message).
func (fs *flagSet) Enum(name, value, usage string, values ...string) *string {
	e := &enumValue{s: value, values: values}
	fs.Var(e, name, usage)
	return &e.s
}

type enumValue struct {
	s      string
	values []string
}

func (e *enumValue) String() string { return e.s }
func (e *enumValue) Type() string   { return "string" }

func (e *enumValue) Set(v string) error {
	e.s = v
	for _, name := range e.values {
		if strings.EqualFold(v, name) {
			e.s = name
		}
	}
	return nil
}

// configFlag is the flag every command takes beside its own: the file of
// flag values (config.go), also LAPSE_CONFIG.
const configFlag = "config"

// parseFlags parses args, then fills every flag not given on the command
// line from LAPSE_<NAME> if set, then every flag still unset from the
// --config file, then checks every duration flag against its span.
//
// The command line is read by pflag, as every Go CLI reads it: flags
// anywhere among the arguments (--flag value, --flag=value, and for a long
// name -flag too, as lapse always took), "--" ending them; -h or --help
// anywhere returns flag.ErrHelp, which the command tree answers with the
// command's help on stdout.
func parseFlags(fs *flagSet, args []string) error {
	if fs.describing {
		return errDescribed
	}
	pfs := fs.pflags()
	configPath := pfs.String(configFlag, "", "")
	if err := pfs.Parse(normalizeArgs(pfs, args)); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return flag.ErrHelp
		}
		fmt.Fprintf(fs.Output(), "%s: %v\nRun '%s --help' for its flags.\n", fs.Name(), err, fs.Name())
		return errUsage
	}
	// The Go flag set keeps the arguments, for the commands' fs.Args().
	if err := fs.FlagSet.Parse(append([]string{"--"}, pfs.Args()...)); err != nil {
		return fmt.Errorf("internal error: %w", err)
	}
	if fs.NArg() > 0 && fs.args == "" {
		fmt.Fprintf(fs.Output(), "%s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		return errUsage
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
	if !pfs.Changed(configFlag) {
		*configPath = os.Getenv(envName(configFlag))
	}
	fromConfig := map[string]bool{}
	if *configPath != "" {
		if fromConfig, err = applyConfig(fs, *configPath, func(name string) bool {
			return onCommandLine[name] || fromEnv[name] || fs.cmdLineOnly[name]
		}); err != nil {
			fmt.Fprintf(fs.Output(), "%s: --config %s: %v\n", fs.Name(), *configPath, err)
			return errUsage
		}
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
		if msg := s.check(d, onCommandLine[f.Name] || fromEnv[f.Name] || fromConfig[f.Name]); msg != "" {
			shown := fmt.Sprintf("--%s %s", f.Name, d)
			switch {
			case fromEnv[f.Name]:
				shown = fmt.Sprintf("%s=%s (--%s)", envName(f.Name), os.Getenv(envName(f.Name)), f.Name)
			case fromConfig[f.Name]:
				shown = fmt.Sprintf("%s: %s in %s (--%s)", f.Name, d, *configPath, f.Name)
			}
			fmt.Fprintf(fs.Output(), "%s: %s: %s\n", fs.Name(), shown, msg)
			err = errUsage
		}
	})
	return err
}

// pflags is the flag set as pflag sees it: the same flags, each setting its
// value through the Go flag set (so that fs.Visit sees what the command
// line set), for parsing and for the command tree's help, docs and
// completion.
func (fs *flagSet) pflags() *pflag.FlagSet {
	pfs := pflag.NewFlagSet(fs.Name(), pflag.ContinueOnError)
	pfs.SetOutput(io.Discard)
	pfs.Usage = func() {}
	pfs.SortFlags = false
	fs.VisitAll(func(f *flag.Flag) {
		pf := &pflag.Flag{Name: f.Name, Usage: f.Usage, Value: goFlag{fs.FlagSet, f}, DefValue: f.DefValue}
		if pf.Value.Type() == "duration" && pf.DefValue == "0s" {
			pf.DefValue = "0" // pflag then shows no "(default 0s)"
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			pf.NoOptDefVal = "true"
		}
		pfs.AddFlag(pf)
	})
	pfs.SortFlags = true
	return pfs
}

// goFlag is a Go flag as a pflag.Value.
type goFlag struct {
	fs *flag.FlagSet
	f  *flag.Flag
}

func (g goFlag) String() string     { return g.f.Value.String() }
func (g goFlag) Set(v string) error { return g.fs.Set(g.f.Name, v) }

// Type names the value in help: "duration", "string", "int"…
func (g goFlag) Type() string {
	if t, ok := g.f.Value.(interface{ Type() string }); ok {
		return t.Type()
	}
	if b, ok := g.f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
		return "bool"
	}
	if gt, ok := g.f.Value.(flag.Getter); ok {
		switch gt.Get().(type) {
		case time.Duration:
			return "duration"
		case string:
			return "string"
		case int:
			return "int"
		case int64:
			return "int64"
		case float64:
			return "float64"
		}
	}
	return "value"
}

// normalizeArgs rewrites a long flag written with one dash (-store x, as
// lapse took it before pflag) to two (--store x), and -help to --help, so
// that pflag does not read it as shorthands. A flag's value is left alone,
// even one that starts with a dash (--grace -7s), and so is everything
// after "--".
func normalizeArgs(pfs *pflag.FlagSet, args []string) []string {
	out := slices.Clone(args)
	for i := 0; i < len(out); i++ {
		a := out[i]
		if a == "--" {
			break
		}
		if len(a) < 2 || a[0] != '-' {
			continue
		}
		body := strings.TrimPrefix(a[1:], "-")
		name, _, hasValue := strings.Cut(body, "=")
		if a[1] != '-' {
			switch {
			case name == "help":
				out[i] = "--help"
				continue
			case len(name) > 1 && pfs.Lookup(name) != nil:
				out[i] = "-" + a
			default:
				continue
			}
		}
		if f := pfs.Lookup(name); f != nil && !hasValue && f.NoOptDefVal == "" {
			i++ // its value
		}
	}
	return out
}

func envName(flagName string) string {
	return "LAPSE_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Days defines a duration flag that also takes days, written Nd ("35d",
// "1.5d"), beside Go's units ("36h", "90m"): for the retentions, which are
// counted in days. It is checked against s as Duration's flags are.
func (fs *flagSet) Days(name string, value time.Duration, s span, usage string) *time.Duration {
	fs.spans[name] = s
	d := &daysValue{d: value}
	fs.Var(d, name, usage)
	return &d.d
}

// daysValue is a time.Duration read by parseDays; it shows whole days as Nd.
type daysValue struct{ d time.Duration }

func (v *daysValue) Get() any     { return v.d }
func (v *daysValue) Type() string { return "duration" }

func (v *daysValue) String() string {
	const day = 24 * time.Hour
	if v.d > 0 && v.d%day == 0 {
		return fmt.Sprintf("%dd", v.d/day)
	}
	return v.d.String()
}

func (v *daysValue) Set(s string) error {
	d, err := parseDays(s)
	if err != nil {
		return err
	}
	v.d = d
	return nil
}

// parseDays reads "35d" or "1.5d" as days, anything else as
// time.ParseDuration does.
func parseDays(s string) (time.Duration, error) {
	if n, ok := strings.CutSuffix(s, "d"); ok {
		f, err := strconv.ParseFloat(n, 64)
		if err != nil || f < 0 || f > 100*365 {
			return 0, fmt.Errorf("invalid duration %q: want days as Nd (35d), or a Go duration (36h)", s)
		}
		return time.Duration(f * float64(24*time.Hour)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q: want days as Nd (35d), or a Go duration (36h)", s)
	}
	return d, nil
}
