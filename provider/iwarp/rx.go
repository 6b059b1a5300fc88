package iwarp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/goverbs/goverbs/internal/engine"
	"github.com/goverbs/goverbs/internal/wire"
	"github.com/goverbs/goverbs/verbs"
)

// stageSize bounds what one read may bring in ahead of the header being
// parsed: small messages arrive with one read, large payloads are read
// straight into their target memory.
const stageSize = 4096

// reader is the receive side of the stream: a small staging buffer for
// headers (and whatever payload came with them) and direct reads for the rest.
type reader struct {
	nc   net.Conn
	buf  [stageSize]byte
	r, w int
	crc  wire.CRC
}

// need makes at least n bytes (n <= stageSize) available at buf[r:].
func (rd *reader) need(n int) error {
	if rd.w-rd.r >= n {
		return nil
	}
	if rd.r > 0 {
		rd.w = copy(rd.buf[:], rd.buf[rd.r:rd.w])
		rd.r = 0
	}
	for rd.w < n {
		k, err := rd.nc.Read(rd.buf[rd.w:])
		rd.w += k
		if err != nil {
			if rd.w >= n {
				return nil
			}
			return err
		}
	}
	return nil
}

// take returns the next n buffered bytes (after need(n)).
func (rd *reader) take(n int) []byte {
	b := rd.buf[rd.r : rd.r+n]
	rd.r += n
	return b
}

// readInto fills dst from the staging buffer, then straight from the socket.
func (rd *reader) readInto(dst []byte, crc bool) error {
	k := copy(dst, rd.buf[rd.r:rd.w])
	rd.r += k
	if k < len(dst) {
		if _, err := io.ReadFull(rd.nc, dst[k:]); err != nil {
			return err
		}
	}
	if crc {
		rd.crc.Update(dst)
	}
	return nil
}

// discard consumes n bytes (the payload of a zero-length-target segment).
func (rd *reader) discard(n int, crc bool) error {
	for n > 0 {
		if err := rd.need(1); err != nil {
			return err
		}
		k := min(n, rd.w-rd.r)
		if crc {
			rd.crc.Update(rd.buf[rd.r : rd.r+k])
		}
		rd.r += k
		n -= k
	}
	return nil
}

// rxState is the receive side's DDP/RDMAP state; only the receive goroutine uses it.
type rxState struct {
	rd  reader
	hdr [96]byte
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
}

var errStop = errors.New("iwarp: receive stopped")

func (c *conn) rxLoop() {
	defer close(c.rxDone)
	s := &c.rx
	s.rd.nc = c.nc
	for i := range s.msn {
		s.msn[i] = 1
	}
	for {
		err := c.rxFPDU(s)
		if err == nil {
			continue
		}
		if err != errStop {
			select {
			case <-c.dying: // we closed it
			default:
				if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || isReset(err) {
					err = ErrDisconnected
				} else {
					err = fmt.Errorf("iwarp: receive: %w", err)
				}
				c.fail(err, nil, nil)
			}
		}
		return
	}
}

// rxFPDU reads and processes one FPDU.
func (c *conn) rxFPDU(s *rxState) error {
	rd := &s.rd
	if err := rd.need(4); err != nil {
		return err
	}
	pre := rd.buf[rd.r : rd.r+4]
	ulen := int(binary.BigEndian.Uint16(pre))
	hl, herr := wire.HeaderLen(pre[2], pre[3])
	if err := rd.need(hl); err != nil {
		return err
	}
	h := wire.Header(s.hdr[:hl])
	copy(h, rd.take(hl))
	raceAcquire()
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
	plen := ulen - (hl - wire.MPALenLen)
	if plen < 0 {
		c.terminate(wire.TermDDPCatastrophic(), h, nil, "ULPDU shorter than its header")
		return errStop
	}
	if c.crc {
		rd.crc.Reset()
		rd.crc.Update(h)
	}
	var err error
	switch op := h.Opcode(); op {
	case wire.OpWrite:
		err = c.rxWrite(s, h, plen)
	case wire.OpReadResponse:
		err = c.rxReadResponse(s, h, plen)
	case wire.OpSend, wire.OpSendSE, wire.OpSendInv, wire.OpSendSEInv:
		err = c.rxSend(s, h, plen)
	case wire.OpReadRequest:
		err = c.rxReadRequest(s, h)
	case wire.OpTerminate:
		c.rxTerminate(s, h, plen)
		return errStop
	case wire.OpImmediate, wire.OpImmediateSE:
		err = c.rxImmediate(s, h)
	case wire.OpAtomicRequest:
		err = c.rxAtomicRequest(s, h)
	case wire.OpAtomicResponse:
		err = c.rxAtomicResponse(s, h)
	default:
		c.terminate(wire.TermRDMAP(wire.RDMAPRemoteOperation, wire.RDMAPUnexpectedOpcode), h, nil, op.String())
		return errStop
	}
	if err != nil {
		return err
	}
	// pad and CRC
	pad := wire.Pad(ulen)
	if err := rd.need(pad + wire.CRCLen); err != nil {
		return err
	}
	t := rd.take(pad + wire.CRCLen)
	if c.crc {
		rd.crc.Update(t[:pad])
		if rd.crc.Sum() != wire.TrailerCRC(t[pad:]) {
			c.terminate(wire.TermMPA(wire.MPACRCError), nil, nil, "CRC mismatch")
			return errStop
		}
	}
	if !c.rxSeen.Load() {
		c.rxSeen.Store(true)
		c.q.Kick() // the responder may now transmit
	}
	return c.rxFinish(s, h)
}

// rxFinish completes a message whose last FPDU has been read and checked.
func (c *conn) rxFinish(s *rxState, h wire.Header) error {
	if !h.Last() {
		return nil
	}
	switch op := h.Opcode(); op {
	case wire.OpWrite:
		s.tagActive = false
	case wire.OpReadResponse:
		s.tagActive = false
		c.orqMu.Lock()
		e := c.orq[0]
		c.orq[0] = orqEntry{}
		c.orq = c.orq[1:]
		c.orqMu.Unlock()
		if int(e.got) != int(e.size) {
			c.terminate(wire.TermDDPTagged(wire.DDPTagBaseBounds), h, nil, "short Read Response")
			return errStop
		}
		c.q.Complete(e.w, e.seq, verbs.WCSuccess)
	case wire.OpSend, wire.OpSendSE, wire.OpSendInv, wire.OpSendSEInv:
		s.sendActive = false
		s.msn[wire.QNSend]++
		wc := verbs.WC{Opcode: verbs.WCRecv, ByteLen: uint32(s.got), SrcQP: 0}
		if s.immPending {
			wc.Flags |= verbs.WCFlagWithImm
			wc.ImmData = s.imm
			s.immPending = false
		}
		if op == wire.OpSendInv || op == wire.OpSendSEInv {
			rkey := h.InvSTag()
			if c.q.Invalidate(rkey) != engine.FaultNone {
				wc.Status = verbs.WCRemInvReqErr
				c.q.CompleteRecv(s.rc, &wc, false)
				c.terminate(wire.TermRDMAP(wire.RDMAPRemoteOperation, wire.RDMAPSTagNotInvalidated), h, nil, "invalidate")
				return errStop
			}
			wc.Flags |= verbs.WCFlagWithInv
			wc.ImmData = rkey
		}
		c.q.CompleteRecv(s.rc, &wc, op == wire.OpSendSE || op == wire.OpSendSEInv)
	}
	return nil
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

func (c *conn) rxWrite(s *rxState, h wire.Header, plen int) error {
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
	dst, f := c.q.ResolveRemote(stag, to, uint32(plen), verbs.AccessRemoteWrite)
	if f != engine.FaultNone {
		c.terminate(tagFault(f), h, evp(verbs.EventQPAccessErr), "RDMA Write: "+f.String())
		return errStop
	}
	if err := s.rd.readInto(dst, c.crc); err != nil {
		return err
	}
	s.tagNext = to + uint64(plen)
	s.writeLen += plen
	return nil
}

func (c *conn) rxReadResponse(s *rxState, h wire.Header, plen int) error {
	c.orqMu.Lock()
	var e *orqEntry
	if len(c.orq) > 0 && !c.orq[0].atomic {
		e = &c.orq[0]
	}
	c.orqMu.Unlock()
	if e == nil {
		c.terminate(wire.TermDDPTagged(wire.DDPTagInvalidSTag), h, nil, "Read Response without a Read")
		return errStop
	}
	// Only this goroutine changes e.got, and e stays at the head until completed.
	if h.STag() != e.stag || h.TO() != e.to+uint64(e.got) || int(e.got)+plen > int(e.size) {
		c.terminate(wire.TermDDPTagged(wire.DDPTagBaseBounds), h, nil, "Read Response does not match the Read")
		return errStop
	}
	if err := c.placeSegs(s, e.sink, int(e.got), plen); err != nil {
		return err
	}
	e.got += uint32(plen)
	s.tagActive = !h.Last()
	return nil
}

// placeSegs reads n bytes into the segment list at byte offset off.
func (c *conn) placeSegs(s *rxState, segs [][]byte, off, n int) error {
	for _, seg := range segs {
		if n == 0 {
			break
		}
		if off >= len(seg) {
			off -= len(seg)
			continue
		}
		k := min(len(seg)-off, n)
		if err := s.rd.readInto(seg[off:off+k], c.crc); err != nil {
			return err
		}
		n -= k
		off = 0
	}
	if n > 0 { // callers check lengths first
		return s.rd.discard(n, c.crc)
	}
	return nil
}

func (c *conn) rxSend(s *rxState, h wire.Header, plen int) error {
	if h.MSN() != s.msn[wire.QNSend] {
		c.terminate(wire.TermDDPUntagged(wire.DDPUntagMSNRange), h, nil, "Send MSN")
		return errStop
	}
	if !s.sendActive {
		if h.MO() != 0 {
			c.terminate(wire.TermDDPUntagged(wire.DDPUntagInvalidMO), h, nil, "first Send segment has MO != 0")
			return errStop
		}
		rc, ok := c.q.TakeRecv()
		if !ok {
			c.terminate(wire.TermDDPUntagged(wire.DDPUntagNoBuffer), h, nil, "no receive buffer posted")
			return errStop
		}
		segs, st := c.q.RecvSegments(rc, s.recvSegs[:0])
		s.recvSegs = segs
		if st != verbs.WCSuccess {
			wc := verbs.WC{Opcode: verbs.WCRecv, Status: st}
			c.q.CompleteRecv(rc, &wc, false)
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
		c.q.CompleteRecv(s.rc, &wc, false)
		s.sendActive = false
		// siw sends "no buffer" (0x02) here, not "message too long".
		c.terminate(wire.TermDDPUntagged(wire.DDPUntagNoBuffer), h, nil, "message longer than the receive buffer")
		return errStop
	}
	if err := c.placeSegs(s, s.recvSegs, s.got, plen); err != nil {
		return err
	}
	s.got += plen
	return nil
}

func (c *conn) rxReadRequest(s *rxState, h wire.Header) error {
	if h.MSN() != s.msn[wire.QNReadRequest] {
		c.terminate(wire.TermDDPUntagged(wire.DDPUntagMSNRange), h, nil, "Read Request MSN")
		return errStop
	}
	s.msn[wire.QNReadRequest]++
	rr := h.ReadRequest()
	src, f := c.q.ResolveRemote(rr.SrcSTag(), rr.SrcTO(), rr.Size(), verbs.AccessRemoteRead)
	if f != engine.FaultNone {
		code := wire.RDMAPInvalidSTag
		switch f {
		case engine.FaultBounds:
			code = wire.RDMAPBaseBounds
		case engine.FaultAccess:
			code = wire.RDMAPAccessRights
		case engine.FaultPD:
			code = wire.RDMAPSTagNotAssociated
		}
		c.terminate(wire.TermRDMAP(wire.RDMAPRemoteProtection, code), h, evp(verbs.EventQPAccessErr), "RDMA Read: "+f.String())
		return errStop
	}
	return c.queueResp(h, resp{kind: respRead, src: src, stag: rr.SinkSTag(), to: rr.SinkTO()})
}

// queueResp adds a response to the IRQ, which holds at most IRD requests.
func (c *conn) queueResp(h wire.Header, r resp) error {
	c.irqMu.Lock()
	full := len(c.irq) >= c.ird // IRD 0: no inbound reads or atomics at all
	if !full {
		c.irq = append(c.irq, r)
	}
	c.irqMu.Unlock()
	if full {
		c.terminate(wire.TermRDMAP(wire.RDMAPRemoteOperation, wire.RDMAPCatastrophicStream), h, nil, "more outstanding Read/Atomic Requests than IRD")
		return errStop
	}
	c.wakeTx()
	return nil
}

func (c *conn) rxImmediate(s *rxState, h wire.Header) error {
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
	rc, ok := c.q.TakeRecv()
	if !ok {
		c.terminate(wire.TermDDPUntagged(wire.DDPUntagNoBuffer), h, nil, "no receive buffer for immediate data")
		return errStop
	}
	wc := verbs.WC{Opcode: verbs.WCRecv, Flags: verbs.WCFlagWithImm, ImmData: imm}
	if flags&immAfterWrite != 0 {
		wc.Opcode, wc.ByteLen = verbs.WCRecvRDMAWithImm, uint32(s.writeLen)
	}
	c.q.CompleteRecv(rc, &wc, h.Opcode() == wire.OpImmediateSE)
	return nil
}

func (c *conn) rxAtomicRequest(s *rxState, h wire.Header) error {
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
	default:
		c.terminate(wire.TermRDMAP(wire.RDMAPRemoteOperation, wire.RDMAPUnexpectedOpcode), h, nil, "atomic swap is not supported")
		return errStop
	}
	cmpAdd, swap := a.AddSwap(), uint64(0)
	if op == verbs.WRAtomicCmpAndSwp {
		cmpAdd, swap = a.Compare(), a.AddSwap()
	}
	orig, f := c.q.Atomic(a.STag(), a.TO(), op, cmpAdd, swap)
	if f != engine.FaultNone {
		code := wire.RDMAPInvalidSTag
		switch f {
		case engine.FaultBounds, engine.FaultAlign:
			code = wire.RDMAPBaseBounds
		case engine.FaultAccess:
			code = wire.RDMAPAccessRights
		case engine.FaultPD:
			code = wire.RDMAPSTagNotAssociated
		}
		c.terminate(wire.TermRDMAP(wire.RDMAPRemoteProtection, code), h, evp(verbs.EventQPAccessErr), "atomic: "+f.String())
		return errStop
	}
	return c.queueResp(h, resp{kind: respAtomic, reqID: a.ReqID(), orig: orig})
}

func (c *conn) rxAtomicResponse(s *rxState, h wire.Header) error {
	if h.MSN() != s.msn[wire.QNAtomicResponse] {
		c.terminate(wire.TermDDPUntagged(wire.DDPUntagMSNRange), h, nil, "Atomic Response MSN")
		return errStop
	}
	s.msn[wire.QNAtomicResponse]++
	c.orqMu.Lock()
	var e orqEntry
	ok := len(c.orq) > 0 && c.orq[0].atomic
	if ok {
		e = c.orq[0]
		c.orq[0] = orqEntry{}
		c.orq = c.orq[1:]
	}
	c.orqMu.Unlock()
	if !ok {
		c.terminate(wire.TermRDMAP(wire.RDMAPRemoteOperation, wire.RDMAPUnexpectedOpcode), h, nil, "Atomic Response without a request")
		return errStop
	}
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], h.AtomicResponse().Orig())
	engine.CopyInto(e.sink, 0, b[:])
	// The trailer is checked before rxFinish, but an atomic response is a
	// single FPDU: complete after the CRC check by deferring to rxFinish
	// would need more state; the CRC of 32 header bytes was already fed.
	c.q.Complete(e.w, e.seq, verbs.WCSuccess)
	return nil
}

// rxTerminate handles a Terminate from the peer: log-level details go into
// the error; the connection ends and everything outstanding is flushed. A
// Terminate that reports a protection error on one of our Read Requests
// completes that Read with REM_ACCESS_ERR.
func (c *conn) rxTerminate(s *rxState, h wire.Header, plen int) {
	info, _ := wire.ParseTerminate(h)
	var body []byte
	if plen > 0 && plen <= stageSize {
		if s.rd.need(plen) == nil {
			body = s.rd.take(plen)
		}
	}
	if len(body) > 0 { // attached headers follow the control word
		full := append(append([]byte(nil), h...), body...)
		info, _ = wire.ParseTerminate(wire.Header(full))
	}
	err := &TerminateError{Cause: info.RFC.Cause, Info: fmt.Sprintf("in siw's bit order: %v", info.Swapped.Cause)}
	if len(info.RDMAPHdr) >= wire.ReadRequestBodyLen {
		rr := wire.ReadRequest(info.RDMAPHdr)
		c.orqMu.Lock()
		var e *orqEntry
		for i := range c.orq {
			if !c.orq[i].atomic && c.orq[i].stag == rr.SinkSTag() && c.orq[i].to == rr.SinkTO() {
				e = &c.orq[i]
				break
			}
		}
		var w *engine.WQE
		var seq uint64
		if e != nil {
			w, seq = e.w, e.seq
		}
		c.orqMu.Unlock()
		if w != nil {
			st := verbs.WCWRFlushErr
			for _, f := range []wire.TermFields{info.RFC, info.Swapped} {
				if f.Cause.Layer == wire.LayerRDMAP && f.Cause.EType == uint8(wire.RDMAPRemoteProtection) {
					st = verbs.WCRemAccessErr
				} else if f.Cause.Layer == wire.LayerRDMAP && f.Cause.EType == uint8(wire.RDMAPRemoteOperation) && st == verbs.WCWRFlushErr {
					st = verbs.WCRemOpErr
				}
			}
			c.close(err, nil)
			c.q.Complete(w, seq, st)
			return
		}
	}
	c.fail(err, nil, nil)
}

func isReset(err error) bool {
	var ne *net.OpError
	return errors.As(err, &ne)
}
