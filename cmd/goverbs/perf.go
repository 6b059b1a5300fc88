package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/goverbs/goverbs/cmd/goverbs/internal/perf"
	"github.com/goverbs/goverbs/rdmacm"
)

const perfHelp = `usage: goverbs perf [TEST [flags] [SERVER]]

With no TEST, every test runs once in loopback at its default size and one
summary table is printed (the README's main job).

TEST is one of send_lat, send_bw, write_lat, write_bw, read_lat, read_bw, atomic_lat.
With no SERVER and no -server, both ends run in this process over a real
connection: loopback iWARP/TCP (-d iwarp0) or shared memory (-d shm0).
With -server, wait for one client; with SERVER, connect to it. Flags go
before SERVER, as with perftest. With -d shm0 both processes are on one
host: the socket is the abstract name @goverbs-perf-PORT, SERVER is ignored.

Method.
  Latency: every iteration is timestamped once, right after its post
  (perftest's method), and a sample is the time between two consecutive
  stamps; the distribution of the samples is reported: t_min, t_typical
  (the median), t_avg, t_max, the standard deviation, and the 99% and
  99.9% percentiles.
  Send and write latency is half a ping-pong round trip; read and atomic
  latency is one operation, post to completion, per iteration. -w untimed
  iterations (1000 by default, as ucx_perftest's -w) come first: the first
  exchanges pay for cold caches and first touches of pages.
  Bandwidth: -t work requests are kept in flight on each of -q QPs, one in
  -Q signaled (perftest's cq_mod, 100: its completion accounts for those
  before it); the bytes of the completed requests are divided by the
  elapsed time (MB = 10^6 bytes). The peak is the best window of at least
  a twentieth of the run and 5 ms. Both ends busy-poll their CQs (polled
  progress).

-R speaks perftest's own rdma_cm protocol instead of goverbs' (control
connection, version and pingpong_dest exchange, receiver credits for
send_bw over iWARP), so goverbs works against ib_send_bw, ib_write_bw,
ib_read_bw, ib_send_lat, ib_write_lat and ib_read_lat run with -R, in
either role (not atomic_lat: siw has no atomics). As with perftest, give
both ends the same test, -s, -n and -q (without -R a goverbs server takes
them from the client); perftest reports MB/s as MiB/s.

While a test runs, a progress line is shown on stderr when stdout and
stderr are terminals (never with -json).

flags:
`

// defaultWarmup is the number of untimed iterations before a latency test
// (goverbs' protocol only: perftest's peers do not run them).
const defaultWarmup = 1000

// defaultCQMod is perftest's default cq_mod: a bandwidth test signals one
// work request in this many (and always the last).
const defaultCQMod = 100

func perfCmd(args []string) error {
	fs := newFlags("perf")
	fs.Usage = func() { fmt.Fprint(os.Stderr, perfHelp); fs.PrintDefaults() }
	size := fs.Int("s", 0, "message size in bytes (default: 2 for latency, 65536 for bandwidth tests)")
	all := fs.Bool("a", false, "run every size from 2 B to 8 MiB (powers of two)")
	iters := fs.Int("n", 0, "iterations (default: 1000 for latency, 5000 for bandwidth tests)")
	warm := fs.Int("w", -1, "untimed warm-up iterations before a latency test's timed ones (default: 1000; none with -R)")
	dur := fs.Int("D", 0, "run bandwidth tests for this many seconds instead of -n iterations")
	depth := fs.Int("t", 128, "send queue depth (work requests in flight)")
	cqMod := fs.Int("Q", defaultCQMod, "bandwidth tests: one completion per this many work requests (perftest's cq_mod)")
	port := fs.Int("p", 18515, "port")
	dev := fs.String("d", "iwarp0", "device: iwarp0 (TCP) or shm0 (same-host shared memory)")
	server := fs.Bool("server", false, "wait for a client")
	js := fs.Bool("json", false, "print results as JSON lines")
	qps := fs.Int("q", 1, "number of QPs (connections) driven in parallel, bandwidth tests")
	pt := fs.Bool("R", false, "perftest's rdma_cm protocol: interoperate with ib_*_bw/ib_*_lat -R")
	if len(args) == 0 {
		return perfAll()
	}
	if args[0] == "-h" || args[0] == "-help" || args[0] == "--help" {
		fs.Usage()
		return nil
	}
	test := args[0]
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *dev != "iwarp0" && *dev != "shm0" {
		return fmt.Errorf("perf: device %q: iwarp0 or shm0", *dev)
	}
	shm := *dev == "shm0"
	if shm && *pt {
		return errors.New("perf: -R (perftest's protocol) runs over iwarp0: perftest has no shared-memory device")
	}
	listenAddr := net.JoinHostPort("", strconv.Itoa(*port))
	serverAddr := func() string { return net.JoinHostPort(fs.Arg(0), strconv.Itoa(*port)) }
	loopAddr := "127.0.0.1:0"
	if shm {
		listenAddr = fmt.Sprintf("unix:@goverbs-perf-%d", *port)
		serverAddr = func() string { return listenAddr }
		loopAddr = fmt.Sprintf("unix:@goverbs-perf-%d-%d", os.Getpid(), time.Now().UnixNano())
	}
	c := perf.Config{Test: test, Size: *size, Iters: *iters, Duration: time.Duration(*dur) * time.Second, TxDepth: *depth, QPs: *qps, Warmup: *warm, CQMod: *cqMod}
	switch {
	case *pt && c.Warmup > 0:
		return errors.New("perf: -w with -R: perftest's latency tests have no warm-up, and both ends must run the same iterations")
	case c.Warmup < 0 && !*pt:
		c.Warmup = defaultWarmup
	case c.Warmup < 0:
		c.Warmup = 0
	}
	if !*js {
		c.Progress = progressLine()
	}
	lat := test == "send_lat" || test == "write_lat" || test == "read_lat" || test == "atomic_lat"
	if c.Size == 0 {
		c.Size = 65536
		if lat {
			c.Size = 2
		}
	}
	if c.Iters == 0 {
		c.Iters = 5000
		if lat {
			c.Iters = 1000
		}
	}
	sizes := []int{c.Size}
	if *all {
		sizes = nil
		for n := 2; n <= 8<<20; n *= 2 {
			sizes = append(sizes, n)
		}
	}
	if *pt && *all {
		return errors.New("perf: -a is not supported with -R (run one size at a time)")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	if *server {
		ln, err := rdmacm.Listen(listenAddr)
		if err != nil {
			return err
		}
		defer ln.Close()
		fmt.Fprintf(os.Stderr, "waiting for a client on %v\n", ln.LocalAddr())
		if *pt {
			c.Progress = nil
			return perf.ServePerftest(ctx, ln, c)
		}
		for range sizes {
			if err := perf.Serve(ctx, ln, c); err != nil {
				return err
			}
		}
		return nil
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 8, 2, ' ', tabwriter.AlignRight)
	if !*js {
		if lat {
			fmt.Fprintln(w, "#bytes\t#iterations\tt_min[usec]\tt_max[usec]\tt_typical[usec]\tt_avg[usec]\tt_stdev[usec]\t99% percentile[usec]\t99.9% percentile[usec]\t")
		} else {
			fmt.Fprintln(w, "#bytes\t#iterations\tBW peak[MB/sec]\tBW average[MB/sec]\tMsgRate[Mpps]\t")
		}
	}
	for _, n := range sizes {
		c.Size = n
		var r perf.Result
		var err error
		switch {
		case fs.NArg() > 0 && *pt:
			r, err = perf.RunPerftest(ctx, serverAddr(), c)
		case fs.NArg() > 0:
			r, err = perf.Run(ctx, serverAddr(), c)
		case *pt:
			r, err = perf.LoopbackPerftest(ctx, loopAddr, c)
		default:
			r, err = perf.Loopback(ctx, loopAddr, c)
		}
		clearProgress(c.Progress)
		if err != nil {
			w.Flush()
			return err
		}
		if *js {
			b, _ := json.Marshal(r)
			fmt.Println(string(b))
			continue
		}
		if lat {
			fmt.Fprintf(w, "%d\t%d\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t\n", r.Bytes, r.Iters, r.Min, r.Max, r.Typical, r.Avg, r.Stdev, r.P99, r.P999)
		} else {
			fmt.Fprintf(w, "%d\t%d\t%.2f\t%.2f\t%.6f\t\n", r.Bytes, r.Iters, r.PeakMBs, r.AvgMBs, r.MsgRate)
		}
		w.Flush()
	}
	return w.Flush()
}

// perfAll runs every test once in loopback with its defaults and prints
// one table.
func perfAll() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	fmt.Println("goverbs perf: every test in loopback, one process, both ends busy-polling:")
	fmt.Println("iwarp0 (iWARP over loopback TCP) and shm0 (shared memory)")
	fmt.Println()
	lw := tabwriter.NewWriter(os.Stdout, 0, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(lw, "device\ttest\tbytes\titerations\tt_min[us]\tt_typical[us]\tt_avg[us]\t99%[us]\t99.9%[us]\t")
	bw := tabwriter.NewWriter(os.Stdout, 0, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(bw, "device\ttest\tbytes\titerations\tBW peak[MB/s]\tBW average[MB/s]\tMsgRate[Mpps]\t")
	for _, dev := range []string{"iwarp0", "shm0"} {
		for _, test := range perf.Tests {
			c := perf.Config{Test: test, Size: 65536, Iters: 20000, TxDepth: 128, Warmup: defaultWarmup, CQMod: defaultCQMod}
			lat := test == "send_lat" || test == "write_lat" || test == "read_lat" || test == "atomic_lat"
			if lat {
				c.Size, c.Iters = 8, 20000
			}
			addr := "127.0.0.1:0"
			if dev == "shm0" {
				addr = fmt.Sprintf("unix:@goverbs-perf-%d-%s", os.Getpid(), test)
				if !lat {
					c.Size, c.Iters = 1<<20, 5000
				}
			}
			c.Progress = progressLine()
			r, err := perf.Loopback(ctx, addr, c)
			clearProgress(c.Progress)
			if err != nil {
				return fmt.Errorf("%s %s: %w", dev, test, err)
			}
			if lat {
				fmt.Fprintf(lw, "%s\t%s\t%d\t%d\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t\n", dev, test, r.Bytes, r.Iters, r.Min, r.Typical, r.Avg, r.P99, r.P999)
			} else {
				fmt.Fprintf(bw, "%s\t%s\t%d\t%d\t%.0f\t%.0f\t%.4f\t\n", dev, test, r.Bytes, r.Iters, r.PeakMBs, r.AvgMBs, r.MsgRate)
			}
		}
	}
	lw.Flush()
	fmt.Println()
	bw.Flush()
	fmt.Println()
	fmt.Println("latency: send and write are half a round trip, read and atomic one whole operation (see goverbs perf -h)")
	return nil
}

// isTerminal reports whether f is a character device (a terminal).
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// progressLine returns a Progress callback that keeps one live line on
// stderr, or nil when stdout or stderr is not a terminal.
func progressLine() func(perf.Progress) {
	if !isTerminal(os.Stdout) || !isTerminal(os.Stderr) {
		return nil
	}
	var last time.Time
	return func(p perf.Progress) {
		if time.Since(last) < 200*time.Millisecond {
			return
		}
		last = time.Now()
		line := fmt.Sprintf("%s: %d", p.Test, p.Done)
		if p.Total > 0 {
			line += fmt.Sprintf("/%d iterations (%.0f%%)", p.Total, 100*float64(p.Done)/float64(p.Total))
		} else {
			line += " iterations"
		}
		line += fmt.Sprintf(", %.1f s", p.Elapsed.Seconds())
		if p.Bytes > 0 && p.Elapsed > 0 {
			line += fmt.Sprintf(", %.0f MB/s", float64(p.Bytes)/p.Elapsed.Seconds()/1e6)
		}
		fmt.Fprintf(os.Stderr, "\r\033[K%s", line)
	}
}

// clearProgress erases the progress line, if there is one.
func clearProgress(f func(perf.Progress)) {
	if f != nil {
		fmt.Fprint(os.Stderr, "\r\033[K")
	}
}
