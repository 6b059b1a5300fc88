// Command goverbs is goverbs' tool: it lists RDMA devices, runs a loopback
// demonstration, speaks rping's protocol and measures like perftest.
//
//	goverbs devices [-v]     list devices (like ibv_devices; -v like ibv_devinfo)
//	goverbs demo [-n ITERS]  loopback demo and benchmark over the loop provider
//	goverbs ping -s|-c ...   rping over iWARP (interoperates with rdma-core's rping)
//	goverbs perf TEST ...    perftest-style latency and bandwidth tests over iWARP
//	goverbs stat COMMAND ... run a command, then print the device counters
//
// Flags are GNU-style and may come before or after the other arguments, as
// with perftest and rping (-s 4096, --size=4096, -vV); the spellings of
// Go's flag package (-json, -server, --v) work too.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/pflag"

	gvcapture "github.com/goverbs/goverbs/capture"
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

// run runs the command line args (without the program name) and returns
// the exit status: 0, 1 when the command failed, 2 for a bad command line.
func run(args []string) int {
	args, file, err := captureFlag(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, "goverbs:", err)
		return 2
	}
	if file != "" {
		rec, err := gvcapture.Start(file, gvcapture.Options{})
		if err != nil {
			fmt.Fprintln(os.Stderr, "goverbs:", err)
			return 1
		}
		defer func() {
			if err := rec.Stop(); err != nil {
				fmt.Fprintln(os.Stderr, "goverbs:", err)
			}
			fmt.Fprintf(os.Stderr, "goverbs: %d packets recorded in %s\n", rec.Packets(), file)
		}()
	}
	if len(args) < 1 {
		usage(os.Stderr)
		return 2
	}
	switch args[0] {
	case "devices":
		err = devices(args[1:])
	case "demo":
		err = demo(args[1:])
	case "ping":
		err = ping(args[1:])
	case "perf":
		err = perfCmd(args[1:])
	case "stat":
		err = stat(args[1:])
	case "soak":
		err = soak(args[1:])
	case "-h", "-help", "--help", "help":
		usage(helpOut)
		return 0
	default:
		fmt.Fprintf(os.Stderr, "goverbs: unknown command %q\n", args[0])
		usage(os.Stderr)
		return 2
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
		fmt.Fprintln(os.Stderr, "goverbs:", err)
		return 1
	}
}

// captureFlag takes --capture FILE (or --capture=FILE, -capture FILE) out
// of args, wherever it is: every command records its traffic with it.
func captureFlag(args []string) (rest []string, file string, err error) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(rest, args[i:]...), file, nil
		}
		switch {
		case a == "--capture" || a == "-capture":
			if i+1 == len(args) {
				return nil, "", errors.New("--capture needs a file name")
			}
			file = args[i+1]
			i++
		case strings.HasPrefix(a, "--capture=") || strings.HasPrefix(a, "-capture="):
			file = a[strings.IndexByte(a, '=')+1:]
		default:
			rest = append(rest, a)
		}
	}
	return rest, file, nil
}

func usage(w io.Writer) {
	fmt.Fprint(w, `usage: goverbs COMMAND [flags]

commands:
  devices [-v]      list RDMA devices (-v: attributes and ports, like ibv_devinfo)
  demo [-n ITERS]   loopback demo (SEND/RECV, RDMA WRITE/READ, atomics, error
                    handling) and a benchmark table, over the in-process loop provider
  ping -s|-c [-a ADDR] [-p PORT] [-C COUNT] [-S SIZE] [-v] [-V] [-d]
                    rping's protocol over iWARP/TCP: works against rdma-core's
                    rping on a Linux siw device, in both roles
  perf [TEST [SERVER] [-s SIZE] [-a] [-n ITERS] [-D SECS] [-t DEPTH] [-p PORT] [--json] [--server]]
                    perftest-style send/write/read/atomic latency and bandwidth;
                    with no SERVER, both ends in this process (loopback)
  soak [-a ADDR] [-D DURATION] [-q CONNS] [--kill-every DURATION]
                    mixed operations against a peer process it kills now and
                    then, every byte verified; reports lost or corrupted work
  stat [--json] COMMAND [ARGS...]
                    run a command, then print the counters of the devices it
                    used (messages and bytes per opcode, errors, retransmits)

Flags may come before or after the other arguments; goverbs COMMAND -h
describes each. Every command takes --capture FILE: its RDMA traffic is
recorded to FILE as pcapng, which Wireshark decodes (RoCEv2; see go doc
github.com/goverbs/goverbs/capture).
`)
}

// command is a subcommand's flag set and help.
type command struct {
	*pflag.FlagSet
	name string
	help string // printed before the flags
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
	return &command{FlagSet: fs, name: name, help: help}
}

// printHelp writes the command's help and its flags.
func (c *command) printHelp(w io.Writer) {
	fmt.Fprint(w, c.help)
	fmt.Fprintf(w, "\nflags:\n%s", c.FlagUsages())
}

// parse parses args, flags anywhere among the other arguments, and
// returns the arguments that are not flags. With -h or --help it prints
// the help and returns errHelp; a bad flag is a usageError.
func (c *command) parse(args []string) ([]string, error) {
	if err := c.Parse(goSpellings(c.FlagSet, args)); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			c.printHelp(helpOut)
			return nil, errHelp
		}
		return nil, &usageError{c.name, err}
	}
	if h, _ := c.GetBool("help"); h {
		c.printHelp(helpOut)
		return nil, errHelp
	}
	return c.Args(), nil
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
