package perf

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/leakcheck"
	"github.com/goverbs/goverbs/rdmacm"
	"github.com/goverbs/goverbs/verbs"
)

// eventAddr is a loopback address for dev, unique to name.
func eventAddr(dev, name string) string {
	if dev == "shm0" {
		return fmt.Sprintf("unix:@goverbs-perf-ev-%d-%s", os.Getpid(), name)
	}
	return "127.0.0.1:0"
}

// checkEventResult checks a run of c in event mode: every iteration
// counted (perftest's write_lat, whose samples are the gaps between the
// iterations' stamps, has one fewer), the figures in order, and at least
// one event taken but never more than the completions the measuring side
// could have had, at most two per iteration (a receive and a send): an
// event needs a completion that fired the CQ's arming, so a spurious one
// would show here.
func checkEventResult(t *testing.T, c Config, r Result, perftest bool) {
	t.Helper()
	if c.lat() {
		want := c.Iters
		if perftest && c.Test == "write_lat" {
			want--
		}
		if r.Iters != want || !(r.Min > 0 && r.Min <= r.Typical && r.Typical <= r.Max && r.P99 <= r.Max) {
			t.Fatalf("latency figures: %+v", r)
		}
	} else if r.Iters != c.Iters*max(c.QPs, 1) || r.AvgMBs <= 0 || r.PeakMBs < r.AvgMBs || r.MsgRate <= 0 {
		t.Fatalf("bandwidth figures: %+v", r)
	}
	most := int64(2 * (c.Warmup + c.Iters) * max(c.QPs, 1))
	if !c.Events {
		most = 0
	}
	// A test whose completions need the peer's answer waits for it; the
	// completions of WRITEs and SENDs may all be there before the poll
	// (an iWARP WRITE completes once the socket took it), and so may
	// those of READs and atomics over shm (the initiator does them).
	least := int64(0)
	switch {
	case !c.Events:
	case c.Test == "send_lat", c.Test == "write_lat" && !perftest:
		least = 1
	case r.Device != "shm0" && (c.Test == "read_bw" || c.Test == "read_lat" || c.Test == "atomic_lat"):
		least = 1
	}
	if r.Events < least || r.Events > most {
		t.Fatalf("%d completion events taken, want %d to %d (events %v): %+v", r.Events, least, most, c.Events, r)
	}
}

// Every test runs in event mode (-e) on both ends, over iWARP and shm, and
// counts every iteration; a polling run takes no event.
func TestEvents(t *testing.T) {
	leakcheck.Check(t)
	for _, dev := range []string{"iwarp0", "shm0"} {
		for _, test := range Tests {
			for _, events := range []bool{true, false} {
				if !events && test != "send_lat" {
					continue // TestLoopback runs the polling ones
				}
				if racesByDesign(test, false) && !events {
					continue
				}
				name := fmt.Sprintf("%s/%s/events=%v", dev, test, events)
				t.Run(name, func(t *testing.T) {
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer cancel()
					c := Config{Test: test, Size: 8, Iters: 200, TxDepth: 16, Warmup: 20, CQMod: 7, Events: events}
					if test == "send_bw" {
						c.Warmup = 0
					}
					r, err := Loopback(ctx, eventAddr(dev, fmt.Sprintf("%s-%v", test, events)), c)
					if err != nil {
						t.Fatal(err)
					}
					checkEventResult(t, c, r, false)
				})
			}
		}
	}
}

// Event mode is each end's own choice: a client in event mode against a
// polling server and the other way round. write_lat's immediate data is
// the client's choice, which the server follows.
func TestEventsOneSide(t *testing.T) {
	leakcheck.Check(t)
	for _, dev := range []string{"iwarp0", "shm0"} {
		for _, test := range []string{"send_lat", "write_lat", "send_bw", "write_bw", "read_lat"} {
			for _, clientEvents := range []bool{true, false} {
				if racesByDesign(test, false) && !clientEvents {
					continue // a polling client: write_lat polls memory
				}
				t.Run(fmt.Sprintf("%s/%s/client-events=%v", dev, test, clientEvents), func(t *testing.T) {
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer cancel()
					addr := eventAddr(dev, fmt.Sprintf("one-%s-%v", test, clientEvents))
					ln, err := rdmacm.Listen(addr)
					if err != nil {
						t.Fatal(err)
					}
					defer ln.Close()
					c := Config{Test: test, Size: 64, Iters: 150, TxDepth: 16, Warmup: 10, CQMod: 5, Events: clientEvents}
					if test == "send_bw" {
						c.Warmup = 0
					}
					sc := c
					sc.Events = !clientEvents
					served := make(chan error, 1)
					go func() { served <- Serve(ctx, ln, sc) }()
					r, err := Run(ctx, ln.LocalAddr().String(), c)
					if serr := <-served; err != nil || serr != nil {
						t.Fatalf("client %v, server %v", err, serr)
					}
					checkEventResult(t, c, r, false)
				})
			}
		}
	}
}

// perftest's protocol (-R) in event mode on both ends, one QP and two.
func TestEventsPerftest(t *testing.T) {
	leakcheck.Check(t)
	for _, test := range Tests {
		if test == "atomic_lat" || racesByDesign(test, true) {
			continue // atomic_lat -R runs over RoCE (TestEventsPerftestRoCE)
		}
		for _, qps := range []int{1, 2} {
			if qps > 1 && (&Config{Test: test}).lat() {
				continue
			}
			t.Run(fmt.Sprintf("%s/q=%d", test, qps), func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				c := Config{Test: test, Size: 4096, Iters: 300, TxDepth: 16, QPs: qps, CQMod: 10, Events: true}
				r, err := LoopbackPerftest(ctx, "127.0.0.1:0", c)
				if err != nil {
					t.Fatal(err)
				}
				checkEventResult(t, c, r, true)
			})
		}
	}
}

// A wait in event mode ends with its context, and the CQs and channel it
// made are released: no hang when nothing comes.
func TestEventsWaitEnds(t *testing.T) {
	leakcheck.Check(t)
	vc, err := verbs.OpenDevice("iwarp0")
	if err != nil {
		t.Fatal(err)
	}
	defer vc.Close()
	e := newEvents(&Config{Events: true})
	attr := verbs.QPInitAttr{Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4}}
	if err := e.attach(vc, &attr); err != nil {
		t.Fatal(err)
	}
	if attr.SendCQ == nil || attr.RecvCQ == nil || attr.SendCQ == attr.RecvCQ || attr.SendCQ.Channel() != attr.RecvCQ.Channel() {
		t.Fatalf("attach: send CQ %p, receive CQ %p: two CQs on one channel", attr.SendCQ, attr.RecvCQ)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	wc := make([]verbs.WC, 1)
	if err := e.one(ctx, attr.RecvCQ, wc); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a wait with nothing to come: %v, want the context's deadline", err)
	}
	if e.count() != 0 {
		t.Fatalf("%d events taken from an idle CQ", e.count())
	}
	e.close()
	if err := attr.RecvCQ.ReqNotify(false); err == nil {
		t.Fatal("the CQs of event mode outlive close")
	}
	var polled *events
	if err := polled.attach(vc, &verbs.QPInitAttr{}); err != nil || polled.count() != 0 {
		t.Fatalf("polled mode: attach %v, count %d", err, polled.count())
	}
	polled.close()
}

// A bandwidth run whose send queue outruns the transport blocks for its
// completions in event mode: 1 MiB WRITEs and SENDs, sixteen in flight, are
// more than loopback TCP's socket buffers hold. Over shm the run need not
// block: a WRITE or READ is the initiator's own copy, whose completion may
// be there at once; it must still count right and take no stray event.
func TestEventsBandwidthBlocks(t *testing.T) {
	leakcheck.Check(t)
	for _, dev := range []string{"iwarp0", "shm0"} {
		for _, test := range []string{"write_bw", "send_bw", "read_bw"} {
			t.Run(dev+"/"+test, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				c := Config{Test: test, Size: 1 << 20, Iters: 64, TxDepth: 16, CQMod: 4, Events: true}
				r, err := Loopback(ctx, eventAddr(dev, "blocks-"+test), c)
				if err != nil {
					t.Fatal(err)
				}
				checkEventResult(t, c, r, false)
				t.Logf("%s %s: %d events for %d requests", dev, test, r.Events, r.Iters)
				if r.Events < 1 && dev == "iwarp0" {
					t.Fatalf("%d events: the run never blocked", r.Events)
				}
			})
		}
	}
}
