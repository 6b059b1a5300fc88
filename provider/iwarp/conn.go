package iwarp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/goverbs/goverbs/internal/engine"
	"github.com/goverbs/goverbs/internal/wire"
	"github.com/goverbs/goverbs/verbs"
	"golang.org/x/sys/unix"
)

var (
	errCMOnly = fmt.Errorf("%w: iWARP QPs are connected by the connection manager (rdmacm), not by Modify", verbs.ErrInvalid)
	// ErrDisconnected reports that the peer closed the connection.
	ErrDisconnected = errors.New("iwarp: disconnected by the peer")
	// ErrLocalDisconnect reports that this side disconnected or destroyed the QP.
	ErrLocalDisconnect = errors.New("iwarp: disconnected")
	// ErrRemoteTerminate reports a Terminate received from the peer.
	ErrRemoteTerminate = errors.New("iwarp: terminated by the peer")
)

// TerminateError is the error of a connection torn down by a Terminate, sent or received.
type TerminateError struct {
	Sent  bool
	Cause wire.TermError
	Info  string
}

// Error describes the Terminate and its direction.
func (e *TerminateError) Error() string {
	dir := "received"
	if e.Sent {
		dir = "sent"
	}
	if e.Info != "" {
		return fmt.Sprintf("iwarp: Terminate %s: %v (%s)", dir, e.Cause, e.Info)
	}
	return fmt.Sprintf("iwarp: Terminate %s: %v", dir, e.Cause)
}

// Unwrap makes a received Terminate match ErrRemoteTerminate.
func (e *TerminateError) Unwrap() error {
	if e.Sent {
		return nil
	}
	return ErrRemoteTerminate
}

// goverbs flags in the second word of an RFC 7306 immediate.
const (
	immSendFollows = 1
	immAfterWrite  = 2
)

// orqEntry is an outstanding RDMA Read or atomic (the ORQ, bounded by ORD).
type orqEntry struct {
	w      *engine.WQE
	seq    uint64
	atomic bool
	sink   [][]byte
	size   uint32
	stag   uint32 // the sink STag and TO sent in the Read Request
	to     uint64
	got    uint32
}

// respKind is the kind of a response queued for the transmit goroutine.
type respKind uint8

const (
	respRead respKind = iota
	respAtomic
)

// resp is an inbound Read or Atomic Request waiting for its response (the IRQ, bounded by IRD).
type resp struct {
	kind  respKind
	src   []byte
	stag  uint32
	to    uint64
	reqID uint32
	orig  uint64
}

// conn is a connected QP's wire: its TCP connection and the DDP/RDMAP state.
type conn struct {
	ep      engine.Endpoint
	req     engine.Requester
	resp    engine.Responder
	nc      net.Conn
	crc     bool
	ext     bool
	passive bool
	ird     int
	ord     int
	pdata   []byte
	maxFPDU int

	// transmit side; txMu serialises whole messages on the stream
	txMu       sync.Mutex
	txMSN      [4]uint32 // per queue number: next MSN (starts at 1)
	hbuf       []byte    // headers and trailers of the message being sent
	iov        [][]byte
	segScratch [][]byte
	nb         [][]byte // what emit has left to write
	wiov       [128]unix.Iovec
	werr       error
	writeFn    func(fd uintptr) bool
	txCRC      wire.CRC
	rxSeen     atomic.Bool // the responder may transmit only after the first FPDU arrived
	hold       *time.Timer // ends the responder's wait for a silent initiator (see start)

	// the ORQ: reads and atomics we issued
	orqMu sync.Mutex
	orq   []orqEntry
	reqID uint32

	// the IRQ: requests from the peer waiting for our responses
	irqMu  sync.Mutex
	irq    []resp
	txWake chan struct{}

	rx           rxState // the receive side, under rxMu
	rxMu         sync.Mutex
	raw          syscall.RawConn
	pollFn       func(fd uintptr)
	pollErr      error
	needProgress atomic.Bool // the transmit goroutine should call Requester.Transmit
	polled       atomic.Bool // the application polls (engine.Progressor.Polled)
	rxWake       chan struct{}
	rxAny        atomic.Bool // an FPDU has arrived
	nudgeArmed   atomic.Bool // the start-up nudge is scheduled (see sent)
	nudgeNeeded  atomic.Bool // the transmit goroutine should send the start-up nudge
	nudge        *time.Timer

	// a response sent from the receive side (respondNow)
	pending  []byte
	rhdr     [96]byte
	respIov  [3 * respFPDUs]unix.Iovec
	respSeg  [1][]byte
	respBufs [][]byte
	respN    int
	respFn   func(fd uintptr)

	// lifetime
	once   sync.Once
	err    error
	term   []byte // Terminate to send before closing
	dying  chan struct{}
	done   chan struct{}
	rxDone chan struct{}
	// estab is closed once the QP is established: the receive side starts
	// only then, so that a message arriving at once (the peer may send as
	// soon as it has the MPA Reply) never meets a QP still in INIT.
	estab     chan struct{}
	estabDone atomic.Bool
}

func newConn(ep engine.Endpoint, nc net.Conn, n wire.Negotiated, ext, passive bool, pdata []byte, cfg Config) *conn {
	c := &conn{
		ep: ep, req: ep.Requester(), resp: ep.Responder(), nc: nc, crc: n.CRC, ext: ext, passive: passive, ird: n.IRD, ord: n.ORD, pdata: pdata,
		txWake: make(chan struct{}, 1), dying: make(chan struct{}), done: make(chan struct{}), rxDone: make(chan struct{}),
		estab: make(chan struct{}),
	}
	for i := range c.txMSN {
		c.txMSN[i] = 1
	}
	c.maxFPDU = cfg.MaxFPDU
	if c.maxFPDU <= 0 {
		c.maxFPDU = mss(nc)
	}
	c.maxFPDU = min(c.maxFPDU, wire.MaxULPDULen+wire.MPALenLen+wire.CRCLen)
	setDeadPeer(nc, cfg.DeadPeerTimeout)
	if !passive {
		c.rxSeen.Store(true) // the initiator speaks first
	}
	c.pollFn = c.pollFD
	c.respFn = c.respWrite
	c.writeFn = c.writeOut
	c.rxWake = make(chan struct{}, 1)
	for i := range c.rx.msn {
		c.rx.msn[i] = 1
	}
	return c
}

// start runs the connection's goroutines.
func (c *conn) start() error {
	sc, ok := c.nc.(syscall.Conn)
	if !ok {
		return fmt.Errorf("iwarp: %T has no file descriptor", c.nc)
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	c.raw = raw
	if !c.rxSeen.Load() {
		// MPA's start-up rule makes the responder wait for the initiator's
		// first FPDU; siw needs it only until it has read the MPA Reply (it
		// fails if FPDUs follow the Reply in the same read). Some
		// applications have the responder speak first on a connection set up
		// long before (perftest's write_lat server writes first): after
		// nudgeDelay the responder may transmit anyway, as siw itself does.
		c.hold = time.AfterFunc(nudgeDelay, func() {
			if !c.rxSeen.Swap(true) {
				c.progressLater()
			}
		})
	}
	go c.rxLoop()
	go c.txLoop()
	return nil
}

// payloadMax is the payload of one FPDU with a header of hdrLen bytes.
func (c *conn) payloadMax(hdrLen int) int {
	return wire.MaxPayload(c.maxFPDU, hdrLen)
}

// Modify implements engine.Transport: nothing to change on the wire.
func (c *conn) Modify(*verbs.QPAttr, verbs.QPAttrMask, verbs.QPState, verbs.QPState) error {
	return nil
}

// RecvPosted implements engine.Transport: iWARP has no RNR, nothing waits.
func (c *conn) RecvPosted() {}

// Shutdown implements engine.Transport: the QP left RTS (error, reset,
// destroy). It runs with the QP locked, so it only starts the teardown.
func (c *conn) Shutdown(destroyed bool) {
	c.close(ErrLocalDisconnect, nil)
}

// close tears the connection down once: the transmit goroutine sends term
// (if any), then closes the socket; the receive goroutine then ends. It
// never calls the QP.
func (c *conn) close(err error, term []byte) {
	c.once.Do(func() {
		c.err = err
		c.term = term
		// Unblock a sender stuck on a full socket, but leave time for the Terminate.
		c.nc.SetWriteDeadline(time.Now().Add(2 * time.Second))
		close(c.dying)
	})
}

// fail closes the connection for err and moves the QP to ERR (flushing it),
// raising ev when ev is non-nil.
func (c *conn) fail(err error, term []byte, ev *verbs.EventType) {
	c.close(err, term)
	if ev != nil {
		c.ep.Fatal(*ev)
	} else {
		c.ep.Fail()
	}
}

// terminate builds the Terminate for cause on the offending header and fails the connection.
func (c *conn) terminate(cause wire.TermError, off wire.Header, ev *verbs.EventType, info string) {
	t := wire.TerminateFor(1, cause, off)
	b, _ := wire.AppendTerminate(make([]byte, 0, 128), &t)
	b = wire.FinishFPDU(b, 0, c.crc)
	c.fail(&TerminateError{Sent: true, Cause: cause, Info: info}, b, ev)
}

func evp(e verbs.EventType) *verbs.EventType { return &e }

// txLoop sends responses (RDMA Read and atomic) and, at the end, the
// Terminate; then it closes the socket.
func (c *conn) txLoop() {
	defer close(c.done)
	for {
		select {
		case <-c.txWake:
			if c.nudgeNeeded.Swap(false) && !c.rxAny.Load() {
				c.lockTx()
				c.hbuf = grow(c.hbuf[:0], wire.TaggedHeaderLen+8)[:wire.TaggedHeaderLen]
				wire.PutTagged(c.hbuf, wire.OpWrite, true, 1, 0, wire.TaggedHeaderLen-wire.MPALenLen)
				c.hbuf = wire.FinishFPDU(c.hbuf, 0, c.crc)
				c.nc.Write(c.hbuf)
				c.txMu.Unlock()
			}
			if c.needProgress.Swap(false) {
				c.req.Resume() // a send queue stalled on the MPA start-up rule
				c.req.Transmit()
			}
			if err := c.sendResponses(); err != nil {
				c.fail(fmt.Errorf("iwarp: send: %w", err), nil, nil)
			}
		case <-c.dying:
			c.lockTx()
			if c.term != nil {
				c.nc.Write(c.term)
			}
			c.txMu.Unlock()
			c.txMu.Lock()
			if c.nudge != nil {
				c.nudge.Stop()
			}
			c.txMu.Unlock()
			if c.hold != nil {
				c.hold.Stop()
			}
			c.nc.Close()
			<-c.rxDone
			return
		}
	}
}

// lockTx takes the stream and first writes what a response sent from the
// receive side left unwritten (see respondNow).
func (c *conn) lockTx() error {
	c.txMu.Lock()
	if len(c.pending) == 0 {
		return nil
	}
	p := c.pending
	c.pending = nil
	_, err := c.nc.Write(p)
	return err
}

// respondNow sends a one-FPDU response (a Read Response or an Atomic
// Response) from the receive side, saving the transmit goroutine's wake-up
// (tens of microseconds) on the read and atomic latency path. It never
// blocks: it needs the stream free and writes without waiting; what the
// socket does not take at once is kept in c.pending, which the next owner
// of the stream writes before anything else.
func (c *conn) respondNow(r *resp) bool {
	if !c.txMu.TryLock() {
		return false
	}
	defer c.txMu.Unlock()
	if len(c.pending) > 0 {
		return false
	}
	var bufs [][]byte
	if r.kind == respRead {
		c.respSeg[0] = r.src
		segs := c.respSeg[:0]
		if len(r.src) > 0 {
			segs = c.respSeg[:1]
		}
		stag, to := r.stag, r.to
		bufs = c.build(wire.TaggedHeaderLen, segs, len(r.src), func(h []byte, off, plen int, last bool) {
			wire.PutTagged(h, wire.OpReadResponse, last, stag, to+uint64(off), wire.TaggedHeaderLen-wire.MPALenLen+plen)
		})
	} else {
		f := c.rhdr[:wire.AtomicResponseLen]
		wire.PutAtomicResponse(f, c.nextMSN(wire.QNAtomicResponse), &wire.AtomicResponseFields{ReqID: r.reqID, Orig: r.orig})
		c.respSeg[0] = wire.FinishFPDU(f, 0, c.crc)
		bufs = c.respSeg[:1]
	}
	raceRelease()
	c.respBufs, c.respN = bufs, 0
	c.raw.Control(c.respFn) // a closed socket leaves respN 0: the rest goes nowhere, as the connection is ending
	n, total := c.respN, 0
	for _, b := range bufs {
		total += len(b)
	}
	if n < total {
		// Keep the rest: the stream must carry it before anything else.
		rest := make([]byte, 0, total-n)
		for _, b := range bufs {
			if n >= len(b) {
				n -= len(b)
				continue
			}
			rest = append(rest, b[n:]...)
			n = 0
		}
		c.pending = rest
		c.wakeTx()
	}
	return true
}

func (c *conn) respWrite(fd uintptr) {
	c.respN, _ = writevNB(int(fd), c.respIov[:], c.respBufs)
}

// respFPDUs is the largest response, in FPDUs, that respondNow sends.
const respFPDUs = 4

func (c *conn) wakeTx() {
	select {
	case c.txWake <- struct{}{}:
	default:
	}
}

// sendResponses sends the queued responses in request order.
func (c *conn) sendResponses() error {
	for {
		c.irqMu.Lock()
		if len(c.irq) == 0 {
			c.irqMu.Unlock()
			return nil
		}
		// The request leaves the IRQ before its response is written: once the
		// requester has the response it may send the next request, which
		// must find room.
		r := c.irq[0]
		c.irq[0] = resp{}
		c.irq = c.irq[1:]
		if len(c.irq) == 0 {
			c.irq = c.irq[:0:cap(c.irq)]
		}
		c.irqMu.Unlock()
		err := c.lockTx()
		if err != nil {
			c.txMu.Unlock()
			return err
		}
		switch r.kind {
		case respRead:
			err = c.sendTagged(wire.OpReadResponse, r.stag, r.to, oneSeg(r.src), len(r.src))
		case respAtomic:
			c.hbuf = c.hbuf[:0]
			c.hbuf = grow(c.hbuf, wire.AtomicResponseLen+8)[:wire.AtomicResponseLen]
			wire.PutAtomicResponse(c.hbuf, c.nextMSN(wire.QNAtomicResponse), &wire.AtomicResponseFields{ReqID: r.reqID, Orig: r.orig})
			c.hbuf = wire.FinishFPDU(c.hbuf, 0, c.crc)
			raceRelease()
			_, err = c.nc.Write(c.hbuf)
		}
		c.txMu.Unlock()
		if err != nil {
			return err
		}
	}
}

func oneSeg(b []byte) [][]byte {
	if len(b) == 0 {
		return nil
	}
	return [][]byte{b}
}

func grow(b []byte, n int) []byte {
	if cap(b)-len(b) < n {
		nb := make([]byte, len(b), len(b)+n+256)
		copy(nb, b)
		return nb
	}
	return b
}

func (c *conn) nextMSN(qn int) uint32 {
	m := c.txMSN[qn]
	c.txMSN[qn]++
	return m
}

// Send implements engine.Transport: it sends w's message(s) on the stream.
func (c *conn) Send(w *engine.WQE) engine.Result {
	select {
	case <-c.dying:
		return engine.Fail(verbs.WCWRFlushErr)
	default:
	}
	if !c.rxSeen.Load() {
		return engine.ResultStall // MPA: the responder waits for the initiator's first FPDU
	}
	wr := &w.WR
	var segs [][]byte
	var st verbs.WCStatus
	if err := c.lockTx(); err != nil {
		c.txMu.Unlock()
		c.close(fmt.Errorf("iwarp: send: %w", err), nil)
		return engine.Fail(verbs.WCLocQPOpErr)
	}
	defer c.txMu.Unlock()
	var err error
	switch wr.Opcode {
	case verbs.WRSend, verbs.WRSendWithInv, verbs.WRSendWithImm:
		if segs, st = c.payload(w); st != verbs.WCSuccess {
			return engine.Fail(st)
		}
		se := wr.Flags&verbs.SendSolicited != 0
		op := wire.OpSend
		var inv uint32
		switch {
		case wr.Opcode == verbs.WRSendWithInv && se:
			op, inv = wire.OpSendSEInv, wr.InvalidateRKey
		case wr.Opcode == verbs.WRSendWithInv:
			op, inv = wire.OpSendInv, wr.InvalidateRKey
		case se:
			op = wire.OpSendSE
		}
		if wr.Opcode == verbs.WRSendWithImm {
			flags := uint32(0)
			if w.Len > 0 {
				flags = immSendFollows
			}
			if err = c.sendImmediate(wr.ImmData, flags, se && w.Len == 0); err != nil || w.Len == 0 {
				break
			}
		}
		err = c.sendUntagged(op, inv, segs, int(w.Len))
	case verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm:
		if segs, st = c.payload(w); st != verbs.WCSuccess {
			return engine.Fail(st)
		}
		err = c.sendTagged(wire.OpWrite, wr.RKey, wr.RemoteAddr, segs, int(w.Len))
		if err == nil && wr.Opcode == verbs.WRRDMAWriteWithImm {
			err = c.sendImmediate(wr.ImmData, immAfterWrite, wr.Flags&verbs.SendSolicited != 0)
		}
	case verbs.WRRDMARead, verbs.WRAtomicCmpAndSwp, verbs.WRAtomicFetchAndAdd, verbs.WRFlush, verbs.WRAtomicWrite:
		return c.sendRequest(w)
	default:
		return engine.Fail(verbs.WCLocQPOpErr)
	}
	if err != nil {
		c.close(fmt.Errorf("iwarp: send: %w", err), nil)
		return engine.Fail(verbs.WCLocQPOpErr)
	}
	return engine.ResultOK
}

// payload resolves w's outgoing data into c.segScratch (reused, so that the
// data path does not allocate). c.txMu is held.
func (c *conn) payload(w *engine.WQE) ([][]byte, verbs.WCStatus) {
	segs, st := c.req.Payload(w, c.segScratch[:0])
	c.segScratch = segs
	return segs, st
}

// sendRequest sends an RDMA Read Request or an Atomic Request and records it
// in the ORQ; the response completes it. c.txMu is held.
func (c *conn) sendRequest(w *engine.WQE) engine.Result {
	wr := &w.WR
	var sink [][]byte
	var st verbs.WCStatus
	var f wire.AtomicRequestFields
	switch wr.Opcode {
	case verbs.WRFlush:
		f = wire.AtomicRequestFields{Op: wire.FlushGoverbs, STag: wr.RKey, TO: wr.RemoteAddr,
			AddSwap: uint64(wr.FlushLen), Compare: uint64(wr.FlushType)}
	case verbs.WRAtomicWrite:
		src, st := c.payload(w)
		if st != verbs.WCSuccess {
			return engine.Fail(st)
		}
		var v [8]byte
		n := 0
		for _, s := range src {
			n += copy(v[n:], s)
		}
		f = wire.AtomicRequestFields{Op: wire.AtomicWriteGoverbs, STag: wr.RKey, TO: wr.RemoteAddr,
			AddSwap: binary.BigEndian.Uint64(v[:]), AddSwapMask: ^uint64(0)}
	default:
		if sink, st = c.req.Sink(w, nil); st != verbs.WCSuccess {
			return engine.Fail(st)
		}
	}
	e := orqEntry{w: w, seq: w.Seq(), sink: sink, size: w.Len}
	if len(wr.SGList) > 0 && f.Op == 0 {
		e.stag, e.to = wr.SGList[0].LKey, wr.SGList[0].Addr
	}
	c.hbuf = c.hbuf[:0]
	var err error
	if wr.Opcode == verbs.WRRDMARead {
		c.hbuf = grow(c.hbuf, wire.ReadRequestLen+8)[:wire.ReadRequestLen]
		wire.PutReadRequest(c.hbuf, c.nextMSN(wire.QNReadRequest), &wire.ReadRequestFields{
			SinkSTag: e.stag, SinkTO: e.to, Size: w.Len, SrcSTag: wr.RKey, SrcTO: wr.RemoteAddr})
	} else {
		e.atomic = true
		switch wr.Opcode {
		case verbs.WRAtomicFetchAndAdd:
			f = wire.AtomicRequestFields{Op: wire.AtomicFetchAdd, STag: wr.RKey, TO: wr.RemoteAddr, AddSwap: wr.CompareAdd, AddSwapMask: ^uint64(0)}
		case verbs.WRAtomicCmpAndSwp:
			f = wire.AtomicRequestFields{Op: wire.AtomicCompareSwap, STag: wr.RKey, TO: wr.RemoteAddr,
				AddSwap: wr.Swap, AddSwapMask: ^uint64(0), Compare: wr.CompareAdd, CompareMask: ^uint64(0)}
		}
		c.orqMu.Lock()
		c.reqID++
		f.ReqID = c.reqID
		c.orqMu.Unlock()
		c.hbuf = grow(c.hbuf, wire.AtomicRequestLen+8)[:wire.AtomicRequestLen]
		wire.PutAtomicRequest(c.hbuf, c.nextMSN(wire.QNReadRequest), &f)
	}
	c.hbuf = wire.FinishFPDU(c.hbuf, 0, c.crc)
	// The ORQ entry must exist before the response can arrive.
	c.orqMu.Lock()
	c.orq = append(c.orq, e)
	c.orqMu.Unlock()
	raceRelease()
	if _, err = c.nc.Write(c.hbuf); err != nil {
		c.close(fmt.Errorf("iwarp: send: %w", err), nil)
		return engine.Fail(verbs.WCLocQPOpErr)
	}
	c.sent()
	return engine.ResultPending
}

// sendImmediate sends an RFC 7306 Immediate Data message. c.txMu is held.
func (c *conn) sendImmediate(imm, flags uint32, se bool) error {
	c.hbuf = c.hbuf[:0]
	c.hbuf = grow(c.hbuf, wire.ImmediateLen+8)[:wire.ImmediateLen]
	wire.PutImmediate(c.hbuf, se, c.nextMSN(wire.QNSend), uint64(imm)<<32|uint64(flags))
	c.hbuf = wire.FinishFPDU(c.hbuf, 0, c.crc)
	raceRelease()
	_, err := c.nc.Write(c.hbuf)
	return err
}

// sendUntagged sends a Send message of n bytes gathered from segs. c.txMu is held.
func (c *conn) sendUntagged(op wire.Opcode, inv uint32, segs [][]byte, n int) error {
	msn := c.nextMSN(wire.QNSend)
	return c.emit(wire.UntaggedHeaderLen, segs, n, func(h []byte, off, plen int, last bool) {
		wire.PutUntagged(h, op, last, inv, wire.QNSend, msn, uint32(off), wire.UntaggedHeaderLen-wire.MPALenLen+plen)
	})
}

// sendTagged sends a tagged message (RDMA Write or Read Response) of n bytes
// gathered from segs to stag/to. c.txMu is held.
func (c *conn) sendTagged(op wire.Opcode, stag uint32, to uint64, segs [][]byte, n int) error {
	return c.emit(wire.TaggedHeaderLen, segs, n, func(h []byte, off, plen int, last bool) {
		wire.PutTagged(h, op, last, stag, to+uint64(off), wire.TaggedHeaderLen-wire.MPALenLen+plen)
	})
}

// emit cuts a message into FPDUs and writes them with one gathered write:
// headers and trailers come from c.hbuf, payload pieces straight from the
// registered memory in segs. put writes the header of the FPDU carrying
// plen bytes at message offset off.
func (c *conn) emit(hdrLen int, segs [][]byte, n int, put func(h []byte, off, plen int, last bool)) error {
	c.nb = c.build(hdrLen, segs, n, put)
	raceRelease()
	c.werr = nil
	if err := c.raw.Write(c.writeFn); c.werr == nil {
		c.werr = err
	}
	c.nb = nil
	c.sent()
	return c.werr
}

// writeOut writes c.nb with raw non-blocking writevs and reports false when
// the socket is full (RawConn.Write then waits for room in the netpoller).
// A large write takes hundreds of microseconds in the kernel: as an ordinary
// syscall it would let the runtime's monitor hand the goroutine's P to
// another thread each time, a context switch per message on small machines.
func (c *conn) writeOut(fd uintptr) bool {
	for len(c.nb) > 0 {
		if len(c.nb[0]) == 0 {
			c.nb = c.nb[1:]
			continue
		}
		w, err := writevNB(int(fd), c.wiov[:], c.nb[:min(len(c.nb), len(c.wiov))])
		if err != nil {
			c.werr = err
			return true
		}
		if w == 0 {
			return false
		}
		for len(c.nb) > 0 && w >= len(c.nb[0]) {
			w -= len(c.nb[0])
			c.nb = c.nb[1:]
		}
		if w > 0 {
			c.nb[0] = c.nb[0][w:]
		}
	}
	return true
}

// build lays out a message's FPDUs in c.iov: headers and trailers in
// c.hbuf, payload pieces from segs. c.txMu is held.
func (c *conn) build(hdrLen int, segs [][]byte, n int, put func(h []byte, off, plen int, last bool)) [][]byte {
	maxp := c.payloadMax(hdrLen)
	nf := 1
	if n > 0 {
		nf = (n + maxp - 1) / maxp
	}
	per := hdrLen + 3 + wire.CRCLen
	if cap(c.hbuf) < nf*per {
		c.hbuf = make([]byte, 0, nf*per+256)
	}
	hb := c.hbuf[:nf*per]
	iov := c.iov[:0]
	si, so := 0, 0 // position in segs
	off := 0
	for f := 0; f < nf; f++ {
		plen := min(maxp, n-off)
		last := off+plen == n
		h := hb[f*per : f*per+hdrLen]
		put(h, off, plen, last)
		iov = append(iov, h)
		if c.crc {
			c.txCRC.Reset()
			c.txCRC.Update(h)
		}
		for left := plen; left > 0; {
			s := segs[si][so:]
			if len(s) > left {
				s = s[:left]
			}
			iov = append(iov, s)
			if c.crc {
				c.txCRC.Update(s)
			}
			left -= len(s)
			so += len(s)
			if so == len(segs[si]) {
				si, so = si+1, 0
			}
		}
		pad := wire.Pad(hdrLen - wire.MPALenLen + plen)
		var crc uint32
		if c.crc {
			c.txCRC.UpdatePad(pad)
			crc = c.txCRC.Sum()
		}
		t := hb[f*per+hdrLen : f*per+hdrLen+pad+wire.CRCLen]
		wire.PutTrailer(t, pad, crc)
		iov = append(iov, t)
		off += plen
	}
	c.iov = iov
	return iov
}

// nudgeDelay is how long an initiator waits for the peer's first FPDU
// before nudging it (see sent).
const nudgeDelay = 200 * time.Millisecond

// sent notes that FPDUs went out. siw has a start-up race: an FPDU that
// arrives between its MPA Reply and the installation of its QP's receive
// upcall stays unread in its socket until the next TCP event (seen with
// siw's debug log in the vmlab). Against a peer that is not a goverbs peer,
// an initiator that has sent and received nothing for nudgeDelay therefore
// sends one zero-length RDMA Write (STag 1, TO 0: the form of siw's own
// Write RTR, which iWARP receivers accept without a check); its arrival
// makes siw read what was waiting.
func (c *conn) sent() {
	if c.passive || c.ext || c.nudgeArmed.Load() || !c.nudgeArmed.CompareAndSwap(false, true) {
		return
	}
	c.nudge = time.AfterFunc(nudgeDelay, func() {
		if !c.rxAny.Load() {
			c.nudgeNeeded.Store(true)
			c.wakeTx()
		}
	})
}
