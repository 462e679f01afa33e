package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Exit codes; see the package documentation.
const (
	exitOK       = 0
	exitError    = 1
	exitUsage    = 2
	exitConfirm  = 3
	exitNotFound = 4
)

const usageText = `Usage: outboxctl [--dsn DSN] [--table NAME] [--timeout D] COMMAND [flags] [args]

Commands:
  stats [--json]                              backlog counts and oldest pending age
  dead list [--type T] [--aggregate A] [--limit N] [--json] [--payload]
  dead count [--type T] [--aggregate A] [--json]
  dead replay [--dry-run] [--yes] ID...       DEAD -> NEW for the given events
  dead replay-all [--type T] [--aggregate A] [--limit N] [--batch N] [--dry-run] [--yes]
  dead blocked [--type T] [--aggregate A] [--limit N] [--json]
                                              ordered keys held up by a DEAD head
  dead skip [--dry-run] [--yes] ID...         move the keys of DEAD ordered heads past them
  purge --older-than D [--dead-older-than D | --keep-dead] [--batch N] [--dry-run] [--yes]
  schema [postgres|mysql|sqlite]              print the DDL; connects to nothing
  migrate status [--json]                     applied and pending schema versions
  migrate up [--to N] [--dry-run]             apply the pending migrations
  migrate down --to N [--dry-run] [--yes]     revert the migrations above N (0 drops the table)
  migrate files --format goose|golang-migrate --out DIR [postgres|mysql|sqlite]
                                              write the migrations for --table; connects to nothing
  serve [--addr HOST:PORT] [--allow-writes] [--show-payloads]
                                              web console (no authentication of its own)
  partitions list|create [--interval D] [--ahead N]
                                              PostgreSQL partitioned tables: list, create ahead
  partitions migrate [--interval D] [--ahead N] [--dry-run] [--yes]
                                              convert a plain table into a partitioned one
  help [COMMAND]                              this text, or a command's flags

Global flags (also accepted after the command):
  --dsn DSN       postgres://user:pass@host:5432/db (or host=... dbname=...),
                  user:pass@tcp(host:3306)/db (or mysql://user:pass@tcp(...)/db),
                  sqlite://path, file:path or a path (default $OUTBOX_DSN)
  --table NAME    outbox table (default $OUTBOX_TABLE, else outbox_event)
  --timeout D     give up after D, e.g. 10m (default: no limit; Ctrl-C stops);
                  every duration D takes days too: 7d, 1d12h, 36h, 90m

Commands that change data print their plan first; without --yes they change
nothing and exit 3, with --dry-run they exit 0. Replayed events are delivered
again: consumers must deduplicate on event_id.

` + exitCodesText + "\n"

const exitCodesText = `Exit codes: 0 ok, 1 error, 2 usage, 3 confirmation required (nothing changed),
4 dead replay: some IDs not replayed (not found or not DEAD).`

// usageError is a mistake in the command line: exit code 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// exitCode is an outcome other than success that is not an error.
type exitCode int

func (c exitCode) Error() string { return fmt.Sprintf("exit %d", int(c)) }

// globals are the flags every command accepts.
type globals struct {
	dsn     string
	table   string
	timeout time.Duration
}

func (g *globals) register(fs *flag.FlagSet) {
	fs.Var(stringFlag{&g.dsn}, "dsn", "database `DSN` (default $OUTBOX_DSN)")
	fs.Var(stringFlag{&g.table}, "table", "outbox table `name` (default $OUTBOX_TABLE, else outbox_event)")
	fs.Var(durationFlag{&g.timeout}, "timeout", "give up after this `duration` (default: no limit)")
}

// stringFlag is a string flag that never shows its current value in help
// output: a DSN from the environment may carry a password.
type stringFlag struct{ p *string }

func (f stringFlag) String() string     { return "" }
func (f stringFlag) Set(s string) error { *f.p = s; return nil }

// durationFlag is a duration flag that also takes days ("7d", "1d12h"),
// the unit retention is thought in; it can be registered on several flag
// sets at once.
type durationFlag struct{ p *time.Duration }

func (f durationFlag) String() string { return "" }
func (f durationFlag) Set(s string) error {
	d, err := parseDuration(s)
	if err != nil {
		return err
	}
	*f.p = d
	return nil
}

// parseDuration is time.ParseDuration with a leading whole number of days:
// "7d", "1d12h", "90m".
func parseDuration(s string) (time.Duration, error) {
	bad := errors.New("not a duration: want e.g. 7d, 36h, 90m or 1d12h")
	var days int64
	if i := strings.IndexByte(s, 'd'); i >= 0 {
		n, err := strconv.ParseInt(s[:i], 10, 32)
		if err != nil || n < 0 {
			return 0, bad
		}
		days, s = n, s[i+1:]
		if s == "" {
			s = "0s"
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil || (days > 0 && d < 0) {
		return 0, bad
	}
	return time.Duration(days)*24*time.Hour + d, nil
}

// app is one invocation.
type app struct {
	g              globals
	stdout, stderr io.Writer
	now            func() time.Time
}

// run executes the command line args and returns the exit code.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	a := &app{stdout: stdout, stderr: stderr, now: time.Now}
	a.g.dsn = getenv("OUTBOX_DSN")
	a.g.table = getenv("OUTBOX_TABLE")
	if a.g.table == "" {
		a.g.table = "outbox_event"
	}
	err := a.dispatch(ctx, args)
	var ue *usageError
	var code exitCode
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.As(err, &code):
		return int(code)
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "outboxctl: %s\nRun 'outboxctl help' for usage.\n", ue.msg)
		return exitUsage
	default:
		fmt.Fprintf(stderr, "outboxctl: %v\n", err)
		if h := hint(err, a.g.table); h != "" {
			fmt.Fprintf(stderr, "hint: %s\n", h)
		}
		return exitError
	}
}

func (a *app) dispatch(ctx context.Context, args []string) error {
	fs := a.command("outboxctl")
	fs.usage = strings.TrimSuffix(usageText, "\n")
	if err := fs.parse(args); err != nil {
		return err
	}
	rest := fs.Args()
	if len(rest) == 0 {
		fmt.Fprint(a.stderr, usageText)
		return &usageError{msg: "no command given"}
	}
	cmd, args := rest[0], rest[1:]
	switch cmd {
	case "help":
		return a.help(args)
	case "stats":
		return a.stats(ctx, args)
	case "dead":
		if len(args) == 0 {
			return usagef("dead: give a subcommand: list, count, replay, replay-all, blocked or skip")
		}
		switch args[0] {
		case "list":
			return a.deadList(ctx, args[1:])
		case "count":
			return a.deadCount(ctx, args[1:])
		case "replay":
			return a.deadReplay(ctx, args[1:])
		case "replay-all":
			return a.deadReplayAll(ctx, args[1:])
		case "blocked":
			return a.deadBlocked(ctx, args[1:])
		case "skip":
			return a.deadSkip(ctx, args[1:])
		}
		return usagef("dead: unknown subcommand %q (want list, count, replay, replay-all, blocked or skip)", args[0])
	case "purge":
		return a.purge(ctx, args)
	case "schema":
		return a.schema(args)
	case "migrate":
		return a.migrate(ctx, args)
	case "serve":
		return a.serve(ctx, args)
	case "partitions":
		return a.partitions(ctx, args)
	}
	return usagef("unknown command %q", cmd)
}

// commandHelp is each command's usage line, shown by "help COMMAND" and -h.
var commandHelp = map[string]string{
	"stats":              "outboxctl stats [--json]",
	"dead list":          "outboxctl dead list [--type T] [--aggregate A] [--limit N] [--json] [--payload]",
	"dead count":         "outboxctl dead count [--type T] [--aggregate A] [--json]",
	"dead replay":        "outboxctl dead replay [--dry-run] [--yes] ID...",
	"dead replay-all":    "outboxctl dead replay-all [--type T] [--aggregate A] [--limit N] [--batch N] [--dry-run] [--yes]",
	"dead blocked":       "outboxctl dead blocked [--type T] [--aggregate A] [--limit N] [--json]",
	"dead skip":          "outboxctl dead skip [--dry-run] [--yes] ID...",
	"purge":              "outboxctl purge --older-than D [--dead-older-than D | --keep-dead] [--batch N] [--dry-run] [--yes]",
	"schema":             "outboxctl schema [postgres|mysql|sqlite]",
	"migrate status":     "outboxctl migrate status [--version-table NAME] [--json]",
	"migrate up":         "outboxctl migrate up [--to N] [--version-table NAME] [--dry-run]",
	"migrate down":       "outboxctl migrate down --to N [--version-table NAME] [--dry-run] [--yes]",
	"migrate files":      "outboxctl migrate files --format goose|golang-migrate --out DIR [postgres|mysql|sqlite]",
	"serve":              serveHelp,
	"partitions list":    "outboxctl partitions list [--interval D] [--ahead N]",
	"partitions create":  "outboxctl partitions create [--interval D] [--ahead N]",
	"partitions migrate": "outboxctl partitions migrate [--interval D] [--ahead N] [--dry-run] [--yes]",
}

func (a *app) help(args []string) error {
	name := strings.Join(args, " ")
	if name == "" {
		fmt.Fprint(a.stdout, usageText)
		return nil
	}
	if _, ok := commandHelp[name]; !ok {
		// A command with subcommands (dead, migrate, partitions): the
		// usage line of each.
		var subs []string
		for _, k := range slices.Sorted(maps.Keys(commandHelp)) {
			if strings.HasPrefix(k, name+" ") {
				subs = append(subs, "  "+commandHelp[k])
			}
		}
		if len(subs) == 0 {
			return usagef("help: unknown command %q (want one of: %s)", name, strings.Join(commandNames(), ", "))
		}
		fmt.Fprintf(a.stdout, "Usage:\n%s\n\n'outboxctl help %s SUBCOMMAND' shows a subcommand's flags.\n",
			strings.Join(subs, "\n"), name)
		return nil
	}
	// The command's own -h prints its flags.
	return a.dispatch(context.Background(), append(args, "-h"))
}

// commandNames returns the commands help takes, without their
// subcommands, sorted.
func commandNames() []string {
	seen := map[string]bool{}
	for k := range commandHelp {
		cmd, _, _ := strings.Cut(k, " ")
		seen[cmd] = true
	}
	return slices.Sorted(maps.Keys(seen))
}

// flags is a command's flag set and its usage line.
type flags struct {
	*flag.FlagSet
	a     *app
	usage string
}

// command returns the flag set of a subcommand, with the global flags. The
// flag set reports nothing itself: run prints usage errors, and -h prints
// the usage on stdout.
func (a *app) command(name string) *flags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	a.g.register(fs)
	return &flags{FlagSet: fs, a: a, usage: "Usage: " + commandHelp[name]}
}

// parse parses args. Flags may follow positional arguments ("dead replay
// ID1 ID2 --yes"), except on the top level, where the first positional
// argument is the command; "--" ends the flags. The positional arguments
// are left in Args().
func (f *flags) parse(args []string) error {
	if f.Name() == "outboxctl" {
		return f.check(f.Parse(args))
	}
	var positional []string
	for {
		if err := f.check(f.Parse(args)); err != nil {
			return err
		}
		rest := f.Args()
		consumed := len(args) - len(rest)
		if len(rest) == 0 {
			break
		}
		if consumed > 0 && args[consumed-1] == "--" {
			positional = append(positional, rest...)
			break
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
	return f.Parse(append([]string{"--"}, positional...))
}

func (f *flags) check(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprintln(f.a.stdout, f.usage)
		if f.Name() != "outboxctl" {
			fmt.Fprintln(f.a.stdout, "\nFlags:")
			f.SetOutput(f.a.stdout)
			f.PrintDefaults()
			f.SetOutput(io.Discard)
			fmt.Fprintln(f.a.stdout, "\n"+exitCodesText)
		}
		return err
	case f.Name() == "outboxctl":
		return &usageError{msg: err.Error()}
	}
	return usagef("%s: %v", f.Name(), err)
}
