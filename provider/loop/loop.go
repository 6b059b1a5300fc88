// Package loop is goverbs' in-process provider: queue pairs in one process,
// connected directly, with no network. It runs the whole shared software
// engine (every check, status and state transition the other pure-Go
// providers have), so it is what to use to unit-test RDMA code: import it,
// open "loop0", and connect two QPs with Connect.
//
// Work requests execute synchronously inside PostSend, on the posting
// goroutine: when PostSend returns, an RDMA WRITE has landed in the target
// region and the receiver's completion is in its CQ. Errors follow the
// InfiniBand RC rules: a remote access violation completes the requester's
// WR with REM_ACCESS_ERR and moves the responder QP to ERR with
// EventQPAccessErr; a receive buffer that is too small completes the
// receive with LOC_LEN_ERR and the send with REM_INV_REQ_ERR; a send that
// finds no posted receive is an RNR: with rnr_retry 7 it waits for one,
// otherwise it is retried rnr_retry times, min_rnr_timer apart, and then fails
// with RNR_RETRY_EXC_ERR; a peer QP that is missing or not connected gives
// RETRY_EXC_ERR at once (the transport timeout is not simulated).
//
// FLUSH and ATOMIC_WRITE execute at the target QP through the engine's
// responder helpers: a persistent flush of a region on a file mapping
// writes the range back (msync) before the request completes.
//
// # Completing at send, as iWARP does
//
// A device added with Config.CompleteAtSend completes its RC requests as
// iWARP (siw, and goverbs' iwarp provider) does instead: a SEND or RDMA
// WRITE (with immediate or invalidate too) completes successfully once it
// is sent, and an error the target finds (a bad rkey, a message longer
// than the receive buffer, a SEND that finds no receive posted: iWARP has
// no RNR) arrives afterwards, as the peer's Terminate would: the QP moves
// to ERR with EventQPFatal, and the requests behind the failed one
// complete with WR_FLUSH_ERR. Requests that wait for a response (RDMA
// READ, atomics, FLUSH, ATOMIC_WRITE) still report the target's error in
// their completion, as an iWARP Read does when the Terminate names it.
// Code whose tests pass on such a device does not rely on the error
// being in the failing request's own completion (see package verbs,
// "Completion semantics"); the conformance suite runs on it as it runs on
// iWARP. What it does not model is the connection: a local error, or a
// QP moved to ERR, leaves the peer's QP as it is, where iWARP's Terminate
// would take it to ERR too.
//
// UD works too: a UD receive buffer gets the 40-byte GRH (an IPv6 header
// with the source and destination GIDs) followed by the payload, and WC
// flags have WCFlagGRH. UD sends with no posted receive, or with a Q_Key
// that does not match, are dropped, as on a real fabric.
package loop

import (
	"encoding/binary"
	"sync"
	"time"

	"github.com/goverbs/goverbs/internal/engine"
	"github.com/goverbs/goverbs/verbs"
	"github.com/goverbs/goverbs/verbs/driver"
)

// DeviceName is the name of the loop device registered at init.
const DeviceName = "loop0"

// MaxInline is the largest max_inline_data a loop QP may ask for.
const MaxInline = 4096

type provider struct{}

func (provider) Devices() []driver.Device {
	fab.mu.Lock()
	defer fab.mu.Unlock()
	out := make([]driver.Device, len(fab.devs))
	for i, d := range fab.devs {
		out[i] = d
	}
	return out
}

// fab is the process-wide fabric that connects loop devices.
var fab struct {
	mu   sync.Mutex
	devs []*engine.Device
}

func init() {
	AddDevice(DeviceName)
	driver.Register("loop", provider{})
}

// Config configures a loop device (AddDeviceConfig).
type Config struct {
	// CompleteAtSend makes the device's RC QPs complete SENDs and RDMA
	// WRITEs as iWARP does: successfully once sent, an error the target
	// finds arriving afterwards as a move to ERR with EventQPFatal and a
	// flush of what follows (see the package doc). False keeps
	// InfiniBand's rule: the error is in the failing request's completion.
	CompleteAtSend bool
	// NoFlush and NoAtomicWrite make a device without IBA 1.5's FLUSH
	// (DeviceFlushGlobal, DeviceFlushPersistent) or ATOMIC_WRITE
	// (DeviceAtomicWrite), as most NICs and rdma-core before version 45
	// are: it refuses the opcodes and the FLUSH access flags with
	// verbs.ErrNotSupported, so that code that must work there (librpma's
	// fallbacks) can be tested.
	NoFlush, NoAtomicWrite bool
}

// AddDevice adds another loop device (to model two hosts, say) and returns
// its name. Devices reach each other's QPs through address vectors: the LID
// or the GID of the target device's port.
func AddDevice(name string) string { return AddDeviceConfig(name, Config{}) }

// AddDeviceConfig is AddDevice for a device configured by cfg.
func AddDeviceConfig(name string, cfg Config) string {
	fab.mu.Lock()
	defer fab.mu.Unlock()
	idx := len(fab.devs) + 1
	guid := uint64(0x0200_5eff_fe00_0000) | uint64(idx)
	var gid verbs.GID
	gid[0], gid[1] = 0xfe, 0x80
	binary.BigEndian.PutUint64(gid[8:], guid)
	caps := verbs.DeviceFlushGlobal | verbs.DeviceFlushPersistent | verbs.DeviceAtomicWrite
	if cfg.NoFlush {
		caps &^= verbs.DeviceFlushGlobal | verbs.DeviceFlushPersistent
	}
	if cfg.NoAtomicWrite {
		caps &^= verbs.DeviceAtomicWrite
	}
	d := engine.NewDevice(engine.Config{
		Name:      name,
		GUID:      guid,
		NodeType:  verbs.NodeCA,
		Transport: verbs.TransportIB,
		GID:       gid,
		Attr: verbs.DeviceAttr{
			FWVer:           "goverbs-loop 1",
			MaxMRSize:       1 << 40,
			PageSizeCap:     4096,
			MaxQP:           1 << 16,
			MaxQPWR:         1 << 15,
			MaxSGE:          32,
			MaxSGERd:        32,
			MaxCQ:           1 << 16,
			MaxCQE:          1 << 22,
			MaxMR:           1 << 20,
			MaxPD:           1 << 16,
			MaxQPRdAtom:     128,
			MaxQPInitRdAtom: 128,
			MaxResRdAtom:    128 << 16,
			AtomicCap:       verbs.AtomicGlob,
			MaxAH:           1 << 16,
			MaxSRQ:          1 << 16,
			MaxSRQWR:        1 << 15,
			MaxSRQSGE:       32,
			MaxInlineData:   MaxInline,
			MaxPKeys:        1,

			DeviceCapFlagsEx: caps,
		},
		Port: verbs.PortAttr{
			State:      verbs.PortActive,
			MaxMTU:     verbs.MTU4096,
			ActiveMTU:  verbs.MTU4096,
			GIDTblLen:  1,
			MaxMsgSz:   1 << 31,
			PKeyTblLen: 1,
			LID:        uint16(idx),
			LinkLayer:  verbs.LinkLayerInfiniBand,
			PhysState:  5, // LinkUp
		},
		NewTransport: func(e engine.Endpoint) engine.Transport { return &wire{e: e, atSend: cfg.CompleteAtSend} },
	})
	fab.devs = append(fab.devs, d)
	return name
}

// route finds the device an address vector names.
func route(av *verbs.AHAttr) *engine.Device {
	fab.mu.Lock()
	defer fab.mu.Unlock()
	for _, d := range fab.devs {
		if av.IsGlobal && d.GIDOf() == av.GRH.DGID {
			return d
		}
		if !av.IsGlobal && d.Attr().NodeGUID&0xFFFF == uint64(av.DLID) {
			return d
		}
	}
	return nil
}

// wire is a loop QP's transport: function calls into the peer's engine.
type wire struct {
	e       engine.Endpoint
	mu      sync.Mutex
	dest    *engine.Device // RC: the destination device, from the AV
	destQPN uint32
	peer    engine.Endpoint // RC: cached destination QP
	cached  bool
	src     [][]byte // scratch, used only by the transmitting goroutine
	dst     [][]byte
	atSend  bool // Config.CompleteAtSend
}

func (w *wire) Modify(attr *verbs.QPAttr, mask verbs.QPAttrMask, from, to verbs.QPState) error {
	if w.e.Type() == verbs.QPTRC && from == verbs.QPSInit && to == verbs.QPSRTR {
		w.mu.Lock()
		// An unknown destination is accepted, as hardware accepts it; sends then fail with RETRY_EXC_ERR.
		w.dest, w.destQPN, w.cached = route(&attr.AHAttr), attr.DestQPNum, false
		w.mu.Unlock()
	}
	return nil
}

func (w *wire) Shutdown(destroyed bool) {
	if w.mu.TryLock() { // Shutdown runs with the QP locked; the cache is only a hint
		w.cached = false
		w.mu.Unlock()
	}
}

func (w *wire) RecvPosted() {
	if w.e.Type() != verbs.QPTRC {
		return
	}
	// The peer is resumed even when it does not look stalled: it may be
	// deciding to stall for want of this very receive, and a Resume
	// (lock-free) is what that decision checks for.
	if p, ok := w.peerQP(false); ok {
		p.Requester().Resume()
	}
}

// peerQP returns the RC peer if it exists and (with connected) is
// connected to this QP.
func (w *wire) peerQP(connected bool) (engine.Endpoint, bool) {
	w.mu.Lock()
	p, ok, dev, n := w.peer, w.cached, w.dest, w.destQPN
	w.mu.Unlock()
	if !ok {
		if dev == nil {
			return p, false
		}
		if p, ok = dev.LookupQP(n); !ok {
			return p, false
		}
		w.mu.Lock()
		w.peer, w.cached = p, true
		w.mu.Unlock()
	}
	if connected && !p.ConnectedTo(w.e.Num()) {
		return p, false
	}
	return p, true
}

func (w *wire) Send(wqe *engine.WQE) engine.Result {
	if w.e.Type() == verbs.QPTUD {
		return w.sendUD(wqe)
	}
	res := w.sendRC(wqe)
	if w.atSend && res.Outcome == engine.Done && remoteError(res.Status) && completesAtSend(wqe.WR.Opcode) {
		// The request was sent, so it completes; the target's error comes
		// back as a Terminate would, failing the QP (which flushes what
		// follows, this request excepted: it is being transmitted).
		w.e.Fatal(verbs.EventQPFatal)
		return engine.ResultOK
	}
	return res
}

// remoteError reports whether s is an error the target found.
func remoteError(s verbs.WCStatus) bool {
	return s == verbs.WCRemAccessErr || s == verbs.WCRemInvReqErr || s == verbs.WCRemOpErr
}

// completesAtSend reports whether op completes once sent over iWARP: the
// requests that get no response.
func completesAtSend(op verbs.WROpcode) bool {
	switch op {
	case verbs.WRSend, verbs.WRSendWithImm, verbs.WRSendWithInv, verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm:
		return true
	}
	return false
}

// sendRC carries out an RC request at the peer.
func (w *wire) sendRC(wqe *engine.WQE) engine.Result {
	pe, ok := w.peerQP(true)
	if !ok {
		return engine.Fail(verbs.WCRetryExcErr)
	}
	q, p := w.e.Requester(), pe.Responder()
	wr := &wqe.WR
	switch wr.Opcode {
	case verbs.WRSend, verbs.WRSendWithImm, verbs.WRSendWithInv:
		return w.send(q, p, wqe)
	case verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm:
		var st verbs.WCStatus
		if w.src, st = q.Payload(wqe, w.src[:0]); st != verbs.WCSuccess {
			return engine.Fail(st)
		}
		dst, f := p.Resolve(wr.RKey, wr.RemoteAddr, wqe.Len, verbs.AccessRemoteWrite)
		if f != engine.FaultNone {
			p.Fatal(verbs.EventQPAccessErr)
			return engine.Fail(verbs.WCRemAccessErr)
		}
		if wr.Opcode == verbs.WRRDMAWriteWithImm {
			return w.writeImm(q, pe, wqe, dst)
		}
		off := 0
		for _, s := range w.src {
			off += copy(dst[off:], s)
		}
		return engine.ResultOK
	case verbs.WRRDMARead:
		if p.IRD() == 0 {
			p.Fatal(verbs.EventQPReqErr)
			return engine.Fail(verbs.WCRemInvReqErr)
		}
		src, f := p.Resolve(wr.RKey, wr.RemoteAddr, wqe.Len, verbs.AccessRemoteRead)
		if f != engine.FaultNone {
			p.Fatal(verbs.EventQPAccessErr)
			return engine.Fail(verbs.WCRemAccessErr)
		}
		var st verbs.WCStatus
		if w.dst, st = q.Sink(wqe, w.dst[:0]); st != verbs.WCSuccess {
			return engine.Fail(st)
		}
		engine.CopyInto(w.dst, 0, src)
		return engine.ResultOK
	case verbs.WRFlush, verbs.WRAtomicWrite:
		if p.IRD() == 0 {
			p.Fatal(verbs.EventQPReqErr)
			return engine.Fail(verbs.WCRemInvReqErr)
		}
		var f engine.Fault
		if wr.Opcode == verbs.WRFlush {
			f = p.Flush(wr.RKey, wr.RemoteAddr, wr.FlushLen, wr.FlushType)
		} else {
			var st verbs.WCStatus
			if w.src, st = q.Payload(wqe, w.src[:0]); st != verbs.WCSuccess {
				return engine.Fail(st)
			}
			var v [8]byte
			engine.CopyFrom(v[:], w.src, 0)
			f = p.AtomicWrite(wr.RKey, wr.RemoteAddr, v)
		}
		switch f {
		case engine.FaultNone:
			return engine.ResultOK
		case engine.FaultAlign, engine.FaultPersist:
			p.Fatal(verbs.EventQPReqErr)
			return engine.Fail(verbs.WCRemInvReqErr)
		}
		p.Fatal(verbs.EventQPAccessErr)
		return engine.Fail(verbs.WCRemAccessErr)
	case verbs.WRAtomicCmpAndSwp, verbs.WRAtomicFetchAndAdd:
		if p.IRD() == 0 {
			p.Fatal(verbs.EventQPReqErr)
			return engine.Fail(verbs.WCRemInvReqErr)
		}
		var st verbs.WCStatus
		if w.dst, st = q.Sink(wqe, w.dst[:0]); st != verbs.WCSuccess {
			return engine.Fail(st)
		}
		old, f := p.Atomic(wr.RKey, wr.RemoteAddr, wr.Opcode, wr.CompareAdd, wr.Swap)
		switch f {
		case engine.FaultNone:
		case engine.FaultAlign:
			p.Fatal(verbs.EventQPReqErr)
			return engine.Fail(verbs.WCRemInvReqErr)
		default:
			p.Fatal(verbs.EventQPAccessErr)
			return engine.Fail(verbs.WCRemAccessErr)
		}
		var b [8]byte
		binary.NativeEndian.PutUint64(b[:], old)
		engine.CopyInto(w.dst, 0, b[:])
		return engine.ResultOK
	}
	return engine.Fail(verbs.WCLocQPOpErr)
}

// send delivers a SEND into the peer's next receive buffer.
func (w *wire) send(q engine.Requester, p engine.Responder, wqe *engine.WQE) engine.Result {
	var st verbs.WCStatus
	if w.src, st = q.Payload(wqe, w.src[:0]); st != verbs.WCSuccess {
		return engine.Fail(st)
	}
	p.LockRx()
	defer p.UnlockRx()
	rc, ok := p.TakeRecv()
	if !ok {
		return w.rnr(q, p, wqe)
	}
	wc := verbs.WC{Opcode: verbs.WCRecv, SrcQP: w.e.Num(), ByteLen: wqe.Len}
	if w.dst, st = p.RecvSegments(rc, w.dst[:0]); st != verbs.WCSuccess {
		wc.Status = st
		p.CompleteRecv(rc, &wc, false)
		p.Fail()
		return engine.Fail(engine.NAKStatus(st))
	}
	if engine.TotalLen(w.dst) < int(wqe.Len) {
		wc.Status = verbs.WCLocLenErr
		p.CompleteRecv(rc, &wc, false)
		p.Fail()
		return engine.Fail(engine.NAKStatus(verbs.WCLocLenErr))
	}
	off := 0
	for _, s := range w.src {
		off += engine.CopyInto(w.dst, off, s)
	}
	switch wqe.WR.Opcode {
	case verbs.WRSendWithImm:
		wc.Flags, wc.ImmData = verbs.WCFlagWithImm, wqe.WR.ImmData
	case verbs.WRSendWithInv:
		if p.Invalidate(wqe.WR.InvalidateRKey) != engine.FaultNone {
			wc.Status = verbs.WCLocQPOpErr
			p.CompleteRecv(rc, &wc, false)
			p.Fail()
			return engine.Fail(verbs.WCRemInvReqErr)
		}
		wc.Flags, wc.ImmData = verbs.WCFlagWithInv, wqe.WR.InvalidateRKey
	}
	p.CompleteRecv(rc, &wc, wqe.WR.Flags&verbs.SendSolicited != 0)
	return engine.ResultOK
}

// writeImm places an RDMA WRITE WITH IMM, whose immediate consumes a receive.
func (w *wire) writeImm(q engine.Requester, pe engine.Endpoint, wqe *engine.WQE, dst []byte) engine.Result {
	p := pe.Responder()
	p.LockRx()
	defer p.UnlockRx()
	rc, ok := p.TakeRecv()
	if !ok {
		return w.rnr(q, p, wqe) // nothing was written yet: the retry writes it
	}
	off := 0
	for _, s := range w.src {
		off += copy(dst[off:], s)
	}
	wc := verbs.WC{Opcode: verbs.WCRecvRDMAWithImm, SrcQP: w.e.Num(), ByteLen: wqe.Len, Flags: verbs.WCFlagWithImm, ImmData: wqe.WR.ImmData}
	p.CompleteRecv(rc, &wc, wqe.WR.Flags&verbs.SendSolicited != 0)
	return engine.ResultOK
}

// rnr handles a send that found no receive buffer: with rnr_retry 7 it waits
// for the peer to post one; otherwise it retries after the peer's
// min_rnr_timer until rnr_retry is used up.
func (w *wire) rnr(q engine.Requester, p engine.Responder, wqe *engine.WQE) engine.Result {
	if w.atSend {
		// iWARP has no RNR: a message with no receive to take it is fatal
		// to the target's QP, and comes back to us as its Terminate.
		p.Fail()
		return engine.Fail(verbs.WCRemOpErr)
	}
	retry := q.RNRRetry()
	if retry == 7 {
		return engine.ResultStall
	}
	wqe.Retries++
	if wqe.Retries > int(retry) {
		return engine.Fail(verbs.WCRNRRetryExcErr)
	}
	time.AfterFunc(RNRDelay(p.MinRNRTimer()), q.Resume)
	return engine.ResultStall
}

// RNRDelay returns the delay a min_rnr_timer code stands for.
func RNRDelay(code uint8) time.Duration { return engine.RNRDelay(code) }

// GRHLen is the size of the Global Routing Header at the start of every UD receive buffer.
const GRHLen = 40

func (w *wire) sendUD(wqe *engine.WQE) engine.Result {
	wr := &wqe.WR
	q := w.e.Requester()
	ah := wr.AH.Attr()
	if int(wqe.Len) > w.e.Device().Port().ActiveMTU.Bytes() { // a datagram is one packet
		return engine.Fail(verbs.WCLocLenErr)
	}
	var st verbs.WCStatus
	if w.src, st = q.Payload(wqe, w.src[:0]); st != verbs.WCSuccess {
		return engine.Fail(st)
	}
	dev := route(&ah)
	if dev == nil {
		return engine.ResultOK // no such destination: the datagram is lost
	}
	pe, ok := dev.LookupQP(wr.RemoteQPN)
	if !ok || pe.Type() != verbs.QPTUD {
		return engine.ResultOK
	}
	p := pe.Responder()
	if !p.CanReceive() {
		return engine.ResultOK
	}
	qkey := wr.RemoteQKey
	if qkey&0x8000_0000 != 0 { // a "controlled" Q_Key: use the sender QP's own
		qkey = w.e.Responder().QKey()
	}
	if p.QKey() != qkey {
		return engine.ResultOK // Q_Key violation: silently dropped
	}
	p.LockRx()
	defer p.UnlockRx()
	rc, ok := p.TakeRecv()
	if !ok {
		return engine.ResultOK // no receive buffer: dropped (UD has no RNR)
	}
	wc := verbs.WC{Opcode: verbs.WCRecv, SrcQP: w.e.Num(), ByteLen: GRHLen + wqe.Len, Flags: verbs.WCFlagGRH}
	if w.dst, st = p.RecvSegments(rc, w.dst[:0]); st != verbs.WCSuccess {
		wc.Status = st
		p.CompleteRecv(rc, &wc, false)
		return engine.ResultOK
	}
	if engine.TotalLen(w.dst) < GRHLen+int(wqe.Len) {
		wc.Status = verbs.WCLocLenErr
		p.CompleteRecv(rc, &wc, false)
		return engine.ResultOK
	}
	var grh [GRHLen]byte
	buildGRH(&grh, &ah.GRH, w.e.Device().GIDOf(), dev.GIDOf(), wqe.Len, wr.Opcode == verbs.WRSendWithImm)
	engine.CopyInto(w.dst, 0, grh[:])
	off := GRHLen
	for _, s := range w.src {
		off += engine.CopyInto(w.dst, off, s)
	}
	if wr.Opcode == verbs.WRSendWithImm {
		wc.Flags |= verbs.WCFlagWithImm
		wc.ImmData = wr.ImmData
	}
	p.CompleteRecv(rc, &wc, wr.Flags&verbs.SendSolicited != 0)
	return engine.ResultOK
}

// buildGRH writes the IPv6-format Global Routing Header of a datagram
// (IBA 8.3): version 6, traffic class, flow label, payload length, next
// header 0x1B (BTH), hop limit, source and destination GIDs. The payload
// length counts what follows the GRH on the wire up to the ICRC: BTH, DETH,
// ImmDt (imm), the n payload bytes padded to a multiple of 4, and the ICRC.
func buildGRH(h *[GRHLen]byte, r *verbs.GlobalRoute, sgid, dgid verbs.GID, n uint32, imm bool) {
	binary.BigEndian.PutUint32(h[0:], 6<<28|uint32(r.TrafficClass)<<20|r.FlowLabel&0xFFFFF)
	pay := 12 + 8 + (n+3)&^3 + 4
	if imm {
		pay += 4
	}
	binary.BigEndian.PutUint16(h[4:], uint16(pay))
	h[6] = 0x1B
	h[7] = r.HopLimit
	if h[7] == 0 {
		h[7] = 64
	}
	copy(h[8:24], sgid[:])
	copy(h[24:40], dgid[:])
}
