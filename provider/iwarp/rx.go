package iwarp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goverbs/goverbs/internal/engine"
	"github.com/goverbs/goverbs/internal/fdpark"
	"github.com/goverbs/goverbs/internal/wire"
	"github.com/goverbs/goverbs/verbs"
)

// stageSize bounds what one read may bring in ahead of the header being
// parsed: small messages arrive with one read, large payloads are read
// straight into their target memory.
const stageSize = 4096

// The receive side is a resumable state machine over non-blocking reads
// (pump), so that two drivers can share it: the connection's goroutine,
// woken by the netpoller when the socket is readable (automatic progress),
// and the application's CQ.Poll when the CQ is empty (polled mode: no
// wake-up of a parked goroutine on the latency path). rxMu serialises them.

type rxPhase uint8

const (
	phHeader rxPhase = iota
	phPayload
	phTrailer
)

// errWouldBlock: the socket has no more bytes now.
var errWouldBlock = errors.New("iwarp: would block")

var errStop = errors.New("iwarp: receive stopped")

// rxSide is the receive side: its DDP/RDMAP state, used under mu by
// whichever of its two drivers (the connection's goroutine, the
// application's poll) holds it.
type rxSide struct {
	mu     sync.Mutex
	fdGone bool        // the socket is closing: the polls leave c.fd alone
	polled atomic.Bool // the application polls (engine.Progressor.Polled)
	wake   chan struct{}
	// ho: the hand-off of the poll that pumps (Progress), for the
	// completions it makes; zero (it takes none) for the other drivers.
	ho engine.Handoff

	// A waiter that blocks in the socket (Block): park is its own
	// registration of the socket, blockFn its callback (a method value
	// made once), bw and blockErr its state across the callback's calls.
	park     fdpark.Parker
	blocked  atomic.Bool // a Block is under way: put leaves nothing to it
	blockFn  func(fd uintptr) bool
	bw       *engine.Waker
	blockErr error
	// quietMu orders quiet's socket option between the receive goroutine
	// stepping aside and a Block, which needs the socket to signal.
	quietMu sync.Mutex
	quieted bool
	any     atomic.Bool // an FPDU has arrived

	buf  [stageSize]byte
	r, w int
	crc  wire.CRC

	phase rxPhase
	hdr   [96]byte
	h     wire.Header
	ulen  int
	// payload destination of the current FPDU
	dst     [][]byte
	dstBuf  [][]byte // backing store of dst
	left    int
	discard bool
	// capture: the current FPDU's payload as read (only while recording)
	cap     bool
	capBuf  []byte
	term    [128]byte // a Terminate's attached headers
	termLen int

	msn [4]uint32 // expected MSN per queue number

	// the untagged (Send) message being received
	sendActive bool
	rc         *engine.RecvCtx
	recvSegs   [][]byte
	recvCap    int
	got        int

	// the tagged message (Write or Read Response) being received
	tagActive bool
	tagSTag   uint32
	tagNext   uint64
	writeLen  int // bytes of the Write in progress, then of the last Write

	immPending bool
	imm        uint32

	bulk bool // the last FPDU carried a large payload
	// early: the last pump stopped at an FPDU's end with nothing
	// buffered, without the read that would find the socket empty.
	early bool
	empty uint64 // reads that found the socket empty (for tests)
	// prog counts the reads that brought bytes: the progress the frame
	// stall check (stall.go) looks for. stallArmed and the fields after it
	// are that check's, all under mu.
	prog       uint64
	stallArmed bool
	stallSeen  uint64    // prog when the check last saw progress
	stallSince time.Time // when it did
	// idleAt: a poll found the socket empty in the middle of a large
	// payload (UnixNano; 0: not so); polls leave it alone for pollGap.
	idleAt atomic.Int64
	iov    [2]unix.Iovec
}

// fill makes n (<= stageSize) bytes available in the staging buffer.
func (s *rxSide) fill(fd, n int) error {
	if s.w-s.r >= n {
		return nil
	}
	if s.r > 0 && len(s.buf)-s.r < n+64 {
		s.w = copy(s.buf[:], s.buf[s.r:s.w])
		s.r = 0
	}
	for s.w-s.r < n {
		k, err := readNB(fd, s.buf[s.w:])
		if k > 0 {
			s.w += k
			s.prog++
			continue
		}
		if err == errWouldBlock {
			s.empty++
		}
		return err
	}
	return nil
}

// readNB is one non-blocking read: errWouldBlock when nothing is there,
// io.EOF at the end of the stream.
func readNB(fd int, b []byte) (int, error) {
	for {
		k, err := rawRead(fd, b)
		switch {
		case k > 0:
			return k, nil
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			return 0, errWouldBlock
		case err == nil:
			return 0, io.EOF
		}
		return 0, err
	}
}

// Tuning of the receive goroutine.
const (
	// During a bulk transfer the goroutine busy-reads for up to bulkSpin
	// before parking: the next chunk is usually microseconds away, while a
	// wake-up of a parked goroutine costs tens of microseconds here. (1 MiB
	// RDMA WRITE streaming, 7 interleaved rounds against iperf3: 50 µs gave
	// 0.94x the TCP stream, 200 µs 1.05x.)
	bulkSpin = 200 * time.Microsecond
	bulkFPDU = 16 << 10 // an FPDU payload at least this large marks a bulk transfer
	// A poll that finds the socket empty in the middle of a large payload
	// keeps the polls after it from reading for pollGap: the sender is
	// writing the rest, and each empty read locks the socket against it.
	pollGap = 2 * time.Microsecond
)

// rxLoop is the connection's receive goroutine: it waits for the socket to
// be readable and pumps.
func (c *conn) rxLoop() {
	defer close(c.rxDone)
	select {
	case <-c.estab:
	case <-c.dying:
		return
	}
	var perr error
	err := c.raw.Read(func(fd uintptr) bool {
		if c.rx.polled.Load() {
			// Only while this goroutine is parked here (not in the
			// netpoller) may arrivals be kept from signalling the socket,
			// and only while no waiter blocks in it.
			c.rx.quietMu.Lock()
			if !c.rx.blocked.Load() {
				quiet(int(fd), true)
				c.rx.quieted = true
			}
			c.rx.quietMu.Unlock()
			// It stays aside as long as the polling goes on: taking the
			// socket from a poller that reads it would only make the two
			// spin against each other (a streaming receiver then used two
			// CPUs and starved its sender on a small machine).
		wait:
			for c.rx.polled.Load() {
				select {
				case <-c.rx.wake:
				case <-c.dying:
					break wait
				}
			}
			c.rx.quietMu.Lock()
			if c.rx.quieted {
				quiet(int(fd), false)
				c.rx.quieted = false
			}
			c.rx.quietMu.Unlock()
		}
		// Always drain before waiting again: the netpoller reports
		// readiness once (edge-triggered), and bytes left unread now would
		// wait for the next arrival if the application stopped polling.
		if h := c.rxHold.Load(); h != nil {
			<-*h
		}
		c.rx.mu.Lock()
		perr = c.pump(int(fd), true)
		bulk := c.rx.bulk
		c.rx.mu.Unlock()
		if perr == errWouldBlock && bulk {
			for start := time.Now(); perr == errWouldBlock && time.Since(start) < bulkSpin; {
				c.rx.mu.Lock()
				perr = c.pump(int(fd), true)
				c.rx.mu.Unlock()
			}
		}
		return perr != errWouldBlock
	})
	if perr == errWouldBlock || perr == nil {
		perr = err
	}
	c.rxFailed(perr)
}

// Progress implements engine.Progressor: polled mode's non-blocking pump,
// called by CQ.Poll on the application's goroutine. The completions it
// makes for the polled CQ (receives, Reads and atomics) go into the poll's
// array when the engine allows (engine.Handoff), not through the CQ's
// ring: a push and a pop, with their atomics, per message.
func (c *conn) Progress(ho engine.Handoff) int {
	if !c.estabDone.Load() {
		return 0 // the receive side starts once the QP is established
	}
	if c.tx.restOut.Load() {
		c.progressTx()
	}
	if t := c.rx.idleAt.Load(); t != 0 {
		if time.Now().UnixNano()-t < int64(pollGap) {
			return 0 // the rest of the payload is on its way: no empty read
		}
		c.rx.idleAt.Store(0)
	}
	if !c.rx.mu.TryLock() {
		return 0 // the receive goroutine is at it
	}
	if c.rx.fdGone {
		c.rx.mu.Unlock()
		return 0
	}
	c.rx.ho = ho
	perr := c.pump(c.fd, false) // c.fd stays open while rx.mu is held (see conn.fd)
	n := c.rx.ho.Len()
	c.rx.ho = engine.Handoff{}
	if perr == errWouldBlock && c.rx.bulk && c.rx.phase == phPayload {
		c.rx.idleAt.Store(time.Now().UnixNano())
	}
	c.rx.mu.Unlock()
	if perr != errWouldBlock && perr != nil {
		c.rxFailed(perr)
	}
	return n
}

// Block implements engine.Blocker: the waiting goroutine reads the socket
// itself, parked in the netpoller on it between arrivals, while the
// receive goroutine stays aside (polled mode). What the transmit side
// leaves to polls meanwhile goes to the transmit goroutine (put).
func (c *conn) Block(w *engine.Waker) bool {
	if !c.estabDone.Load() || c.isDying() {
		return false
	}
	c.rx.blocked.Store(true)
	defer c.rx.blocked.Store(false)
	if c.tx.restOut.Load() {
		c.wakeTx() // a message's rest, left to the polls before this Block
	}
	c.rx.quietMu.Lock()
	if c.rx.quieted {
		c.raw.Control(func(fd uintptr) { quiet(int(fd), false) })
		c.rx.quieted = false
	}
	c.rx.quietMu.Unlock()
	c.rx.bw, c.rx.blockErr = w, nil
	err := c.rx.park.Wait(c.raw, c.rx.blockFn)
	perr := c.rx.blockErr
	c.rx.bw, c.rx.blockErr = nil, nil
	if perr != nil && perr != errWouldBlock {
		c.rxFailed(perr)
		return false
	}
	return err == nil || err == fdpark.ErrInterrupted
}

// blockFD is Block's callback: it processes what the socket has and
// reports whether the wait is over. It asks after each message that ends
// what it has read: a wait that it ends needs no read that would find the
// socket empty (the next poll or Block reads first), while one that goes
// on reads on before it parks (the netpoller reports nothing more for
// bytes that came with those read, nor for the end of the stream that
// came with them).
func (c *conn) blockFD(fd uintptr) bool {
	w := c.rx.bw
	for {
		w.Busy()
		c.rx.mu.Lock()
		perr := c.pump(int(fd), false)
		early := c.rx.early
		c.rx.mu.Unlock()
		if perr != errWouldBlock {
			c.rx.blockErr = perr
			return true
		}
		if !w.Idle() {
			return true
		}
		if !early {
			return false // the socket is empty: park
		}
	}
}

// Interrupt implements engine.Blocker.
func (c *conn) Interrupt() { c.rx.park.Interrupt() }

// Polled implements engine.Progressor: while the application polls, the
// receive goroutine steps aside, and the transmit goroutine leaves the rest
// of a message the socket did not take at once to the polls (progressTx);
// when it stops, both are woken to carry on.
func (c *conn) Polled(on bool) {
	c.rx.polled.Store(on)
	if !on {
		select {
		case c.rx.wake <- struct{}{}:
		default:
		}
		c.wakeTx()
	}
}

// rxFailed ends the connection after a receive error.
func (c *conn) rxFailed(err error) {
	if err == errStop {
		return // a Terminate was sent; the connection is already failing
	}
	select {
	case <-c.dying: // we closed it
		return
	default:
	}
	if errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		err = ErrDisconnected
	} else {
		err = fmt.Errorf("iwarp: receive: %w", err)
	}
	c.fail(err, nil, nil)
}

// pump processes everything the socket has now. It returns errWouldBlock
// when it needs more bytes, errStop after a protocol error (a Terminate is
// on its way), or the I/O error. With drain false (polled mode) it returns
// after a complete FPDU when nothing more is buffered, sparing a read that
// would find nothing (and sets early): the next poll reads again. A frame
// left incomplete starts the stall check (stall.go) unless it runs already.
func (c *conn) pump(fd int, drain bool) error {
	c.rx.early = false
	err := c.pumpFrames(fd, drain)
	if err == errWouldBlock && !c.rx.stallArmed && c.rx.partial() {
		c.armStall()
	}
	return err
}

// partial reports whether a frame has begun and is not complete: its
// header is in part, or its payload or trailer not all read.
func (s *rxSide) partial() bool { return s.phase != phHeader || s.r != s.w }

func (c *conn) pumpFrames(fd int, drain bool) error {
	s := &c.rx
	done := false
	for {
		switch s.phase {
		case phHeader:
			if done && !drain && s.r == s.w {
				s.early = true
				return errWouldBlock
			}
			if err := s.fill(fd, 4); err != nil {
				return err
			}
			pre := s.buf[s.r : s.r+4]
			s.ulen = int(binary.BigEndian.Uint16(pre))
			hl, herr := wire.HeaderLen(pre[2], pre[3])
			if err := s.fill(fd, hl); err != nil {
				return err
			}
			if s.cap = captureFn.Get() != nil; s.cap {
				s.capBuf = s.capBuf[:0]
				if f := wire.FPDULen(s.ulen); herr == nil && f == hl+wire.TrailerLen(s.ulen) && f <= len(s.buf) {
					// No payload: the FPDU is recorded whole before it
					// acts (a Read Request's response must not precede it).
					if err := s.fill(fd, f); err != nil {
						return err
					}
					captureIn(c.nc, c.ep.Num(), [][]byte{s.buf[s.r : s.r+f]})
					s.cap = false
				}
			}
			s.h = wire.Header(s.hdr[:hl])
			copy(s.h, s.buf[s.r:s.r+hl])
			s.r += hl
			raceAcquire()
			if err := c.rxHeader(s, hl, herr); err != nil {
				return err
			}
			s.phase = phPayload
		case phPayload:
			if err := c.rxPayload(fd, s); err != nil {
				return err
			}
			s.phase = phTrailer
		case phTrailer:
			pad := wire.Pad(s.ulen)
			if err := s.fill(fd, pad+wire.CRCLen); err != nil {
				return err
			}
			t := s.buf[s.r : s.r+pad+wire.CRCLen]
			s.r += pad + wire.CRCLen
			if c.crc {
				s.crc.Update(t[:pad])
				if s.crc.Sum() != wire.TrailerCRC(t[pad:]) {
					c.terminate(wire.TermMPA(wire.MPACRCError), nil, nil, "CRC mismatch")
					return errStop
				}
			}
			if s.cap {
				captureIn(c.nc, c.ep.Num(), [][]byte{s.h, s.capBuf, t})
			}
			s.phase = phHeader
			if !c.rx.any.Load() {
				c.rx.any.Store(true)
			}
			if !c.su.rxSeen.Load() {
				c.su.rxSeen.Store(true)
				c.progressLater() // the responder may now transmit
			}
			if err := c.rxFinish(s, s.h); err != nil {
				return err
			}
			done = true
		}
	}
}

// rxPayload places the current FPDU's payload: first what is in the staging
// buffer, then straight from the socket into the destination.
func (c *conn) rxPayload(fd int, s *rxSide) error {
	for s.left > 0 {
		if s.discard {
			if s.r == s.w {
				k, err := readNB(fd, s.buf[:min(len(s.buf), s.left)])
				if err != nil {
					if err == errWouldBlock {
						s.empty++
					}
					return err
				}
				s.r, s.w = 0, k
				s.prog++
			}
			k := min(s.w-s.r, s.left)
			if c.crc {
				s.crc.Update(s.buf[s.r : s.r+k])
			}
			if s.cap {
				s.capBuf = append(s.capBuf, s.buf[s.r:s.r+k]...)
			}
			s.r += k
			s.left -= k
			continue
		}
		d := s.dst[0]
		var k int
		switch {
		case s.r < s.w:
			k = copy(d, s.buf[s.r:s.w])
			s.r += k
		case len(s.dst) == 1:
			// The last piece of the payload: read what follows with it.
			s.r, s.w = 0, 0
			n, err := readv2(fd, &s.iov, d, s.buf[:])
			if err != nil {
				if err == errWouldBlock {
					s.empty++
				}
				return err
			}
			k = min(n, len(d))
			s.w = n - k
			s.prog++
		default:
			var err error
			if k, err = readNB(fd, d); err != nil {
				if err == errWouldBlock {
					s.empty++
				}
				return err
			}
			s.prog++
		}
		if c.crc {
			s.crc.Update(d[:k])
		}
		if s.cap {
			s.capBuf = append(s.capBuf, d[:k]...)
		}
		s.left -= k
		if k == len(d) {
			s.dst = s.dst[1:]
		} else {
			s.dst[0] = d[k:]
		}
	}
	return nil
}

// setDst makes n bytes of the segment list segs, from byte offset off, the
// destination of the current payload.
func (s *rxSide) setDst(segs [][]byte, off, n int) {
	s.dstBuf = engine.AppendRange(s.dstBuf[:0], segs, off, n)
	s.dst = s.dstBuf
}

// rxHeader checks a complete FPDU header and prepares the payload's
// placement (or handles a message that has no payload).
func (c *conn) rxHeader(s *rxSide, hl int, herr error) error {
	h := s.h
	if herr != nil {
		var te *wire.TermError
		if errors.As(herr, &te) {
			c.terminate(*te, h, nil, "bad control bytes")
		} else {
			c.terminate(wire.TermDDPCatastrophic(), h, nil, herr.Error())
		}
		return errStop
	}
	if te := wire.Check(h, c.ext); te != nil {
		c.terminate(*te, h, nil, "header check")
		return errStop
	}
	plen := s.ulen - (hl - wire.MPALenLen)
	if plen < 0 {
		c.terminate(wire.TermDDPCatastrophic(), h, nil, "ULPDU shorter than its header")
		return errStop
	}
	if c.crc {
		s.crc.Reset()
		s.crc.Update(h)
	}
	s.left, s.discard, s.dst = plen, false, nil
	s.bulk = plen >= bulkFPDU
	switch op := h.Opcode(); op {
	case wire.OpWrite:
		return c.rxWrite(s, h, plen)
	case wire.OpReadResponse:
		return c.rxReadResponse(s, h, plen)
	case wire.OpSend, wire.OpSendSE, wire.OpSendInv, wire.OpSendSEInv:
		return c.rxSend(s, h, plen)
	case wire.OpReadRequest:
		return c.rxReadRequest(s, h)
	case wire.OpTerminate:
		// The attached headers are collected and the Terminate handled in rxFinish.
		s.termLen = 0
		if plen > len(s.term) {
			s.discard = true
		} else {
			s.termLen = plen
			s.setDst([][]byte{s.term[:plen]}, 0, plen)
		}
		return nil
	case wire.OpImmediate, wire.OpImmediateSE:
		return c.rxImmediate(s, h)
	case wire.OpAtomicRequest:
		return c.rxAtomicRequest(s, h)
	case wire.OpAtomicResponse:
		return c.rxAtomicResponse(s, h)
	default:
		c.terminate(wire.TermRDMAP(wire.RDMAPRemoteOperation, wire.RDMAPUnexpectedOpcode), h, nil, op.String())
		return errStop
	}
}

// rxFinish completes a message whose last FPDU has been read and checked.
func (c *conn) rxFinish(s *rxSide, h wire.Header) error {
	op := h.Opcode()
	if op == wire.OpTerminate {
		c.rxTerminate(s, h)
		return errStop
	}
	if !h.Last() {
		return nil
	}
	switch op {
	case wire.OpWrite:
		s.tagActive = false
	case wire.OpReadResponse:
		s.tagActive = false
		e, _ := c.orq.pop(false, nil) // rxReadResponse checked it is there
		if int(e.got) != int(e.size) {
			c.terminate(wire.TermDDPTagged(wire.DDPTagBaseBounds), h, nil, "short Read Response")
			return errStop
		}
		c.completeTo(e.w, e.seq, verbs.WCSuccess, &s.ho)
	case wire.OpSend, wire.OpSendSE, wire.OpSendInv, wire.OpSendSEInv:
		s.sendActive = false
		s.msn[wire.QNSend]++
		wc := verbs.WC{Opcode: verbs.WCRecv, ByteLen: uint32(s.got)}
		if s.immPending {
			wc.Flags |= verbs.WCFlagWithImm
			wc.ImmData = s.imm
			s.immPending = false
		}
		if op == wire.OpSendInv || op == wire.OpSendSEInv {
			rkey := h.InvSTag()
			if c.resp.Invalidate(rkey) != engine.FaultNone {
				wc.Status = verbs.WCRemInvReqErr
				c.resp.CompleteRecv(s.rc, &wc, false)
				c.terminate(wire.TermRDMAP(wire.RDMAPRemoteOperation, wire.RDMAPSTagNotInvalidated), h, nil, "invalidate")
				return errStop
			}
			wc.Flags |= verbs.WCFlagWithInv
			wc.ImmData = rkey
		}
		c.resp.CompleteRecvTo(s.rc, &wc, op == wire.OpSendSE || op == wire.OpSendSEInv, &s.ho)
	}
	return nil
}

// complete finishes a request of the ORQ; what it releases is sent by the
// transmit goroutine, never by the receive side.
func (c *conn) complete(w *engine.WQE, seq uint64, st verbs.WCStatus) {
	c.completeTo(w, seq, st, nil)
}

// completeTo is complete with the hand-off of the poll that pumps (c.rx.ho).
func (c *conn) completeTo(w *engine.WQE, seq uint64, st verbs.WCStatus, ho *engine.Handoff) {
	if c.req.CompleteTo(w, seq, st, ho) {
		c.progressLater()
	}
}

// progressLater asks the transmit goroutine to send what the QP can send.
func (c *conn) progressLater() {
	c.needProgress.Store(true)
	c.wakeTx()
}

func tagFault(f engine.Fault) wire.TermError {
	switch f {
	case engine.FaultPD:
		return wire.TermDDPTagged(wire.DDPTagSTagNotAssociated)
	case engine.FaultBounds:
		return wire.TermDDPTagged(wire.DDPTagBaseBounds)
	}
	return wire.TermDDPTagged(wire.DDPTagInvalidSTag) // key and access (DDP has no access-rights code)
}

func (c *conn) rxWrite(s *rxSide, h wire.Header, plen int) error {
	stag, to := h.STag(), h.TO()
	if s.tagActive {
		if stag != s.tagSTag {
			c.terminate(wire.TermDDPTagged(wire.DDPTagInvalidSTag), h, nil, "STag changed within a Write")
			return errStop
		}
		if to != s.tagNext {
			c.terminate(wire.TermDDPTagged(wire.DDPTagBaseBounds), h, nil, "TO not contiguous")
			return errStop
		}
	} else {
		s.tagActive, s.tagSTag, s.writeLen = true, stag, 0
	}
	dst, f := c.resp.Resolve(stag, to, uint32(plen), verbs.AccessRemoteWrite)
	if f != engine.FaultNone {
		c.terminate(tagFault(f), h, evp(verbs.EventQPAccessErr), "RDMA Write: "+f.String())
		return errStop
	}
	s.setDst([][]byte{dst}, 0, plen)
	s.tagNext = to + uint64(plen)
	s.writeLen += plen
	return nil
}

func (c *conn) rxReadResponse(s *rxSide, h wire.Header, plen int) error {
	c.orq.mu.Lock()
	e := c.orq.front()
	if e != nil && e.atomic {
		e = nil
	}
	ok := e != nil && h.STag() == e.stag && h.TO() == e.to+uint64(e.got) && int(e.got)+plen <= int(e.size)
	if ok {
		s.setDst(e.sink, int(e.got), plen)
		e.got += uint32(plen)
	}
	c.orq.mu.Unlock()
	if e == nil {
		c.terminate(wire.TermDDPTagged(wire.DDPTagInvalidSTag), h, nil, "Read Response without a Read")
		return errStop
	}
	if !ok {
		c.terminate(wire.TermDDPTagged(wire.DDPTagBaseBounds), h, nil, "Read Response does not match the Read")
		return errStop
	}
	s.tagActive = !h.Last()
	return nil
}

func (c *conn) rxSend(s *rxSide, h wire.Header, plen int) error {
	if h.MSN() != s.msn[wire.QNSend] {
		c.terminate(wire.TermDDPUntagged(wire.DDPUntagMSNRange), h, nil, "Send MSN")
		return errStop
	}
	if !s.sendActive {
		if h.MO() != 0 {
			c.terminate(wire.TermDDPUntagged(wire.DDPUntagInvalidMO), h, nil, "first Send segment has MO != 0")
			return errStop
		}
		rc, ok := c.resp.TakeRecv()
		if !ok {
			c.terminate(wire.TermDDPUntagged(wire.DDPUntagNoBuffer), h, nil, "no receive buffer posted")
			return errStop
		}
		segs, st := c.resp.RecvSegments(rc, s.recvSegs[:0])
		s.recvSegs = segs
		if st != verbs.WCSuccess {
			wc := verbs.WC{Opcode: verbs.WCRecv, Status: st}
			c.resp.CompleteRecv(rc, &wc, false)
			c.terminate(wire.TermDDPUntagged(wire.DDPUntagNoBuffer), h, nil, "receive buffer not accessible")
			return errStop
		}
		s.sendActive, s.rc, s.got, s.recvCap = true, rc, 0, engine.TotalLen(segs)
	}
	if int(h.MO()) != s.got {
		c.terminate(wire.TermDDPUntagged(wire.DDPUntagInvalidMO), h, nil, "Send MO")
		return errStop
	}
	if s.got+plen > s.recvCap {
		wc := verbs.WC{Opcode: verbs.WCRecv, Status: verbs.WCLocLenErr}
		c.resp.CompleteRecv(s.rc, &wc, false)
		s.sendActive = false
		// siw sends "no buffer" (0x02) here, not "message too long".
		c.terminate(wire.TermDDPUntagged(wire.DDPUntagNoBuffer), h, nil, "message longer than the receive buffer")
		return errStop
	}
	s.setDst(s.recvSegs, s.got, plen)
	s.got += plen
	return nil
}

func (c *conn) rxReadRequest(s *rxSide, h wire.Header) error {
	if h.MSN() != s.msn[wire.QNReadRequest] {
		c.terminate(wire.TermDDPUntagged(wire.DDPUntagMSNRange), h, nil, "Read Request MSN")
		return errStop
	}
	s.msn[wire.QNReadRequest]++
	rr := h.ReadRequest()
	src, f := c.resp.Resolve(rr.SrcSTag(), rr.SrcTO(), rr.Size(), verbs.AccessRemoteRead)
	if f != engine.FaultNone {
		c.terminate(wire.TermRDMAP(wire.RDMAPRemoteProtection, protCode(f)), h, evp(verbs.EventQPAccessErr), "RDMA Read: "+f.String())
		return errStop
	}
	return c.queueResp(h, resp{kind: respRead, src: src, stag: rr.SinkSTag(), to: rr.SinkTO()})
}

func protCode(f engine.Fault) wire.RDMAPCode {
	switch f {
	case engine.FaultBounds, engine.FaultAlign:
		return wire.RDMAPBaseBounds
	case engine.FaultAccess:
		return wire.RDMAPAccessRights
	case engine.FaultPD:
		return wire.RDMAPSTagNotAssociated
	}
	return wire.RDMAPInvalidSTag
}

// queueResp adds a response to the IRQ, which holds at most IRD requests.
func (c *conn) queueResp(h wire.Header, r resp) error {
	n := c.irq.len()
	full := n >= c.ird // IRD 0: no inbound reads or atomics at all
	now := !full && n == 0 && len(r.src) <= respFPDUs*c.payloadMax(wire.TaggedHeaderLen)
	// With nothing queued before it (only this goroutine queues), a small
	// response may go out at once; otherwise the transmit goroutine sends it.
	if now && c.respondNow(&r) {
		return nil
	}
	if !full {
		c.irq.push(r)
	}
	if full {
		c.terminate(wire.TermRDMAP(wire.RDMAPRemoteOperation, wire.RDMAPCatastrophicStream), h, nil, "more outstanding Read/Atomic Requests than IRD")
		return errStop
	}
	c.wakeTx()
	return nil
}

func (c *conn) rxImmediate(s *rxSide, h wire.Header) error {
	if h.MSN() != s.msn[wire.QNSend] {
		c.terminate(wire.TermDDPUntagged(wire.DDPUntagMSNRange), h, nil, "Immediate Data MSN")
		return errStop
	}
	s.msn[wire.QNSend]++
	v := h.Immediate().Value()
	imm, flags := uint32(v>>32), uint32(v)
	if flags&immSendFollows != 0 {
		s.immPending, s.imm = true, imm
		return nil
	}
	rc, ok := c.resp.TakeRecv()
	if !ok {
		c.terminate(wire.TermDDPUntagged(wire.DDPUntagNoBuffer), h, nil, "no receive buffer for immediate data")
		return errStop
	}
	wc := verbs.WC{Opcode: verbs.WCRecv, Flags: verbs.WCFlagWithImm, ImmData: imm}
	if flags&immAfterWrite != 0 {
		wc.Opcode, wc.ByteLen = verbs.WCRecvRDMAWithImm, uint32(s.writeLen)
	}
	c.resp.CompleteRecvTo(rc, &wc, h.Opcode() == wire.OpImmediateSE, &s.ho)
	return nil
}

func (c *conn) rxAtomicRequest(s *rxSide, h wire.Header) error {
	if h.MSN() != s.msn[wire.QNReadRequest] {
		c.terminate(wire.TermDDPUntagged(wire.DDPUntagMSNRange), h, nil, "Atomic Request MSN")
		return errStop
	}
	s.msn[wire.QNReadRequest]++
	a := h.AtomicRequest()
	var op verbs.WROpcode
	switch a.Op() {
	case wire.AtomicFetchAdd:
		op = verbs.WRAtomicFetchAndAdd
	case wire.AtomicCompareSwap:
		op = verbs.WRAtomicCmpAndSwp
	case wire.AtomicWriteGoverbs, wire.FlushGoverbs:
		return c.rxGoverbsRequest(h, a)
	default:
		c.terminate(wire.TermRDMAP(wire.RDMAPRemoteOperation, wire.RDMAPUnexpectedOpcode), h, nil, "atomic swap is not supported")
		return errStop
	}
	cmpAdd, swap := a.AddSwap(), uint64(0)
	if op == verbs.WRAtomicCmpAndSwp {
		cmpAdd, swap = a.Compare(), a.AddSwap()
	}
	// Refuse an atomic beyond IRD before executing it. Only this goroutine
	// adds to the IRQ, so it cannot fill up between here and queueResp.
	if c.irq.len() >= c.ird {
		return c.queueResp(h, resp{})
	}
	orig, f := c.resp.Atomic(a.STag(), a.TO(), op, cmpAdd, swap)
	if f != engine.FaultNone {
		c.terminate(wire.TermRDMAP(wire.RDMAPRemoteProtection, protCode(f)), h, evp(verbs.EventQPAccessErr), "atomic: "+f.String())
		return errStop
	}
	return c.queueResp(h, resp{kind: respAtomic, reqID: a.ReqID(), orig: orig})
}

// rxGoverbsRequest executes an ATOMIC_WRITE or a FLUSH that a goverbs peer
// sent as an Atomic Request with a goverbs code (see wire.FlushGoverbs).
// Everything the connection carried before it has been placed, so a flush
// covers it; the Atomic Response goes out once it is done.
func (c *conn) rxGoverbsRequest(h wire.Header, a wire.AtomicRequest) error {
	if c.irq.len() >= c.ird {
		return c.queueResp(h, resp{})
	}
	var f engine.Fault
	what := "flush: "
	if a.Op() == wire.FlushGoverbs {
		f = c.resp.Flush(a.STag(), a.TO(), uint32(a.AddSwap()), verbs.FlushType(a.Compare()))
	} else {
		what = "atomic write: "
		var v [8]byte
		binary.BigEndian.PutUint64(v[:], a.AddSwap())
		f = c.resp.AtomicWrite(a.STag(), a.TO(), v)
	}
	if f == engine.FaultPersist {
		c.terminate(wire.TermRDMAP(wire.RDMAPRemoteOperation, wire.RDMAPCatastrophicStream), h, evp(verbs.EventQPReqErr), what+f.String())
		return errStop
	}
	if f != engine.FaultNone {
		c.terminate(wire.TermRDMAP(wire.RDMAPRemoteProtection, protCode(f)), h, evp(verbs.EventQPAccessErr), what+f.String())
		return errStop
	}
	return c.queueResp(h, resp{kind: respAtomic, reqID: a.ReqID()})
}

func (c *conn) rxAtomicResponse(s *rxSide, h wire.Header) error {
	if h.MSN() != s.msn[wire.QNAtomicResponse] {
		c.terminate(wire.TermDDPUntagged(wire.DDPUntagMSNRange), h, nil, "Atomic Response MSN")
		return errStop
	}
	s.msn[wire.QNAtomicResponse]++
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], h.AtomicResponse().Orig())
	e, ok := c.orq.pop(true, b[:])
	if !ok {
		c.terminate(wire.TermRDMAP(wire.RDMAPRemoteOperation, wire.RDMAPUnexpectedOpcode), h, nil, "Atomic Response without a request")
		return errStop
	}
	c.completeTo(e.w, e.seq, verbs.WCSuccess, &s.ho)
	return nil
}

// rxTerminate handles a Terminate from the peer: the connection ends and
// everything outstanding is flushed. A Terminate that reports an error on
// one of our Read Requests (it attaches the request's header) completes
// that Read with REM_ACCESS_ERR (protection errors) or REM_OP_ERR.
func (c *conn) rxTerminate(s *rxSide, h wire.Header) {
	full := append(append(make([]byte, 0, len(h)+s.termLen), h...), s.term[:s.termLen]...)
	info, _ := wire.ParseTerminate(wire.Header(full))
	err := &TerminateError{Cause: info.RFC.Cause, Info: fmt.Sprintf("in siw's bit order: %v", info.Swapped.Cause)}
	if len(info.RDMAPHdr) >= wire.ReadRequestBodyLen {
		rr := wire.ReadRequest(info.RDMAPHdr)
		if w, seq, ok := c.orq.findRead(rr.SinkSTag(), rr.SinkTO()); ok {
			st := verbs.WCWRFlushErr
			for _, f := range []wire.TermFields{info.RFC, info.Swapped} {
				if f.Cause.Layer == wire.LayerRDMAP && f.Cause.EType == uint8(wire.RDMAPRemoteProtection) {
					st = verbs.WCRemAccessErr
				} else if f.Cause.Layer == wire.LayerRDMAP && f.Cause.EType == uint8(wire.RDMAPRemoteOperation) && st == verbs.WCWRFlushErr {
					st = verbs.WCRemOpErr
				}
			}
			c.close(err, nil)
			c.complete(w, seq, st)
			return
		}
	}
	c.fail(err, nil, nil)
}
