package perf

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/leakcheck"
	"github.com/goverbs/goverbs/provider/roce"
	"github.com/goverbs/goverbs/rdmacm"
)

// Every test runs in loopback over iWARP and over shm and produces
// plausible figures.
func TestLoopback(t *testing.T) {
	leakcheck.Check(t)
	for _, dev := range []string{"iwarp0", "shm0"} {
		t.Run(dev, func(t *testing.T) { testLoopback(t, dev) })
	}
}

func testLoopback(t *testing.T, dev string) {
	for _, test := range Tests {
		if racesByDesign(test, false) {
			t.Log("write_lat is measured in the run without -race (see race_test.go)")
			continue
		}
		for _, size := range []int{8, 4096} {
			t.Run(test, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				addr := "127.0.0.1:0"
				if dev == "shm0" {
					addr = fmt.Sprintf("unix:@goverbs-perf-test-%d-%s-%d", os.Getpid(), test, size)
				}
				// Warm-up iterations run on both ends (the server learns
				// their number from the client) and are not counted.
				r, err := Loopback(ctx, addr, Config{Test: test, Size: size, Iters: 200, TxDepth: 16, Warmup: 50})
				if err != nil {
					t.Fatal(err)
				}
				if r.Iters < 1 {
					t.Fatalf("%s: %+v", test, r)
				}
				if (&Config{Test: test}).lat() {
					if r.Iters != 200 {
						t.Fatalf("%s: %d samples, want 200 (warm-up not counted)", test, r.Iters)
					}
					if !(r.Min > 0 && r.Min <= r.Typical && r.Typical <= r.Max && r.P99 <= r.Max) {
						t.Fatalf("%s: latency figures out of order: %+v", test, r)
					}
				} else if r.AvgMBs <= 0 || r.PeakMBs < r.AvgMBs || r.MsgRate <= 0 {
					t.Fatalf("%s: bandwidth figures: %+v", test, r)
				}
			})
		}
	}
}

func TestCheck(t *testing.T) {
	for _, c := range []Config{{Test: "nope", Size: 8, Iters: 1}, {Test: "send_lat", Size: 0, Iters: 1}, {Test: "send_lat", Size: 8, Iters: 0},
		{Test: "send_lat", Size: 8, Iters: 1, Warmup: -1}, {Test: "write_bw", Size: 8, Iters: 1, TxDepth: -1},
		{Test: "write_bw", Size: 8, Iters: 1, CQMod: -1}, {Test: "write_bw", Size: 8, Iters: 1, Duration: -time.Second}} {
		if err := c.Check(); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
	// What goverbs' own protocol cannot do is refused, not changed: a
	// duration is for the one-sided bandwidth tests (send_bw's iterations
	// over iWARP are the server's to refuse: TestSendBWIterations).
	for _, c := range []Config{{Test: "send_bw", Size: 8, Iters: 10, Duration: time.Second},
		{Test: "send_lat", Size: 8, Iters: 10, Duration: time.Second}} {
		if err := c.checkOwn(); err == nil {
			t.Errorf("%+v: no error from checkOwn", c)
		}
	}
	if c := (Config{Test: "send_bw", Size: 8, Iters: 10 * MaxSendBWIters}); c.checkOwn() != nil || c.Iters != 10*MaxSendBWIters {
		t.Errorf("send_bw past the iWARP limit: %v, %d iterations", c.checkOwn(), c.Iters)
	}
}

// A timed bandwidth run of large messages stops at its deadline: the
// clock is read at least every MiB posted, not every 256 rounds (at 8 MiB,
// 256 rounds took over a minute). The run is given far more iterations
// than it can do before its deadline (a counted run would do them all);
// 1000 WRITEs or READs of 8 MiB move 8 GB, which no memory copies in 50
// ms, so a run that stopped did fewer.
func TestDurationBoundsLargeMessages(t *testing.T) {
	leakcheck.Check(t)
	const iters = 1000
	for _, dev := range []string{"iwarp0", "shm0"} {
		for _, test := range []string{"write_bw", "read_bw"} {
			t.Run(dev+"/"+test, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				addr := "127.0.0.1:0"
				if dev == "shm0" {
					addr = fmt.Sprintf("unix:@goverbs-perf-deadline-%d-%s", os.Getpid(), test)
				}
				var seen []Progress
				r, err := Loopback(ctx, addr, Config{Test: test, Size: 8 << 20, Iters: iters, TxDepth: 128, CQMod: 100,
					Duration: 50 * time.Millisecond, Progress: func(p Progress) { seen = append(seen, p) }})
				if err != nil {
					t.Fatal(err)
				}
				if r.Iters < 1 || r.Iters >= iters {
					t.Fatalf("%d iterations of 8 MiB in a 50 ms run, want 1 to %d", r.Iters, iters-1)
				}
				for _, p := range seen {
					if p.Total != 0 {
						t.Fatalf("a timed run reported a total: %+v", p)
					}
				}
				if r.Device != dev {
					t.Fatalf("result names device %q, ran on %s", r.Device, dev)
				}
			})
		}
	}
}

// The deadline of a timed run is checked at every post of a MiB or more,
// and the run posts nothing after the first check that finds it passed
// (but one signaled request, so that a completion covers those before
// it). The clock the deadline is checked against jumps an hour ahead at
// its fourth reading: the run must end within a few requests of it, where
// a check every 256 rounds let a round of 128 requests and 255 more rounds
// go first.
func TestDurationCheckedEveryPost(t *testing.T) {
	leakcheck.Check(t)
	for _, dev := range []string{"iwarp0", "shm0"} {
		t.Run(dev, func(t *testing.T) {
			var reads atomic.Int64
			deadlineClock = func() time.Time {
				if reads.Add(1) > 3 {
					return time.Now().Add(time.Hour)
				}
				return time.Now()
			}
			defer func() { deadlineClock = time.Now }()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			addr := "127.0.0.1:0"
			if dev == "shm0" {
				addr = fmt.Sprintf("unix:@goverbs-perf-clock-%d", os.Getpid())
			}
			r, err := Loopback(ctx, addr, Config{Test: "write_bw", Size: 8 << 20, Iters: 1000, TxDepth: 128, CQMod: 100, Duration: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			if r.Iters < 4 || r.Iters > 5 {
				t.Fatalf("%d requests posted, want 4 (one per clock reading) and at most one more", r.Iters)
			}
		})
	}
}

// A goverbs server learns the client's test and parameters (duration and
// cq_mod too) before it accepts, refuses a client that runs another test,
// and refuses one that its Match refuses, telling the client why.
func TestServeMatch(t *testing.T) {
	leakcheck.Check(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	serve := func(sc Config, cc Config) (Result, error, error) {
		ln, err := rdmacm.Listen("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		served := make(chan error, 1)
		go func() { served <- Serve(ctx, ln, sc) }()
		r, err := Run(ctx, ln.LocalAddr().String(), cc)
		return r, err, <-served
	}
	client := Config{Test: "write_bw", Size: 4096, Iters: 300, TxDepth: 16, CQMod: 7, Duration: 30 * time.Millisecond}

	var got Config
	server := Config{Test: "write_bw", Size: 8, Iters: 1, Match: func(c Config) error { got = c; return nil }}
	if r, err, serr := serve(server, client); err != nil || serr != nil || r.Iters < 1 {
		t.Fatalf("matching client: %+v, %v, server %v", r, err, serr)
	}
	if got.Size != 4096 || got.Iters != 300 || got.QPs != 1 || got.CQMod != 7 || got.Duration != 30*time.Millisecond {
		t.Fatalf("the server's Match saw %+v", got)
	}

	server.Test = "read_bw"
	if _, err, serr := serve(server, client); !errors.Is(err, rdmacm.ErrRejected) || !strings.Contains(err.Error(), "the client runs write_bw, this server read_bw") || serr == nil {
		t.Fatalf("another test: client %v, server %v", err, serr)
	}

	server.Test = "write_bw"
	server.Match = func(c Config) error { return fmt.Errorf("size %d, not 8", c.Size) }
	if _, err, serr := serve(server, client); !errors.Is(err, rdmacm.ErrRejected) || !strings.Contains(err.Error(), "size 4096, not 8") || serr == nil {
		t.Fatalf("refused by Match: client %v, server %v", err, serr)
	}
}

// racesByDesign: tests that poll memory the transport writes (see
// race_test.go).
func racesByDesign(test string, perftest bool) bool {
	return raceEnabled && (test == "write_lat" || perftest && test == "send_bw")
}

// perftest's protocol (-R) between a goverbs server and a goverbs client.
func TestPerftestLoopback(t *testing.T) {
	leakcheck.Check(t)
	for _, test := range Tests {
		if test == "atomic_lat" {
			continue
		}
		if racesByDesign(test, true) {
			t.Logf("%s -R is measured in the run without -race (see race_test.go)", test)
			continue
		}
		for _, qps := range []int{1, 2} {
			if qps > 1 && (&Config{Test: test}).lat() {
				continue
			}
			t.Run(fmt.Sprintf("%s/q=%d", test, qps), func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				r, err := LoopbackPerftest(ctx, "127.0.0.1:0", Config{Test: test, Size: 4096, Iters: 300, TxDepth: 16, QPs: qps})
				if err != nil {
					t.Fatal(err)
				}
				if (&Config{Test: test}).lat() {
					if !(r.Min > 0 && r.Min <= r.Typical && r.Typical <= r.Max) {
						t.Fatalf("latency figures out of order: %+v", r)
					}
				} else if r.Iters != 300*qps || r.AvgMBs <= 0 {
					t.Fatalf("bandwidth figures: %+v", r)
				}
			})
		}
	}
}

// Bandwidth tests over several QPs (-q).
func TestLoopbackQPs(t *testing.T) {
	leakcheck.Check(t)
	for _, test := range []string{"send_bw", "write_bw", "read_bw"} {
		t.Run(test, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var seen []Progress
			r, err := Loopback(ctx, "127.0.0.1:0", Config{Test: test, Size: 4096, Iters: 500, TxDepth: 16, QPs: 3,
				Progress: func(p Progress) { seen = append(seen, p) }})
			if err != nil {
				t.Fatal(err)
			}
			if r.Iters != 1500 || r.AvgMBs <= 0 {
				t.Fatalf("%+v", r)
			}
			for _, p := range seen {
				if p.Done > p.Total || p.Test != test {
					t.Fatalf("progress %+v", p)
				}
			}
		})
	}
}

// With CQMod, one request in CQMod is signaled (and the last one), and its
// completion accounts for those before it: the run still counts every
// request, whether the count is a multiple of CQMod or not, and a timed
// run that stops between two signaled requests posts one more signaled
// one instead of waiting for a completion that would never come.
func TestBandwidthCQMod(t *testing.T) {
	leakcheck.Check(t)
	for _, dev := range []string{"iwarp0", "shm0"} {
		for _, test := range []string{"send_bw", "write_bw", "read_bw"} {
			for _, timed := range []bool{false, true} {
				if timed && test == "send_bw" {
					continue // send_bw runs its iterations (the receives are posted before)
				}
				t.Run(fmt.Sprintf("%s/%s/timed=%v", dev, test, timed), func(t *testing.T) {
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer cancel()
					addr := "127.0.0.1:0"
					if dev == "shm0" {
						addr = fmt.Sprintf("unix:@goverbs-perf-cqmod-%d-%s-%v", os.Getpid(), test, timed)
					}
					c := Config{Test: test, Size: 64, Iters: 1003, TxDepth: 16, CQMod: 7}
					if timed {
						c.Duration = 30 * time.Millisecond
					}
					r, err := Loopback(ctx, addr, c)
					if err != nil {
						t.Fatal(err)
					}
					if !timed && r.Iters != 1003 || timed && r.Iters < 1 || r.AvgMBs <= 0 {
						t.Fatalf("%+v", r)
					}
				})
			}
		}
	}
}

// The perftest handshake structure has perftest's layout.
func TestPTDest(t *testing.T) {
	d := ptDest{LID: 1, OutReads: 2, QPN: 3, PSN: 4, RKey: 5, VAddr: 0x0102030405060708, SRQN: 7, GIDIndex: 8}
	d.GID[0], d.GID[15] = 0xfe, 0x01
	b := d.encode()
	if len(b) != 56 || b[3] != 1 || b[19] != 5 || b[24] != 1 || b[31] != 8 || b[32] != 0xfe || b[47] != 1 || b[51] != 7 || b[55] != 8 {
		t.Fatalf("layout % x", b)
	}
	if e, err := decodePTDest(b); err != nil || e != d {
		t.Fatalf("%+v %v", e, err)
	}
}

// roceAddr adds a RoCE device on a loopback address of this process's
// (host its last byte): RoCE's UDP port is one per address, and other
// test processes may run at the same time.
func roceAddr(t *testing.T, host byte) netip.Addr {
	p := os.Getpid()
	addr := netip.AddrFrom4([4]byte{127, byte(16 + p%200), byte(p / 200 % 250), host})
	if _, err := roce.AddDevice(addr); err != nil {
		t.Fatal(err)
	}
	return addr
}

// perftest's protocol over RoCE: atomic_lat (fetch-and-add, which RoCE
// has) and send_bw without iWARP's receiver credits (a sender that finds
// no receive is told to wait by an RNR NAK).
func TestPerftestLoopbackRoCE(t *testing.T) {
	leakcheck.Check(t)
	addr := roceAddr(t, 9)
	for i, test := range []string{"atomic_lat", "send_bw", "read_lat"} {
		if racesByDesign(test, true) {
			continue
		}
		t.Run(test, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			r, err := LoopbackPerftest(ctx, fmt.Sprintf("roce://%v:%d", addr, 18600+i), Config{Test: test, Size: 4096, Iters: 300, TxDepth: 16})
			if err != nil {
				t.Fatal(err)
			}
			if r.Iters != 300 || r.Device == "" {
				t.Fatalf("%+v", r)
			}
		})
	}
}

// A bandwidth test posting lists (perftest's post_list) completes every
// request once, whether the list size divides the iterations and cq_mod
// or not, over both devices, after a warm-up (send_bw has none); a timed
// run with lists ends too.
func TestPostList(t *testing.T) {
	for _, dev := range []string{"iwarp0", "shm0"} {
		for _, test := range []string{"write_bw", "read_bw", "send_bw"} {
			t.Run(dev+"/"+test, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				addr := "127.0.0.1:0"
				if dev == "shm0" {
					addr = fmt.Sprintf("unix:@goverbs-perf-list-%d-%s", os.Getpid(), test)
				}
				r, err := Loopback(ctx, addr, Config{Test: test, Size: 64, Iters: 1000, TxDepth: 32, CQMod: 10, PostList: 7, Warmup: 100})
				if err != nil {
					t.Fatal(err)
				}
				if r.Iters != 1000 || r.AvgMBs <= 0 {
					t.Fatalf("%+v", r)
				}
			})
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	addr := fmt.Sprintf("unix:@goverbs-perf-list-%d-timed", os.Getpid())
	r, err := Loopback(ctx, addr, Config{Test: "write_bw", Size: 8, Iters: 5000, Duration: 200 * time.Millisecond, TxDepth: 128, CQMod: 100, PostList: 16})
	if err != nil || r.Iters < 1000 {
		t.Fatalf("timed run with post lists: %+v %v", r, err)
	}
}

// send_bw runs any number of iterations where a SEND that finds no
// receive waits for one (shm, RoCE: the receiver keeps SendBWRxDepth
// posted, and the sender's requests in flight are fewer), every message
// received; over iWARP, which has no RNR retry, the server refuses more
// than MaxSendBWIters, saying why.
func TestSendBWIterations(t *testing.T) {
	leakcheck.Check(t)
	n := 4*SendBWRxDepth + MaxSendBWIters // past both
	for _, addr := range []string{fmt.Sprintf("unix:@goverbs-perf-sendbw-%d", os.Getpid()), fmt.Sprintf("roce://%v:7391", roceAddr(t, 10))} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		r, err := Loopback(ctx, addr, Config{Test: "send_bw", Size: 8, Iters: n, TxDepth: 128})
		cancel()
		if err != nil {
			t.Fatalf("%s: %v", addr, err)
		}
		if r.Iters != n || r.MsgRate <= 0 {
			t.Fatalf("%s: %+v, want %d iterations", addr, r, n)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := Loopback(ctx, "127.0.0.1:0", Config{Test: "send_bw", Size: 8, Iters: MaxSendBWIters + 1, TxDepth: 128})
	if err == nil || !strings.Contains(err.Error(), "no RNR retry") {
		t.Fatalf("send_bw over iWARP, %d iterations: %v, want the server's refusal", MaxSendBWIters+1, err)
	}
}
