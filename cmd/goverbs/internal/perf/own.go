package perf

// goverbs' own protocol: the private data of rdmacm's connect carries the
// test's parameters and each side's buffer; then the test runs on the data QPs.

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
	// ev is the event mode of the side's run (nil: polled), shared by
	// the sides of one run.
	ev *events
	// recvs is how many receives send_bw's receiver has posted.
	recvs int
}

// The private data of goverbs' own protocol: addr, rkey, size, iterations,
// QPs, then warm-up iterations (a peer that sends only pdLen bytes asks for
// none), then the duration in milliseconds and cq_mod (which only the
// client uses: they are there for the server's Match) and the test (its
// index in Tests plus one), then flags (pdImm).
const (
	pdLen      = 8 + 4 + 4 + 4 + 4
	pdWarmLen  = pdLen + 4
	pdFullLen  = pdWarmLen + 4 + 4 + 4
	pdFlagsLen = pdFullLen + 4
)

// pdImm, in the flags of the private data, says that write_lat's messages
// are RDMA WRITEs with immediate data (a client in event mode), each
// consuming a receive at its target.
const pdImm = 1

func (s *side) privateData(c *Config) []byte {
	b := make([]byte, pdFlagsLen)
	binary.BigEndian.PutUint64(b, s.mr.Addr())
	binary.BigEndian.PutUint32(b[8:], s.mr.RKey())
	binary.BigEndian.PutUint32(b[12:], uint32(c.Size))
	binary.BigEndian.PutUint32(b[16:], uint32(c.Iters))
	binary.BigEndian.PutUint32(b[20:], uint32(c.QPs))
	binary.BigEndian.PutUint32(b[24:], uint32(c.Warmup))
	binary.BigEndian.PutUint32(b[28:], uint32(min(c.Duration.Milliseconds(), math.MaxUint32)))
	binary.BigEndian.PutUint32(b[32:], uint32(c.CQMod))
	binary.BigEndian.PutUint32(b[36:], uint32(slices.Index(Tests, c.Test)+1))
	if c.imm() {
		binary.BigEndian.PutUint32(b[40:], pdImm)
	}
	return b
}

func (s *side) peer(pd []byte) error {
	if len(pd) < pdLen {
		return fmt.Errorf("perf: peer sent %d bytes of private data, want %d", len(pd), pdLen)
	}
	s.raddr, s.rkey = binary.BigEndian.Uint64(pd), binary.BigEndian.Uint32(pd[8:])
	return nil
}

// qpAttr is the QP of a side; server: send_bw's receiving one.
func qpAttr(c *Config, server bool) *verbs.QPInitAttr {
	rq := c.TxDepth + 1
	if c.Test == "send_bw" && server {
		rq = c.Iters + 1
		if c.repost {
			rq = min(c.Iters, SendBWRxDepth) + 1
		}
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
		c.withImm = len(pd) >= pdFlagsLen && binary.BigEndian.Uint32(pd[40:])&pdImm != 0
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
	ev := newEvents(&c)
	defer ev.close() // after the sides (deferred later, run earlier)
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
		s := &side{id: req, ev: ev}
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
	if c.Test == "send_bw" {
		// A SEND that finds no receive waits for one, except over iWARP
		// (no RNR retry: the connection ends).
		c.repost = req.DeviceContext().Device().TransportType() != verbs.TransportIWARP
		if !c.repost && c.Iters > MaxSendBWIters {
			err := fmt.Errorf("send_bw over iWARP runs at most %d iterations (no RNR retry: every receive is posted before the run)", MaxSendBWIters)
			req.Reject([]byte(err.Error()))
			return err
		}
	}
	attr := qpAttr(c, true)
	if err := s.ev.attach(req.DeviceContext(), attr); err != nil {
		req.Reject(nil)
		return err
	}
	if err := req.CreateQP(nil, *attr); err != nil {
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
	if err := s.prepost(c, true); err != nil {
		req.Reject(nil)
		return err
	}
	return req.Accept(ctx, &rdmacm.ConnParam{PrivateData: s.privateData(c), ResponderResources: 16, InitiatorDepth: 16})
}

// serveMany is the passive side of a bandwidth test over several QPs.
func serveMany(ctx context.Context, ss []*side, c *Config) error {
	wc := make([]verbs.WC, 64)
	if c.Test == "send_bw" {
		// Each side's receives and CQ, taken once: the receiving loop
		// allocates nothing and takes no lock of its own (the ID's
		// accessors do, and a context's Err may: both were a few percent
		// of an 8-byte run).
		recvs := make([][]verbs.RecvWR, len(ss))
		cqs := make([]*verbs.CQ, len(ss))
		for i, s := range ss {
			sge := []verbs.SGE{s.mr.SGE(0, c.Size)}
			recvs[i] = make([]verbs.RecvWR, len(wc))
			for j := range recvs[i] {
				recvs[i][j].SGList = sge
			}
			cqs[i] = s.id.RecvCQ()
		}
		for got, idle := 0, 0; got < c.Iters*len(ss); {
			progressed := false
			for i, s := range ss {
				n, err := cqs[i].Poll(wc)
				if err != nil {
					return err
				}
				for _, w := range wc[:n] {
					if err := w.Err(); err != nil {
						return err
					}
				}
				if more := min(n, c.Iters-s.recvs); c.repost && more > 0 {
					// As many receives again as completed, in one call.
					if err := s.id.QP().PostRecv(recvs[i][:more]); err != nil {
						return err
					}
					s.recvs += more
				}
				got += n
				progressed = progressed || n > 0
			}
			if progressed {
				continue
			}
			if ev := ss[0].ev; ev != nil {
				if err := ev.block(ctx); err != nil {
					return err
				}
			} else if idle++; idle&0xff == 0 && ctx.Err() != nil {
				return ctx.Err()
			}
		}
	}
	if ss[0].ev != nil {
		return awaitLeave(ctx, ss)
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

// awaitLeave waits, without polling, until the client has left every
// connection of ss (event mode: the armed CQs let the connections progress
// by themselves).
func awaitLeave(ctx context.Context, ss []*side) error {
	for _, s := range ss {
		select {
		case <-s.id.Done():
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// Run connects to the server at addr (Config.QPs connections), measures
// and returns the result.
func Run(ctx context.Context, addr string, c Config) (Result, error) {
	if err := c.checkOwn(); err != nil {
		return Result{}, err
	}
	c.withImm = c.Events // write_lat: see Config.imm
	ev := newEvents(&c)
	defer ev.close() // after the sides (deferred later, run earlier)
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
		s := &side{id: id, ev: ev}
		ss = append(ss, s)
		if err := s.threadDomain(&c); err != nil {
			return Result{}, err
		}
		attr := qpAttr(&c, false)
		if err := ev.attach(id.DeviceContext(), attr); err != nil {
			return Result{}, err
		}
		if err := id.CreateQP(s.pd, *attr); err != nil {
			return Result{}, err
		}
		if err := s.register(&c); err != nil {
			return Result{}, err
		}
		if err := s.prepost(&c, false); err != nil {
			return Result{}, err
		}
		err = id.Connect(ctx, &rdmacm.ConnParam{PrivateData: s.privateData(&c), ResponderResources: 16, InitiatorDepth: 16,
			Extensions: c.Test == "atomic_lat" || c.imm()})
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
		r.Events = ev.count()
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
func (s *side) prepost(c *Config, server bool) error {
	n := 0
	switch c.Test {
	case "send_lat":
		n = 1
	case "send_bw":
		if server { // the client only sends
			n = c.Iters
			if c.repost {
				n = min(c.Iters, SendBWRxDepth)
			}
		}
	case "write_lat":
		if c.imm() {
			n = 1
		}
	}
	wr := []verbs.RecvWR{{SGList: []verbs.SGE{s.mr.SGE(0, c.Size)}}}
	if c.Test == "write_lat" {
		wr[0].SGList = nil // a WRITE's immediate data consumes a receive, no bytes
	}
	for range n {
		if err := s.id.QP().PostRecv(wr); err != nil {
			return err
		}
	}
	s.recvs = n
	return nil
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
		qp, rcq := s.id.QP(), s.id.RecvCQ() // once: the accessors take the ID's lock
		for range c.Warmup + c.Iters {
			if err := s.ev.one(ctx, rcq, wc); err != nil {
				return err
			}
			qp.PostRecv(recv)
			if err := qp.PostSend(send); err != nil {
				return err
			}
		}
	case "write_lat":
		if err := s.writePingPong(ctx, c, false, nil); err != nil {
			return err
		}
	}
	// send_bw's receiving, and the wait for the client to leave: as with
	// several QPs (the other tests are one-sided, and the last message of a
	// ping-pong may still be on its way when the loop ends; a software RNIC
	// needs a running receiver).
	return serveMany(ctx, []*side{s}, c)
}

// writePingPong exchanges RDMA WRITEs carrying an iteration counter in the
// last 8 bytes of the message; each side polls its buffer for the next
// value (perftest's write_lat), polling its CQ too so that the transport
// makes progress. With immediate data (Config.imm: a client in event
// mode) each WRITE also consumes a receive at its target, whose
// completion is what the target waits for, blocking in event mode; the
// counter is then checked, not polled.
func (s *side) writePingPong(ctx context.Context, c *Config, first bool, l *laps) error {
	size := markSize(c.Size)
	wr := []verbs.SendWR{{Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{s.mr.SGE(size, size)}, RemoteAddr: s.raddr, RKey: s.rkey}}
	if size <= 64 {
		wr[0].Flags |= verbs.SendInline
	}
	imm := c.imm()
	if imm {
		wr[0].Opcode = verbs.WRRDMAWriteWithImm
	}
	recv := []verbs.RecvWR{{}}
	wc := make([]verbs.WC, 16)
	qp, scq, rcq := s.id.QP(), s.id.SendCQ(), s.id.RecvCQ() // once: the accessors take the ID's lock
	mark := s.buf[size-8 : size]
	out := s.buf[2*size-8 : 2*size]
	wait := func(want uint64) error {
		if imm {
			if err := s.ev.one(ctx, rcq, wc); err != nil {
				return err
			}
			if err := qp.PostRecv(recv); err != nil {
				return err
			}
			if got := load64(mark); got != want {
				return fmt.Errorf("perf: write_lat: the completion of WRITE %d came with the counter at %d", want, got)
			}
			return nil
		}
		// Polling the CQ progresses the connection (its sends are
		// unsignaled: the poll takes nothing). In event mode too: a
		// goroutine that spins on memory, even yielding, would leave the
		// connection's own goroutine to be woken by the runtime's
		// netpoller only every 10 ms (the scheduler looks at the network
		// only when it runs out of work, or from sysmon), as seen. At
		// least once per message, even when the peer's WRITE is already
		// there: the poll is what retires our unsignaled WRITEs that went
		// through the peer (a run whose replies always came first filled
		// the send queue under load).
		for i := 0; ; i++ {
			scq.Poll(wc)
			if load64(mark) == want {
				return nil
			}
			if i&0xfff == 0 && ctx.Err() != nil {
				return ctx.Err()
			}
		}
	}
	warm := uint64(c.Warmup)
	for i := uint64(1); i <= warm+uint64(c.Iters); i++ {
		if !first {
			if err := wait(i); err != nil {
				return err
			}
		}
		binary.NativeEndian.PutUint64(out, i)
		if err := qp.PostSend(wr); err != nil {
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
			// The QP and CQ taken once: the ID's accessors take its lock,
			// which the loop paid three times a round trip.
			qp, rcq := s.id.QP(), s.id.RecvCQ()
			for i := range c.Warmup + c.Iters {
				if err := qp.PostSend(send); err != nil {
					return res, err
				}
				if i >= c.Warmup {
					l.stamp()
				}
				if err := s.ev.one(ctx, rcq, wc); err != nil {
					return res, err
				}
				qp.PostRecv(recv)
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
			qp, scq := s.id.QP(), s.id.SendCQ()
			for i := range c.Warmup + c.Iters {
				if err := qp.PostSend(wr); err != nil {
					return res, err
				}
				if i >= c.Warmup {
					l.stamp()
				}
				if err := s.ev.one(ctx, scq, wc); err != nil {
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
