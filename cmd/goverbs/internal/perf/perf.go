// Package perf is the measuring engine of `goverbs perf`: perftest's tests
// (send/write/read latency and bandwidth, atomic latency) between two QPs
// connected with rdmacm, in one process (loopback over a real TCP
// connection) or between a server and a client.
//
// Method. Latency tests time every iteration (time.Now around one round
// trip, or around one RDMA READ or atomic until its completion) and report
// the distribution: one-way figures are half a round trip for send and
// write, the full operation for read and atomic. Bandwidth tests keep up to
// TxDepth work requests in flight, count the bytes of the completions
// polled, and divide by the elapsed time; the peak is the best window of at
// least a twentieth of the run and 5 ms. Every poll loop busy-polls
// (polled mode), or in event mode (Config.Events, perftest's -e) blocks on
// a completion channel between polls.
package perf

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// Tests lists the tests by name.
var Tests = []string{"send_lat", "send_bw", "write_lat", "write_bw", "read_lat", "read_bw", "atomic_lat"}

// Config is what to measure.
type Config struct {
	Test  string
	Size  int
	Iters int // per QP
	// Duration, when non-zero, makes a bandwidth test (write_bw, read_bw)
	// post for this long instead of Iters requests; then the requests in
	// flight complete and the run ends.
	Duration time.Duration
	// TxDepth is the number of work requests kept in flight (the send
	// queue's depth); 0 means 128.
	TxDepth int
	// QPs is the number of QPs (connections) a bandwidth test drives in
	// parallel, round-robin from one goroutine as perftest does; 0 means 1.
	QPs int
	// CQMod is how many work requests of a bandwidth test share one
	// completion (perftest's cq_mod): only every CQMod-th is signaled, and
	// its completion accounts for those before it. 0 or 1: every one.
	CQMod int
	// PostList is how many work requests a bandwidth test posts with one
	// PostSend (perftest's post_list): a list shares the QP's lock and
	// the transport's per-post work. 0 or 1: one at a time.
	PostList int
	// Warmup is the number of untimed iterations a latency test runs
	// before its Iters timed ones (as ucx_perftest -w): the first exchanges
	// pay for cold caches and first touches of pages, not the transport.
	// write_bw and read_bw post that many requests per QP, and wait for
	// them, before the clock starts (send_bw ignores it) (ucx_perftest's bandwidth tests warm
	// up the same way): a run of a few milliseconds otherwise measures
	// the connection's first use too (over shm, the mapping of the
	// peer's memory).
	Warmup int
	// Events makes the measuring loops of this side block for completions
	// the C way, as perftest's -e does: ReqNotify, CompChannel.GetEvent,
	// AckEvents, Poll (see events.go). Each side decides for itself; a
	// server does not learn it from its client. write_lat of goverbs'
	// protocol then signals each message with an RDMA WRITE with
	// immediate data, whose receive completion is what the peer blocks
	// for (a plain WRITE completes at the target without any event).
	Events bool
	// withImm: write_lat's messages are RDMA WRITEs with immediate data
	// (Config.imm).
	withImm bool
	// repost: send_bw's receiver posts SendBWRxDepth receives and posts
	// each again once it completed (a transport with RNR retry: a SEND
	// that finds no receive waits for one), rather than all of them
	// before the run.
	repost bool
	// Source, when set, is the local address a client connects from
	// (rdmacm.CreateIDFrom; RoCE: it chooses the device).
	Source string
	// Progress, when set, is called about every 200 ms of a measurement
	// from the measuring goroutine (keep it short).
	Progress func(Progress)
	// Match, when set on a server of goverbs' protocol (Serve), is given
	// the parameters the client asks for (Test, Size, Iters, QPs, Warmup,
	// Duration, CQMod) before the client is accepted; an error rejects the
	// client, with the error's text as the reason.
	Match func(client Config) error
}

// Progress is how far a measurement is.
type Progress struct {
	Test    string
	Done    int // iterations completed (all QPs)
	Total   int // 0 when the run is timed (-D)
	Elapsed time.Duration
	Bytes   int64 // bytes completed
}

// progress reports iteration done of a single-QP latency run.
func (c *Config) progress(done int, start time.Time) {
	if c.Progress == nil || done&0x3ff != 0 {
		return
	}
	c.Progress(Progress{Test: c.Test, Done: done, Total: c.Iters, Elapsed: time.Since(start), Bytes: int64(done) * int64(c.Size)})
}

// Result is one measurement.
type Result struct {
	Test string `json:"test"`
	// Provider is left to the caller (the package knows devices only).
	Provider string `json:"provider,omitempty"`
	// Device is the device the measuring end's QPs ran on.
	Device string `json:"device,omitempty"`
	Bytes  int    `json:"bytes"`
	Iters  int    `json:"iterations"`
	// latency tests, microseconds
	Min     float64 `json:"t_min_us,omitempty"`
	Max     float64 `json:"t_max_us,omitempty"`
	Typical float64 `json:"t_typical_us,omitempty"`
	Avg     float64 `json:"t_avg_us,omitempty"`
	Stdev   float64 `json:"t_stdev_us,omitempty"`
	P99     float64 `json:"p99_us,omitempty"`
	P999    float64 `json:"p99_9_us,omitempty"`
	// bandwidth tests
	PeakMBs float64 `json:"bw_peak_mb_s,omitempty"`
	AvgMBs  float64 `json:"bw_avg_mb_s,omitempty"`
	MsgRate float64 `json:"msg_rate_mpps,omitempty"`
	// Events is the number of completion events the measuring side took
	// (GetEvent returns) in event mode, warm-up included; zero when it
	// polled.
	Events int64 `json:"events,omitempty"`
}

// imm reports whether write_lat's messages are RDMA WRITEs with immediate
// data: the client decides it (its event mode: Run sets withImm), the
// server follows (Serve sets it from the client's private data).
func (c *Config) imm() bool {
	return c.Test == "write_lat" && c.withImm
}

func (c *Config) lat() bool {
	return c.Test == "send_lat" || c.Test == "write_lat" || c.Test == "read_lat" || c.Test == "atomic_lat"
}

// Check validates a configuration.
func (c *Config) Check() error {
	if !slices.Contains(Tests, c.Test) {
		return fmt.Errorf("unknown test %q (one of %v)", c.Test, Tests)
	}
	if c.Test == "atomic_lat" {
		c.Size = 8
	}
	if c.Size < 1 || c.Size > 8<<20 {
		return fmt.Errorf("size %d out of range (1 B to 8 MiB)", c.Size)
	}
	if c.Iters < 1 {
		return fmt.Errorf("iterations %d", c.Iters)
	}
	if c.Warmup < 0 || c.Warmup > 1<<30 {
		return fmt.Errorf("warm-up iterations %d", c.Warmup)
	}
	if c.TxDepth < 0 || c.TxDepth > 1<<16 {
		return fmt.Errorf("send queue depth %d (1 to 65536)", c.TxDepth)
	}
	if c.TxDepth == 0 {
		c.TxDepth = 128
	}
	if c.CQMod < 0 {
		return fmt.Errorf("cq_mod %d", c.CQMod)
	}
	if c.PostList < 0 || c.PostList > 1<<16 {
		return fmt.Errorf("post list %d (1 to 65536)", c.PostList)
	}
	if c.Duration < 0 {
		return fmt.Errorf("duration %v", c.Duration)
	}
	if c.QPs < 1 {
		c.QPs = 1
	}
	if c.QPs > 64 {
		return fmt.Errorf("%d QPs (at most 64)", c.QPs)
	}
	if c.QPs > 1 && c.lat() {
		return fmt.Errorf("-q %d: latency tests run on one QP", c.QPs)
	}
	return nil
}

// MaxSendBWIters is the most iterations send_bw runs in goverbs' protocol
// over iWARP: it has no RNR retry (a SEND that finds no receive ends the
// connection), so every receive is posted before the run, and the receive
// queue holds at most this many. Over the other transports a SEND that
// finds no receive waits for one (RNR retry), and the receiver keeps
// SendBWRxDepth receives posted, as perftest does: any number.
const MaxSendBWIters = 8192

// SendBWRxDepth is how many receives send_bw's receiver keeps posted over
// a transport with RNR retry (perftest's rx_depth).
const SendBWRxDepth = 512

// checkOwn validates a configuration for goverbs' own protocol (Run,
// Serve, Loopback).
func (c *Config) checkOwn() error {
	if err := c.Check(); err != nil {
		return err
	}
	if c.Duration > 0 && (c.lat() || c.Test == "send_bw") {
		return fmt.Errorf("%s runs a number of iterations, not a duration (a duration is for write_bw and read_bw)", c.Test)
	}
	return nil
}

// summarize fills r's latency figures from the samples d (sorting d).
func summarize(r *Result, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	slices.Sort(d)
	us := func(x time.Duration) float64 { return float64(x) / 1e3 }
	var sum, sq float64
	for _, x := range d {
		sum += us(x)
	}
	avg := sum / float64(len(d))
	for _, x := range d {
		sq += (us(x) - avg) * (us(x) - avg)
	}
	at := func(q float64) float64 { return us(d[min(len(d)-1, int(q*float64(len(d))))]) }
	r.Iters = len(d)
	r.Min, r.Max, r.Typical, r.Avg = us(d[0]), us(d[len(d)-1]), at(0.5), avg
	r.Stdev = math.Sqrt(sq / float64(len(d)))
	r.P99, r.P999 = at(0.99), at(0.999)
}

// laps takes one time stamp per iteration of a latency test (goverbs' own
// tests and the perftest-compatible ones), as perftest does: a sample is
// the time between two consecutive stamps, so the clock is read once per
// iteration (a time.Now costs two clock reads and a duration a third) and
// the loop's own work between iterations (posting the next receive)
// counts, as it does in a real exchange. The stamp is taken right after
// the post, not before it: the interval between stamps is the same, but
// the clock read (20-30 ns in a VM, where perftest's rdtsc is a few) then
// falls while the message is in flight instead of delaying it.
type laps struct {
	base time.Time
	t    []time.Duration // since base
}

// newLaps makes room for the stamps of iters iterations and the end.
func newLaps(iters int) *laps {
	return &laps{base: time.Now(), t: samples[time.Duration](iters + 1)}
}

func (l *laps) stamp() { l.t = append(l.t, time.Since(l.base)) }

// samples turns the stamps into samples, each divided by div (2 for a
// ping-pong, whose one-way latency is half the round trip).
func (l *laps) samples(div time.Duration) []time.Duration {
	if len(l.t) < 2 {
		return nil
	}
	d := l.t[:len(l.t)-1]
	for i := range d {
		d[i] = (l.t[i+1] - l.t[i]) / div
	}
	return d
}

// samples returns an empty slice with room for n latency samples (or time
// stamps), its memory already written: a first write to each page inside
// the timed loop would add its page fault to the figures.
func samples[T any](n int) []T {
	d := make([]T, n)
	var z T
	for i := range d {
		d[i] = z
	}
	return d[:0]
}
