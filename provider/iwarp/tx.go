package iwarp

import (
	"encoding/binary"
	"fmt"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/goverbs/goverbs/internal/engine"
	"github.com/goverbs/goverbs/internal/wire"
	"github.com/goverbs/goverbs/verbs"
)

// txSide is the transmit side of the stream. mu serialises whole messages:
// the engine's transmitter (Send), the transmit goroutine (responses, the
// Terminate) and a response sent from the receive side (respondNow).
type txSide struct {
	mu      sync.Mutex
	msn     [4]uint32 // per queue number: next MSN (starts at 1)
	maxFPDU int
	hbuf    []byte // headers and trailers of the message being sent
	iov     [][]byte
	segs    [][]byte // the payload of the message being sent
	nb      [][]byte // what emit has left to write
	wiov    [128]unix.Iovec
	werr    error
	writeFn func(fd uintptr) bool
	crc     wire.CRC

	// a response sent from the receive side (respondNow); pending is what
	// the socket did not take, which the stream carries before anything else
	pending  []byte
	rhdr     [96]byte
	respIov  [3 * respFPDUs]unix.Iovec
	respSeg  [1][]byte
	respBufs [][]byte
	respN    int
	respFn   func(fd uintptr)
}

// lockTx takes the stream and first writes what a response sent from the
// receive side left unwritten (see respondNow).
func (c *conn) lockTx() error {
	c.tx.mu.Lock()
	if len(c.tx.pending) == 0 {
		return nil
	}
	p := c.tx.pending
	c.tx.pending = nil
	_, err := c.nc.Write(p)
	return err
}

// respondNow sends a one-FPDU response (a Read Response or an Atomic
// Response) from the receive side, saving the transmit goroutine's wake-up
// (tens of microseconds) on the read and atomic latency path. It never
// blocks: it needs the stream free and writes without waiting; what the
// socket does not take at once is kept in c.tx.pending, which the next owner
// of the stream writes before anything else.
func (c *conn) respondNow(r *resp) bool {
	if !c.tx.mu.TryLock() {
		return false
	}
	defer c.tx.mu.Unlock()
	if len(c.tx.pending) > 0 {
		return false
	}
	var bufs [][]byte
	if r.kind == respRead {
		c.tx.respSeg[0] = r.src
		segs := c.tx.respSeg[:0]
		if len(r.src) > 0 {
			segs = c.tx.respSeg[:1]
		}
		stag, to := r.stag, r.to
		bufs = c.build(wire.TaggedHeaderLen, segs, len(r.src), func(h []byte, off, plen int, last bool) {
			wire.PutTagged(h, wire.OpReadResponse, last, stag, to+uint64(off), wire.TaggedHeaderLen-wire.MPALenLen+plen)
		})
	} else {
		f := c.tx.rhdr[:wire.AtomicResponseLen]
		wire.PutAtomicResponse(f, c.nextMSN(wire.QNAtomicResponse), &wire.AtomicResponseFields{ReqID: r.reqID, Orig: r.orig})
		c.tx.respSeg[0] = wire.FinishFPDU(f, 0, c.crc)
		bufs = c.tx.respSeg[:1]
	}
	raceRelease()
	c.tx.respBufs, c.tx.respN = bufs, 0
	c.raw.Control(c.tx.respFn) // a closed socket leaves respN 0: the rest goes nowhere, as the connection is ending
	n, total := c.tx.respN, 0
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
		c.tx.pending = rest
		c.wakeTx()
	}
	return true
}

func (c *conn) respWrite(fd uintptr) {
	c.tx.respN, _ = writevNB(int(fd), c.tx.respIov[:], c.tx.respBufs)
}

// respFPDUs is the largest response, in FPDUs, that respondNow sends.
const respFPDUs = 4

// sendResponses sends the queued responses in request order.
func (c *conn) sendResponses() error {
	for {
		r, ok := c.irq.pop()
		if !ok {
			return nil
		}
		err := c.lockTx()
		if err != nil {
			c.tx.mu.Unlock()
			return err
		}
		switch r.kind {
		case respRead:
			err = c.sendTagged(wire.OpReadResponse, r.stag, r.to, oneSeg(r.src), len(r.src))
		case respAtomic:
			c.tx.hbuf = c.tx.hbuf[:0]
			c.tx.hbuf = grow(c.tx.hbuf, wire.AtomicResponseLen+8)[:wire.AtomicResponseLen]
			wire.PutAtomicResponse(c.tx.hbuf, c.nextMSN(wire.QNAtomicResponse), &wire.AtomicResponseFields{ReqID: r.reqID, Orig: r.orig})
			c.tx.hbuf = wire.FinishFPDU(c.tx.hbuf, 0, c.crc)
			raceRelease()
			_, err = c.nc.Write(c.tx.hbuf)
		}
		c.tx.mu.Unlock()
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

// sendRequest sends an RDMA Read Request or an Atomic Request and records it
// in the ORQ; the response completes it. c.tx.mu is held.
func (c *conn) sendRequest(w *engine.WQE) engine.Result {
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
	}
	// The slot is filled outside the ORQ's lock: only the transmitter adds,
	// and the receive side reads only what push added.
	e := c.orq.slot()
	sink := e.sink[:0]
	if f.Op == 0 {
		if sink, st = c.req.Sink(w, sink); st != verbs.WCSuccess {
			return engine.Fail(st)
		}
	}
	*e = orqEntry{w: w, seq: w.Seq(), sink: sink, size: w.Len}
	if len(wr.SGList) > 0 && f.Op == 0 {
		e.stag, e.to = wr.SGList[0].LKey, wr.SGList[0].Addr
	}
	c.tx.hbuf = c.tx.hbuf[:0]
	var err error
	if wr.Opcode == verbs.WRRDMARead {
		c.tx.hbuf = grow(c.tx.hbuf, wire.ReadRequestLen+8)[:wire.ReadRequestLen]
		wire.PutReadRequest(c.tx.hbuf, c.nextMSN(wire.QNReadRequest), &wire.ReadRequestFields{
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
		c.tx.hbuf = grow(c.tx.hbuf, wire.AtomicRequestLen+8)[:wire.AtomicRequestLen]
		wire.PutAtomicRequest(c.tx.hbuf, c.nextMSN(wire.QNReadRequest), &f)
	}
	c.tx.hbuf = wire.FinishFPDU(c.tx.hbuf, 0, c.crc)
	// The ORQ entry must exist before the response can arrive.
	c.orq.push()
	raceRelease()
	if _, err = c.nc.Write(c.tx.hbuf); err != nil {
		c.close(fmt.Errorf("iwarp: send: %w", err), nil)
		return engine.Fail(verbs.WCLocQPOpErr)
	}
	c.sent()
	return engine.ResultPending
}

// sendImmediate sends an RFC 7306 Immediate Data message. c.tx.mu is held.
func (c *conn) sendImmediate(imm, flags uint32, se bool) error {
	c.tx.hbuf = c.tx.hbuf[:0]
	c.tx.hbuf = grow(c.tx.hbuf, wire.ImmediateLen+8)[:wire.ImmediateLen]
	wire.PutImmediate(c.tx.hbuf, se, c.nextMSN(wire.QNSend), uint64(imm)<<32|uint64(flags))
	c.tx.hbuf = wire.FinishFPDU(c.tx.hbuf, 0, c.crc)
	raceRelease()
	_, err := c.nc.Write(c.tx.hbuf)
	return err
}

// sendUntagged sends a Send message of n bytes gathered from segs. c.tx.mu is held.
func (c *conn) sendUntagged(op wire.Opcode, inv uint32, segs [][]byte, n int) error {
	msn := c.nextMSN(wire.QNSend)
	return c.emit(wire.UntaggedHeaderLen, segs, n, func(h []byte, off, plen int, last bool) {
		wire.PutUntagged(h, op, last, inv, wire.QNSend, msn, uint32(off), wire.UntaggedHeaderLen-wire.MPALenLen+plen)
	})
}

// sendTagged sends a tagged message (RDMA Write or Read Response) of n bytes
// gathered from segs to stag/to. c.tx.mu is held.
func (c *conn) sendTagged(op wire.Opcode, stag uint32, to uint64, segs [][]byte, n int) error {
	return c.emit(wire.TaggedHeaderLen, segs, n, func(h []byte, off, plen int, last bool) {
		wire.PutTagged(h, op, last, stag, to+uint64(off), wire.TaggedHeaderLen-wire.MPALenLen+plen)
	})
}

// emit cuts a message into FPDUs and writes them with one gathered write:
// headers and trailers come from c.tx.hbuf, payload pieces straight from the
// registered memory in segs. put writes the header of the FPDU carrying
// plen bytes at message offset off.
func (c *conn) emit(hdrLen int, segs [][]byte, n int, put func(h []byte, off, plen int, last bool)) error {
	c.tx.nb = c.build(hdrLen, segs, n, put)
	raceRelease()
	c.tx.werr = nil
	if err := c.raw.Write(c.tx.writeFn); c.tx.werr == nil {
		c.tx.werr = err
	}
	c.tx.nb = nil
	c.sent()
	return c.tx.werr
}

// writeOut writes c.tx.nb with raw non-blocking writevs and reports false when
// the socket is full (RawConn.Write then waits for room in the netpoller).
// A large write takes hundreds of microseconds in the kernel: as an ordinary
// syscall it would let the runtime's monitor hand the goroutine's P to
// another thread each time, a context switch per message on small machines.
func (c *conn) writeOut(fd uintptr) bool {
	for len(c.tx.nb) > 0 {
		if len(c.tx.nb[0]) == 0 {
			c.tx.nb = c.tx.nb[1:]
			continue
		}
		w, err := writevNB(int(fd), c.tx.wiov[:], c.tx.nb[:min(len(c.tx.nb), len(c.tx.wiov))])
		if err != nil {
			c.tx.werr = err
			return true
		}
		if w == 0 {
			return false
		}
		for len(c.tx.nb) > 0 && w >= len(c.tx.nb[0]) {
			w -= len(c.tx.nb[0])
			c.tx.nb = c.tx.nb[1:]
		}
		if w > 0 {
			c.tx.nb[0] = c.tx.nb[0][w:]
		}
	}
	return true
}

// build lays out a message's FPDUs in c.tx.iov: headers and trailers in
// c.tx.hbuf, payload pieces from segs. c.tx.mu is held.
func (c *conn) build(hdrLen int, segs [][]byte, n int, put func(h []byte, off, plen int, last bool)) [][]byte {
	maxp := c.payloadMax(hdrLen)
	nf := 1
	if n > 0 {
		nf = (n + maxp - 1) / maxp
	}
	per := hdrLen + 3 + wire.CRCLen
	if cap(c.tx.hbuf) < nf*per {
		c.tx.hbuf = make([]byte, 0, nf*per+256)
	}
	hb := c.tx.hbuf[:nf*per]
	iov := c.tx.iov[:0]
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
