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
// (polled mode).
package perf

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/goverbs/goverbs/rdmacm"
	"github.com/goverbs/goverbs/verbs"
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

// MaxSendBWIters is the most iterations send_bw runs in goverbs' protocol:
// iWARP has no RNR retry, so every receive is posted before the run, and
// the receive queue holds at most this many.
const MaxSendBWIters = 8192

// checkOwn validates a configuration for goverbs' own protocol (Run,
// Serve, Loopback).
func (c *Config) checkOwn() error {
	if err := c.Check(); err != nil {
		return err
	}
	if c.Test == "send_bw" && c.Iters > MaxSendBWIters {
		return fmt.Errorf("send_bw runs at most %d iterations (every receive is posted before the run: iWARP has no RNR retry)", MaxSendBWIters)
	}
	if c.Duration > 0 && (c.lat() || c.Test == "send_bw") {
		return fmt.Errorf("%s runs a number of iterations, not a duration (a duration is for write_bw and read_bw)", c.Test)
	}
	return nil
}

// side is one end: its identifier and its registered buffer.
type side struct {
	id  *rdmacm.ID
	mem *verbs.Buffer
	buf []byte
	mr  *verbs.MR
	// The client's QP is created in a thread domain (td), through the
	// parent domain pd: one goroutine posts to it, so a provider may post
	// without the QP's lock.
	pd *verbs.PD
	td *verbs.TD
	// the peer's buffer
	raddr uint64
	rkey  uint32
}

// The private data of goverbs' own protocol: addr, rkey, size, iterations,
// QPs, then warm-up iterations (a peer that sends only pdLen bytes asks for
// none), then the duration in milliseconds and cq_mod (which only the
// client uses: they are there for the server's Match) and the test (its
// index in Tests plus one).
const (
	pdLen     = 8 + 4 + 4 + 4 + 4
	pdWarmLen = pdLen + 4
	pdFullLen = pdWarmLen + 4 + 4 + 4
)

func (s *side) privateData(c *Config) []byte {
	b := make([]byte, pdFullLen)
	binary.BigEndian.PutUint64(b, s.mr.Addr())
	binary.BigEndian.PutUint32(b[8:], s.mr.RKey())
	binary.BigEndian.PutUint32(b[12:], uint32(c.Size))
	binary.BigEndian.PutUint32(b[16:], uint32(c.Iters))
	binary.BigEndian.PutUint32(b[20:], uint32(c.QPs))
	binary.BigEndian.PutUint32(b[24:], uint32(c.Warmup))
	binary.BigEndian.PutUint32(b[28:], uint32(min(c.Duration.Milliseconds(), math.MaxUint32)))
	binary.BigEndian.PutUint32(b[32:], uint32(c.CQMod))
	binary.BigEndian.PutUint32(b[36:], uint32(slices.Index(Tests, c.Test)+1))
	return b
}

func (s *side) peer(pd []byte) error {
	if len(pd) < pdLen {
		return fmt.Errorf("perf: peer sent %d bytes of private data, want %d", len(pd), pdLen)
	}
	s.raddr, s.rkey = binary.BigEndian.Uint64(pd), binary.BigEndian.Uint32(pd[8:])
	return nil
}

func qpAttr(c *Config) *verbs.QPInitAttr {
	rq := c.TxDepth + 1
	if c.Test == "send_bw" {
		rq = c.Iters + 1
	}
	return &verbs.QPInitAttr{QPType: verbs.QPTRC, Cap: verbs.QPCap{MaxSendWR: c.TxDepth + 1, MaxRecvWR: rq,
		MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64}}
}

// threadDomain gives the client's side of an RDMA WRITE or READ test a
// thread domain and the parent domain to create its QP through: one
// goroutine posts to a client QP (a bandwidth test round-robins its QPs
// from one). The pure-Go providers then post a WRITE or READ posted alone
// without the QP's lock, but the lock's other uses cost a little more
// (verbs.TD): the SEND and atomic tests go without.
func (s *side) threadDomain(c *Config) error {
	if !strings.HasPrefix(c.Test, "write_") && !strings.HasPrefix(c.Test, "read_") {
		return nil
	}
	ctx, pd := s.id.DeviceContext(), s.id.PD()
	if ctx == nil || pd == nil {
		return nil // the identifier has no device yet: no thread domain
	}
	td, err := ctx.AllocTD()
	if err != nil {
		return err
	}
	if s.pd, err = ctx.AllocParentDomain(verbs.ParentDomainAttr{PD: pd, TD: td}); err != nil {
		td.Dealloc()
		return err
	}
	s.td = td
	return nil
}

func (s *side) register(c *Config) error {
	n := markSize(c.Size) * 2
	// Memory outside the Go heap, as RDMA applications register it; over
	// shm it is a memfd the peer maps, so one-sided operations are direct.
	b, err := verbs.AllocBuffer(n)
	if err != nil {
		return err
	}
	s.mem, s.buf = b, b.Bytes()[:n]
	s.mr, err = s.id.PD().RegMR(s.buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic)
	return err
}

func (s *side) close() {
	s.id.Close()
	if s.pd != nil {
		s.pd.Dealloc()
		s.td.Dealloc()
	}
	if s.mr != nil {
		s.mr.Dereg()
	}
	if s.mem != nil {
		s.mem.Free()
	}
}

// Serve accepts one client on ln (its Config.QPs connections) and plays
// the passive side of the test: size, iterations, QPs and warm-up come
// from the client, which must run the server's test (and pass Match, when
// set).
func Serve(ctx context.Context, ln *rdmacm.ID, c Config) error {
	req, err := ln.GetRequest(ctx)
	if err != nil {
		return err
	}
	pd := req.PrivateData()
	if len(pd) >= pdLen {
		c.Size, c.Iters, c.QPs = int(binary.BigEndian.Uint32(pd[12:])), int(binary.BigEndian.Uint32(pd[16:])), int(binary.BigEndian.Uint32(pd[20:]))
		c.Warmup, c.Duration, c.CQMod = 0, 0, 0
		if len(pd) >= pdWarmLen {
			c.Warmup = int(binary.BigEndian.Uint32(pd[24:]))
		}
		if len(pd) >= pdFullLen {
			c.Duration = time.Duration(binary.BigEndian.Uint32(pd[28:])) * time.Millisecond
			c.CQMod = int(binary.BigEndian.Uint32(pd[32:]))
		}
	}
	err = c.checkOwn()
	if len(pd) >= pdFullLen {
		if t := int(binary.BigEndian.Uint32(pd[36:])) - 1; err == nil && t != slices.Index(Tests, c.Test) {
			name := "an unknown test"
			if t >= 0 && t < len(Tests) {
				name = Tests[t]
			}
			err = fmt.Errorf("the client runs %s, this server %s", name, c.Test)
		}
	}
	if err == nil && c.Match != nil {
		err = c.Match(c)
	}
	if err != nil {
		req.Reject([]byte(err.Error()))
		req.Close()
		return err
	}
	var ss []*side
	defer func() {
		for _, s := range ss {
			s.close()
		}
	}()
	for i := range c.QPs {
		if i > 0 {
			if req, err = ln.GetRequest(ctx); err != nil {
				return err
			}
		}
		s := &side{id: req}
		ss = append(ss, s)
		if err := s.accept(ctx, &c); err != nil {
			return err
		}
	}
	if len(ss) == 1 {
		return ss[0].serve(ctx, &c)
	}
	return serveMany(ctx, ss, &c)
}

// accept answers the connection request of s.
func (s *side) accept(ctx context.Context, c *Config) error {
	req := s.id
	if err := req.CreateQP(nil, *qpAttr(c)); err != nil {
		req.Reject(nil)
		return err
	}
	if err := s.register(c); err != nil {
		req.Reject(nil)
		return err
	}
	if err := s.peer(req.PrivateData()); err != nil {
		req.Reject(nil)
		return err
	}
	if err := s.prepost(c); err != nil {
		req.Reject(nil)
		return err
	}
	return req.Accept(ctx, &rdmacm.ConnParam{PrivateData: s.privateData(c), ResponderResources: 16, InitiatorDepth: 16})
}

// serveMany is the passive side of a bandwidth test over several QPs.
func serveMany(ctx context.Context, ss []*side, c *Config) error {
	wc := make([]verbs.WC, 64)
	if c.Test == "send_bw" {
		for got := 0; got < c.Iters*len(ss); {
			progressed := false
			for _, s := range ss {
				n, err := s.id.RecvCQ().Poll(wc)
				if err != nil {
					return err
				}
				for _, w := range wc[:n] {
					if err := w.Err(); err != nil {
						return err
					}
				}
				got += n
				progressed = progressed || n > 0
			}
			if !progressed && ctx.Err() != nil {
				return ctx.Err()
			}
		}
	}
	// Keep every connection progressing (polled mode) until the client
	// has left them all.
	for i := 0; ; i++ {
		for _, s := range ss {
			s.id.RecvCQ().Poll(wc)
		}
		if i&0x3ff != 0 {
			continue
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		left := 0
		for _, s := range ss {
			select {
			case <-s.id.Done():
				left++
			default:
			}
		}
		if left == len(ss) {
			return nil
		}
	}
}

// Run connects to the server at addr (Config.QPs connections), measures
// and returns the result.
func Run(ctx context.Context, addr string, c Config) (Result, error) {
	if err := c.checkOwn(); err != nil {
		return Result{}, err
	}
	var ss []*side
	defer func() {
		for _, s := range ss {
			s.close()
		}
	}()
	for range c.QPs {
		id, err := rdmacm.CreateIDFrom(c.Source, addr)
		if err != nil {
			return Result{}, err
		}
		s := &side{id: id}
		ss = append(ss, s)
		if err := s.threadDomain(&c); err != nil {
			return Result{}, err
		}
		if err := id.CreateQP(s.pd, *qpAttr(&c)); err != nil {
			return Result{}, err
		}
		if err := s.register(&c); err != nil {
			return Result{}, err
		}
		if err := s.prepost(&c); err != nil {
			return Result{}, err
		}
		err = id.Connect(ctx, &rdmacm.ConnParam{PrivateData: s.privateData(&c), ResponderResources: 16, InitiatorDepth: 16,
			Extensions: c.Test == "atomic_lat"})
		if err != nil {
			return Result{}, refused(err)
		}
		if err := s.peer(id.PrivateData()); err != nil {
			return Result{}, err
		}
	}
	var r Result
	var err error
	if c.lat() {
		r, err = ss[0].run(ctx, &c)
	} else {
		ks := make([]*bwQP, len(ss))
		for i, s := range ss {
			ks[i] = s.bwQP(&c)
		}
		if err = warmUp(ctx, &c, ks); err == nil {
			r, err = bandwidth(ctx, &c, ks, Result{Test: c.Test, Bytes: c.Size, Iters: c.Iters})
		}
	}
	if err == nil {
		r.Device = ss[0].id.DeviceContext().Device().Name()
		for _, s := range ss {
			s.id.Disconnect()
		}
	}
	return r, err
}

// refused adds to a rejection by a goverbs server the reason it gave (Serve
// rejects with the text of its error).
func refused(err error) error {
	var rej *rdmacm.RejectedError
	if !errors.As(err, &rej) {
		return err
	}
	why := strings.TrimRight(string(rej.PrivateData), "\x00")
	if why == "" || strings.ContainsFunc(why, func(r rune) bool { return !unicode.IsPrint(r) }) {
		return err
	}
	return fmt.Errorf("%w (the server says: %s)", err, why)
}

// Loopback runs a server and a client in this process over addr (host:port,
// or unix:... for shared memory).
func Loopback(ctx context.Context, addr string, c Config) (Result, error) {
	if err := c.checkOwn(); err != nil {
		return Result{}, err
	}
	return loopback(ctx, addr, c, Serve, Run)
}

// LoopbackPerftest runs a perftest-protocol server and client (-R) in this
// process over addr (host:port).
func LoopbackPerftest(ctx context.Context, addr string, c Config) (Result, error) {
	if err := c.checkPerftest(); err != nil {
		return Result{}, err
	}
	return loopback(ctx, addr, c, ServePerftest, RunPerftest)
}

// loopback listens on addr, serves one run in a goroutine (without
// progress reports: the client makes them) and runs the client against it.
func loopback(ctx context.Context, addr string, c Config,
	serve func(context.Context, *rdmacm.ID, Config) error, run func(context.Context, string, Config) (Result, error)) (Result, error) {
	ln, err := rdmacm.Listen(addr)
	if err != nil {
		return Result{}, err
	}
	defer ln.Close()
	sc := c
	sc.Progress = nil
	served := make(chan error, 1)
	go func() { served <- serve(ctx, ln, sc) }()
	r, err := run(ctx, ln.LocalAddr().String(), c)
	if serr := <-served; err == nil {
		err = serr
	}
	return r, err
}

// prepost posts the receives a test needs before the connection exists
// (iWARP: a message that finds no receive ends the connection).
func (s *side) prepost(c *Config) error {
	n := 0
	switch c.Test {
	case "send_lat":
		n = 1
	case "send_bw":
		n = c.Iters
	}
	wr := []verbs.RecvWR{{SGList: []verbs.SGE{s.mr.SGE(0, c.Size)}}}
	for range n {
		if err := s.id.QP().PostRecv(wr); err != nil {
			return err
		}
	}
	return nil
}

// spin busy-polls cq for one completion.
func spin(ctx context.Context, cq *verbs.CQ, wc []verbs.WC) error {
	for i := 0; ; i++ {
		n, err := cq.Poll(wc[:1])
		if err != nil {
			return err
		}
		if n == 1 {
			return wc[0].Err()
		}
		if i&0xfff == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// serve is the passive side: it answers ping-pongs and waits for the end.
func (s *side) serve(ctx context.Context, c *Config) error {
	wc := make([]verbs.WC, 16)
	switch c.Test {
	case "send_lat":
		send := []verbs.SendWR{{Opcode: verbs.WRSend, SGList: []verbs.SGE{s.mr.SGE(c.Size, c.Size)}}}
		if c.Size <= 64 {
			send[0].Flags |= verbs.SendInline
		}
		recv := []verbs.RecvWR{{SGList: []verbs.SGE{s.mr.SGE(0, c.Size)}}}
		for range c.Warmup + c.Iters {
			if err := spin(ctx, s.id.RecvCQ(), wc); err != nil {
				return err
			}
			s.id.QP().PostRecv(recv)
			if err := s.id.QP().PostSend(send); err != nil {
				return err
			}
		}
	case "write_lat":
		return s.writePingPong(ctx, c, false, nil)
	case "send_bw":
		for got := 0; got < c.Iters; {
			n, err := s.id.RecvCQ().Poll(wc)
			if err != nil {
				return err
			}
			for _, w := range wc[:n] {
				if err := w.Err(); err != nil {
					return err
				}
			}
			got += n
			if n == 0 && ctx.Err() != nil {
				return ctx.Err()
			}
		}
	}
	// The other tests are one-sided. A software RNIC needs a running
	// receiver: busy-poll the CQ (polled mode reads the socket) until the
	// client leaves, as the active side does.
	done := s.id.Done()
	for i := 0; ; i++ {
		s.id.RecvCQ().Poll(wc)
		if i&0x3ff == 0 {
			select {
			case <-done:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			default:
			}
		}
	}
}

// writePingPong exchanges RDMA WRITEs carrying an iteration counter in the
// last 8 bytes of the message; each side polls its buffer for the next
// value (perftest's write_lat), polling its CQ too so that the transport
// makes progress.
func (s *side) writePingPong(ctx context.Context, c *Config, first bool, l *laps) error {
	size := markSize(c.Size)
	wr := []verbs.SendWR{{Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{s.mr.SGE(size, size)}, RemoteAddr: s.raddr, RKey: s.rkey}}
	if size <= 64 {
		wr[0].Flags |= verbs.SendInline
	}
	wc := make([]verbs.WC, 16)
	mark := s.buf[size-8 : size]
	out := s.buf[2*size-8 : 2*size]
	wait := func(want uint64) error {
		for i := 0; load64(mark) != want; i++ {
			s.id.SendCQ().Poll(wc)
			if i&0xfff == 0 && ctx.Err() != nil {
				return ctx.Err()
			}
		}
		return nil
	}
	warm := uint64(c.Warmup)
	for i := uint64(1); i <= warm+uint64(c.Iters); i++ {
		if !first {
			if err := wait(i); err != nil {
				return err
			}
		}
		binary.NativeEndian.PutUint64(out, i)
		if err := s.id.QP().PostSend(wr); err != nil {
			return err
		}
		if first {
			if i > warm {
				l.stamp()
			}
			if err := wait(i); err != nil {
				return err
			}
		}
	}
	if first {
		l.stamp()
	}
	return nil
}

// markSize is the message size of write_lat: at least 8 bytes and a
// multiple of 8, so that the counter in its last 8 bytes is aligned.
func markSize(n int) int { return (max(n, 8) + 7) &^ 7 }

// run is the active side of every test.
func (s *side) run(ctx context.Context, c *Config) (Result, error) {
	res := Result{Test: c.Test, Bytes: c.Size, Iters: c.Iters}
	wc := make([]verbs.WC, 64)
	if c.lat() {
		l := newLaps(c.Iters)
		div := time.Duration(2) // ping-pongs: half the round trip
		var wr []verbs.SendWR
		switch c.Test {
		case "send_lat":
			send := []verbs.SendWR{{Opcode: verbs.WRSend, SGList: []verbs.SGE{s.mr.SGE(c.Size, c.Size)}}}
			if c.Size <= 64 {
				send[0].Flags |= verbs.SendInline
			}
			recv := []verbs.RecvWR{{SGList: []verbs.SGE{s.mr.SGE(0, c.Size)}}}
			for i := range c.Warmup + c.Iters {
				if err := s.id.QP().PostSend(send); err != nil {
					return res, err
				}
				if i >= c.Warmup {
					l.stamp()
				}
				if err := spin(ctx, s.id.RecvCQ(), wc); err != nil {
					return res, err
				}
				s.id.QP().PostRecv(recv)
			}
			l.stamp()
		case "write_lat":
			if err := s.writePingPong(ctx, c, true, l); err != nil {
				return res, err
			}
		case "read_lat":
			wr = []verbs.SendWR{{Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGList: []verbs.SGE{s.mr.SGE(0, c.Size)}, RemoteAddr: s.raddr, RKey: s.rkey}}
		case "atomic_lat":
			wr = []verbs.SendWR{{Opcode: verbs.WRAtomicFetchAndAdd, Flags: verbs.SendSignaled, SGList: []verbs.SGE{s.mr.SGE(0, 8)}, RemoteAddr: s.raddr, RKey: s.rkey, CompareAdd: 1}}
		}
		if len(wr) > 0 {
			div = 1 // a read or atomic is a round trip itself
			for i := range c.Warmup + c.Iters {
				if err := s.id.QP().PostSend(wr); err != nil {
					return res, err
				}
				if i >= c.Warmup {
					l.stamp()
				}
				if err := spin(ctx, s.id.SendCQ(), wc); err != nil {
					return res, err
				}
			}
			l.stamp()
		}
		summarize(&res, l.samples(div))
		return res, nil
	}
	return bandwidth(ctx, c, []*bwQP{s.bwQP(c)}, res)
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

// bwQP is one QP of a bandwidth run.
type bwQP struct {
	qp    *verbs.QP
	scq   *verbs.CQ
	wr    []verbs.SendWR
	depth int // when non-zero, a bound below Config.TxDepth (the ORD of reads)
	// credit, when set, is perftest's receiver-credit word, which the
	// receiver RDMA-WRITEs with its receive count: at most rxDepth sends
	// may be ahead of it.
	credit  []byte
	rxDepth int

	posted, done int
	lastSig      bool // the last request posted was signaled
	unsig        int  // requests posted unsignaled since the last signaled one
}

func (s *side) bwQP(c *Config) *bwQP {
	op := verbs.WRRDMAWrite
	switch c.Test {
	case "send_bw":
		op = verbs.WRSend
	case "read_bw":
		op = verbs.WRRDMARead
	}
	k := &bwQP{qp: s.id.QP(), scq: s.id.SendCQ(), wr: make([]verbs.SendWR, max(c.PostList, 1))}
	for i := range k.wr {
		k.wr[i] = verbs.SendWR{Opcode: op, Flags: verbs.SendSignaled, SGList: []verbs.SGE{s.mr.SGE(0, c.Size)}, RemoteAddr: s.raddr, RKey: s.rkey}
	}
	if op == verbs.WRRDMARead {
		k.depth = 16 // the ORD negotiated
	}
	return k
}

// warmUp posts c.Warmup requests on each QP of a bandwidth test, up to the
// send queue's depth at a time, and waits for them (Config.Warmup).
// send_bw has none (every receive is posted before the run).
func warmUp(ctx context.Context, c *Config, ks []*bwQP) error {
	if c.Test == "send_bw" {
		return nil
	}
	wc := make([]verbs.WC, 16)
	for _, k := range ks {
		depth := c.TxDepth
		if k.depth > 0 {
			depth = min(depth, k.depth)
		}
		wr := []verbs.SendWR{k.wr[0]}
		for left := c.Warmup; left > 0; {
			n := min(left, depth)
			for i := range n {
				wr[0].WRID, wr[0].Flags = 0, k.wr[0].Flags&^verbs.SendSignaled
				if i == n-1 {
					wr[0].Flags |= verbs.SendSignaled // its completion accounts for the others
				}
				if err := k.qp.PostSend(wr); err != nil {
					return err
				}
			}
			if err := spin(ctx, k.scq, wc); err != nil {
				return err
			}
			left -= n
		}
	}
	return nil
}

// lookBytes is how many bytes bandwidth posts between its looks at the
// clock.
const lookBytes = 1 << 20

// postEach is bandwidth's loop for one request per PostSend without
// credits (perftest's default): while the run goes on, it posts up to
// depth requests ahead of the completions, every mod-th signaled (and the
// run's last). Its locals stay in registers and on the stack, where the
// general loop's list bookkeeping and closure reloaded them around every
// PostSend (a sixth of an 8-byte WRITE's instructions); what the run
// still owes once it stops (the last signaled request of a timed run) is
// the general loop's.
func (k *bwQP) postEach(c *Config, depth, mod int, timed bool, stop *bool, moved *int, look func() error) error {
	end := k.done + depth
	last := -1 // the run's last request: signaled
	if !timed {
		end = min(end, c.Iters)
		last = c.Iters - 1
	}
	// sigAt is the next request to signal: a count, not p%mod (a division
	// per request was a twentieth of an 8-byte WRITE's cost).
	p := k.posted
	sigAt := p + max(mod-k.unsig-1, 0)
	if last >= p {
		sigAt = min(sigAt, last)
	}
	qp, wr := k.qp, (*[1]verbs.SendWR)(k.wr)
	flags := wr[0].Flags &^ verbs.SendSignaled
	sig := k.lastSig
	for p < end && !*stop {
		wr[0].WRID, wr[0].Flags = uint64(p), flags
		if sig = p == sigAt; sig {
			wr[0].Flags = flags | verbs.SendSignaled
			sigAt = p + mod
			if last >= p {
				sigAt = min(sigAt, last)
			}
		}
		if err := qp.PostSend(wr[:]); err != nil {
			k.setPosted(p, sigAt, mod, sig)
			return err
		}
		p++
		if *moved += c.Size; *moved >= lookBytes {
			k.setPosted(p, sigAt, mod, sig)
			if err := look(); err != nil {
				return err
			}
		}
	}
	k.setPosted(p, sigAt, mod, sig)
	return nil
}

// setPosted records postEach's progress: p requests posted, the next
// signaled one sigAt (as the count of unsignaled ones the general loop
// keeps), the last one signaled or not.
func (k *bwQP) setPosted(p, sigAt, mod int, sig bool) {
	k.posted, k.unsig, k.lastSig = p, max(mod-1-(sigAt-p), 0), sig
}

// deadlineClock is what a timed run's deadline is checked against (a test
// replaces it to see when the deadline is checked).
var deadlineClock = time.Now

// bandwidth keeps up to the send queue depth of work requests in flight on
// every QP, round-robin from this goroutine, and counts the bytes of the
// completions.
func bandwidth(ctx context.Context, c *Config, ks []*bwQP, res Result) (Result, error) {
	wc := make([]verbs.WC, 64)
	timed := c.Duration > 0
	deadline := time.Now().Add(c.Duration)
	stop := false
	mayPost := func(k *bwQP) bool { return !stop && (timed || k.posted < c.Iters) }
	// completions per twentieth of the run, for the peak
	var marks []time.Duration
	step := max(c.Iters*len(ks)/20, 1)
	nextMark := step // the completion count of the next mark
	start := time.Now()
	last := start
	total := 0
	// The clock is read (for the deadline, the context and progress) every
	// 256 rounds and whenever lookBytes have been posted since the last
	// read: one round can move a whole send queue of large messages, and
	// at 8 MiB 256 rounds took over a minute. Reading it every round would
	// cost small messages their rate.
	moved := 0
	look := func() error {
		moved = 0
		now := time.Now()
		if timed && deadlineClock().After(deadline) {
			stop = true
		}
		if c.Progress != nil && now.Sub(last) >= 200*time.Millisecond {
			last = now
			p := Progress{Test: c.Test, Done: total, Elapsed: now.Sub(start), Bytes: int64(total) * int64(c.Size)}
			if !timed {
				p.Total = c.Iters * len(ks)
			}
			c.Progress(p)
		}
		return ctx.Err()
	}
	for i := 0; ; i++ {
		busy := false
		for _, k := range ks {
			depth := c.TxDepth
			if k.depth > 0 {
				depth = min(depth, k.depth)
			}
			mod := max(1, min(c.CQMod, depth))
			if len(k.wr) == 1 && k.credit == nil {
				if err := k.postEach(c, depth, mod, timed, &stop, &moved, look); err != nil {
					return res, err
				}
			}
			for k.posted-k.done < depth && (mayPost(k) || !k.lastSig && k.posted > k.done) {
				// A list of up to PostList requests, each as if posted
				// alone.
				m := 0
				for m < len(k.wr) && k.posted+m-k.done < depth {
					p := k.posted + m
					more := !stop && (timed || p < c.Iters) // mayPost, at p
					if !more && m > 0 {
						break // the list's last request was the run's last, signaled
					}
					if k.credit != nil && uint32(p+1)-load32(k.credit) >= uint32(k.rxDepth) {
						break
					}
					// Every mod-th request is signaled, and the last one:
					// of the run, or (a timed run that stopped) one more,
					// so that a completion accounts for every request
					// posted. (A count, not p%mod: a division per request
					// was a twentieth of an 8-byte WRITE's cost.)
					sig := k.unsig+1 >= mod || !more || !timed && p+1 == c.Iters
					k.unsig++
					if sig {
						k.unsig = 0
					}
					w := &k.wr[m]
					w.WRID = uint64(p)
					w.Flags &^= verbs.SendSignaled
					if sig {
						w.Flags |= verbs.SendSignaled
					}
					k.lastSig = sig
					m++
				}
				if m == 0 {
					break
				}
				if err := k.qp.PostSend(k.wr[:m]); err != nil {
					return res, err
				}
				k.posted += m
				if moved += m * c.Size; moved >= lookBytes {
					if err := look(); err != nil {
						return res, err
					}
				}
			}
			n, err := k.scq.Poll(wc)
			if err != nil {
				return res, err
			}
			covered := k.done
			for _, w := range wc[:n] {
				if err := w.Err(); err != nil {
					return res, err
				}
				covered = max(covered, int(w.WRID)+1) // a completion accounts for the requests before it
			}
			if total+covered-k.done >= nextMark {
				now := time.Since(start)
				for ; nextMark <= total+covered-k.done; nextMark += step {
					marks = append(marks, now)
				}
			}
			total += covered - k.done
			k.done = covered
			busy = busy || mayPost(k) || k.done < k.posted
		}
		if !busy {
			break
		}
		if i&0xff == 0 || moved >= lookBytes {
			if err := look(); err != nil {
				return res, err
			}
		}
	}
	el := time.Since(start)
	res.Iters = total
	res.AvgMBs = float64(total) * float64(c.Size) / el.Seconds() / 1e6
	res.MsgRate = float64(total) / el.Seconds() / 1e6
	res.PeakMBs = res.AvgMBs
	// The peak is the best window of at least a twentieth of the run and at
	// least 5 ms: shorter windows measure how fast the socket buffers fill.
	for i := 0; i < len(marks); i++ {
		for j := i + 1; j < len(marks); j++ {
			if dt := marks[j] - marks[i]; dt >= 5*time.Millisecond {
				res.PeakMBs = max(res.PeakMBs, float64((j-i)*step)*float64(c.Size)/dt.Seconds()/1e6)
				break
			}
		}
	}
	return res, nil
}

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
