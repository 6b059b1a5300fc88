package iwarp

import (
	"encoding/binary"
	"fmt"
	"net"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/goverbs/goverbs/internal/engine"
	"github.com/goverbs/goverbs/internal/wire"
	"github.com/goverbs/goverbs/verbs"
)

// txSide is the transmit side of the stream. mu serialises whole messages
// on it: the engine's transmitter (Send), the transmit goroutine (responses,
// the start-up nudge, the Terminate) and a response sent from the receive
// side (respondNow).
//
// Only the transmit goroutine ever waits for the socket. The others write
// without waiting (Send on the application's goroutine must never block,
// as ibv_post_send does not), and what the socket does not take stays in
// rest: the tail of iov, still pointing into the registered memory and into
// hbuf, so nothing else goes on the stream, and neither is reused, until it
// is written (by the transmit goroutine, or in polled mode by the
// application's polls: progressTx). Send does not wait for mu either: when
// the stream is busy it returns Stall, leaving want set, and whoever frees
// the stream resumes the engine.
//
// Requests queued one behind another go out together (engine.Batcher): a
// Send told that another request follows lays its message out after the
// ones kept back and keeps it too, holding mu until the engine's next Send
// or Flush writes them all with one writev. (rsocket over iWARP posts a
// WRITE and its announcing SEND as a list: one system call each before.)
type txSide struct {
	mu      sync.Mutex
	msn     [4]uint32 // per queue number: next MSN (starts at 1)
	maxFPDU int
	hbuf    []byte   // headers and trailers of the messages laid out (an arena: see hdrs)
	hused   int      // how much of hbuf they use
	iov     [][]byte // their FPDUs: headers, payload pieces, trailers
	segs    [][]byte // the payload of the message being built
	respSeg [1][]byte
	wiov    [128]unix.Iovec
	crc     wire.CRC

	// batching: messages are kept back, laid out in iov[:kept] (keptLen
	// bytes), and the engine's transmitter holds mu from the Send that kept
	// the first one to the Send or Flush that writes them. held are the
	// Sends and Writes among them (they complete once written).
	batching bool
	kept     int
	keptLen  int
	held     [batchMax]sentReq
	nheld    int
	heldFail bool // their write failed: the first completes with the error

	rest   [][]byte  // what the socket has not taken yet of the messages on the stream
	restW  []sentReq // the Sends and Writes that complete once rest is written
	restB  [batchMax + 1]sentReq
	werr   error
	fdGone bool                  // the socket is closing: put and progressTx leave c.fd alone
	puts   uint64                // writes begun without waiting (put): for tests
	waitFn func(fd uintptr) bool // writeRest, for RawConn.Write, which then waits for room

	// want: the engine's transmitter found the stream busy and returned
	// Stall; it is resumed once the stream is free.
	want atomic.Bool
	// restOut: rest is not empty (a hint for polled mode, read without mu).
	restOut atomic.Bool
}

// sentReq is a request whose message is on its way: a Send or Write
// completes once all of it is written.
type sentReq struct {
	w   *engine.WQE
	seq uint64
	end int // kept back: where its message ends in the batch's bytes
}

// What a batch keeps back: messages of at most batchSmall bytes (batching
// saves a system call per message, which a large message hardly notices),
// at most batchMax Sends and Writes and batchBytes on the wire, and half a
// writev's pieces (wiov). A large message goes out at once, with the ones
// kept before it.
const (
	batchSmall = 16 << 10
	batchMax   = 16
	batchBytes = 64 << 10
)

// tryLockTx takes the stream for the engine's transmitter without waiting.
// It fails when another holder has it or a message's rest is still being
// written; want then makes whoever frees the stream resume the engine.
// Only the engine's transmitter (one goroutine at a time per QP) sets want.
func (c *conn) tryLockTx() bool {
	if !c.tx.mu.TryLock() {
		// Set before trying again: a holder that lets go after this
		// TryLock failed sees it.
		c.tx.want.Store(true)
		if !c.tx.mu.TryLock() {
			return false
		}
		c.tx.want.Store(false)
	}
	if len(c.tx.rest) > 0 {
		// The transmit goroutine writes it and then resumes the engine.
		c.tx.want.Store(true)
		c.tx.mu.Unlock()
		return false
	}
	return true
}

// unlockTx lets go of the stream. When the engine's transmitter found it
// busy meanwhile and it is free now, the engine is resumed: here, or with
// later (on the receive side, which never transmits requests) by the
// transmit goroutine.
func (c *conn) unlockTx(later bool) {
	free := len(c.tx.rest) == 0
	c.tx.mu.Unlock()
	if free && c.tx.want.Load() && c.tx.want.Swap(false) {
		if later {
			c.progressLater()
		} else {
			c.req.Resume()
		}
	}
}

// lockTx takes the stream for the transmit goroutine, waiting for it (no
// other holder keeps it for long: none but this goroutine waits for the
// socket), and writes what the socket has not taken yet of the messages
// before, waiting for room; releaseTx completes the requests this finished.
func (c *conn) lockTx() error {
	c.tx.mu.Lock()
	if len(c.tx.rest) == 0 {
		return nil
	}
	if err := c.wait(); err != nil {
		c.tx.restW = c.tx.restW[:0] // the QP's flush completes them
		return err
	}
	c.tx.restOut.Store(false)
	return nil
}

// progressTx is polled mode's transmit side, called by the application's
// CQ.Poll: it writes without waiting what the socket has not taken yet of
// the message on the stream, and completes that message once it is out.
// While the application polls, this replaces the transmit goroutine's
// wait for room, and its wake-up (tens of microseconds) with it.
func (c *conn) progressTx() {
	if !c.tx.mu.TryLock() {
		return // its holder writes it, or the transmit goroutine waits for room
	}
	if len(c.tx.rest) == 0 {
		c.unlockTx(false)
		return
	}
	c.tx.werr = nil
	raceRelease()
	if c.tx.fdGone {
		c.tx.werr = net.ErrClosed
	} else {
		c.writeRest(uintptr(c.fd)) // open while tx.mu is held (see conn.fd)
	}
	if len(c.tx.rest) > 0 || c.tx.werr != nil {
		if c.tx.werr != nil {
			c.wakeTx() // the transmit goroutine meets the error and fails the connection
		}
		c.tx.mu.Unlock()
		return
	}
	c.tx.restOut.Store(false)
	c.releaseTx()
}

// releaseTx is unlockTx after lockTx or progressTx: once the rest of the
// messages on the stream is written, it completes the Sends and Writes
// among them. It is not for the receive side (it may transmit).
func (c *conn) releaseTx() {
	var done [batchMax + 1]sentReq
	n := 0
	free := len(c.tx.rest) == 0
	if free {
		n = copy(done[:], c.tx.restW)
		c.tx.restW = c.tx.restW[:0]
	}
	c.tx.mu.Unlock()
	for _, d := range done[:n] {
		c.req.Complete(d.w, d.seq, verbs.WCSuccess)
	}
	if free && c.tx.want.Load() && c.tx.want.Swap(false) {
		c.req.Resume()
	}
}

// put writes the message laid out in iov without waiting. What the socket
// does not take stays in c.tx.rest, and the transmit goroutine is woken to
// write it. c.tx.mu is held.
func (c *conn) put(iov [][]byte) error {
	c.tx.puts++
	c.record(iov)
	c.tx.iov, c.tx.rest, c.tx.werr = iov, iov, nil
	raceRelease()
	var err error
	if c.tx.fdGone {
		err = net.ErrClosed
	} else {
		c.writeRest(uintptr(c.fd)) // open while tx.mu is held (see conn.fd)
	}
	if c.tx.werr != nil {
		err = c.tx.werr
	}
	c.sent()
	if len(c.tx.rest) > 0 {
		c.tx.restOut.Store(true)
		// While the application polls, its polls write the rest
		// (progressTx); otherwise, and on an error, the transmit goroutine
		// does (it fails the connection on the error).
		if err != nil || !c.rx.polled.Load() || c.rx.blocked.Load() {
			c.wakeTx()
		}
	}
	return err
}

// wait writes c.tx.rest, waiting in the netpoller whenever the socket is
// full. Only the transmit goroutine calls it; c.tx.mu is held. It ends with
// an error when the connection dies (the kernel's error, or the write
// deadline that close sets).
func (c *conn) wait() error {
	c.tx.werr = nil
	raceRelease()
	err := c.raw.Write(c.tx.waitFn)
	if c.tx.werr != nil {
		err = c.tx.werr
	}
	if err == nil {
		c.sent()
	}
	return err
}

// writeRest writes c.tx.rest with raw non-blocking writevs and reports
// false when the socket is full. A large write takes hundreds of
// microseconds in the kernel: as an ordinary syscall it would let the
// runtime's monitor hand the goroutine's P to another thread each time, a
// context switch per message on small machines.
func (c *conn) writeRest(fd uintptr) bool {
	for len(c.tx.rest) > 0 {
		if len(c.tx.rest[0]) == 0 {
			c.tx.rest = c.tx.rest[1:]
			continue
		}
		w, err := writevNB(int(fd), c.tx.wiov[:], c.tx.rest[:min(len(c.tx.rest), len(c.tx.wiov))])
		if err != nil {
			c.tx.werr = err
			return true
		}
		if w == 0 {
			return false
		}
		for len(c.tx.rest) > 0 && w >= len(c.tx.rest[0]) {
			w -= len(c.tx.rest[0])
			c.tx.rest = c.tx.rest[1:]
		}
		if w > 0 {
			c.tx.rest[0] = c.tx.rest[0][w:]
		}
	}
	return true
}

// transmit puts w's message(s) on the stream without waiting, after the
// messages kept back, or keeps them back too (see out). A message the
// socket takes only in part is Pending: the transmit goroutine writes the
// rest and then completes a Send or Write (a Read or an atomic completes
// with its response, as always). c.tx.mu is held.
func (c *conn) transmit(w *engine.WQE) engine.Result {
	wr := &w.WR
	iov := c.begin()
	switch wr.Opcode {
	case verbs.WRSend, verbs.WRSendWithInv, verbs.WRSendWithImm:
		segs, st := c.payload(w)
		if st != verbs.WCSuccess {
			return c.failKept(st)
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
			iov = append(iov, c.immediate(wr.ImmData, flags, se && w.Len == 0))
			if w.Len == 0 {
				break
			}
		}
		msn := c.nextMSN(wire.QNSend)
		iov = c.build(iov, wire.UntaggedHeaderLen, segs, int(w.Len), func(h []byte, off, plen int, last bool) {
			wire.PutUntagged(h, op, last, inv, wire.QNSend, msn, uint32(off), wire.UntaggedHeaderLen-wire.MPALenLen+plen)
		})
	case verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm:
		segs, st := c.payload(w)
		if st != verbs.WCSuccess {
			return c.failKept(st)
		}
		iov = c.buildTagged(iov, wire.OpWrite, wr.RKey, wr.RemoteAddr, segs, int(w.Len))
		if wr.Opcode == verbs.WRRDMAWriteWithImm {
			iov = append(iov, c.immediate(wr.ImmData, immAfterWrite, wr.Flags&verbs.SendSolicited != 0))
		}
	case verbs.WRRDMARead, verbs.WRAtomicCmpAndSwp, verbs.WRAtomicFetchAndAdd, verbs.WRFlush, verbs.WRAtomicWrite:
		return c.sendRequest(w, iov)
	default:
		return c.failKept(verbs.WCLocQPOpErr)
	}
	return c.out(iov, w, true)
}

// begin returns where a new message's FPDUs go: after the messages kept
// back, or (the stream is free: nothing of hbuf is in use) at the start of
// c.tx.iov and of the header arena. c.tx.mu is held.
func (c *conn) begin() [][]byte {
	if c.tx.batching {
		return c.tx.iov[:c.tx.kept]
	}
	c.tx.hused = 0
	return c.tx.iov[:0]
}

// out writes iov, the messages laid out so far ending with w's, or keeps
// them back when the engine has another request ready (w.More) and the
// batch has room. comp says that w (nil for Flush) completes once written:
// a Send or Write. c.tx.mu is held; the caller ends with endSend (unless
// batching).
func (c *conn) out(iov [][]byte, w *engine.WQE, comp bool) engine.Result {
	c.tx.iov = iov
	if w != nil && w.More() && w.Len <= batchSmall && c.tx.nheld < batchMax && len(iov) <= len(c.tx.wiov)/2 {
		if n := c.keepLen(iov); n <= batchBytes {
			c.keep(iov, w, comp, n)
			return engine.ResultPending
		}
	}
	c.tx.batching, c.tx.kept, c.tx.keptLen = false, 0, 0
	if err := c.put(iov); err != nil {
		if c.readFirst(err) {
			// The connection ends once the peer's last messages are read:
			// w and the requests kept back with it wait for that, and are
			// flushed then (endSend completes none of them).
			c.tx.nheld = 0
			return engine.ResultPending
		}
		// The connection ends; as on siw, the request whose write failed
		// completes with LOC_QP_OP_ERR (the first kept back, if any: see
		// endSend), and the rest are flushed.
		c.close(sendError(err), nil)
		c.tx.heldFail = c.tx.nheld > 0
		return engine.Fail(verbs.WCLocQPOpErr)
	}
	if len(c.tx.rest) > 0 {
		// The kept Sends and Writes already written complete now
		// (endSend), the others, and w, once the rest is out.
		k := 0
		if c.tx.nheld > 0 {
			written := 0
			for _, b := range iov {
				written += len(b)
			}
			for _, b := range c.tx.rest {
				written -= len(b)
			}
			for k < c.tx.nheld && c.tx.held[k].end <= written {
				k++
			}
		}
		c.tx.restW = append(c.tx.restB[:0], c.tx.held[k:c.tx.nheld]...)
		c.tx.nheld = k
		if comp {
			c.tx.restW = append(c.tx.restW, sentReq{w: w, seq: w.Seq()})
		}
		return engine.ResultPending
	}
	if comp {
		return engine.ResultOK
	}
	return engine.ResultPending
}

// testHookKept, when a test sets it, runs when out keeps a message back.
var testHookKept atomic.Pointer[func()]

// keep keeps iov's messages back, n bytes in all, w's the last (see out).
// c.tx.mu is held.
func (c *conn) keep(iov [][]byte, w *engine.WQE, comp bool, n int) {
	c.tx.keptLen = n
	if comp {
		c.tx.held[c.tx.nheld] = sentReq{w, w.Seq(), n}
		c.tx.nheld++
	}
	c.tx.kept = len(iov)
	c.tx.batching = true
	if h := testHookKept.Load(); h != nil {
		(*h)()
	}
}

// keepLen is how many bytes the batch would hold with iov's messages
// after those kept back. c.tx.mu is held.
func (c *conn) keepLen(iov [][]byte) int {
	n := c.tx.keptLen
	for _, b := range iov[c.tx.kept:] {
		n += len(b)
	}
	return n
}

// failKept ends a request that fails before it is laid out (a bad key, an
// unknown opcode): the messages kept back before it are written first, as
// they would have been without the batch. c.tx.mu is held.
func (c *conn) failKept(st verbs.WCStatus) engine.Result {
	if c.tx.batching {
		c.out(c.tx.iov[:c.tx.kept], nil, false)
	}
	return engine.Fail(st)
}

// endSend ends a Send or Flush that wrote what was kept back: it lets go of
// the stream and completes the Sends and Writes kept back, now written (or
// the first with the error that ended the connection; the QP's flush
// completes the others). Not while batching.
func (c *conn) endSend() {
	if c.tx.nheld == 0 && !c.tx.heldFail {
		c.unlockTx(false) // nothing was kept back: the usual request alone
		return
	}
	var done [batchMax]sentReq
	n := copy(done[:], c.tx.held[:c.tx.nheld])
	c.tx.nheld = 0
	st := verbs.WCSuccess
	if c.tx.heldFail {
		c.tx.heldFail = false
		st, n = verbs.WCLocQPOpErr, min(n, 1)
	}
	c.unlockTx(false)
	for _, d := range done[:n] {
		c.req.Complete(d.w, d.seq, st)
	}
}

// dropKeptIfDying ends a batch on a dying connection: the messages kept
// back are forgotten, unwritten (the QP's flush completes their requests),
// and the stream is let go. It reports whether it did so; c.tx.mu is
// held, batching.
func (c *conn) dropKeptIfDying() bool {
	if !c.isDying() {
		return false
	}
	c.tx.batching, c.tx.kept, c.tx.keptLen, c.tx.nheld = false, 0, 0, 0
	c.unlockTx(false)
	return true
}

// Flush implements engine.Batcher: it writes the messages kept back when
// the engine found no request to send after them after all.
func (c *conn) Flush() {
	if !c.tx.batching || c.dropKeptIfDying() {
		return
	}
	c.out(c.tx.iov[:c.tx.kept], nil, false)
	c.endSend()
}

func sendError(err error) error { return fmt.Errorf("iwarp: send: %w", err) }

// respondNow sends a response (a Read Response of at most respFPDUs FPDUs
// or an Atomic Response) from the receive side, saving the transmit
// goroutine's wake-up (tens of microseconds) on the read and atomic latency
// path. It never blocks: it needs the stream free and writes without
// waiting; what the socket does not take at once stays in c.tx.rest for the
// transmit goroutine.
func (c *conn) respondNow(r *resp) bool {
	if !c.tx.mu.TryLock() {
		return false
	}
	if len(c.tx.rest) > 0 {
		c.unlockTx(true)
		return false
	}
	// An error means the connection is ending: the transmit goroutine,
	// woken by put, fails it.
	c.put(c.response(r))
	c.unlockTx(true)
	return true
}

// respFPDUs is the largest response, in FPDUs, that respondNow sends.
const respFPDUs = 4

// response lays out r's response in c.tx.iov. c.tx.mu is held.
func (c *conn) response(r *resp) [][]byte {
	if r.kind == respRead {
		c.tx.respSeg[0] = r.src
		segs := c.tx.respSeg[:0]
		if len(r.src) > 0 {
			segs = c.tx.respSeg[:1]
		}
		return c.buildTagged(c.begin(), wire.OpReadResponse, r.stag, r.to, segs, len(r.src))
	}
	iov := c.begin()
	f := c.control(wire.AtomicResponseLen)
	wire.PutAtomicResponse(f, c.nextMSN(wire.QNAtomicResponse), &wire.AtomicResponseFields{ReqID: r.reqID, Orig: r.orig})
	return append(iov, wire.FinishFPDU(f, 0, c.crc))
}

// sendResponses sends the queued responses in request order; the transmit
// goroutine calls it. A response leaves the queue under the stream's lock,
// so that respondNow cannot overtake it, but before it is written: once the
// requester has the response it may send the next request, which must find
// room.
func (c *conn) sendResponses() error {
	for {
		err := c.lockTx()
		if err == nil {
			r, ok := c.irq.pop()
			if !ok {
				c.releaseTx()
				return nil
			}
			c.tx.iov = c.response(&r)
			c.tx.rest = c.tx.iov
			c.record(c.tx.iov)
			err = c.wait()
		}
		c.releaseTx()
		if err != nil {
			return err
		}
	}
}

// hdrs returns n bytes of the header arena, after those of the messages
// laid out since the stream was last free (begin). When the arena is full
// a larger one replaces it: what the messages laid out use stays where it
// is, referred to by c.tx.iov. c.tx.mu is held.
func (c *conn) hdrs(n int) []byte {
	if cap(c.tx.hbuf)-c.tx.hused < n {
		c.tx.hbuf = make([]byte, max(2*cap(c.tx.hbuf), n+256))
		c.tx.hused = 0
	}
	b := c.tx.hbuf[c.tx.hused : c.tx.hused+n : c.tx.hused+n]
	c.tx.hused += n
	return b
}

// control returns a control FPDU of n bytes (a request or an Atomic
// Response) from the header arena, with room for its trailer. c.tx.mu is
// held.
func (c *conn) control(n int) []byte {
	return c.hdrs(n + wire.MaxTrailerLen)[:n]
}

func (c *conn) nextMSN(qn int) uint32 {
	m := c.tx.msn[qn]
	c.tx.msn[qn]++
	return m
}

// payload resolves w's outgoing data into c.tx.segs (reused, so that the
// data path does not allocate). c.tx.mu is held.
func (c *conn) payload(w *engine.WQE) ([][]byte, verbs.WCStatus) {
	segs, st := c.req.Payload(w, c.tx.segs[:0])
	c.tx.segs = segs
	return segs, st
}

// sendRequest sends an RDMA Read Request or an Atomic Request, laid out
// after iov, and records it in the ORQ; the response completes it. c.tx.mu
// is held.
func (c *conn) sendRequest(w *engine.WQE, iov [][]byte) engine.Result {
	wr := &w.WR
	var st verbs.WCStatus
	var f wire.AtomicRequestFields
	switch wr.Opcode {
	case verbs.WRFlush:
		f = wire.AtomicRequestFields{Op: wire.FlushGoverbs, STag: wr.RKey, TO: wr.RemoteAddr,
			AddSwap: uint64(wr.FlushLen), Compare: uint64(wr.FlushType)}
	case verbs.WRAtomicWrite:
		src, st := c.payload(w)
		if st != verbs.WCSuccess {
			return c.failKept(st)
		}
		var v [8]byte
		n := 0
		for _, s := range src {
			n += copy(v[n:], s)
		}
		f = wire.AtomicRequestFields{Op: wire.AtomicWriteGoverbs, STag: wr.RKey, TO: wr.RemoteAddr,
			AddSwap: binary.BigEndian.Uint64(v[:]), AddSwapMask: ^uint64(0)}
	default:
	}
	// The slot is filled outside the ORQ's lock: only the transmitter adds,
	// and the receive side reads only what push added.
	e := c.orq.slot()
	sink := e.sink[:0]
	if f.Op == 0 {
		if sink, st = c.req.Sink(w, sink); st != verbs.WCSuccess {
			return c.failKept(st)
		}
	}
	*e = orqEntry{w: w, seq: w.Seq(), sink: sink, size: w.Len}
	if len(wr.SGList) > 0 && f.Op == 0 {
		e.stag, e.to = wr.SGList[0].LKey, wr.SGList[0].Addr
	}
	var b []byte
	if wr.Opcode == verbs.WRRDMARead {
		b = c.control(wire.ReadRequestLen)
		wire.PutReadRequest(b, c.nextMSN(wire.QNReadRequest), &wire.ReadRequestFields{
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
		f.ReqID = c.orq.nextReqID()
		b = c.control(wire.AtomicRequestLen)
		wire.PutAtomicRequest(b, c.nextMSN(wire.QNReadRequest), &f)
	}
	b = wire.FinishFPDU(b, 0, c.crc)
	// The ORQ entry must exist before the response can arrive. Pending,
	// even when part of the request is still to go (or kept back): the
	// response, which cannot come before all of it, completes it.
	c.orq.push()
	return c.out(append(iov, b), w, false)
}

// immediate lays out an RFC 7306 Immediate Data message in the header
// arena. c.tx.mu is held.
func (c *conn) immediate(imm, flags uint32, se bool) []byte {
	b := c.control(wire.ImmediateLen)
	wire.PutImmediate(b, se, c.nextMSN(wire.QNSend), uint64(imm)<<32|uint64(flags))
	return wire.FinishFPDU(b, 0, c.crc)
}

// buildTagged lays out a tagged message (RDMA Write or Read Response) of n
// bytes gathered from segs to stag/to, appending to iov. c.tx.mu is held.
func (c *conn) buildTagged(iov [][]byte, op wire.Opcode, stag uint32, to uint64, segs [][]byte, n int) [][]byte {
	return c.build(iov, wire.TaggedHeaderLen, segs, n, func(h []byte, off, plen int, last bool) {
		wire.PutTagged(h, op, last, stag, to+uint64(off), wire.TaggedHeaderLen-wire.MPALenLen+plen)
	})
}

// build cuts a message into FPDUs, appended to iov: headers and trailers
// in c.tx.hbuf, payload pieces straight from the registered memory in segs.
// put writes the header of the FPDU carrying plen bytes at message offset
// off. c.tx.mu is held.
func (c *conn) build(iov [][]byte, hdrLen int, segs [][]byte, n int, put func(h []byte, off, plen int, last bool)) [][]byte {
	maxp := c.payloadMax(hdrLen)
	if n <= copySmall && n <= maxp {
		return c.buildSmall(iov, hdrLen, segs, n, put)
	}
	return c.buildFPDUs(iov, hdrLen, segs, n, maxp, put)
}

// buildFPDUs is build's general case: FPDUs of at most maxp bytes of
// payload each, the payload pieces pointing into segs. c.tx.mu is held.
func (c *conn) buildFPDUs(iov [][]byte, hdrLen int, segs [][]byte, n, maxp int, put func(h []byte, off, plen int, last bool)) [][]byte {
	nf := 1
	if n > 0 {
		nf = (n + maxp - 1) / maxp
	}
	per := hdrLen + 3 + wire.CRCLen
	hb := c.hdrs(nf * per)
	si, so := 0, 0 // position in segs
	off := 0
	for f := 0; f < nf; f++ {
		plen := min(maxp, n-off)
		last := off+plen == n
		h := hb[f*per : f*per+hdrLen]
		put(h, off, plen, last)
		iov = append(iov, h)
		if c.crc {
			c.tx.crc.Reset()
			c.tx.crc.Update(h)
		}
		for left := plen; left > 0; {
			s := segs[si][so:]
			if len(s) > left {
				s = s[:left]
			}
			iov = append(iov, s)
			if c.crc {
				c.tx.crc.Update(s)
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
			c.tx.crc.UpdatePad(pad)
			crc = c.tx.crc.Sum()
		}
		t := hb[f*per+hdrLen : f*per+hdrLen+pad+wire.CRCLen]
		wire.PutTrailer(t, pad, crc)
		iov = append(iov, t)
		off += plen
	}
	c.tx.iov = iov
	return iov
}

// copySmall is the largest payload that build copies next to its header
// and trailer: the FPDU is then one piece of the writev, which the kernel
// copies in one go, where three pieces (and their iovecs) cost more than
// the copy of a few dozen bytes. The bytes on the wire are the same.
const copySmall = 64

// buildSmall is build for a message of n <= copySmall bytes that fits one
// FPDU: header, payload, pad and CRC laid out together in the header
// arena. c.tx.mu is held.
func (c *conn) buildSmall(iov [][]byte, hdrLen int, segs [][]byte, n int, put func(h []byte, off, plen int, last bool)) [][]byte {
	pad := wire.Pad(hdrLen - wire.MPALenLen + n)
	end := hdrLen + n
	f := c.hdrs(end + pad + wire.CRCLen)
	put(f[:hdrLen], 0, n, true)
	k := hdrLen
	for _, s := range segs {
		k += copy(f[k:end], s)
	}
	var crc uint32
	if c.crc {
		c.tx.crc.Reset()
		c.tx.crc.Update(f[:end])
		c.tx.crc.UpdatePad(pad)
		crc = c.tx.crc.Sum()
	}
	wire.PutTrailer(f[end:], pad, crc)
	iov = append(iov, f)
	c.tx.iov = iov
	return iov
}
