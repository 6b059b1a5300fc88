package conformance

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/goverbs/goverbs/verbs"
)

// Work-completion error statuses and flushing: every status a software
// provider produces, each checked on both ends of the connection (the
// requester's completion, the responder's QP state, asynchronous event and
// receive completions), and the WR_FLUSH_ERR completions of everything that
// was queued behind the failing request.

func init() {
	register(
		Case{Name: "WrongLKeyGivesLocProtErr", Run: testWrongLKeyGivesLocProtErr},
		Case{Name: "SGEOutsideRegionGivesLocProtErr", Run: testSGEOutsideRegionGivesLocProtErr},
		Case{Name: "LKeyOfOtherPDGivesLocProtErr", Run: testLKeyOfOtherPDGivesLocProtErr},
		Case{Name: "RecvSGEWrongKeyGivesLocProtErrAndRemOpErr", Run: testRecvSGEWrongKeyGivesLocProtErrAndRemOpErr},
		Case{Name: "RecvBufferTooSmallGivesLocLenErr", Run: testRecvBufferTooSmallGivesLocLenErr},
		Case{Name: "RemoteWriteWrongRKeyGivesRemAccessErr", Run: testRemoteWriteWrongRKeyGivesRemAccessErr},
		Case{Name: "RemoteWriteWithoutPermissionGivesRemAccessErr", Run: testRemoteWriteWithoutPermissionGivesRemAccessErr},
		Case{Name: "RemoteWriteOutsideRegionGivesRemAccessErr", Run: testRemoteWriteOutsideRegionGivesRemAccessErr},
		Case{Name: "RemoteReadWithoutPermissionGivesRemAccessErr", Run: testRemoteReadWithoutPermissionGivesRemAccessErr},
		Case{Name: "QPAccessFlagsDenyRemoteWrite", Run: testQPAccessFlagsDenyRemoteWrite},
		Case{Name: "ReadSinkWithoutLocalWriteGivesLocProtErr", Run: testReadSinkWithoutLocalWriteGivesLocProtErr},
		Case{Name: "AtomicMisalignedGivesRemInvReqErr", Need: func(c Caps) bool { return c.Atomics }, Run: testAtomicMisalignedGivesRemInvReqErr},
		Case{Name: "AtomicWithoutPermissionGivesRemAccessErr", Need: func(c Caps) bool { return c.Atomics }, Run: testAtomicWithoutPermissionGivesRemAccessErr},
		Case{Name: "AtomicFetchAddAndCmpSwapReturnOldValue", Need: func(c Caps) bool { return c.Atomics }, Run: testAtomicFetchAddAndCmpSwapReturnOldValue},
		// IRD is set by Modify here; an iWARP connection negotiates it and
		// the responder raises its IRD to the initiator's ORD (RFC 6581).
		Case{Name: "ReadWithZeroIRDGivesRemInvReqErr", Need: func(c Caps) bool { return c.Modify }, Run: testReadWithZeroIRDGivesRemInvReqErr},
		Case{Name: "RNRRetryExceededGivesRNRRetryExcErr", Need: func(c Caps) bool { return c.RNR }, Run: testRNRRetryExceededGivesRNRRetryExcErr},
		Case{Name: "RNRInfiniteRetryWaitsForReceive", Need: func(c Caps) bool { return c.RNR }, Run: testRNRInfiniteRetryWaitsForReceive},
		Case{Name: "PeerNotConnectedGivesRetryExcErr", Need: func(c Caps) bool { return c.Modify }, Run: testPeerNotConnectedGivesRetryExcErr},
		Case{Name: "WriteWithImmConsumesReceive", Need: func(c Caps) bool { return c.Immediate }, Run: testWriteWithImmConsumesReceive},
		Case{Name: "SendWithImmCarriesImmData", Need: func(c Caps) bool { return c.Immediate }, Run: testSendWithImmCarriesImmData},
		Case{Name: "SendWithInvalidateInvalidatesRKey", Need: func(c Caps) bool { return c.Invalidate }, Run: testSendWithInvalidateInvalidatesRKey},
		Case{Name: "SendWithInvalidateOfUnknownKeyFails", Need: func(c Caps) bool { return c.Invalidate }, Run: testSendWithInvalidateOfUnknownKeyFails},
		Case{Name: "ERRFlushesOutstandingWorkInOrder", Need: func(c Caps) bool { return c.RNR }, Run: testERRFlushesOutstandingWorkInOrder},
		Case{Name: "DeregisteredMRKeyStopsWorking", Run: testDeregisteredMRKeyStopsWorking},
		Case{Name: "WCStatusesHaveNames", Run: testWCStatusesHaveNames},
	)
}

// errBadKey returns a key that names no region: k with its low (variant) byte changed.
func errBadKey(k uint32) uint32 { return k ^ 0x5a }

// errFailAndFlush posts bad on s followed by three valid requests to peer (a
// signaled SEND, an unsignaled SEND and a signaled RDMA WRITE, wr_ids
// bad.WRID+1..+3) in one PostSend, and checks that bad completes with st and
// the three after it with WR_FLUSH_ERR, in posting order (IB spec C10-96 /
// ibv_post_send(3): an error moves the QP to ERR and every outstanding
// request flushes, signaled or not). Then it checks that s's QP is in ERR and
// that a request posted in ERR completes at once with WR_FLUSH_ERR.
func errFailAndFlush(t *testing.T, s, peer *Side, bad verbs.SendWR, st verbs.WCStatus) {
	t.Helper()
	id := bad.WRID
	Fill(s.Buf[:64], 0x40)
	wrs := []verbs.SendWR{
		bad,
		s.Send(id+1, 0, 16),
		{WRID: id + 2, Opcode: verbs.WRSend, SGList: []verbs.SGE{s.MR.SGE(0, 16)}},
		{WRID: id + 3, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: []verbs.SGE{s.MR.SGE(0, 16)},
			RemoteAddr: peer.MR.RemoteAddr(peer.MR.Len() - 64), RKey: peer.MR.RKey()},
	}
	s.MustPostSend(t, wrs...)
	wcs := PollN(t, s.SendCQ, len(wrs))
	ExpectWC(t, wcs[0], id, st, bad.Opcode.WCOpcode())
	for i, wc := range wcs[1:] {
		ExpectWC(t, wc, id+1+uint64(i), verbs.WCWRFlushErr, 0)
	}
	for _, wc := range wcs {
		if wc.QPNum != s.QP.Num() {
			t.Fatalf("completion %s: qp_num %#x, want %#x", Describe(wc), wc.QPNum, s.QP.Num())
		}
	}
	WaitState(t, s.QP, verbs.QPSErr)
	s.MustPostSend(t, s.Send(id+4, 0, 16))
	ExpectWC(t, Poll1(t, s.SendCQ), id+4, verbs.WCWRFlushErr, 0)
	ExpectEmpty(t, s.SendCQ)
}

// errExpectQPEvent checks that the next asynchronous event of s's context is typ for s's QP.
func errExpectQPEvent(t *testing.T, s *Side, typ verbs.EventType) {
	t.Helper()
	ev := NextEvent(t, s.Ctx)
	if ev.Type != typ || ev.QP != s.QP {
		t.Fatalf("async event %v, want %v for QP %#x", ev, typ, s.QP.Num())
	}
}

// errExpectRecvFlushed checks that s's receive CQ holds WR_FLUSH_ERR completions
// for wrids, in that order, and nothing else.
func errExpectRecvFlushed(t *testing.T, s *Side, wrids ...uint64) {
	t.Helper()
	for i, wc := range PollN(t, s.RecvCQ, len(wrids)) {
		ExpectWC(t, wc, wrids[i], verbs.WCWRFlushErr, 0)
		if wc.QPNum != s.QP.Num() {
			t.Fatalf("flushed receive %s: qp_num %#x, want %#x", Describe(wc), wc.QPNum, s.QP.Num())
		}
	}
	ExpectEmpty(t, s.RecvCQ)
}

// errFailRemote posts bad from s to peer, a request whose failure the
// responder detects. With InfiniBand RC errors it is errFailAndFlush: bad
// completes with the responder's NAK status st and everything behind it
// flushes. With asynchronous (iWARP) errors bad may have completed locally
// before the Terminate came back, so only its completion and the requester's
// move to ERR are checked.
func errFailRemote(t *testing.T, f Fixture, s, peer *Side, bad verbs.SendWR, st verbs.WCStatus) {
	t.Helper()
	if !f.Caps().AsyncErrors {
		errFailAndFlush(t, s, peer, bad, st)
		return
	}
	bad.Flags |= verbs.SendSignaled
	s.MustPostSend(t, bad)
	if wc := Poll1(t, s.SendCQ); wc.WRID != bad.WRID {
		t.Fatalf("completion %s, want wr_id %#x", Describe(wc), bad.WRID)
	}
	WaitState(t, s.QP, verbs.QPSErr)
}

// errResponderUnharmed checks that a local error of the requester did not
// reach the responder r: it stays in RTS and its posted receives are
// untouched. (With asynchronous errors the requester's error tears the
// connection down, so there is nothing to check.)
func errResponderUnharmed(t *testing.T, f Fixture, r *Side) {
	t.Helper()
	if f.Caps().AsyncErrors {
		return
	}
	if st := r.QP.State(); st != verbs.QPSRTS {
		t.Fatalf("responder QP in %v after a local error of the requester, want RTS", st)
	}
	ExpectEmpty(t, r.RecvCQ)
}

// errResponderFatal checks the responder's side of a remote error (IB
// spec 9.7.5.2.4, loop package doc): its QP moves to ERR, the asynchronous
// event ev is raised for it on its own context (InfiniBand), and its posted
// receive recvID flushes.
func errResponderFatal(t *testing.T, f Fixture, r *Side, ev verbs.EventType, recvID uint64) {
	t.Helper()
	WaitState(t, r.QP, verbs.QPSErr)
	if !f.Caps().AsyncErrors {
		errExpectQPEvent(t, r, ev)
	}
	errExpectRecvFlushed(t, r, recvID)
}

// errRegWindow registers buf[off:off+n] of s's buffer as a second region with access acc.
func errRegWindow(t *testing.T, s *Side, off, n int, acc verbs.AccessFlags) *verbs.MR {
	t.Helper()
	mr, err := s.PD.RegMR(s.Buf[off:off+n], acc)
	if err != nil {
		t.Fatalf("RegMR(%v): %v", acc, err)
	}
	t.Cleanup(func() { mr.Dereg() })
	return mr
}

func errSnapshot(b []byte) []byte { return append([]byte(nil), b...) }

func errUnchanged(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		i := 0
		for i < len(got) && got[i] == want[i] {
			i++
		}
		t.Fatalf("%s changed (first difference at byte %d)", what, i)
	}
}

// WrongLKeyGivesLocProtErr: an SGE whose lkey names no region fails the
// request with IBV_WC_LOC_PROT_ERR (ibv_post_send(3), IB spec 10.6.3.2
// "local protection error"); the completion is generated even for an
// unsignaled request, and the rest of the send queue flushes.
func testWrongLKeyGivesLocProtErr(t *testing.T, f Fixture) {
	for _, tc := range []struct {
		name  string
		flags verbs.SendFlags
		key   func(a *Side) uint32
	}{
		{"GarbageKey", verbs.SendSignaled, func(a *Side) uint32 { return errBadKey(a.MR.LKey()) }},
		{"GarbageKeyUnsignaled", 0, func(a *Side) uint32 { return errBadKey(a.MR.LKey()) }},
		{"KeyOfDeregisteredMR", verbs.SendSignaled, func(a *Side) uint32 {
			mr, err := a.PD.RegMR(make([]byte, 4096), verbs.AccessLocalWrite)
			if err != nil {
				t.Fatalf("RegMR: %v", err)
			}
			if err := mr.Dereg(); err != nil {
				t.Fatalf("Dereg: %v", err)
			}
			return mr.LKey()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := NewPair(t, f, PairOpts{})
			b.MustPostRecv(t, b.Recv(100, 0, 4096))
			sge := a.MR.SGE(0, 64)
			sge.LKey = tc.key(a)
			errFailAndFlush(t, a, b, verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, Flags: tc.flags, SGList: []verbs.SGE{sge}}, verbs.WCLocProtErr)
			errResponderUnharmed(t, f, b)
		})
	}
}

// SGEOutsideRegionGivesLocProtErr: an SGE that does not lie inside the
// region its lkey names (running past its end, starting before its start,
// or a later SGE of a list) fails the request with IBV_WC_LOC_PROT_ERR and
// delivers nothing to the responder.
func testSGEOutsideRegionGivesLocProtErr(t *testing.T, f Fixture) {
	for _, tc := range []struct {
		name string
		sgl  func(a *Side) []verbs.SGE
	}{
		{"PastEnd", func(a *Side) []verbs.SGE { return []verbs.SGE{a.MR.SGE(a.MR.Len()-10, 20)} }},
		{"BeforeStart", func(a *Side) []verbs.SGE {
			return []verbs.SGE{{Addr: a.MR.Addr() - 8, Length: 16, LKey: a.MR.LKey()}}
		}},
		{"SecondSGE", func(a *Side) []verbs.SGE {
			return []verbs.SGE{a.MR.SGE(0, 32), a.MR.SGE(a.MR.Len()-8, 9)}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := NewPair(t, f, PairOpts{})
			b.MustPostRecv(t, b.Recv(100, 0, 4096))
			errFailAndFlush(t, a, b, verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: tc.sgl(a)}, verbs.WCLocProtErr)
			errResponderUnharmed(t, f, b)
		})
	}
}

// LKeyOfOtherPDGivesLocProtErr: a region of another protection domain
// cannot be used by a QP (ibv_alloc_pd(3): a PD's QPs and MRs work only
// with each other); the request fails with IBV_WC_LOC_PROT_ERR.
func testLKeyOfOtherPDGivesLocProtErr(t *testing.T, f Fixture) {
	a, b := NewPair(t, f, PairOpts{})
	pd2, err := a.Ctx.AllocPD()
	if err != nil {
		t.Fatalf("AllocPD: %v", err)
	}
	t.Cleanup(func() { pd2.Dealloc() })
	mr2, err := pd2.RegMR(make([]byte, 4096), verbs.AccessLocalWrite)
	if err != nil {
		t.Fatalf("RegMR: %v", err)
	}
	t.Cleanup(func() { mr2.Dereg() })
	b.MustPostRecv(t, b.Recv(100, 0, 4096))
	errFailAndFlush(t, a, b, verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: []verbs.SGE{mr2.SGE(0, 64)}}, verbs.WCLocProtErr)
	errResponderUnharmed(t, f, b)
}

// RecvSGEWrongKeyGivesLocProtErrAndRemOpErr: when the receive buffer a
// SEND lands in has a bad lkey, the receive completes with
// IBV_WC_LOC_PROT_ERR and the responder QP moves to ERR (its other receives
// flush); the requester gets IBV_WC_REM_OP_ERR (the responder's "remote
// operational error" NAK, IB spec 9.7.5.2.4) and flushes too.
func testRecvSGEWrongKeyGivesLocProtErrAndRemOpErr(t *testing.T, f Fixture) {
	a, b := NewPair(t, f, PairOpts{})
	bad := b.Recv(100, 0, 4096)
	bad.SGList[0].LKey = errBadKey(b.MR.LKey())
	b.MustPostRecv(t, bad, b.Recv(101, 4096, 4096))
	errFailRemote(t, f, a, b, a.Send(1, 0, 64), verbs.WCRemOpErr)
	wc := Poll1(t, b.RecvCQ)
	ExpectWC(t, wc, 100, verbs.WCLocProtErr, 0)
	WaitState(t, b.QP, verbs.QPSErr)
	errExpectRecvFlushed(t, b, 101)
}

// RecvBufferTooSmallGivesLocLenErr: a message longer than the receive
// buffers completes the receive with IBV_WC_LOC_LEN_ERR and moves the
// responder to ERR; the requester gets IBV_WC_REM_INV_REQ_ERR (IB spec
// 9.7.5.2.4, "invalid request": message too long). Nothing is written past
// the receive buffer.
func testRecvBufferTooSmallGivesLocLenErr(t *testing.T, f Fixture) {
	a, b := NewPair(t, f, PairOpts{})
	Fill(b.Buf, 0x11)
	before := errSnapshot(b.Buf)
	b.MustPostRecv(t, b.Recv(100, 1000, 10), b.Recv(101, 4096, 4096))
	errFailRemote(t, f, a, b, a.Send(1, 0, 100), verbs.WCRemInvReqErr)
	ExpectWC(t, Poll1(t, b.RecvCQ), 100, verbs.WCLocLenErr, 0)
	WaitState(t, b.QP, verbs.QPSErr)
	errExpectRecvFlushed(t, b, 101)
	errUnchanged(t, "responder memory before the receive buffer", b.Buf[:1000], before[:1000])
	errUnchanged(t, "responder memory after the receive buffer", b.Buf[1010:], before[1010:])
}

// errRemoteViolation posts wr from a to b, with a receive posted on b, and
// checks the IB RC rules for a remote access violation: the requester
// completes with IBV_WC_REM_ACCESS_ERR and flushes the rest, the responder
// moves to ERR with IBV_EVENT_QP_ACCESS_ERR and flushes its receive, and the
// responder's memory is untouched. (With asynchronous errors: both QPs end
// in ERR, the receive flushes and the memory is untouched.)
func errRemoteViolation(t *testing.T, f Fixture, a, b *Side, wr verbs.SendWR) {
	t.Helper()
	Fill(b.Buf, 0x77)
	before := errSnapshot(b.Buf)
	b.MustPostRecv(t, b.Recv(100, 0, 64))
	errFailRemote(t, f, a, b, wr, verbs.WCRemAccessErr)
	errResponderFatal(t, f, b, verbs.EventQPAccessErr, 100)
	errUnchanged(t, "responder memory", b.Buf, before)
}

func errWriteWR(a *Side, n int, raddr uint64, rkey uint32) verbs.SendWR {
	return verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.MR.SGE(0, n)}, RemoteAddr: raddr, RKey: rkey}
}

func errReadWR(a *Side, off, n int, raddr uint64, rkey uint32) verbs.SendWR {
	return verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.MR.SGE(off, n)}, RemoteAddr: raddr, RKey: rkey}
}

// RemoteWriteWrongRKeyGivesRemAccessErr: an RDMA WRITE with an rkey that
// names no region is a remote access violation.
func testRemoteWriteWrongRKeyGivesRemAccessErr(t *testing.T, f Fixture) {
	a, b := NewPair(t, f, PairOpts{})
	errRemoteViolation(t, f, a, b, errWriteWR(a, 64, b.MR.RemoteAddr(128), errBadKey(b.MR.RKey())))
}

// RemoteWriteWithoutPermissionGivesRemAccessErr: an RDMA WRITE into a
// region registered without IBV_ACCESS_REMOTE_WRITE is a remote access
// violation (ibv_reg_mr(3)).
func testRemoteWriteWithoutPermissionGivesRemAccessErr(t *testing.T, f Fixture) {
	a, b := NewPair(t, f, PairOpts{})
	w := errRegWindow(t, b, 4096, 4096, verbs.AccessLocalWrite|verbs.AccessRemoteRead)
	errRemoteViolation(t, f, a, b, errWriteWR(a, 64, w.RemoteAddr(0), w.RKey()))
}

// RemoteWriteOutsideRegionGivesRemAccessErr: an RDMA WRITE whose range is
// not inside the region (past its end, or starting before it) is a remote
// access violation and writes nothing, neither inside the region nor next to it.
func testRemoteWriteOutsideRegionGivesRemAccessErr(t *testing.T, f Fixture) {
	for _, tc := range []struct {
		name  string
		raddr func(w *verbs.MR) uint64
	}{
		{"PastEnd", func(w *verbs.MR) uint64 { return w.RemoteAddr(w.Len() - 32) }},
		{"BeforeStart", func(w *verbs.MR) uint64 { return w.Addr() - 32 }},
		{"EntirelyAfter", func(w *verbs.MR) uint64 { return w.RemoteAddr(w.Len()) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := NewPair(t, f, PairOpts{})
			w := errRegWindow(t, b, 4096, 4096, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
			errRemoteViolation(t, f, a, b, errWriteWR(a, 64, tc.raddr(w), w.RKey()))
		})
	}
}

// RemoteReadWithoutPermissionGivesRemAccessErr: an RDMA READ of a region
// registered without IBV_ACCESS_REMOTE_READ is a remote access violation;
// the requester's sink is not written.
func testRemoteReadWithoutPermissionGivesRemAccessErr(t *testing.T, f Fixture) {
	a, b := NewPair(t, f, PairOpts{})
	w := errRegWindow(t, b, 4096, 4096, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	Fill(a.Buf[8192:8192+256], 0x33)
	sink := errSnapshot(a.Buf[8192 : 8192+256])
	errRemoteViolation(t, f, a, b, errReadWR(a, 8192, 256, w.RemoteAddr(0), w.RKey()))
	errUnchanged(t, "read sink", a.Buf[8192:8192+256], sink)
}

// QPAccessFlagsDenyRemoteWrite: a responder QP whose qp_access_flags lack
// IBV_ACCESS_REMOTE_WRITE refuses RDMA WRITEs even into a region that
// allows them (ibv_modify_qp(3), IBV_QP_ACCESS_FLAGS), whether the flags
// were set when connecting or changed later by RTS->RTS; remote reads,
// which the flags allow, still work.
func testQPAccessFlagsDenyRemoteWrite(t *testing.T, f Fixture) {
	t.Run("AtConnect", func(t *testing.T) {
		rc := DefaultRC
		rc.QPAccessFlags = verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
		a, b := NewPair(t, f, PairOpts{RC: &rc})
		errReadThenWriteDenied(t, f, a, b)
	})
	t.Run("ModifiedInRTS", func(t *testing.T) {
		a, b := NewPair(t, f, PairOpts{})
		// The write is allowed first (the read behind it completes once the
		// responder executed it: a write may complete at the requester before)...
		a.MustPostSend(t, errWriteWR(a, 64, b.MR.RemoteAddr(0), b.MR.RKey()),
			errReadWR(a, 2048, 8, b.MR.RemoteAddr(0), b.MR.RKey()))
		ExpectWC(t, Poll1(t, a.SendCQ), 1, verbs.WCSuccess, verbs.WCRDMAWrite)
		ExpectWC(t, Poll1(t, a.SendCQ), 1, verbs.WCSuccess, verbs.WCRDMARead)
		// ...and refused once the responder's QP no longer grants it.
		attr := verbs.QPAttr{QPState: verbs.QPSRTS, QPAccessFlags: verbs.AccessRemoteRead}
		if err := b.QP.Modify(&attr, verbs.QPAttrState|verbs.QPAttrAccessFlags); err != nil {
			t.Fatalf("Modify RTS->RTS access flags: %v", err)
		}
		qa, _, err := b.QP.Query()
		if err != nil || qa.QPAccessFlags != verbs.AccessRemoteRead {
			t.Fatalf("Query after modify: access %v, err %v; want %v", qa.QPAccessFlags, err, verbs.AccessRemoteRead)
		}
		errReadThenWriteDenied(t, f, a, b)
	})
}

func errReadThenWriteDenied(t *testing.T, f Fixture, a, b *Side) {
	t.Helper()
	Fill(b.Buf[:256], 0x21)
	a.MustPostSend(t, errReadWR(a, 1024, 256, b.MR.RemoteAddr(0), b.MR.RKey()))
	ExpectWC(t, Poll1(t, a.SendCQ), 1, verbs.WCSuccess, verbs.WCRDMARead)
	if !bytes.Equal(a.Buf[1024:1024+256], b.Buf[:256]) {
		t.Fatal("read data differs")
	}
	errRemoteViolation(t, f, a, b, errWriteWR(a, 64, b.MR.RemoteAddr(4096), b.MR.RKey()))
}

// ReadSinkWithoutLocalWriteGivesLocProtErr: the local buffers an RDMA READ
// (or an atomic) writes into need IBV_ACCESS_LOCAL_WRITE (ibv_reg_mr(3));
// without it the request fails with IBV_WC_LOC_PROT_ERR, the sink is not
// written, and the responder is not harmed.
func testReadSinkWithoutLocalWriteGivesLocProtErr(t *testing.T, f Fixture) {
	ops := []verbs.WROpcode{verbs.WRRDMARead}
	if f.Caps().Atomics {
		ops = append(ops, verbs.WRAtomicFetchAndAdd)
	}
	for _, op := range ops {
		t.Run(op.String(), func(t *testing.T) {
			a, b := NewPair(t, f, PairOpts{})
			sinkBuf := make([]byte, 4096)
			Fill(sinkBuf, 0x5c)
			want := errSnapshot(sinkBuf)
			sink, err := a.PD.RegMR(sinkBuf, verbs.AccessRemoteRead)
			if err != nil {
				t.Fatalf("RegMR: %v", err)
			}
			t.Cleanup(func() { sink.Dereg() })
			Fill(b.Buf[:4096], 0x99)
			n := 256
			if op != verbs.WRRDMARead {
				n = 8
			}
			wr := verbs.SendWR{WRID: 1, Opcode: op, Flags: verbs.SendSignaled, SGList: []verbs.SGE{sink.SGE(0, n)},
				RemoteAddr: b.MR.RemoteAddr(errAtomicOff(b.MR, 0)), RKey: b.MR.RKey(), CompareAdd: 1}
			b.MustPostRecv(t, b.Recv(100, 8192, 64))
			errFailAndFlush(t, a, b, wr, verbs.WCLocProtErr)
			errUnchanged(t, "sink without local write", sinkBuf, want)
			if !f.Caps().AsyncErrors && b.QP.State() != verbs.QPSRTS {
				t.Fatalf("responder QP in %v, want RTS", b.QP.State())
			}
		})
	}
}

// errAtomicOff returns the first offset at or after base whose remote address
// in mr is 8-byte aligned.
func errAtomicOff(mr *verbs.MR, base int) int {
	return base + int((8-mr.RemoteAddr(base)%8)%8)
}

func errAtomicWR(a *Side, wrid uint64, op verbs.WROpcode, sinkOff int, raddr uint64, rkey uint32, cmpAdd, swap uint64) verbs.SendWR {
	return verbs.SendWR{WRID: wrid, Opcode: op, Flags: verbs.SendSignaled, SGList: []verbs.SGE{a.MR.SGE(sinkOff, 8)},
		RemoteAddr: raddr, RKey: rkey, CompareAdd: cmpAdd, Swap: swap}
}

// AtomicMisalignedGivesRemInvReqErr: the target of an atomic must be 8-byte
// aligned (ibv_post_send(3)); otherwise the responder answers "invalid
// request" (IB spec 9.4.5): the requester gets IBV_WC_REM_INV_REQ_ERR and
// the responder moves to ERR with IBV_EVENT_QP_REQ_ERR. Memory is untouched.
func testAtomicMisalignedGivesRemInvReqErr(t *testing.T, f Fixture) {
	for _, op := range []verbs.WROpcode{verbs.WRAtomicFetchAndAdd, verbs.WRAtomicCmpAndSwp} {
		t.Run(op.String(), func(t *testing.T) {
			a, b := NewPair(t, f, PairOpts{})
			Fill(b.Buf, 0x10)
			before := errSnapshot(b.Buf)
			b.MustPostRecv(t, b.Recv(100, 0, 64))
			off := errAtomicOff(b.MR, 256) + 4
			errFailRemote(t, f, a, b, errAtomicWR(a, 1, op, errAtomicOff(a.MR, 1024), b.MR.RemoteAddr(off), b.MR.RKey(), 0, 0), verbs.WCRemInvReqErr)
			errResponderFatal(t, f, b, verbs.EventQPReqErr, 100)
			errUnchanged(t, "responder memory", b.Buf, before)
		})
	}
}

// AtomicWithoutPermissionGivesRemAccessErr: an atomic on a region
// registered without IBV_ACCESS_REMOTE_ATOMIC is a remote access violation.
func testAtomicWithoutPermissionGivesRemAccessErr(t *testing.T, f Fixture) {
	for _, op := range []verbs.WROpcode{verbs.WRAtomicFetchAndAdd, verbs.WRAtomicCmpAndSwp} {
		t.Run(op.String(), func(t *testing.T) {
			a, b := NewPair(t, f, PairOpts{})
			w := errRegWindow(t, b, 4096, 4096, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
			errRemoteViolation(t, f, a, b, errAtomicWR(a, 1, op, errAtomicOff(a.MR, 1024), w.RemoteAddr(errAtomicOff(w, 64)), w.RKey(), 0, 1))
		})
	}
}

// AtomicFetchAddAndCmpSwapReturnOldValue: FETCH_AND_ADD adds compare_add to
// the 64-bit target and CMP_AND_SWP stores swap when the target equals
// compare_add; both return the target's original value in the 8-byte local
// sink, in host byte order (ibv_post_send(3)). A compare that does not match
// leaves the target unchanged. The completions report byte_len 8.
func testAtomicFetchAddAndCmpSwapReturnOldValue(t *testing.T, f Fixture) {
	a, b := NewPair(t, f, PairOpts{})
	toff := errAtomicOff(b.MR, 512)
	soff := errAtomicOff(a.MR, 2048)
	target := b.Buf[toff : toff+8]
	sink := a.Buf[soff : soff+8]
	Fill(b.Buf[toff-8:toff+16], 0xe0)
	guard := errSnapshot(b.Buf[toff-8 : toff+16])
	binary.NativeEndian.PutUint64(target, 100)
	raddr, rkey := b.MR.RemoteAddr(toff), b.MR.RKey()

	steps := []struct {
		op           verbs.WROpcode
		cmpAdd, swap uint64
		old, after   uint64
	}{
		{verbs.WRAtomicFetchAndAdd, 23, 0, 100, 123},
		{verbs.WRAtomicCmpAndSwp, 123, 7, 123, 7},         // compare matches: swapped
		{verbs.WRAtomicCmpAndSwp, 999, 5, 7, 7},           // compare differs: unchanged
		{verbs.WRAtomicFetchAndAdd, ^uint64(0), 0, 7, 6},  // adding -1 wraps modulo 2^64
		{verbs.WRAtomicCmpAndSwp, 6, 1 << 63, 6, 1 << 63}, // all 64 bits are stored
		{verbs.WRAtomicFetchAndAdd, 1 << 62, 0, 1 << 63, 3 << 62},
	}
	for i, s := range steps {
		binary.NativeEndian.PutUint64(sink, 0xdead_beef_dead_beef)
		wrid := uint64(10 + i)
		a.MustPostSend(t, errAtomicWR(a, wrid, s.op, soff, raddr, rkey, s.cmpAdd, s.swap))
		wc := Poll1(t, a.SendCQ)
		ExpectWC(t, wc, wrid, verbs.WCSuccess, s.op.WCOpcode())
		if wc.ByteLen != 8 {
			t.Fatalf("step %d (%v): byte_len %d, want 8", i, s.op, wc.ByteLen)
		}
		if got := binary.NativeEndian.Uint64(sink); got != s.old {
			t.Fatalf("step %d (%v %d, %d): returned %#x, want the old value %#x", i, s.op, s.cmpAdd, s.swap, got, s.old)
		}
		if got := binary.NativeEndian.Uint64(target); got != s.after {
			t.Fatalf("step %d (%v %d, %d): target %#x, want %#x", i, s.op, s.cmpAdd, s.swap, got, s.after)
		}
	}
	errUnchanged(t, "bytes around the atomic target", append(errSnapshot(b.Buf[toff-8:toff]), b.Buf[toff+8:toff+16]...),
		append(errSnapshot(guard[:8]), guard[16:]...))
	ExpectEmpty(t, b.RecvCQ) // atomics consume no receive
	if b.QP.State() != verbs.QPSRTS {
		t.Fatalf("responder in %v, want RTS", b.QP.State())
	}
}

// ReadWithZeroIRDGivesRemInvReqErr: a responder whose max_dest_rd_atomic
// (IRD) is 0 accepts no RDMA READ or atomic: the requester gets
// IBV_WC_REM_INV_REQ_ERR and the responder moves to ERR with
// IBV_EVENT_QP_REQ_ERR. RDMA WRITE, which needs no responder resources,
// still works.
func testReadWithZeroIRDGivesRemInvReqErr(t *testing.T, f Fixture) {
	ops := []verbs.WROpcode{verbs.WRRDMARead}
	if f.Caps().Atomics {
		ops = append(ops, verbs.WRAtomicFetchAndAdd)
	}
	for _, op := range ops {
		t.Run(op.String(), func(t *testing.T) {
			rc := DefaultRC
			rc.MaxDestRdAtomic = 0
			a, b := NewPair(t, f, PairOpts{RC: &rc})
			a.MustPostSend(t, errWriteWR(a, 64, b.MR.RemoteAddr(0), b.MR.RKey()))
			ExpectWC(t, Poll1(t, a.SendCQ), 1, verbs.WCSuccess, verbs.WCRDMAWrite)
			b.MustPostRecv(t, b.Recv(100, 8192, 64))
			wr := errReadWR(a, 1024, 64, b.MR.RemoteAddr(0), b.MR.RKey())
			if op != verbs.WRRDMARead {
				wr = errAtomicWR(a, 1, op, errAtomicOff(a.MR, 1024), b.MR.RemoteAddr(errAtomicOff(b.MR, 0)), b.MR.RKey(), 1, 0)
			}
			wr.WRID = 2
			errFailRemote(t, f, a, b, wr, verbs.WCRemInvReqErr)
			errResponderFatal(t, f, b, verbs.EventQPReqErr, 100)
		})
	}
}

// RNRRetryExceededGivesRNRRetryExcErr: a SEND that finds no posted receive
// is answered with RNR NAKs; after rnr_retry retries (min_rnr_timer apart)
// the requester gives up with IBV_WC_RNR_RETRY_EXC_ERR (ibv_modify_qp(3),
// IB spec 9.7.5.2.8). The responder is not harmed: it stays in RTS.
func testRNRRetryExceededGivesRNRRetryExcErr(t *testing.T, f Fixture) {
	for _, retry := range []uint8{0, 1, 3} {
		t.Run("RNRRetry"+string(rune('0'+retry)), func(t *testing.T) {
			rc := DefaultRC
			rc.RNRRetry, rc.MinRNRTimer = retry, 1
			a, b := NewPair(t, f, PairOpts{RC: &rc})
			errFailAndFlush(t, a, b, a.Send(1, 0, 64), verbs.WCRNRRetryExcErr)
			errResponderUnharmed(t, f, b)
		})
	}
}

// RNRInfiniteRetryWaitsForReceive: with rnr_retry 7 the requester retries
// forever: a SEND with no posted receive does not complete, and completes
// on both sides once the receive is posted.
func testRNRInfiniteRetryWaitsForReceive(t *testing.T, f Fixture) {
	a, b := NewPair(t, f, PairOpts{}) // DefaultRC has rnr_retry 7
	Fill(a.Buf[:300], 0x42)
	a.MustPostSend(t, a.Send(1, 0, 300), a.Send(2, 300, 10))
	time.Sleep(20 * time.Millisecond) // absence, not speed: nothing may complete without a receive
	ExpectEmpty(t, a.SendCQ)
	ExpectEmpty(t, b.RecvCQ)
	if st := a.QP.State(); st != verbs.QPSRTS {
		t.Fatalf("requester in %v while waiting for a receive, want RTS", st)
	}
	b.MustPostRecv(t, b.Recv(100, 1000, 4096))
	ExpectWC(t, Poll1(t, a.SendCQ), 1, verbs.WCSuccess, verbs.WCSend)
	wc := Poll1(t, b.RecvCQ)
	ExpectWC(t, wc, 100, verbs.WCSuccess, verbs.WCRecv)
	if wc.ByteLen != 300 || !bytes.Equal(b.Buf[1000:1300], a.Buf[:300]) {
		t.Fatalf("receive %s: want 300 bytes of the message", Describe(wc))
	}
	// The second send waits in turn for the second receive.
	ExpectEmpty(t, a.SendCQ)
	b.MustPostRecv(t, b.Recv(101, 8000, 64))
	ExpectWC(t, Poll1(t, a.SendCQ), 2, verbs.WCSuccess, verbs.WCSend)
	ExpectWC(t, Poll1(t, b.RecvCQ), 101, verbs.WCSuccess, verbs.WCRecv)
}

// PeerNotConnectedGivesRetryExcErr: when the destination QP does not
// answer (it was reset, moved to ERR, or destroyed), the requester's
// transport retries run out and the request completes with
// IBV_WC_RETRY_EXC_ERR (IB spec 9.7.5.2.5), the rest flushing.
func testPeerNotConnectedGivesRetryExcErr(t *testing.T, f Fixture) {
	for _, tc := range []struct {
		name string
		kill func(t *testing.T, b *Side)
	}{
		{"PeerReset", func(t *testing.T, b *Side) {
			if err := b.QP.Modify(&verbs.QPAttr{QPState: verbs.QPSReset}, verbs.QPAttrState); err != nil {
				t.Fatalf("Modify to RESET: %v", err)
			}
		}},
		{"PeerInError", func(t *testing.T, b *Side) {
			if err := b.QP.Modify(&verbs.QPAttr{QPState: verbs.QPSErr}, verbs.QPAttrState); err != nil {
				t.Fatalf("Modify to ERR: %v", err)
			}
		}},
		{"PeerDestroyed", func(t *testing.T, b *Side) {
			if err := b.QP.Destroy(); err != nil {
				t.Fatalf("Destroy: %v", err)
			}
			b.QP = nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := NewPair(t, f, PairOpts{})
			b.MustPostRecv(t, b.Recv(100, 0, 4096))
			tc.kill(t, b)
			errFailAndFlush(t, a, b, a.Send(1, 0, 64), verbs.WCRetryExcErr)
		})
	}
}

// WriteWithImmConsumesReceive: RDMA_WRITE_WITH_IMM places the data in the
// target region and consumes a receive, whose completion has opcode
// IBV_WC_RECV_RDMA_WITH_IMM, IBV_WC_WITH_IMM, the immediate value and
// byte_len equal to the write's length (ibv_poll_cq(3)); the receive's own
// buffer is not written.
func testWriteWithImmConsumesReceive(t *testing.T, f Fixture) {
	a, b := NewPair(t, f, PairOpts{})
	Fill(a.Buf[:300], 0x61)
	Fill(b.Buf, 0x01)
	before := errSnapshot(b.Buf)
	b.MustPostRecv(t, b.Recv(100, 20000, 4096))
	a.MustPostSend(t, verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWriteWithImm, Flags: verbs.SendSignaled, ImmData: 0x8badf00d,
		SGList: []verbs.SGE{a.MR.SGE(0, 300)}, RemoteAddr: b.MR.RemoteAddr(5000), RKey: b.MR.RKey()})
	ExpectWC(t, Poll1(t, a.SendCQ), 1, verbs.WCSuccess, verbs.WCRDMAWrite)
	wc := Poll1(t, b.RecvCQ)
	ExpectWC(t, wc, 100, verbs.WCSuccess, verbs.WCRecvRDMAWithImm)
	if wc.Flags&verbs.WCFlagWithImm == 0 || wc.ImmData != 0x8badf00d || wc.ByteLen != 300 || wc.QPNum != b.QP.Num() {
		t.Fatalf("receive completion %+v: want WITH_IMM, imm 0x8badf00d, byte_len 300, qp_num %#x", wc, b.QP.Num())
	}
	if !bytes.Equal(b.Buf[5000:5300], a.Buf[:300]) {
		t.Fatal("written data differs")
	}
	errUnchanged(t, "responder memory before the target", b.Buf[:5000], before[:5000])
	errUnchanged(t, "responder memory after the target (with the receive buffer)", b.Buf[5300:], before[5300:])
}

// SendWithImmCarriesImmData: SEND_WITH_IMM delivers the message and the
// immediate value: the receive completion has opcode IBV_WC_RECV,
// IBV_WC_WITH_IMM and the value posted.
func testSendWithImmCarriesImmData(t *testing.T, f Fixture) {
	a, b := NewPair(t, f, PairOpts{})
	Fill(a.Buf[:77], 0x2f)
	b.MustPostRecv(t, b.Recv(100, 3000, 4096))
	a.MustPostSend(t, verbs.SendWR{WRID: 1, Opcode: verbs.WRSendWithImm, Flags: verbs.SendSignaled, ImmData: 0x01020304,
		SGList: []verbs.SGE{a.MR.SGE(0, 77)}})
	ExpectWC(t, Poll1(t, a.SendCQ), 1, verbs.WCSuccess, verbs.WCSend)
	wc := Poll1(t, b.RecvCQ)
	ExpectWC(t, wc, 100, verbs.WCSuccess, verbs.WCRecv)
	if wc.Flags&verbs.WCFlagWithImm == 0 || wc.Flags&verbs.WCFlagWithInv != 0 || wc.ImmData != 0x01020304 || wc.ByteLen != 77 {
		t.Fatalf("receive completion %+v: want WITH_IMM, imm 0x01020304, byte_len 77", wc)
	}
	if !bytes.Equal(b.Buf[3000:3077], a.Buf[:77]) {
		t.Fatal("received data differs")
	}
}

// SendWithInvalidateInvalidatesRKey: SEND_WITH_INV delivers the message and
// invalidates the named remote key at the receiver: the receive completion
// has IBV_WC_WITH_INV and the key in imm_data (ibv_poll_cq(3),
// invalidated_rkey); afterwards an RDMA WRITE with that key is a remote
// access violation, other regions keep working, and the invalidated region
// can still be deregistered.
func testSendWithInvalidateInvalidatesRKey(t *testing.T, f Fixture) {
	a, b := NewPair(t, f, PairOpts{})
	invBuf := make([]byte, 4096)
	inv, err := b.PD.RegMR(invBuf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	if err != nil {
		t.Fatalf("RegMR: %v", err)
	}
	dereged := false
	t.Cleanup(func() {
		if !dereged {
			inv.Dereg()
		}
	})
	// The key works before it is invalidated.
	a.MustPostSend(t, verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.MR.SGE(0, 16)}, RemoteAddr: inv.RemoteAddr(0), RKey: inv.RKey()})
	ExpectWC(t, Poll1(t, a.SendCQ), 1, verbs.WCSuccess, verbs.WCRDMAWrite)

	b.MustPostRecv(t, b.Recv(100, 0, 4096))
	a.MustPostSend(t, verbs.SendWR{WRID: 2, Opcode: verbs.WRSendWithInv, Flags: verbs.SendSignaled, InvalidateRKey: inv.RKey(),
		SGList: []verbs.SGE{a.MR.SGE(0, 32)}})
	ExpectWC(t, Poll1(t, a.SendCQ), 2, verbs.WCSuccess, verbs.WCSend)
	wc := Poll1(t, b.RecvCQ)
	ExpectWC(t, wc, 100, verbs.WCSuccess, verbs.WCRecv)
	if wc.Flags&verbs.WCFlagWithInv == 0 || wc.Flags&verbs.WCFlagWithImm != 0 || wc.ImmData != inv.RKey() || wc.ByteLen != 32 {
		t.Fatalf("receive completion %+v: want WITH_INV, invalidated rkey %#x, byte_len 32", wc, inv.RKey())
	}
	// Other regions still work. (A read: its completion means the responder
	// has executed it, where a write may complete at the requester first.)
	a.MustPostSend(t, errReadWR(a, 1024, 16, b.MR.RemoteAddr(100), b.MR.RKey()))
	ExpectWC(t, Poll1(t, a.SendCQ), 1, verbs.WCSuccess, verbs.WCRDMARead)
	// The invalidated key does not.
	before := errSnapshot(invBuf)
	wr := errWriteWR(a, 16, inv.RemoteAddr(0), inv.RKey())
	wr.WRID = 4
	errRemoteViolation(t, f, a, b, wr)
	errUnchanged(t, "invalidated region", invBuf, before)
	if err := inv.Dereg(); err != nil {
		t.Fatalf("Dereg of a remotely invalidated region: %v", err)
	}
	dereged = true
}

// SendWithInvalidateOfUnknownKeyFails: a SEND_WITH_INV naming a key the
// receiver cannot invalidate fails: the requester gets
// IBV_WC_REM_INV_REQ_ERR and the responder's receive completes in error and
// its QP moves to ERR. (Providers differ on the receive's status, rxe and
// siw report REM_INV_REQ_ERR, so only "an error" is required.)
func testSendWithInvalidateOfUnknownKeyFails(t *testing.T, f Fixture) {
	a, b := NewPair(t, f, PairOpts{})
	b.MustPostRecv(t, b.Recv(100, 0, 4096), b.Recv(101, 4096, 4096))
	errFailRemote(t, f, a, b, verbs.SendWR{WRID: 1, Opcode: verbs.WRSendWithInv, Flags: verbs.SendSignaled,
		InvalidateRKey: errBadKey(b.MR.RKey()), SGList: []verbs.SGE{a.MR.SGE(0, 32)}}, verbs.WCRemInvReqErr)
	wc := Poll1(t, b.RecvCQ)
	if wc.WRID != 100 || wc.Status == verbs.WCSuccess || wc.Status == verbs.WCWRFlushErr {
		t.Fatalf("receive completion %s: want wr_id 0x64 with an error status", Describe(wc))
	}
	WaitState(t, b.QP, verbs.QPSErr)
	errExpectRecvFlushed(t, b, 101)
}

// ERRFlushesOutstandingWorkInOrder: moving a QP to ERR completes every
// outstanding work request with IBV_WC_WR_FLUSH_ERR, signaled or not, in
// posting order: sends on the send CQ, receives on the receive CQ
// (ibv_modify_qp(3), IB spec 10.3.1 "Error state"). Flushed requests are
// never executed later.
func testERRFlushesOutstandingWorkInOrder(t *testing.T, f Fixture) {
	a, b := NewPair(t, f, PairOpts{}) // rnr_retry 7: sends wait for a receive that never comes
	a.MustPostRecv(t, a.Recv(100, 8192, 64), a.Recv(101, 8256, 64), a.Recv(102, 8320, 64), a.Recv(103, 8384, 64))
	a.MustPostSend(t,
		a.Send(1, 0, 16),
		verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, SGList: []verbs.SGE{a.MR.SGE(0, 16)}},
		a.Send(3, 0, 16),
		verbs.SendWR{WRID: 4, Opcode: verbs.WRSend, SGList: []verbs.SGE{a.MR.SGE(0, 16)}},
		verbs.SendWR{WRID: 5, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: []verbs.SGE{a.MR.SGE(0, 16)},
			RemoteAddr: b.MR.RemoteAddr(0), RKey: b.MR.RKey()},
		verbs.SendWR{WRID: 6, Opcode: verbs.WRRDMARead, SGList: []verbs.SGE{a.MR.SGE(4096, 16)},
			RemoteAddr: b.MR.RemoteAddr(0), RKey: b.MR.RKey()},
	)
	ExpectEmpty(t, a.SendCQ)
	ExpectEmpty(t, a.RecvCQ)
	if err := a.QP.Modify(&verbs.QPAttr{QPState: verbs.QPSErr}, verbs.QPAttrState); err != nil {
		t.Fatalf("Modify to ERR: %v", err)
	}
	if st := a.QP.State(); st != verbs.QPSErr {
		t.Fatalf("QP in %v after Modify to ERR", st)
	}
	for i, wc := range PollN(t, a.SendCQ, 6) {
		ExpectWC(t, wc, uint64(1+i), verbs.WCWRFlushErr, 0)
		if wc.QPNum != a.QP.Num() {
			t.Fatalf("flushed send %s: qp_num %#x, want %#x", Describe(wc), wc.QPNum, a.QP.Num())
		}
	}
	ExpectEmpty(t, a.SendCQ)
	errExpectRecvFlushed(t, a, 100, 101, 102, 103)
	// The flushed sends are gone: a receive posted at the peer now stays unused.
	b.MustPostRecv(t, b.Recv(200, 0, 64))
	ExpectEmpty(t, b.RecvCQ)
	if st := b.QP.State(); st != verbs.QPSRTS {
		t.Fatalf("peer in %v, want RTS", st)
	}
}

// DeregisteredMRKeyStopsWorking: after ibv_dereg_mr the region's keys stop
// working at once: a local SGE with its lkey fails with
// IBV_WC_LOC_PROT_ERR, and a remote WRITE or READ with its rkey is a remote
// access violation (IBV_WC_REM_ACCESS_ERR, responder to ERR).
func testDeregisteredMRKeyStopsWorking(t *testing.T, f Fixture) {
	t.Run("LocalSGE", func(t *testing.T) {
		a, b := NewPair(t, f, PairOpts{})
		mr, err := a.PD.RegMR(make([]byte, 4096), verbs.AccessLocalWrite)
		if err != nil {
			t.Fatalf("RegMR: %v", err)
		}
		b.MustPostRecv(t, b.Recv(100, 0, 4096), b.Recv(101, 4096, 4096))
		a.MustPostSend(t, verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: []verbs.SGE{mr.SGE(0, 64)}})
		ExpectWC(t, Poll1(t, a.SendCQ), 1, verbs.WCSuccess, verbs.WCSend)
		ExpectWC(t, Poll1(t, b.RecvCQ), 100, verbs.WCSuccess, verbs.WCRecv)
		if err := mr.Dereg(); err != nil {
			t.Fatalf("Dereg: %v", err)
		}
		errFailAndFlush(t, a, b, verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: []verbs.SGE{mr.SGE(0, 64)}}, verbs.WCLocProtErr)
		errResponderUnharmed(t, f, b)
	})
	for _, op := range []verbs.WROpcode{verbs.WRRDMAWrite, verbs.WRRDMARead} {
		t.Run("Remote"+op.String(), func(t *testing.T) {
			a, b := NewPair(t, f, PairOpts{})
			mr, err := b.PD.RegMR(make([]byte, 4096), verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
			if err != nil {
				t.Fatalf("RegMR: %v", err)
			}
			wr := errWriteWR(a, 64, mr.RemoteAddr(0), mr.RKey())
			if op == verbs.WRRDMARead {
				wr = errReadWR(a, 1024, 64, mr.RemoteAddr(0), mr.RKey())
			}
			a.MustPostSend(t, wr)
			ExpectWC(t, Poll1(t, a.SendCQ), 1, verbs.WCSuccess, op.WCOpcode())
			// A read behind it completes only once the responder has executed
			// the write, which may have completed at the requester before.
			a.MustPostSend(t, errReadWR(a, 2048, 8, mr.RemoteAddr(0), mr.RKey()))
			ExpectWC(t, Poll1(t, a.SendCQ), 1, verbs.WCSuccess, verbs.WCRDMARead)
			if err := mr.Dereg(); err != nil {
				t.Fatalf("Dereg: %v", err)
			}
			wr.WRID = 2
			errRemoteViolation(t, f, a, b, wr)
		})
	}
}

// WCStatusesHaveNames: every status a provider produces prints as
// ibv_wc_status_str does: readable text, not the "WCStatus(n)" fallback,
// and distinct for distinct statuses; Name gives the C constant.
func testWCStatusesHaveNames(t *testing.T, f Fixture) {
	produced := []verbs.WCStatus{
		verbs.WCSuccess, verbs.WCLocLenErr, verbs.WCLocQPOpErr, verbs.WCLocProtErr, verbs.WCWRFlushErr,
		verbs.WCRemInvReqErr, verbs.WCRemAccessErr, verbs.WCRemOpErr, verbs.WCRetryExcErr, verbs.WCRNRRetryExcErr,
		verbs.WCGeneralErr, verbs.WCFatalErr,
	}
	seen := map[string]verbs.WCStatus{}
	for _, st := range produced {
		s := st.String()
		if s == "" || strings.HasPrefix(s, "WCStatus(") {
			t.Errorf("WCStatus %d prints %q", uint32(st), s)
		}
		if o, dup := seen[s]; dup {
			t.Errorf("WCStatus %d and %d both print %q", uint32(o), uint32(st), s)
		}
		seen[s] = st
		if n := st.Name(); !strings.HasPrefix(n, "IBV_WC_") {
			t.Errorf("WCStatus %d has name %q, want an IBV_WC_ constant", uint32(st), n)
		}
	}
	if s := verbs.WCStatus(200).String(); s != "WCStatus(200)" {
		t.Errorf("unknown status prints %q, want WCStatus(200)", s)
	}
	if verbs.WCWRFlushErr.String() != "Work Request Flushed Error" || verbs.WCRemAccessErr.String() != "remote access error" {
		t.Errorf("statuses print %q and %q, want libibverbs' texts", verbs.WCWRFlushErr, verbs.WCRemAccessErr)
	}
	wc := verbs.WC{WRID: 7, Status: verbs.WCRemAccessErr}
	if err := wc.Err(); err == nil || !strings.Contains(err.Error(), "remote access error") {
		t.Errorf("WC.Err of a failed completion: %v", err)
	}
	if err := (&verbs.WC{Status: verbs.WCSuccess}).Err(); err != nil {
		t.Errorf("WC.Err of a successful completion: %v", err)
	}
}
