package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/goverbs/goverbs/cmd/goverbs/internal/perf"
	"github.com/goverbs/goverbs/provider/rdmacore"
	"github.com/goverbs/goverbs/provider/roce"
	"github.com/goverbs/goverbs/rdmacm"
)

const perfHelp = `usage: goverbs perf [TEST [SERVER] [flags]]

With no TEST (and no flags), every test runs once in loopback at its
default size and one summary table is printed (the README's main job).

TEST is one of send_lat, send_bw, write_lat, write_bw, read_lat, read_bw,
atomic_lat. With no SERVER and no --server, both ends run in this process
over a real connection: loopback iWARP/TCP (-d iwarp0) or shared memory
(-d shm0). With --server, wait for one client; with SERVER, connect to it.
Flags may come before or after TEST and SERVER, as perftest's do. With
-d shm0 both processes are on one host: the socket is the abstract name
@goverbs-perf-PORT, and SERVER is localhost (or a loopback address) or a
unix: address of its own.

Without -R, a goverbs server takes the size, iterations, QPs, warm-up,
duration and cq_mod from its client; those given to the server too must
match the client's, or the client is refused (perftest's habit of giving
both ends the same flags works, and a mismatch is caught). With -a the
server serves the client's run of every size.

Method.
  Latency: every iteration is timestamped once, right after its post
  (perftest's method), and a sample is the time between two consecutive
  stamps; the distribution of the samples is reported: t_min, t_typical
  (the median), t_avg, t_max, the standard deviation, and the 99% and
  99.9% percentiles.
  Send and write latency is half a ping-pong round trip; read and atomic
  latency is one operation, post to completion, per iteration. -w untimed
  iterations (1000 by default, as ucx_perftest's -w) come first: the first
  exchanges pay for cold caches and first touches of pages. write_bw and
  read_bw run -w untimed requests (none by default) before the clock starts.
  Bandwidth: -t work requests are kept in flight on each of -q QPs, one in
  -Q signaled (perftest's cq_mod: its completion accounts for those before
  it), posted -l at a time (perftest's post_list: one PostSend per list,
  1 by default); the bytes of the completed requests are divided by the elapsed time
  (MB = 10^6 bytes). The peak is the best window of at least a twentieth
  of the run and 5 ms. Both ends busy-poll their CQs (polled progress).
  With -D (seconds as perftest's, 2 or 1.5, or a Go duration, 1500ms),
  write_bw and read_bw post for that long, then the requests in flight
  complete (send_bw runs -n iterations: its receiver keeps 512 receives
  posted, as perftest's rx_depth, over transports where a SEND that finds
  none waits for one; over iWARP, which has no RNR retry, it posts every
  receive before the run, and -n is 8192 at most).

-e (--events, perftest's -e) waits for completions the C way instead of
busy-polling: every CQ armed with ReqNotify, the loop blocks in
CompChannel.GetEvent when a poll finds nothing, acknowledges the event
(AckEvents) and re-arms the CQ before polling again. It is each end's own
choice (give it to both for a blocking run, as with perftest). Its
write_lat signals each RDMA WRITE with immediate data, whose receive
completion is what the peer blocks for (a plain WRITE raises no event at
its target); with -R, write_lat polls the message's last byte as perftest
does and only waits for its own completions by event (perftest refuses
-e for its WRITE tests). The passive end of a one-sided test lets the
connection progress by itself instead of polling.

-R speaks perftest's own rdma_cm protocol instead of goverbs' (control
connection, version and pingpong_dest exchange, receiver credits for
send_bw over iWARP), so goverbs works against ib_send_bw, ib_write_bw,
ib_read_bw, ib_send_lat, ib_write_lat and ib_read_lat run with -R, in
either role, and ib_atomic_lat over RoCE (iWARP has no atomics in
perftest's protocol). As with perftest, give both ends the same test, -s,
-n and -q; perftest reports MB/s as MiB/s.

Over RoCE (-d roceN, one device per local address, or --bind ADDR), each
process needs an address of its own: UDP port 4791 of an address is one
process's. Two processes of one host use two loopback addresses, e.g.
--server --bind 127.0.0.1 and --bind 127.0.0.2 127.0.0.1.

While a test runs, a progress line is shown on stderr when stdout and
stderr are terminals (never with --json).
`

// defaultWarmup is the number of untimed iterations before a latency test
// (goverbs' protocol only: perftest's peers do not run them).
const defaultWarmup = 1000

// defaultCQMod is perftest's default cq_mod: a bandwidth test signals one
// work request in this many (and always the last).
const defaultCQMod = 100

// The devices goverbs perf runs over, with their providers and what they are.
var perfDevices = map[string]struct{ provider, what string }{
	"iwarp0": {"iwarp", "iWARP over TCP"},
	"shm0":   {"shm", "same-host shared memory"},
}

// perfDevice returns a device's provider and what it is; RoCE devices
// (roce0, roce1, ...: one per local address) are the roce provider's.
func perfDevice(name string) (provider, what string, ok bool) {
	if d, ok := perfDevices[name]; ok {
		return d.provider, d.what, true
	}
	if _, ok := roce.DeviceAddr(name); ok {
		return "roce", "RoCEv2 over UDP", true
	}
	// An rdma-core device (a build with -tags rdmacore): connections go
	// through the kernel's rdma_cm, by the address of its interface.
	if _, ok := rdmacore.DeviceAddr(name); ok {
		return "rdmacore", "rdma-core, the kernel's driver", true
	}
	return "", "", false
}

// perfRun is a parsed perf command line.
type perfRun struct {
	summary  bool // no TEST: every test once, one table
	cfg      perf.Config
	sizes    []int // the sizes to run, in order
	lat      bool  // a latency test
	dev      string
	perftest bool // -R
	json     bool
	server   bool   // --server: listen on listen
	listen   string // --server, or loopback: the address to listen on
	dial     string // SERVER: the address to connect to ("" in loopback)
	// matchSize, on a goverbs server, sets the size the next client must
	// ask for (the server's Match checks it when -s or -a was given).
	matchSize func(n int)
	cmd       *command // its flags (--capture)
}

// isLat reports whether test is a latency test.
func isLat(test string) bool {
	return test == "send_lat" || test == "write_lat" || test == "read_lat" || test == "atomic_lat"
}

// parsePerf parses perf's command line (without "perf") and checks all of
// it, so that nothing is printed or run before a mistake is found.
func parsePerf(args []string) (*perfRun, error) {
	fs := newCommand("perf", perfHelp)
	size := fs.IntP("size", "s", 0, "message size in bytes (default: 2 for latency, 65536 for bandwidth tests)")
	all := fs.BoolP("all", "a", false, "run every size from 2 B to 8 MiB (powers of two)")
	iters := fs.IntP("iters", "n", 0, "iterations (default: 1000 for latency, 5000 for bandwidth tests)")
	warm := fs.IntP("warmup", "w", 0, "untimed warm-up iterations before the timed ones (default: 1000 for latency tests, 0 for write_bw and read_bw; not with -R or send_bw)")
	dur := fs.duration("duration", "D", 0, "write_bw, read_bw: post this long instead of -n iterations: seconds as perftest's (2, 1.5) or with a unit (1500ms), to the millisecond")
	depth := fs.IntP("tx-depth", "t", 128, "send queue depth (work requests in flight)")
	cqMod := fs.IntP("cq-mod", "Q", defaultCQMod, "bandwidth tests: one completion per this many work requests (perftest's cq_mod)")
	postList := fs.IntP("post-list", "l", 1, "bandwidth tests: post this many work requests with one PostSend (perftest's post_list)")
	port := fs.IntP("port", "p", 18515, "port")
	dev := fs.StringP("ib-dev", "d", "iwarp0", "device: iwarp0 (TCP), shm0 (same-host shared memory) or a RoCE device (roce0, ...: see goverbs devices)")
	bind := fs.StringP("bind", "B", "", "RoCE: the local IP address to use (its device; made if it has none); implies a RoCE device")
	qps := fs.IntP("qps", "q", 1, "bandwidth tests: number of QPs (connections) driven in parallel (perftest's --qp)")
	fs.alias("qp", "qps")
	server := fs.Bool("server", false, "wait for a client")
	js := fs.Bool("json", false, "print results as JSON lines (a server prints no results)")
	pt := fs.BoolP("rdma-cm", "R", false, "perftest's rdma_cm protocol: interoperate with ib_*_bw/ib_*_lat -R")
	ev := fs.BoolP("events", "e", false, "wait for completions with completion events (ReqNotify, GetEvent) instead of busy-polling")
	args, err := fs.parse(args)
	if err != nil {
		return nil, err
	}
	bad := func(format string, a ...any) (*perfRun, error) { return nil, badUsage("perf", format, a...) }
	if len(args) == 0 {
		if fs.nflag() > 0 {
			return bad("flags need a TEST (with no TEST, every test runs with its defaults)")
		}
		return &perfRun{summary: true, cmd: fs}, nil
	}
	r := &perfRun{dev: *dev, perftest: *pt, json: *js, server: *server, cmd: fs}
	test := args[0]
	if !slices.Contains(perf.Tests, test) {
		return bad("unknown test %q (one of %s)", test, strings.Join(perf.Tests, ", "))
	}
	r.lat = isLat(test)
	if len(args) > 2 {
		return bad("unexpected argument %q (TEST and one SERVER at most)", args[2])
	}
	peer := ""
	if len(args) == 2 {
		peer = args[1]
	}
	var local netip.Addr // RoCE: the device's address
	if *bind != "" {
		a, err := netip.ParseAddr(*bind)
		if err != nil {
			return bad("--bind %q: an IP address", *bind)
		}
		name, err := roce.AddDevice(a)
		if err != nil {
			return bad("--bind %s: %v", *bind, err)
		}
		if fs.Changed("ib-dev") && *dev != name {
			return bad("--bind %s is device %s, not -d %s", *bind, name, *dev)
		}
		*dev, r.dev = name, name
	}
	prov, _, ok := perfDevice(*dev)
	switch prov {
	case "roce":
		local, _ = roce.DeviceAddr(*dev)
	case "rdmacore":
		local, _ = rdmacore.DeviceAddr(*dev)
	}
	switch {
	case *dev == "loop0":
		return bad("-d loop0: the loop provider connects two QPs of one process directly (loop.Connect), with no connection manager, so it serves neither a second process nor perf's connection; measure it with goverbs demo, or use -d shm0 (shared memory between processes) or iwarp0")
	case !ok:
		return bad("device %q: iwarp0, shm0, a RoCE device or an rdma-core device (see goverbs devices)", *dev)
	case prov == "rdmacore" && fs.Changed("capture"):
		return bad("--capture records goverbs' own providers; %s's traffic is the kernel's (record it with tcpdump on its interface)", *dev)
	case *server && peer != "":
		return bad("--server and SERVER %q: a server waits, a client connects: give one", peer)
	case *port < 0 || *port > 65535:
		return bad("port %d out of range", *port)
	case *pt && *dev == "shm0":
		return bad("-R (perftest's protocol) runs over iwarp0: perftest has no shared-memory device")
	case *pt && test == "atomic_lat" && prov != "roce":
		return bad("atomic_lat -R runs over a RoCE device: iWARP has no atomics in perftest's protocol")
	case *pt && *all:
		return bad("-a is not supported with -R (run one size at a time)")
	case *all && fs.Changed("size"):
		return bad("-a and -s: -a runs every size")
	case fs.Changed("duration") && *pt:
		return bad("-D is not supported with -R")
	case fs.Changed("duration") && (r.lat || test == "send_bw"):
		return bad("-D: %s runs -n iterations (a duration is for write_bw and read_bw)", test)
	case fs.Changed("duration") && *dur < time.Millisecond:
		return bad("-D %v: at least a millisecond", *dur)
	case fs.Changed("duration") && fs.Changed("iters"):
		return bad("-D and -n: a run is timed or counted, give one")
	case fs.Changed("warmup") && !r.lat && (test == "send_bw" || *pt):
		return bad("-w: warm-up iterations are for latency tests, write_bw and read_bw (not with -R)")
	case fs.Changed("warmup") && *pt && *warm > 0:
		return bad("-w with -R: perftest's latency tests have no warm-up, and both ends must run the same iterations")
	case fs.Changed("cq-mod") && r.lat:
		return bad("-Q: cq_mod is for bandwidth tests")
	case *cqMod < 1:
		return bad("-Q %d: at least 1", *cqMod)
	case fs.Changed("post-list") && r.lat:
		return bad("-l: a post list is for bandwidth tests")
	case *postList < 1:
		return bad("-l %d: at least 1", *postList)
	case *depth < 1:
		return bad("-t %d: at least 1", *depth)
	case fs.Changed("qps") && *qps > 1 && r.lat:
		return bad("-q %d: latency tests run on one QP", *qps)
	}

	c := perf.Config{Test: test, Size: *size, Iters: *iters, Duration: dur.Truncate(time.Millisecond),
		TxDepth: *depth, QPs: *qps, Warmup: *warm, CQMod: *cqMod, PostList: *postList, Events: *ev}
	if !fs.Changed("warmup") && !*pt && r.lat {
		c.Warmup = defaultWarmup
	}
	if c.Size == 0 && !fs.Changed("size") {
		c.Size = 65536
		if r.lat {
			c.Size = 2
		}
	}
	if c.Iters == 0 && !fs.Changed("iters") {
		c.Iters = 5000
		if r.lat {
			c.Iters = 1000
		}
	}
	r.sizes = []int{c.Size}
	if *all {
		r.sizes = nil
		for n := 2; n <= 8<<20; n *= 2 {
			r.sizes = append(r.sizes, n)
		}
	}
	for _, n := range r.sizes {
		cc := c
		cc.Size = n
		if err := cc.Check(); err != nil {
			return bad("%v", err)
		}
	}
	if !*pt && test == "send_bw" && c.Iters > perf.MaxSendBWIters && prov == "iwarp" {
		return bad("-n %d: send_bw over iWARP runs at most %d iterations (no RNR retry: every receive is posted before the run)", c.Iters, perf.MaxSendBWIters)
	}

	// Addresses.
	p := strconv.Itoa(*port)
	switch {
	case prov == "rdmacore" && strings.HasPrefix(peer, "unix:"):
		return bad("SERVER %s: a unix: address is for -d shm0", peer)
	case prov == "rdmacore" && peer != "":
		r.dial = "rdma://" + net.JoinHostPort(peer, p)
	case prov == "rdmacore":
		// The kernel's CM listens on the device's address.
		r.listen = "rdma://" + net.JoinHostPort(local.String(), p)
	case prov == "roce" && strings.HasPrefix(peer, "unix:"):
		return bad("SERVER %s: a unix: address is for -d shm0", peer)
	case prov == "roce" && peer != "":
		r.dial = "roce://" + net.JoinHostPort(peer, p)
		if fs.Changed("ib-dev") || *bind != "" {
			c.Source = local.String()
		}
	case prov == "roce":
		// A listener (server or loopback) is on the device's address;
		// rdma_cm has no port 0.
		r.listen = "roce://" + net.JoinHostPort(local.String(), p)
	case *dev == "shm0" && strings.HasPrefix(peer, "unix:"):
		if fs.Changed("port") {
			return bad("-p with SERVER %s: a unix: address is the whole address, it has no port", peer)
		}
		r.dial = peer
	case *dev == "shm0" && peer != "":
		if !isLocalHost(peer) {
			return bad("SERVER %q with -d shm0: shared memory connects processes of one host (localhost, a loopback address or a unix: address)", peer)
		}
		r.dial = "unix:@goverbs-perf-" + p
	case peer != "":
		if strings.HasPrefix(peer, "unix:") {
			return bad("SERVER %s: a unix: address is for -d shm0", peer)
		}
		r.dial = net.JoinHostPort(peer, p)
	case *server && *dev == "shm0":
		r.listen = "unix:@goverbs-perf-" + p
	case *server:
		r.listen = net.JoinHostPort("", p)
	case *dev == "shm0" && fs.Changed("port"):
		r.listen = "unix:@goverbs-perf-" + p
	case *dev == "shm0":
		r.listen = fmt.Sprintf("unix:@goverbs-perf-%d-%d", os.Getpid(), time.Now().UnixNano())
	case fs.Changed("port"):
		r.listen = net.JoinHostPort("127.0.0.1", p)
	default:
		r.listen = "127.0.0.1:0"
	}

	// A goverbs server checks that its client runs what the server was
	// told (the client's parameters are the ones used).
	if *server && !*pt {
		want := c
		given := fs.Changed
		c.Match = func(got perf.Config) error {
			var diff []string
			check := func(flag string, given bool, w, g any) {
				if given && w != g {
					diff = append(diff, fmt.Sprintf("%s %v (this server: %v)", flag, g, w))
				}
			}
			check("-s", given("size") || *all, want.Size, got.Size)
			check("-n", given("iters"), want.Iters, got.Iters)
			check("-q", given("qps"), want.QPs, got.QPs)
			check("-w", given("warmup"), want.Warmup, got.Warmup)
			check("-D", given("duration"), want.Duration, got.Duration)
			check("-Q", given("cq-mod"), want.CQMod, got.CQMod)
			if len(diff) > 0 {
				return fmt.Errorf("the client asks for %s", strings.Join(diff, ", "))
			}
			return nil
		}
		// With -a, each run's expected size is set before it is served.
		r.cfg = c
		r.matchSize = func(n int) { want.Size = n }
		return r, nil
	}
	r.cfg = c
	return r, nil
}

// isLocalHost reports whether host names this host's loopback.
func isLocalHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func perfCmd(args []string) error {
	r, err := parsePerf(args)
	if err != nil {
		return err
	}
	if err := r.cmd.begin(); err != nil {
		return err
	}
	if r.summary {
		return perfAll()
	}
	return r.run()
}

// run runs a parsed perf command line.
func (r *perfRun) run() error {
	c := r.cfg
	if !r.json {
		c.Progress = progressLine()
	}
	prov, what, _ := perfDevice(r.dev)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	if r.server {
		ln, err := rdmacm.Listen(r.listen)
		if err != nil {
			return err
		}
		defer ln.Close()
		fmt.Fprintf(os.Stderr, "goverbs perf %s: waiting for a client on %v (device %s, provider %s)\n", c.Test, ln.LocalAddr(), r.dev, prov)
		c.Progress = nil
		if r.perftest {
			return perf.ServePerftest(ctx, ln, c)
		}
		for _, n := range r.sizes {
			if r.matchSize != nil {
				r.matchSize(n)
			}
			if err := perf.Serve(ctx, ln, c); err != nil {
				return err
			}
		}
		return nil
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 8, 2, ' ', tabwriter.AlignRight)
	if !r.json {
		where := "loopback, both ends in this process"
		if r.dial != "" {
			where = "client of " + r.dial
		}
		proto := ""
		if r.perftest {
			proto = ", perftest's rdma_cm protocol"
		}
		if c.Events {
			proto += ", completion events (-e)"
		}
		fmt.Printf("goverbs perf %s: device %s (provider %s: %s), %s%s\n", c.Test, r.dev, prov, what, where, proto)
		if r.lat {
			fmt.Fprintln(w, "#bytes\t#iterations\tt_min[usec]\tt_max[usec]\tt_typical[usec]\tt_avg[usec]\tt_stdev[usec]\t99% percentile[usec]\t99.9% percentile[usec]\t")
		} else {
			fmt.Fprintln(w, "#bytes\t#iterations\tBW peak[MB/sec]\tBW average[MB/sec]\tMsgRate[Mpps]\t")
		}
	}
	for _, n := range r.sizes {
		c.Size = n
		var res perf.Result
		var err error
		switch {
		case r.dial != "" && r.perftest:
			res, err = perf.RunPerftest(ctx, r.dial, c)
		case r.dial != "":
			res, err = perf.Run(ctx, r.dial, c)
		case r.perftest:
			res, err = perf.LoopbackPerftest(ctx, r.listen, c)
		default:
			res, err = perf.Loopback(ctx, r.listen, c)
		}
		clearProgress(c.Progress)
		if err != nil {
			w.Flush()
			return err
		}
		if res.Device == "" {
			res.Device = r.dev
		}
		res.Provider, _, _ = perfDevice(res.Device)
		if r.json {
			b, _ := json.Marshal(res)
			fmt.Println(string(b))
			continue
		}
		if r.lat {
			fmt.Fprintf(w, "%d\t%d\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t\n", res.Bytes, res.Iters, res.Min, res.Max, res.Typical, res.Avg, res.Stdev, res.P99, res.P999)
		} else {
			fmt.Fprintf(w, "%d\t%d\t%.2f\t%.2f\t%.6f\t\n", res.Bytes, res.Iters, res.PeakMBs, res.AvgMBs, res.MsgRate)
		}
		w.Flush()
	}
	return w.Flush()
}

// summaryEventTests are the tests the summary table also runs in event
// mode (-e), beside their polling rows.
var summaryEventTests = []string{"send_lat", "write_lat", "send_bw"}

// perfAll runs every test once in loopback with its defaults and prints
// one table.
func perfAll() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	fmt.Println("goverbs perf: every test in loopback, one process, both ends busy-polling, and rows -e with")
	fmt.Println("both ends blocking for completion events (ReqNotify, GetEvent) instead:")
	fmt.Println("device iwarp0 (provider iwarp: iWARP over loopback TCP) and device shm0 (provider shm: shared memory)")
	fmt.Println()
	lw := tabwriter.NewWriter(os.Stdout, 0, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(lw, "device\ttest\tbytes\titerations\tt_min[us]\tt_typical[us]\tt_avg[us]\t99%[us]\t99.9%[us]\t")
	bw := tabwriter.NewWriter(os.Stdout, 0, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(bw, "device\ttest\tbytes\titerations\tBW peak[MB/s]\tBW average[MB/s]\tMsgRate[Mpps]\t")
	for _, dev := range []string{"iwarp0", "shm0"} {
		for _, test := range perf.Tests {
			for _, events := range []bool{false, true} {
				if events && !slices.Contains(summaryEventTests, test) {
					continue
				}
				c := perf.Config{Test: test, Size: 65536, Iters: 20000, TxDepth: 128, Warmup: defaultWarmup, CQMod: defaultCQMod, Events: events}
				lat := isLat(test)
				if lat {
					c.Size, c.Iters = 8, 20000
					if events {
						// A blocking round trip costs tens of microseconds
						// (two wake-ups): fewer iterations keep the job short.
						c.Iters, c.Warmup = 5000, 200
					}
				}
				if test == "send_bw" {
					c.Iters = min(c.Iters, perf.MaxSendBWIters)
				}
				addr := "127.0.0.1:0"
				if dev == "shm0" {
					addr = fmt.Sprintf("unix:@goverbs-perf-%d-%s-%t", os.Getpid(), test, events)
					if !lat {
						c.Size, c.Iters = 1<<20, 5000
					}
				}
				name := test
				if events {
					name += " -e"
				}
				c.Progress = progressLine()
				r, err := perf.Loopback(ctx, addr, c)
				clearProgress(c.Progress)
				if err != nil {
					return fmt.Errorf("%s %s: %w", dev, name, err)
				}
				if lat {
					fmt.Fprintf(lw, "%s\t%s\t%d\t%d\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t\n", dev, name, r.Bytes, r.Iters, r.Min, r.Typical, r.Avg, r.P99, r.P999)
				} else {
					fmt.Fprintf(bw, "%s\t%s\t%d\t%d\t%.0f\t%.0f\t%.4f\t\n", dev, name, r.Bytes, r.Iters, r.PeakMBs, r.AvgMBs, r.MsgRate)
				}
			}
		}
	}
	lw.Flush()
	fmt.Println()
	bw.Flush()
	fmt.Println()
	fmt.Println("latency: send and write are half a round trip, read and atomic one whole operation (see goverbs perf -h);")
	fmt.Println("-e: completion events instead of polling (write_lat -e: WRITEs with immediate data)")
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
