// Command goverbs is goverbs' tool: it lists RDMA devices, runs a loopback
// demonstration, speaks rping's protocol and measures like perftest.
//
//	goverbs [GLOBAL FLAGS] COMMAND [FLAGS] [ARGS]
//
//	goverbs devices [-v] [-d DEV]  list devices (like ibv_devices; -v like ibv_devinfo)
//	goverbs demo [-n ITERS]        loopback demo and benchmark over the loop provider
//	goverbs ping -s|-c ...         rping over iWARP, shared memory or RoCE
//	goverbs perf TEST ...          perftest-style latency and bandwidth tests
//	goverbs soak [ADDR] ...        mixed operations against a peer it kills now and then
//	goverbs stat COMMAND ...       run a command, then print the device counters
//	goverbs help [COMMAND]         this overview, or a command's help
//
// Flags are GNU-style and may come before or after the other arguments, as
// with perftest and rping (-s 4096, --size=4096, -vV); the spellings of
// Go's flag package (-json, -server, --v) work too, and so do perftest's
// underscores (--post_list, --rdma_cm). The global flags come before
// COMMAND: -h/--help, --version, -v/--verbose (the command's own -v) and
// --capture FILE (which every command that moves RDMA traffic also takes
// after COMMAND).
//
// # One meaning per flag
//
// A long flag means the same in every command that has it. Short letters
// are perftest's in perf and rping's in ping, so that their users' habits
// and scripts carry over; goverbs' own commands (devices, demo, soak,
// stat) use perf's letters. Where perftest and rping disagree, ping keeps
// rping's letter and the long name says what it is:
//
//	-a  --all         perf: every message size       (ping: -a is --addr, as in rping)
//	-B  --bind        perf: RoCE, the local address to use
//	-C  --count       ping: pings (rping's)
//	-c  --client      ping: be the client (rping's)
//	-D  --duration    perf, demo, soak: how long: 1.5 (seconds) or 1.5s, 200ms
//	-d  --ib-dev      perf, devices: the device      (ping: -d is --debug, as in rping)
//	-e  --events      perf: wait for completions by event, not by polling (perftest's)
//	-h  --help        every command
//	-l  --post-list   perf: work requests per post (perftest's post_list)
//	-n  --iters       perf, demo: iterations
//	-p  --port        perf, ping: port
//	-Q  --cq-mod      perf: one completion per this many requests
//	-q  --qps         perf, soak: QPs (connections); perftest's --qp too
//	-R  --rdma-cm     perf: perftest's rdma_cm protocol
//	-S  --size        ping: message size (rping's)
//	-s  --size        perf: message size             (ping: -s is --server, as in rping)
//	-t  --tx-depth    perf: send queue depth
//	-V  --validate    ping: check the data (rping's)
//	-v  --verbose     devices, ping, and before any command: say more
//	-w  --warmup      perf: untimed iterations first
//
// Long only: --server (perf, ping: wait for a client), --addr (ping, soak:
// the address), --json (perf, stat: JSON lines), --timeout (ping: each
// step's), --crc (ping), --kill-every (soak), --idle (stat), --capture
// FILE (every command that moves traffic) and --version (before COMMAND).
//
// Exit status: 0 on success, 1 when the command failed, 2 for a command
// line it refuses.
package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	gvcapture "github.com/goverbs/goverbs/capture"
	"github.com/goverbs/goverbs/cmd/goverbs/internal/perf"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

// Where help goes (standard output, as GNU tools do; tests replace it).
var helpOut io.Writer = os.Stdout

// errHelp is returned by a command that printed its help as asked.
var errHelp = errors.New("help requested")

// usageError is a command line that a command refuses: exit status 2.
type usageError struct {
	cmd string
	err error
}

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// exitError is a failure with its own exit status (a command that stat
// ran).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// badUsage returns a usageError for command cmd.
func badUsage(cmd, format string, a ...any) error {
	return &usageError{cmd, fmt.Errorf(format, a...)}
}

// commandNames are goverbs' commands, in the order the overview lists them.
var commandNames = []string{"devices", "demo", "ping", "perf", "soak", "stat"}

// commandNamed returns the command called name, or nil.
func commandNamed(name string) func([]string) error {
	switch name {
	case "devices":
		return devices
	case "demo":
		return demo
	case "ping":
		return ping
	case "perf":
		return perfCmd
	case "soak":
		return soak
	case "stat":
		return stat
	}
	return nil
}

// run runs the command line args (without the program name) and returns
// the exit status: 0, 1 when the command failed, 2 for a bad command line.
func run(args []string) int {
	g := pflag.NewFlagSet("goverbs", pflag.ContinueOnError)
	g.SetOutput(io.Discard)
	g.Usage = func() {}
	g.SetInterspersed(false) // the flags after COMMAND are its own
	help := g.BoolP("help", "h", false, "")
	version := g.Bool("version", false, "")
	verbose := g.BoolP("verbose", "v", false, "")
	capFile := g.String("capture", "", "")
	if err := g.Parse(goSpellings(g, args)); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			usage(helpOut)
			return 0
		}
		fmt.Fprintf(os.Stderr, "goverbs: %v (global flags: -h, --version, -v, --capture FILE; goverbs -h for help)\n", err)
		return 2
	}
	args = g.Args()
	switch {
	case *version:
		printVersion(helpOut)
		return 0
	case *help:
		usage(helpOut)
		return 0
	case len(args) == 0:
		usage(os.Stderr)
		return 2
	}
	name, args := args[0], args[1:]
	if name == "help" {
		switch {
		case len(args) == 0:
			usage(helpOut)
			return 0
		case len(args) > 1:
			fmt.Fprintf(os.Stderr, "goverbs help: one command at a time (goverbs help %s)\n", args[0])
			return 2
		case commandNamed(args[0]) == nil:
			unknownCommand(args[0])
			return 2
		}
		name, args = args[0], []string{"--help"}
	}
	cmd := commandNamed(name)
	if cmd == nil {
		unknownCommand(name)
		return 2
	}
	// The global flags are the command's own, given before it.
	var global []string
	if *verbose {
		global = append(global, "--verbose")
	}
	if g.Changed("capture") {
		global = append(global, "--capture="+*capFile)
	}
	if len(global) > 0 {
		args = append(global, args...)
	}
	prev := recording
	err := cmd(args)
	if recording != prev {
		stopCapture()
		recording = prev
	}
	var ue *usageError
	var ee *exitError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errHelp):
		return 0
	case errors.As(err, &ee):
		fmt.Fprintln(os.Stderr, "goverbs:", err)
		return ee.code
	case errors.As(err, &ue):
		fmt.Fprintf(os.Stderr, "goverbs %s: %v\n(goverbs %s -h for help)\n", ue.cmd, ue.err, ue.cmd)
		return 2
	default:
		fmt.Fprintf(os.Stderr, "goverbs %s: %v\n", name, err)
		return 1
	}
}

// unknownCommand says, in one line, that name is not a command.
func unknownCommand(name string) {
	hint := ""
	switch {
	case slices.Contains(perf.Tests, name):
		hint = fmt.Sprintf(": a test of goverbs perf (goverbs perf %s)", name)
	case strings.HasPrefix(name, "-"):
		hint = ": flags after COMMAND are the command's"
	}
	fmt.Fprintf(os.Stderr, "goverbs: unknown command %q%s (commands: %s; goverbs -h for help)\n", name, hint, strings.Join(commandNames, ", "))
}

// printVersion prints goverbs' version from the build information: the
// module's version (or "(devel)" in a build from a work tree), the VCS
// revision when the build recorded one, and the Go toolchain.
func printVersion(w io.Writer) {
	v, rev := "(unknown)", ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			v = bi.Main.Version
		}
		var modified bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if rev != "" && modified {
			rev += "+modified"
		}
	}
	fmt.Fprintf(w, "goverbs %s", v)
	if rev != "" {
		fmt.Fprintf(w, " (revision %s)", rev)
	}
	fmt.Fprintf(w, " %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func usage(w io.Writer) {
	fmt.Fprint(w, `usage: goverbs [-h] [--version] [-v] [--capture FILE] COMMAND [flags] [args]

commands:
  devices [-v] [-d DEV]
                    list RDMA devices and their addresses (-v: attributes and
                    ports, like ibv_devinfo; -d: that device only)
  demo [-n ITERS] [-D DURATION]
                    loopback demo (SEND/RECV, RDMA WRITE/READ, atomics, error
                    handling) and a benchmark table, over the in-process loop provider
  ping -s|-c [-a ADDR] [-p PORT] [-C COUNT] [-S SIZE] [-v] [-V] [-d]
                    rping's protocol and flags over iWARP/TCP, shared memory
                    or RoCEv2: works against rdma-core's rping, in both roles
  perf [TEST [SERVER] [-s SIZE] [-a] [-n ITERS] [-D DURATION] [-d DEV] [-p PORT] [--server] ...]
                    perftest's tests and flags: send/write/read/atomic latency
                    and bandwidth; with no SERVER, both ends in this process
  soak [ADDR] [-D DURATION] [-q CONNS] [--kill-every DURATION]
                    mixed operations against a peer process it kills now and
                    then, every byte verified; reports lost or corrupted work
  stat [--json] COMMAND [ARGS...]
                    run a command, then print the counters of the devices it
                    used (messages and bytes per opcode, errors, retransmits)
  help [COMMAND]    this overview, or the command's help (as COMMAND -h)

global flags (before COMMAND):
  -h, --help        this overview
      --version     goverbs' version (module, VCS revision, Go)
  -v, --verbose     the command's -v (devices, ping)
      --capture FILE
                    record the command's RDMA traffic to FILE as pcapng,
                    which Wireshark decodes (go doc github.com/goverbs/goverbs/capture);
                    every command that moves traffic takes it after COMMAND too

Flags may come before or after the other arguments of a command. A long
flag means the same in every command; short letters are perftest's in perf
and rping's in ping (where they differ: -a is --all in perf, --addr in
ping; -s --size in perf, --server in ping, whose size is -S; -d the device
in perf and devices, --debug in ping). Durations are seconds (1.5) or Go
durations (1.5s, 200ms). go doc github.com/goverbs/goverbs/cmd/goverbs has
the table of every letter.
`)
}

// captureUsage is the help line of --capture.
const captureUsage = "record this command's RDMA traffic to `FILE` as pcapng (Wireshark decodes it; go doc github.com/goverbs/goverbs/capture)"

// The recording that a command's --capture started (nil: none), and its file.
var (
	recording   *gvcapture.Recorder
	captureFile string
)

// stopCapture ends the recording and says what it holds.
func stopCapture() {
	if err := recording.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "goverbs:", err)
	}
	fmt.Fprintf(os.Stderr, "goverbs: %d packets recorded in %s\n", recording.Packets(), captureFile)
}

// durationFlag is a flag that takes a duration in the one syntax of every
// command: a number of seconds as perftest's -D has it ("2", "1.5") or a
// Go duration ("1.5s", "200ms").
type durationFlag time.Duration

// parseDuration parses s in durationFlag's syntax.
func parseDuration(s string) (time.Duration, error) {
	if f, err := strconv.ParseFloat(s, 64); err == nil && !strings.ContainsAny(s, "xXpP_") {
		if math.IsNaN(f) || math.Abs(f) > float64(math.MaxInt64)/float64(time.Second) {
			return 0, fmt.Errorf("%q: out of range", s)
		}
		return time.Duration(f * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q: a duration is seconds (1.5) or a number with its unit (1.5s, 200ms, 2m)", s)
	}
	return d, nil
}

func (d *durationFlag) Set(s string) error {
	v, err := parseDuration(s)
	if err != nil {
		return err
	}
	*d = durationFlag(v)
	return nil
}

func (d *durationFlag) Type() string { return "duration" }

func (d *durationFlag) String() string {
	if *d == 0 {
		return "0" // pflag shows no default for "0"
	}
	return time.Duration(*d).String()
}

// command is a subcommand's flag set and help.
type command struct {
	*pflag.FlagSet
	name    string
	help    string            // printed before the flags
	aliases map[string]string // other long names of flags (perftest's --qp)
	// noCapture, when set, says why the command refuses --capture.
	noCapture string
	capture   string            // --capture's file
	moved     map[string]string // letters an earlier version had: what to give now
}

// newCommand returns the flag set of subcommand name, whose help text
// (usage line and description) is help.
func newCommand(name, help string) *command {
	fs := pflag.NewFlagSet("goverbs "+name, pflag.ContinueOnError)
	fs.SortFlags = false
	// Errors are returned and help printed by parse, not by pflag.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.BoolP("help", "h", false, "print this help")
	c := &command{FlagSet: fs, name: name, help: help}
	// perftest spells its long flags with underscores (--post_list,
	// --rdma_cm): both spellings are one flag.
	fs.SetNormalizeFunc(func(_ *pflag.FlagSet, n string) pflag.NormalizedName {
		n = strings.ReplaceAll(n, "_", "-")
		if a, ok := c.aliases[n]; ok {
			n = a
		}
		return pflag.NormalizedName(n)
	})
	return c
}

// alias makes --name another name of the flag --of.
func (c *command) alias(name, of string) {
	if c.aliases == nil {
		c.aliases = map[string]string{}
	}
	c.aliases[name] = of
}

// duration defines a flag in the one duration syntax of every command
// (durationFlag).
func (c *command) duration(name, short string, value time.Duration, usage string) *time.Duration {
	p := new(time.Duration)
	*p = value
	c.VarP((*durationFlag)(p), name, short, usage)
	return p
}

// movedLetter says, when -letter is given, what to give instead (a letter
// that meant something else before the letters got one meaning each).
func (c *command) movedLetter(letter, instead string) {
	if c.moved == nil {
		c.moved = map[string]string{}
	}
	c.moved[letter] = instead
}

// refuseCapture makes the command refuse --capture, saying why.
func (c *command) refuseCapture(why string) { c.noCapture = why }

// addCapture defines --capture, last in the help, as every command has it.
func (c *command) addCapture() {
	if c.Lookup("capture") != nil {
		return
	}
	u := captureUsage
	if c.noCapture != "" {
		u = "refused (" + c.noCapture + "): no `FILE` to record"
	}
	c.StringVar(&c.capture, "capture", "", u)
}

// printHelp writes the command's help and its flags.
func (c *command) printHelp(w io.Writer) {
	c.addCapture()
	fmt.Fprint(w, c.help)
	fmt.Fprintf(w, "\nflags:\n%s", c.FlagUsages())
}

// parse parses args, flags anywhere among the other arguments, and
// returns the arguments that are not flags. With -h or --help it prints
// the help and returns errHelp; a bad flag is a usageError.
func (c *command) parse(args []string) ([]string, error) {
	c.addCapture()
	if err := c.Parse(goSpellings(c.FlagSet, args)); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			c.printHelp(helpOut)
			return nil, errHelp
		}
		if strings.Contains(err.Error(), "unknown flag: --verbose") {
			// A global -v before a command that has none.
			return nil, badUsage(c.name, "-v: %s has no verbose output", c.name)
		}
		for l, instead := range c.moved {
			if strings.Contains(err.Error(), "unknown shorthand flag: '"+l+"'") {
				return nil, badUsage(c.name, "%v: %s (one meaning per letter: see goverbs -h)", err, instead)
			}
		}
		return nil, &usageError{c.name, err}
	}
	if h, _ := c.GetBool("help"); h {
		c.printHelp(helpOut)
		return nil, errHelp
	}
	if c.Changed("capture") {
		switch {
		case c.noCapture != "":
			return nil, badUsage(c.name, "--capture: %s, there is nothing to record", c.noCapture)
		case c.capture == "":
			return nil, badUsage(c.name, "--capture needs a file name")
		case recording != nil:
			return nil, badUsage(c.name, "--capture %s: %s is being recorded already", c.capture, captureFile)
		}
	}
	return c.Args(), nil
}

// nflag is the number of flags given, --capture not counted (a command
// records whatever it does).
func (c *command) nflag() int {
	n := c.NFlag()
	if c.Changed("capture") {
		n--
	}
	return n
}

// begin starts the recording that --capture asked for, once the command
// line has been checked and before the command moves traffic; run stops it
// when the command returns.
func (c *command) begin() error {
	if c.capture == "" {
		return nil
	}
	rec, err := gvcapture.Start(c.capture, gvcapture.Options{})
	if err != nil {
		return err
	}
	recording, captureFile = rec, c.capture
	return nil
}

// noArgs refuses arguments a command has no use for.
func (c *command) noArgs(args []string) error {
	if len(args) > 0 {
		return badUsage(c.name, "unexpected argument %q", args[0])
	}
	return nil
}

// goSpellings rewrites the spellings of Go's flag package, which earlier
// versions of this tool parsed and which scripts use, into GNU ones: a long
// name after one dash (-json, -server, -crc=true) gets its second dash, and
// a one-letter name after two (--v) loses one. Everything else is left to
// pflag: -s4096, -vV, -s=4096, --size 4096. The value of a flag that takes
// one is never rewritten, and nothing after "--".
func goSpellings(fs *pflag.FlagSet, args []string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(out, args[i:]...)
		}
		name := strings.TrimLeft(a, "-")
		dashes := len(a) - len(name)
		if dashes == 0 || dashes > 2 || name == "" {
			out = append(out, a)
			continue
		}
		inline := false
		if j := strings.IndexByte(name, '='); j >= 0 {
			name, inline = name[:j], true
		}
		var f *pflag.Flag
		switch {
		case dashes == 1 && len(name) == 1:
			f = fs.ShorthandLookup(name)
		case dashes == 1:
			if f = fs.Lookup(name); f != nil {
				a = "-" + a
			}
		case len(name) == 1:
			if f = fs.ShorthandLookup(name); f != nil {
				a = a[1:]
			} else {
				f = fs.Lookup(name)
			}
		default:
			f = fs.Lookup(name)
		}
		out = append(out, a)
		if f != nil && !inline && f.NoOptDefVal == "" && i+1 < len(args) {
			i++ // the flag's value, as it is
			out = append(out, args[i])
		}
	}
	return out
}
