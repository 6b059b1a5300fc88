package conformance

// The posting rules of ibv_post_send(3), ibv_post_recv(3), ibv_post_srq_recv(3)
// and the verbs-level parts of rdma_post_recv(3) and rdma_post_sendv(3): the
// first-failure (bad_wr) rule, queue sizes, SGE and inline limits, the QP
// states that accept work, SRQ use, the UD receive layout (GRH first) and
// what happens to datagrams that cannot be delivered.
//
// Every case holds for a provider that executes work requests
// asynchronously: completions are always polled (PollN/Poll1), and "this
// was not posted / not delivered" is shown positively, by a later request
// taking the place the missing one would have taken (a later message landing
// in an earlier receive, the flush of a QP in ERR naming exactly the receives
// that were still posted).

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/goverbs/goverbs/verbs"
)

func init() {
	register(
		Case{Name: "PostRecvStopsAtFirstBadWR", Run: testPostRecvStopsAtFirstBadWR},
		Case{Name: "PostSendStopsAtFirstBadWR", Run: testPostSendStopsAtFirstBadWR},
		Case{Name: "SRQPostRecvStopsAtFirstBadWR", Run: testSRQPostRecvStopsAtFirstBadWR},
		Case{Name: "PostRecvWithSRQFails", Run: testPostRecvWithSRQFails},
		Case{Name: "SRQSharedByTwoQPs", Run: testSRQSharedByTwoQPs},
		Case{Name: "SRQLimitEvent", Run: testSRQLimitEvent},
		Case{Name: "SRQPostRecvQueueFull", Run: testSRQPostRecvQueueFull},
		Case{Name: "PostSendWrongState", Need: func(c Caps) bool { return c.Modify }, Run: testPostSendWrongState},
		Case{Name: "SendBeforeConnectFails", Run: testSendBeforeConnectFails},
		Case{Name: "PostSendQueueFull", Need: func(c Caps) bool { return c.RNR }, Run: testPostSendQueueFull},
		Case{Name: "PostRecvQueueFull", Run: testPostRecvQueueFull},
		Case{Name: "TooManySGEs", Run: testTooManySGEs},
		Case{Name: "InlineTooLong", Run: testInlineTooLong},
		Case{Name: "InlineDataCopiedAtPost", Run: testInlineDataCopiedAtPost},
		Case{Name: "InlineOnRDMAReadRejected", Run: testInlineOnRDMAReadRejected},
		Case{Name: "RecvBufferReusableAfterCompletion", Run: testRecvBufferReusableAfterCompletion},
		Case{Name: "ScatterGatherSend", Run: testScatterGatherSend},
		Case{Name: "ErrStatePostCompletesWithFlush", Run: testErrStatePostCompletesWithFlush},
		Case{Name: "UDOpcodeRestrictions", Need: postNeedUD, Run: testUDOpcodeRestrictions},
		Case{Name: "UDReceiveHasGRHFirst40Bytes", Need: postNeedUD, Run: testUDReceiveHasGRHFirst40Bytes},
		Case{Name: "UDReceiveTooSmallForGRH", Need: postNeedUD, Run: testUDReceiveTooSmallForGRH},
		Case{Name: "UDQKeyMismatchDropped", Need: postNeedUD, Run: testUDQKeyMismatchDropped},
		Case{Name: "UDNoReceiveDropped", Need: postNeedUD, Run: testUDNoReceiveDropped},
		Case{Name: "UDSendLargerThanMTU", Need: postNeedUD, Run: testUDSendLargerThanMTU},
	)
}

func postNeedUD(c Caps) bool { return c.UD }

// postRoCEv4 reports an IPv4-mapped GID (::ffff:a.b.c.d): RoCEv2 over IPv4.
func postRoCEv4(g verbs.GID) bool {
	return bytes.Equal(g[:10], make([]byte, 10)) && g[10] == 0xFF && g[11] == 0xFF
}

// ---- helpers of this file (prefixed post to keep the package namespace tidy) ----

// postExpectBad checks a *verbs.PostError: bad_wr index, its wr_id and the cause.
func postExpectBad(t testing.TB, err error, bad int, wrid uint64, want error) {
	t.Helper()
	ExpectPostErr(t, err, bad, want)
	var pe *verbs.PostError
	errors.As(err, &pe)
	if pe.WRID != wrid {
		t.Fatalf("error %v names wr_id %#x, want %#x", err, pe.WRID, wrid)
	}
}

// postCap returns the QP's actual queue capabilities (ibv_query_qp).
func postCap(t testing.TB, q *verbs.QP) verbs.QPCap {
	t.Helper()
	a, _, err := q.Query()
	if err != nil {
		t.Fatalf("Query: %v", err)
	}
	return a.Cap
}

// postModify applies Modify and fails the test on error.
func postModify(t testing.TB, q *verbs.QP, attr verbs.QPAttr, mask verbs.QPAttrMask) {
	t.Helper()
	if err := q.Modify(&attr, mask); err != nil {
		t.Fatalf("Modify QP %#x to %v: %v", q.Num(), attr.QPState, err)
	}
}

// postToErr moves q to ERR.
func postToErr(t testing.TB, q *verbs.QP) {
	t.Helper()
	postModify(t, q, verbs.QPAttr{QPState: verbs.QPSErr}, verbs.QPAttrState)
	WaitState(t, q, verbs.QPSErr)
}

// postRCInit moves an RC QP from RESET to INIT.
func postRCInit(t testing.TB, q *verbs.QP) {
	t.Helper()
	postModify(t, q, verbs.QPAttr{QPState: verbs.QPSInit, PortNum: 1, QPAccessFlags: DefaultRC.QPAccessFlags},
		verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags)
}

// postRCRTR moves an RC QP of s from INIT to RTR, connected to dest's QP.
func postRCRTR(t testing.TB, f Fixture, s, dest *Side) {
	t.Helper()
	port, err := s.Ctx.QueryPort(1)
	if err != nil {
		t.Fatalf("QueryPort: %v", err)
	}
	a := DefaultRC
	a.QPState = verbs.QPSRTR
	a.AHAttr = f.AHTo(t, dest.Ctx)
	a.DestQPNum = dest.QP.Num()
	a.PathMTU = min(a.PathMTU, port.ActiveMTU)
	a.MaxDestRdAtomic = uint8(min(int(a.MaxDestRdAtomic), s.Ctx.QueryDevice().MaxQPRdAtom))
	postModify(t, s.QP, a, verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|
		verbs.QPAttrRQPSN|verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer)
}

// postRCRTS moves an RC QP of s from RTR to RTS.
func postRCRTS(t testing.TB, s *Side) {
	t.Helper()
	a := DefaultRC
	a.QPState = verbs.QPSRTS
	a.MaxRdAtomic = uint8(min(int(a.MaxRdAtomic), s.Ctx.QueryDevice().MaxQPInitRdAtom))
	postModify(t, s.QP, a, verbs.QPAttrState|verbs.QPAttrSQPSN|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|
		verbs.QPAttrRNRRetry|verbs.QPAttrMaxQPRdAtomic)
}

// postFlushRecv shows which receives are still posted on s's QP: it posts a
// last receive (sentinel), moves the QP to ERR and polls the flushed
// receives up to the sentinel's. It returns their wr_ids in order, the
// sentinel's last. Receives are flushed in posting order.
func postFlushRecv(t testing.TB, s *Side, sentinel uint64) []uint64 {
	t.Helper()
	s.MustPostRecv(t, s.Recv(sentinel, len(s.Buf)-64, 64))
	postToErr(t, s.QP)
	var ids []uint64
	for len(ids) <= 4096 {
		wc := Poll1(t, s.RecvCQ)
		if wc.Status != verbs.WCWRFlushErr {
			t.Fatalf("completion %s after the QP moved to ERR, want %v", Describe(wc), verbs.WCWRFlushErr)
		}
		ids = append(ids, wc.WRID)
		if wc.WRID == sentinel {
			return ids
		}
	}
	t.Fatalf("no flushed completion for sentinel %#x", sentinel)
	return nil
}

// postNoEvent checks, without waiting, that ctx has no asynchronous event queued.
func postNoEvent(t testing.TB, ctx *verbs.Context) {
	t.Helper()
	c, cancel := context.WithCancel(context.Background())
	cancel()
	if ev, err := ctx.GetAsyncEvent(c); err == nil {
		t.Fatalf("unexpected asynchronous event %v", ev)
	}
}

// postSendOK polls a's send completion wrid (a SEND) and b's receive
// completion rwrid of n bytes.
func postSendOK(t testing.TB, a, b *Side, wrid, rwrid uint64, n int) verbs.WC {
	t.Helper()
	ExpectWC(t, Poll1(t, a.SendCQ), wrid, verbs.WCSuccess, verbs.WCSend)
	wc := Poll1(t, b.RecvCQ)
	ExpectWC(t, wc, rwrid, verbs.WCSuccess, verbs.WCRecv)
	if wc.ByteLen != uint32(n) {
		t.Fatalf("receive %s: byte_len %d, want %d", Describe(wc), wc.ByteLen, n)
	}
	return wc
}

// postSGL returns k SGEs of n bytes each on mr, stride bytes apart from off.
func postSGL(mr *verbs.MR, k, off, stride, n int) []verbs.SGE {
	sgl := make([]verbs.SGE, k)
	for i := range sgl {
		sgl[i] = mr.SGE(off+i*stride, n)
	}
	return sgl
}

// postQKey is the Q_Key of the UD cases (not a controlled Q_Key: bit 31 clear).
const postQKey = 0x1234_5678

// postNewUD returns two UD sides, both in RTS with postQKey, and an address
// handle on a's PD that reaches b's port.
func postNewUD(t *testing.T, f Fixture) (a, b *Side, ah *verbs.AH) {
	t.Helper()
	ca, cb := f.Open(t)
	a = NewSide(t, ca, verbs.QPTUD, PairOpts{})
	b = NewSide(t, cb, verbs.QPTUD, PairOpts{})
	for _, s := range []*Side{a, b} {
		if err := f.ActivateUD(t, s.QP, postQKey); err != nil {
			t.Fatalf("ActivateUD: %v", err)
		}
	}
	ah, err := a.PD.CreateAH(f.AHTo(t, cb))
	if err != nil {
		t.Fatalf("CreateAH: %v", err)
	}
	t.Cleanup(func() { ah.Destroy() })
	return a, b, ah
}

// postUDSend is a signaled UD SEND of the n bytes at off of a's buffer to b's QP.
func postUDSend(a *Side, ah *verbs.AH, b *Side, wrid uint64, off, n int) verbs.SendWR {
	wr := a.Send(wrid, off, n)
	wr.AH, wr.RemoteQPN, wr.RemoteQKey = ah, b.QP.Num(), postQKey
	return wr
}

// ---- ibv_post_recv / ibv_post_send / ibv_post_srq_recv: the bad_wr rule ----

// ibv_post_recv(3): "It stops processing WRs from this list at the first
// failure ... and returns this failing WR through bad_wr": the WRs before it
// are posted, it and those after it are not.
func testPostRecvStopsAtFirstBadWR(t *testing.T, f Fixture) {
	a, b := NewPair(t, f, PairOpts{})
	tooMany := postSGL(b.MR, postCap(t, b.QP).MaxRecvSGE+1, 4096, 32, 16)
	err := b.QP.PostRecv([]verbs.RecvWR{b.Recv(1, 0, 256), {WRID: 2, SGList: tooMany}, b.Recv(3, 256, 256)})
	postExpectBad(t, err, 1, 2, verbs.ErrInvalid)

	// The first receive was posted: a message lands in it.
	Fill(a.Buf[:100], 5)
	a.MustPostSend(t, a.Send(10, 0, 100))
	postSendOK(t, a, b, 10, 1, 100)
	if !bytes.Equal(b.Buf[:100], a.Buf[:100]) {
		t.Fatal("received data differs from the data sent")
	}
	// The third was not: flushing the receive queue finds only the sentinel.
	if ids := postFlushRecv(t, b, 4); !slices.Equal(ids, []uint64{4}) {
		t.Fatalf("receives still posted after the failed list: %v, want only the sentinel [4]", ids)
	}
}

// ibv_post_send(3): the same first-failure rule for sends; the requests
// before bad_wr execute, the one after it never does.
func testPostSendStopsAtFirstBadWR(t *testing.T, f Fixture) {
	bad := []struct {
		name string
		wr   func(t *testing.T, a *Side) verbs.SendWR
	}{
		{"InvalidOpcode", func(t *testing.T, a *Side) verbs.SendWR {
			wr := a.Send(12, 0, 8)
			wr.Opcode = verbs.WROpcode(0x7f)
			return wr
		}},
		{"TooManySGEs", func(t *testing.T, a *Side) verbs.SendWR {
			return verbs.SendWR{WRID: 12, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
				SGList: postSGL(a.MR, postCap(t, a.QP).MaxSendSGE+1, 4096, 32, 8)}
		}},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			a, b := NewPair(t, f, PairOpts{})
			b.MustPostRecv(t, b.Recv(1, 0, 1024), b.Recv(2, 1024, 1024), b.Recv(3, 2048, 1024))
			Fill(a.Buf[:300], 7)
			err := a.QP.PostSend([]verbs.SendWR{a.Send(11, 0, 100), tc.wr(t, a), a.Send(13, 100, 200)})
			postExpectBad(t, err, 1, 12, verbs.ErrInvalid)

			// A later send (50 bytes) is the second message; request 13 (200 bytes) never went.
			a.MustPostSend(t, a.Send(14, 100, 50))
			sc := PollN(t, a.SendCQ, 2)
			ExpectWC(t, sc[0], 11, verbs.WCSuccess, verbs.WCSend)
			ExpectWC(t, sc[1], 14, verbs.WCSuccess, verbs.WCSend)
			rc := PollN(t, b.RecvCQ, 2)
			ExpectWC(t, rc[0], 1, verbs.WCSuccess, verbs.WCRecv)
			ExpectWC(t, rc[1], 2, verbs.WCSuccess, verbs.WCRecv)
			if rc[0].ByteLen != 100 || rc[1].ByteLen != 50 {
				t.Fatalf("messages of %d and %d bytes, want 100 and 50", rc[0].ByteLen, rc[1].ByteLen)
			}
			if !bytes.Equal(b.Buf[:100], a.Buf[:100]) || !bytes.Equal(b.Buf[1024:1074], a.Buf[100:150]) {
				t.Fatal("received data differs from the data sent")
			}
			if ids := postFlushRecv(t, b, 9); !slices.Equal(ids, []uint64{3, 9}) {
				t.Fatalf("receives left after two messages: %v, want [3 9]", ids)
			}
		})
	}
}

// ibv_post_srq_recv(3): the first-failure rule on a shared receive queue.
func testSRQPostRecvStopsAtFirstBadWR(t *testing.T, f Fixture) {
	a, b := NewPair(t, f, PairOpts{SRQ: true})
	srq := b.QP.SRQ()
	sa, err := srq.Query()
	if err != nil {
		t.Fatalf("SRQ Query: %v", err)
	}
	tooMany := postSGL(b.MR, sa.MaxSGE+1, 4096, 32, 16)
	err = srq.PostRecv([]verbs.RecvWR{b.Recv(1, 0, 256), {WRID: 2, SGList: tooMany}, b.Recv(3, 256, 256)})
	postExpectBad(t, err, 1, 2, verbs.ErrInvalid)
	if err := srq.PostRecv([]verbs.RecvWR{b.Recv(4, 512, 256)}); err != nil {
		t.Fatalf("SRQ PostRecv: %v", err)
	}
	// Two messages take the receives in posting order: 1, then 4 (3 was never posted).
	Fill(a.Buf[:80], 2)
	a.MustPostSend(t, a.Send(10, 0, 40))
	postSendOK(t, a, b, 10, 1, 40)
	a.MustPostSend(t, a.Send(11, 40, 40))
	postSendOK(t, a, b, 11, 4, 40)
	if !bytes.Equal(b.Buf[:40], a.Buf[:40]) || !bytes.Equal(b.Buf[512:552], a.Buf[40:80]) {
		t.Fatal("received data differs from the data sent")
	}
	if !bytes.Equal(b.Buf[256:296], make([]byte, 40)) {
		t.Fatal("data landed in the buffer of a receive that was not posted")
	}
}

// ---- SRQ ----

// ibv_post_recv(3): "If the QP qp is associated with a shared receive queue,
// you must use the function ibv_post_srq_recv(), and not ibv_post_recv(),
// since the QP's own receive queue will not be used." Posting to the QP
// fails (bad_wr is the first WR); receives posted to the SRQ are consumed by
// the QP and complete on its receive CQ with its qp_num.
func testPostRecvWithSRQFails(t *testing.T, f Fixture) {
	a, b := NewPair(t, f, PairOpts{SRQ: true})
	err := b.QP.PostRecv([]verbs.RecvWR{b.Recv(1, 0, 256), b.Recv(2, 256, 256)})
	postExpectBad(t, err, 0, 1, verbs.ErrInvalid)

	if err := b.QP.SRQ().PostRecv([]verbs.RecvWR{b.Recv(3, 1024, 256)}); err != nil {
		t.Fatalf("SRQ PostRecv: %v", err)
	}
	Fill(a.Buf[:64], 3)
	a.MustPostSend(t, a.Send(20, 0, 64))
	wc := postSendOK(t, a, b, 20, 3, 64)
	// src_qp is defined for UD only (ibv_poll_cq(3)); qp_num names the receiving QP.
	if wc.QPNum != b.QP.Num() {
		t.Fatalf("receive %+v: qp_num %#x, want %#x", wc, wc.QPNum, b.QP.Num())
	}
	if !bytes.Equal(b.Buf[1024:1088], a.Buf[:64]) {
		t.Fatal("data did not land in the SRQ receive's buffer")
	}
	if !bytes.Equal(b.Buf[:512], make([]byte, 512)) {
		t.Fatal("data landed in a buffer of the refused ibv_post_recv")
	}
}

// ibv_create_srq(3)/ibv_post_srq_recv(3): an SRQ is shared by the QPs created with it;
// each incoming message takes the oldest posted receive, whichever QP it
// arrives on, and completes with that QP's qp_num.
func testSRQSharedByTwoQPs(t *testing.T, f Fixture) {
	ca, cb := f.Open(t)
	b1 := NewSide(t, cb, verbs.QPTRC, PairOpts{SRQ: true})
	srq := b1.QP.SRQ()
	b2qp, err := b1.PD.CreateQP(verbs.QPInitAttr{SendCQ: b1.SendCQ, RecvCQ: b1.RecvCQ, SRQ: srq, QPType: verbs.QPTRC,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxSendSGE: 4}})
	if err != nil {
		t.Fatalf("CreateQP with a shared SRQ: %v", err)
	}
	t.Cleanup(func() { b2qp.Destroy() })
	if b2qp.SRQ() != srq {
		t.Fatal("QP.SRQ does not return the SRQ it was created with")
	}
	a1 := NewSide(t, ca, verbs.QPTRC, PairOpts{})
	a2 := NewSide(t, ca, verbs.QPTRC, PairOpts{})
	if err := f.Connect(t, a1.QP, b1.QP, DefaultRC); err != nil {
		t.Fatalf("Connect: %v", err)
	}
	if err := f.Connect(t, a2.QP, b2qp, DefaultRC); err != nil {
		t.Fatalf("Connect: %v", err)
	}
	if err := srq.PostRecv([]verbs.RecvWR{b1.Recv(1, 0, 512), b1.Recv(2, 512, 512), b1.Recv(3, 1024, 512)}); err != nil {
		t.Fatalf("SRQ PostRecv: %v", err)
	}
	steps := []struct {
		from  *Side
		to    *verbs.QP
		n     int
		rwrid uint64
		off   int
	}{
		{a2, b2qp, 100, 1, 0},
		{a1, b1.QP, 200, 2, 512},
		{a2, b2qp, 30, 3, 1024},
	}
	for i, s := range steps {
		Fill(s.from.Buf[:s.n], byte(10*i+1))
		s.from.MustPostSend(t, s.from.Send(uint64(100+i), 0, s.n))
		ExpectWC(t, Poll1(t, s.from.SendCQ), uint64(100+i), verbs.WCSuccess, verbs.WCSend)
		wc := Poll1(t, b1.RecvCQ)
		ExpectWC(t, wc, s.rwrid, verbs.WCSuccess, verbs.WCRecv)
		if wc.QPNum != s.to.Num() || wc.ByteLen != uint32(s.n) {
			t.Fatalf("message %d: completion %+v, want qp_num %#x, byte_len %d", i, wc, s.to.Num(), s.n)
		}
		if !bytes.Equal(b1.Buf[s.off:s.off+s.n], s.from.Buf[:s.n]) {
			t.Fatalf("message %d: data differs", i)
		}
	}
}

// ibv_modify_srq(3): srq_limit arms the limit event; IBV_EVENT_SRQ_LIMIT_REACHED
// is raised (for the SRQ) once, when the number of posted receives drops
// below the limit, and the limit is then disarmed (0) until armed again.
func testSRQLimitEvent(t *testing.T, f Fixture) {
	a, b := NewPair(t, f, PairOpts{SRQ: true})
	srq := b.QP.SRQ()
	post := func(ids ...uint64) {
		t.Helper()
		for _, id := range ids {
			if err := srq.PostRecv([]verbs.RecvWR{b.Recv(id, int(id)*256, 256)}); err != nil {
				t.Fatalf("SRQ PostRecv: %v", err)
			}
		}
	}
	next := uint64(1)
	send := func() {
		t.Helper()
		a.MustPostSend(t, a.Send(1000+next, 0, 16))
		postSendOK(t, a, b, 1000+next, next, 16)
		next++
	}
	arm := func(limit int) {
		t.Helper()
		if err := srq.Modify(&verbs.SRQAttr{SRQLimit: limit}, verbs.SRQAttrLimit); err != nil {
			t.Fatalf("SRQ Modify(limit %d): %v", limit, err)
		}
		if sa, err := srq.Query(); err != nil || sa.SRQLimit != limit {
			t.Fatalf("SRQ Query after arming %d: %+v, %v", limit, sa, err)
		}
	}
	limitEvent := func() {
		t.Helper()
		ev := NextEvent(t, b.Ctx)
		if ev.Type != verbs.EventSRQLimitReached || ev.SRQ != srq {
			t.Fatalf("event %v, want %v for the SRQ", ev, verbs.EventSRQLimitReached)
		}
		if sa, err := srq.Query(); err != nil || sa.SRQLimit != 0 {
			t.Fatalf("SRQ Query after the limit event: %+v, %v; want the limit disarmed (0)", sa, err)
		}
	}

	post(1, 2, 3, 4)
	arm(3)
	send() // 3 left: not below the limit
	postNoEvent(t, b.Ctx)
	send() // 2 left: below 3
	limitEvent()
	send() // 1 left: the limit is disarmed, no second event
	postNoEvent(t, b.Ctx)

	post(5, 6, 7) // 4 left
	postNoEvent(t, b.Ctx)
	arm(3)
	send() // 3 left
	postNoEvent(t, b.Ctx)
	send() // 2 left: the re-armed limit fires again
	limitEvent()
	send() // 1 left
	postNoEvent(t, b.Ctx)
}

// ibv_post_srq_recv(3): more outstanding receives than the SRQ's max_wr fail
// with ENOMEM (ErrQueueFull) at the first one that does not fit; a receive
// consumed by a message frees its slot.
func testSRQPostRecvQueueFull(t *testing.T, f Fixture) {
	a, b := NewPair(t, f, PairOpts{SRQ: true})
	srq := b.QP.SRQ()
	sa, err := srq.Query()
	if err != nil {
		t.Fatalf("SRQ Query: %v", err)
	}
	n := sa.MaxWR
	wrs := make([]verbs.RecvWR, n+2)
	for i := range wrs {
		wrs[i] = b.Recv(uint64(i+1), i*64, 64)
	}
	postExpectBad(t, srq.PostRecv(wrs), n, uint64(n+1), verbs.ErrQueueFull)
	a.MustPostSend(t, a.Send(50, 0, 8))
	postSendOK(t, a, b, 50, 1, 8)
	err = srq.PostRecv([]verbs.RecvWR{b.Recv(200, 0, 64), b.Recv(201, 64, 64)})
	postExpectBad(t, err, 1, 201, verbs.ErrQueueFull)
}

// ---- QP states ----

// ibv_post_send(3)/ibv_modify_qp(3), the IBA QP state machine: a send queue
// accepts work only in RTS (and SQD); posting in RESET, INIT or RTR fails (EINVAL, ErrInvalidState). A
// receive queue accepts work from INIT on (not in RESET), and a receive
// posted in INIT is kept and used once the QP can receive.
func testPostSendWrongState(t *testing.T, f Fixture) {
	a, b := NewPair(t, f, PairOpts{NoConnect: true})
	sendFails := func(st verbs.QPState) {
		t.Helper()
		if got := a.QP.State(); got != st {
			t.Fatalf("QP in %v, want %v", got, st)
		}
		err := a.QP.PostSend([]verbs.SendWR{a.Send(1, 0, 8), a.Send(2, 0, 8)})
		postExpectBad(t, err, 0, 1, verbs.ErrInvalidState)
	}
	sendFails(verbs.QPSReset)
	postExpectBad(t, a.QP.PostRecv([]verbs.RecvWR{a.Recv(3, 0, 64)}), 0, 3, verbs.ErrInvalidState)

	postRCInit(t, a.QP)
	sendFails(verbs.QPSInit)
	a.MustPostRecv(t, a.Recv(4, 1024, 64)) // allowed in INIT

	postRCInit(t, b.QP)
	postRCRTR(t, f, b, a)
	postRCRTS(t, b)
	postRCRTR(t, f, a, b)
	sendFails(verbs.QPSRTR)

	// In RTR the QP receives, into the receive posted in INIT.
	Fill(b.Buf[:40], 9)
	b.MustPostSend(t, b.Send(5, 0, 40))
	postSendOK(t, b, a, 5, 4, 40)
	if !bytes.Equal(a.Buf[1024:1064], b.Buf[:40]) {
		t.Fatal("received data differs from the data sent")
	}

	// In RTS it sends; none of the refused requests comes back.
	postRCRTS(t, a)
	b.MustPostRecv(t, b.Recv(6, 0, 64))
	a.MustPostSend(t, a.Send(7, 0, 8))
	postSendOK(t, a, b, 7, 6, 8)
	ExpectEmpty(t, a.SendCQ)
	ExpectEmpty(t, a.RecvCQ)
}

// rdma_post_sendv(3): sends may be posted "only after the rdma_cm_id has
// been connected": an unconnected QP (RESET, INIT) refuses them, and a
// refused send is not kept to run once the QP is connected.
func testSendBeforeConnectFails(t *testing.T, f Fixture) {
	a, b := NewPair(t, f, PairOpts{NoConnect: true})
	err := a.QP.PostSend([]verbs.SendWR{a.Send(1, 0, 8), a.Send(2, 0, 8)})
	postExpectBad(t, err, 0, 1, verbs.ErrInvalidState)
	postRCInit(t, a.QP)
	err = a.QP.PostSend([]verbs.SendWR{a.Send(3, 0, 8)})
	postExpectBad(t, err, 0, 3, verbs.ErrInvalidState)
	postModify(t, a.QP, verbs.QPAttr{QPState: verbs.QPSReset}, verbs.QPAttrState)

	if err := f.Connect(t, a.QP, b.QP, DefaultRC); err != nil {
		t.Fatalf("Connect: %v", err)
	}
	b.MustPostRecv(t, b.Recv(10, 0, 64), b.Recv(11, 64, 64))
	a.MustPostSend(t, a.Send(4, 0, 8))
	postSendOK(t, a, b, 4, 10, 8)
	if ids := postFlushRecv(t, b, 12); !slices.Equal(ids, []uint64{11, 12}) {
		t.Fatalf("receives left after one message: %v, want [11 12]", ids)
	}
}

// ---- queue sizes ----

// ibv_post_send(3)/ibv_create_qp(3): at most max_send_wr requests are
// outstanding on a send queue; one more fails (ENOMEM, ErrQueueFull) and is
// the bad_wr. Requests that completed, once polled, free their slots. (The
// queue is filled with sends stalled by RNR: the receiver has no buffers and
// rnr_retry is 7, "retry forever".)
func testPostSendQueueFull(t *testing.T, f Fixture) {
	a, b := NewPair(t, f, PairOpts{Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	n := postCap(t, a.QP).MaxSendWR
	rcap := postCap(t, b.QP).MaxRecvWR
	if n < 4 || rcap < 4 {
		t.Fatalf("QP capabilities %+v / %+v: below the 4 WRs asked for", postCap(t, a.QP), postCap(t, b.QP))
	}
	sends := func(first uint64, k int) []verbs.SendWR {
		wrs := make([]verbs.SendWR, k)
		for i := range wrs {
			wrs[i] = a.Send(first+uint64(i), i*8, 8)
		}
		return wrs
	}
	// drain posts k receives, in batches the receive queue can hold, and
	// polls the k sends (from first) and k receives they complete.
	nextRecv := uint64(1000)
	drain := func(first uint64, k int) {
		t.Helper()
		for done := 0; done < k; {
			c := min(k-done, rcap)
			for i := 0; i < c; i++ {
				b.MustPostRecv(t, b.Recv(nextRecv, 0, 64))
				nextRecv++
			}
			for i, wc := range PollN(t, a.SendCQ, c) {
				ExpectWC(t, wc, first+uint64(done+i), verbs.WCSuccess, verbs.WCSend)
			}
			for _, wc := range PollN(t, b.RecvCQ, c) {
				ExpectWC(t, wc, wc.WRID, verbs.WCSuccess, verbs.WCRecv)
			}
			done += c
		}
	}

	postExpectBad(t, a.QP.PostSend(sends(1, n+2)), n, uint64(n+1), verbs.ErrQueueFull)
	postExpectBad(t, a.QP.PostSend(sends(100, 1)), 0, 100, verbs.ErrQueueFull)

	// One receive lets one send complete; once its completion is polled, its
	// slot takes exactly one more request.
	drain(1, 1)
	postExpectBad(t, a.QP.PostSend(sends(uint64(n+1), 2)), 1, uint64(n+2), verbs.ErrQueueFull)
	drain(2, n)

	// All completions polled: the whole queue is free again.
	if err := a.QP.PostSend(sends(500, n)); err != nil {
		t.Fatalf("PostSend of %d requests on an empty send queue: %v", n, err)
	}
	drain(500, n)
	ExpectEmpty(t, a.SendCQ)
}

// ibv_post_recv(3)/ibv_create_qp(3): at most max_recv_wr receives are
// outstanding; one more fails (ENOMEM, ErrQueueFull) and is the bad_wr. A
// receive consumed by a message frees its slot.
func testPostRecvQueueFull(t *testing.T, f Fixture) {
	a, b := NewPair(t, f, PairOpts{Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	n := postCap(t, b.QP).MaxRecvWR
	if n < 4 {
		t.Fatalf("max_recv_wr %d, below the 4 asked for", n)
	}
	wrs := make([]verbs.RecvWR, n+2)
	for i := range wrs {
		wrs[i] = b.Recv(uint64(i+1), i*64, 64)
	}
	postExpectBad(t, b.QP.PostRecv(wrs), n, uint64(n+1), verbs.ErrQueueFull)
	postExpectBad(t, b.QP.PostRecv([]verbs.RecvWR{b.Recv(100, 0, 64)}), 0, 100, verbs.ErrQueueFull)

	a.MustPostSend(t, a.Send(50, 0, 8))
	postSendOK(t, a, b, 50, 1, 8)
	err := b.QP.PostRecv([]verbs.RecvWR{b.Recv(200, 0, 64), b.Recv(201, 64, 64)})
	postExpectBad(t, err, 1, 201, verbs.ErrQueueFull)

	// Exactly the n receives 2..n and 200 are outstanding.
	postToErr(t, b.QP)
	var ids []uint64
	for _, wc := range PollN(t, b.RecvCQ, n) {
		if wc.Status != verbs.WCWRFlushErr {
			t.Fatalf("completion %s, want %v", Describe(wc), verbs.WCWRFlushErr)
		}
		ids = append(ids, wc.WRID)
	}
	var want []uint64
	for i := 2; i <= n; i++ {
		want = append(want, uint64(i))
	}
	want = append(want, 200)
	if !slices.Equal(ids, want) {
		t.Fatalf("flushed receives %v, want %v", ids, want)
	}
	ExpectEmpty(t, b.RecvCQ)
}

// ---- SGE and inline limits ----

// ibv_post_send(3)/ibv_post_recv(3): num_sge may not exceed the QP's
// max_send_sge / max_recv_sge (EINVAL); exactly the maximum is allowed, and
// such a send arrives as one message gathered in SGE order.
func testTooManySGEs(t *testing.T, f Fixture) {
	a, b := NewPair(t, f, PairOpts{})
	sc, rc := postCap(t, a.QP), postCap(t, b.QP)
	err := a.QP.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGList: postSGL(a.MR, sc.MaxSendSGE+1, 0, 100, 10)}})
	postExpectBad(t, err, 0, 1, verbs.ErrInvalid)
	err = b.QP.PostRecv([]verbs.RecvWR{{WRID: 2, SGList: postSGL(b.MR, rc.MaxRecvSGE+1, 0, 100, 64)}})
	postExpectBad(t, err, 0, 2, verbs.ErrInvalid)

	n := sc.MaxSendSGE * 10
	if n > rc.MaxRecvSGE*64 {
		t.Fatalf("capabilities %+v / %+v: the test message does not fit", sc, rc)
	}
	Fill(a.Buf[:sc.MaxSendSGE*100], 4)
	b.MustPostRecv(t, verbs.RecvWR{WRID: 3, SGList: postSGL(b.MR, rc.MaxRecvSGE, 8192, 128, 64)})
	a.MustPostSend(t, verbs.SendWR{WRID: 4, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGList: postSGL(a.MR, sc.MaxSendSGE, 0, 100, 10)})
	postSendOK(t, a, b, 4, 3, n)
	var sent, got []byte
	for i := 0; i < sc.MaxSendSGE; i++ {
		sent = append(sent, a.Buf[i*100:i*100+10]...)
	}
	for i := 0; len(got) < n; i++ {
		got = append(got, b.Buf[8192+i*128:8192+i*128+min(64, n-len(got))]...)
	}
	if !bytes.Equal(got, sent) {
		t.Fatal("received data differs from the gathered data")
	}

	// The same limit on an SRQ (ibv_post_srq_recv: its max_sge).
	srq, err := b.PD.CreateSRQ(verbs.SRQInitAttr{Attr: verbs.SRQAttr{MaxWR: 4, MaxSGE: 2}})
	if err != nil {
		t.Fatalf("CreateSRQ: %v", err)
	}
	t.Cleanup(func() { srq.Destroy() })
	sa, err := srq.Query()
	if err != nil {
		t.Fatalf("SRQ Query: %v", err)
	}
	err = srq.PostRecv([]verbs.RecvWR{{WRID: 5, SGList: postSGL(b.MR, sa.MaxSGE+1, 0, 100, 64)}})
	postExpectBad(t, err, 0, 5, verbs.ErrInvalid)
}

// ibv_post_send(3)/ibv_create_qp(3): IBV_SEND_INLINE data may not exceed
// the QP's max_inline_data (EINVAL), whether it is given as bytes or as
// SGEs; exactly max_inline_data is allowed.
func testInlineTooLong(t *testing.T, f Fixture) {
	a, b := NewPair(t, f, PairOpts{}) // asks for 64 bytes inline
	m := postCap(t, a.QP).MaxInlineData
	if m < 64 {
		t.Fatalf("max_inline_data %d, below the 64 asked for", m)
	}
	msg := make([]byte, m+1)
	Fill(msg, 6)
	err := a.QP.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled | verbs.SendInline, Inline: msg}})
	postExpectBad(t, err, 0, 1, verbs.ErrInvalid)
	err = a.QP.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled | verbs.SendInline,
		SGList: []verbs.SGE{a.MR.SGE(0, m), a.MR.SGE(m, 1)}}})
	postExpectBad(t, err, 0, 2, verbs.ErrInvalid)

	b.MustPostRecv(t, b.Recv(3, 0, m+100))
	a.MustPostSend(t, verbs.SendWR{WRID: 4, Opcode: verbs.WRSend, Flags: verbs.SendSignaled | verbs.SendInline, Inline: msg[:m]})
	postSendOK(t, a, b, 4, 3, m)
	if !bytes.Equal(b.Buf[:m], msg[:m]) {
		t.Fatal("received data differs from the inline data")
	}
}

// ibv_post_send(3), IBV_SEND_INLINE: the data is copied into the work
// request at post time ("The L_Key will not be checked"), so it need not be
// registered (the Go form: an Inline []byte of ordinary memory) and its
// buffer may be reused as soon as PostSend returns. The source is overwritten
// right after PostSend returns; the peer must still get the original bytes,
// for SENDs (bytes and SGE forms) and an inline RDMA WRITE.
func testInlineDataCopiedAtPost(t *testing.T, f Fixture) {
	a, b := NewPair(t, f, PairOpts{})
	b.MustPostRecv(t, b.Recv(1, 0, 128), b.Recv(2, 128, 128))

	msg := make([]byte, 48) // ordinary Go memory, not registered
	Fill(msg, 11)
	want1 := slices.Clone(msg)
	a.MustPostSend(t, verbs.SendWR{WRID: 10, Opcode: verbs.WRSend, Flags: verbs.SendSignaled | verbs.SendInline, Inline: msg})
	clear(msg)

	Fill(a.Buf[:32], 22)
	want2 := slices.Clone(a.Buf[:32])
	a.MustPostSend(t, verbs.SendWR{WRID: 11, Opcode: verbs.WRSend, Flags: verbs.SendSignaled | verbs.SendInline,
		SGList: []verbs.SGE{a.MR.SGE(0, 32)}})
	clear(a.Buf[:32])

	msg3 := make([]byte, 40)
	Fill(msg3, 33)
	want3 := slices.Clone(msg3)
	a.MustPostSend(t, verbs.SendWR{WRID: 12, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled | verbs.SendInline,
		Inline: msg3, RemoteAddr: b.MR.RemoteAddr(4096), RKey: b.MR.RKey()})
	clear(msg3)
	// A last SEND: its arrival shows the write before it has been placed
	// (RC places in order; the write's own completion need not mean that).
	b.MustPostRecv(t, b.Recv(5, 256, 8))
	a.MustPostSend(t, verbs.SendWR{WRID: 13, Opcode: verbs.WRSend, Flags: verbs.SendInline, Inline: []byte("fence")})

	sc := PollN(t, a.SendCQ, 3)
	ExpectWC(t, sc[0], 10, verbs.WCSuccess, verbs.WCSend)
	ExpectWC(t, sc[1], 11, verbs.WCSuccess, verbs.WCSend)
	ExpectWC(t, sc[2], 12, verbs.WCSuccess, verbs.WCRDMAWrite)
	rc := PollN(t, b.RecvCQ, 3)
	ExpectWC(t, rc[0], 1, verbs.WCSuccess, verbs.WCRecv)
	ExpectWC(t, rc[1], 2, verbs.WCSuccess, verbs.WCRecv)
	ExpectWC(t, rc[2], 5, verbs.WCSuccess, verbs.WCRecv)
	if rc[0].ByteLen != 48 || rc[1].ByteLen != 32 {
		t.Fatalf("byte_len %d and %d, want 48 and 32", rc[0].ByteLen, rc[1].ByteLen)
	}
	if !bytes.Equal(b.Buf[:48], want1) {
		t.Fatal("inline send (unregistered bytes): the peer got other data than was posted")
	}
	if !bytes.Equal(b.Buf[128:160], want2) {
		t.Fatal("inline send (SGE): the peer got other data than was posted")
	}
	if !bytes.Equal(b.Buf[4096:4136], want3) {
		t.Fatal("inline RDMA write: the target holds other data than was posted")
	}
}

// ibv_post_send(3): IBV_SEND_INLINE is "Valid only for Send and RDMA Write";
// an inline RDMA READ (whose SGEs are where data is written to) is refused.
func testInlineOnRDMAReadRejected(t *testing.T, f Fixture) {
	a, b := NewPair(t, f, PairOpts{})
	Fill(b.Buf[:16], 8)
	err := a.QP.PostSend([]verbs.SendWR{{WRID: 13, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled | verbs.SendInline,
		SGList: []verbs.SGE{a.MR.SGE(8192, 16)}, RemoteAddr: b.MR.RemoteAddr(0), RKey: b.MR.RKey()}})
	postExpectBad(t, err, 0, 13, verbs.ErrInvalid)
	// Nothing was posted: the next request's completion is the first.
	a.MustPostSend(t, verbs.SendWR{WRID: 14, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.MR.SGE(8192, 16)}, RemoteAddr: b.MR.RemoteAddr(0), RKey: b.MR.RKey()})
	ExpectWC(t, Poll1(t, a.SendCQ), 14, verbs.WCSuccess, verbs.WCRDMARead)
	if !bytes.Equal(a.Buf[8192:8208], b.Buf[:16]) {
		t.Fatal("read data differs")
	}
	ExpectEmpty(t, a.SendCQ)
}

// ---- receive buffers, SG lists ----

// rdma_post_recv(3)/ibv_post_recv(3): the context (wr_id) given at post time
// comes back in the completion, any 64-bit value; the message lands in the
// posted buffer and nowhere else; after the completion is polled the buffer
// may be posted again.
func testRecvBufferReusableAfterCompletion(t *testing.T, f Fixture) {
	a, b := NewPair(t, f, PairOpts{})
	for i := 990; i < 1210; i++ {
		b.Buf[i] = 0xAA
	}
	ids := []uint64{0xfedc_ba98_7654_3210, 0, math.MaxUint64}
	lens := []int{200, 120, 7}
	for i, id := range ids {
		b.MustPostRecv(t, b.Recv(id, 1000, 200)) // the same buffer each time
		Fill(a.Buf[:lens[i]], byte(40*i+1))
		a.MustPostSend(t, a.Send(uint64(i+1), 0, lens[i]))
		postSendOK(t, a, b, uint64(i+1), id, lens[i])
		if !bytes.Equal(b.Buf[1000:1000+lens[i]], a.Buf[:lens[i]]) {
			t.Fatalf("message %d did not land in the posted buffer", i)
		}
		if !bytes.Equal(b.Buf[990:1000], bytes.Repeat([]byte{0xAA}, 10)) || !bytes.Equal(b.Buf[1200:1210], bytes.Repeat([]byte{0xAA}, 10)) {
			t.Fatalf("message %d wrote outside the posted buffer", i)
		}
	}
	// Several receives posted at once complete in order, each with its own context and buffer.
	for i, id := range ids {
		b.MustPostRecv(t, b.Recv(id, 2048+i*256, 256))
	}
	Fill(a.Buf[:300], 77)
	for i := range ids {
		a.MustPostSend(t, a.Send(uint64(10+i), i*100, 100))
	}
	for i, wc := range PollN(t, a.SendCQ, len(ids)) {
		ExpectWC(t, wc, uint64(10+i), verbs.WCSuccess, verbs.WCSend)
	}
	for i, wc := range PollN(t, b.RecvCQ, len(ids)) {
		ExpectWC(t, wc, ids[i], verbs.WCSuccess, verbs.WCRecv)
		if !bytes.Equal(b.Buf[2048+i*256:2048+i*256+100], a.Buf[i*100:i*100+100]) {
			t.Fatalf("message %d did not land in receive %#x's buffer", i, ids[i])
		}
	}
}

// rdma_post_sendv(3): the scatter/gather list is sent as one message: three
// send SGEs arrive as one receive completion, scattered over a receive's two
// SGEs of different sizes in order, byte_len the total.
func testScatterGatherSend(t *testing.T, f Fixture) {
	a, b := NewPair(t, f, PairOpts{})
	Fill(a.Buf[:8192], 3)
	sgl := []verbs.SGE{a.MR.SGE(100, 37), a.MR.SGE(5000, 1), a.MR.SGE(2000, 300)}
	var want []byte
	for _, s := range sgl {
		off := int(s.Addr - a.MR.Addr())
		want = append(want, a.Buf[off:off+int(s.Length)]...)
	}
	n := len(want) // 338
	for i := range b.Buf[:16384] {
		b.Buf[i] = 0xEE
	}
	b.MustPostRecv(t, verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{b.MR.SGE(8000, 100), b.MR.SGE(1000, 400)}}, b.Recv(2, 12000, 64))
	a.MustPostSend(t, verbs.SendWR{WRID: 9, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: sgl})
	postSendOK(t, a, b, 9, 1, n)
	if !bytes.Equal(b.Buf[8000:8100], want[:100]) || !bytes.Equal(b.Buf[1000:1000+n-100], want[100:]) {
		t.Fatal("the message was not scattered over the receive SGEs in order")
	}
	untouched := func(lo, hi int) bool { return bytes.Count(b.Buf[lo:hi], []byte{0xEE}) == hi-lo }
	if !untouched(1000+n-100, 1400) || !untouched(7990, 8000) || !untouched(8100, 8110) || !untouched(990, 1000) {
		t.Fatal("the receive wrote outside the message's bytes")
	}
	// It was one message: the next send takes the second receive.
	a.MustPostSend(t, a.Send(10, 0, 5))
	postSendOK(t, a, b, 10, 2, 5)
}

// ibv_post_send(3)/ibv_post_recv(3) on a QP in ERR: libibverbs software
// providers (as rxe and siw do) accept the request and complete it at once with
// IBV_WC_WR_FLUSH_ERR (signaled or not); nothing reaches the peer.
func testErrStatePostCompletesWithFlush(t *testing.T, f Fixture) {
	a, b := NewPair(t, f, PairOpts{})
	b.MustPostRecv(t, b.Recv(1, 0, 64))
	postToErr(t, a.QP)

	unsig := a.Send(11, 0, 8)
	unsig.Flags = 0
	a.MustPostSend(t, a.Send(10, 0, 8), unsig)
	for i, wc := range PollN(t, a.SendCQ, 2) {
		ExpectWC(t, wc, uint64(10+i), verbs.WCWRFlushErr, 0)
		if wc.QPNum != a.QP.Num() {
			t.Fatalf("flushed send %s: qp_num %#x, want %#x", Describe(wc), wc.QPNum, a.QP.Num())
		}
	}
	a.MustPostRecv(t, a.Recv(12, 0, 64))
	wc := Poll1(t, a.RecvCQ)
	ExpectWC(t, wc, 12, verbs.WCWRFlushErr, 0)
	if wc.QPNum != a.QP.Num() {
		t.Fatalf("flushed receive %s: qp_num %#x, want %#x", Describe(wc), wc.QPNum, a.QP.Num())
	}
	ExpectEmpty(t, a.SendCQ)
	ExpectEmpty(t, a.RecvCQ)
	if ids := postFlushRecv(t, b, 2); !slices.Equal(ids, []uint64{1, 2}) {
		t.Fatalf("the peer's receives after sends from a QP in ERR: %v, want [1 2] (none consumed)", ids)
	}
}

// ---- UD ----

// ibv_post_send(3), the table of opcodes per QP transport type: a UD QP has
// only SEND and SEND_WITH_IMM; RDMA and atomic operations are refused
// (EINVAL), and so is a UD send without an address handle (wr.ud.ah).
func testUDOpcodeRestrictions(t *testing.T, f Fixture) {
	a, b, ah := postNewUD(t, f)
	caps := f.Caps()
	ops := []verbs.WROpcode{verbs.WRRDMAWrite, verbs.WRRDMARead}
	if caps.Immediate {
		ops = append(ops, verbs.WRRDMAWriteWithImm)
	}
	if caps.Atomics {
		ops = append(ops, verbs.WRAtomicCmpAndSwp, verbs.WRAtomicFetchAndAdd)
	}
	if caps.Invalidate {
		ops = append(ops, verbs.WRSendWithInv)
	}
	for i, op := range ops {
		wr := postUDSend(a, ah, b, uint64(i+1), 0, 8)
		wr.Opcode, wr.RemoteAddr, wr.RKey, wr.InvalidateRKey = op, b.MR.RemoteAddr(0), b.MR.RKey(), b.MR.RKey()
		postExpectBad(t, a.QP.PostSend([]verbs.SendWR{wr}), 0, uint64(i+1), verbs.ErrInvalid)
	}
	noAH := postUDSend(a, ah, b, 40, 0, 8)
	noAH.AH = nil
	postExpectBad(t, a.QP.PostSend([]verbs.SendWR{noAH}), 0, 40, verbs.ErrInvalid)

	// None was posted: the next valid send is the first completion on both sides.
	b.MustPostRecv(t, b.Recv(1, 0, 40+64))
	Fill(a.Buf[:8], 1)
	a.MustPostSend(t, postUDSend(a, ah, b, 50, 0, 8))
	postSendOK(t, a, b, 50, 1, 40+8)
	ExpectEmpty(t, a.SendCQ)
	if !bytes.Equal(b.Buf[40:48], a.Buf[:8]) {
		t.Fatal("received data differs from the data sent")
	}
}

// ibv_post_recv(3): "If a WR is being posted to a UD QP, the Global Routing
// Header (GRH) of the incoming message will be placed in the first 40 bytes
// of the buffer(s) ... the actual data of the incoming message will start at
// an offset of 40 bytes". byte_len counts the GRH; with a global address
// WC flags have IBV_WC_GRH and the GRH carries the sender's GID (SGID,
// bytes 8..24) and the receiver's (DGID, bytes 24..40); src_qp is the sender.
func testUDReceiveHasGRHFirst40Bytes(t *testing.T, f Fixture) {
	a, b, ah := postNewUD(t, f)
	for i := range b.Buf[:512] {
		b.Buf[i] = 0xEE
	}
	b.MustPostRecv(t, b.Recv(1, 0, 40+100+60))
	Fill(a.Buf[:100], 4)
	a.MustPostSend(t, postUDSend(a, ah, b, 2, 0, 100))
	wc := postSendOK(t, a, b, 2, 1, 140)
	if wc.SrcQP != a.QP.Num() || wc.QPNum != b.QP.Num() {
		t.Fatalf("receive %+v: src_qp %#x qp_num %#x, want %#x and %#x", wc, wc.SrcQP, wc.QPNum, a.QP.Num(), b.QP.Num())
	}
	if !bytes.Equal(b.Buf[40:140], a.Buf[:100]) {
		t.Fatal("the payload does not start at offset 40 of the receive buffer")
	}
	if bytes.Count(b.Buf[140:200], []byte{0xEE}) != 60 {
		t.Fatal("the receive wrote beyond GRH + payload")
	}
	av := ah.Attr()
	if !av.IsGlobal {
		return // no GRH on the wire: the first 40 bytes are undefined
	}
	if wc.Flags&verbs.WCFlagGRH == 0 {
		t.Fatalf("receive %+v: flags %v lack %v for a datagram sent with a global address", wc, wc.Flags, verbs.WCFlagGRH)
	}
	port := av.PortNum
	if port == 0 {
		port = 1
	}
	sgid, err := a.Ctx.QueryGID(port, int(av.GRH.SGIDIndex))
	if err != nil {
		t.Fatalf("QueryGID: %v", err)
	}
	dgid, err := b.Ctx.QueryGID(1, 0)
	if err != nil {
		t.Fatalf("QueryGID: %v", err)
	}
	if dgid != av.GRH.DGID {
		t.Fatalf("AH DGID %v, want the receiver's %v", av.GRH.DGID, dgid)
	}
	if postRoCEv4(sgid) {
		// RoCEv2 over IPv4 (as Linux rxe gives it): the IPv4 header in the
		// last 20 bytes, the first 20 undefined.
		ip := b.Buf[20:40]
		if ip[0] != 0x45 || ip[9] != 17 || !bytes.Equal(ip[12:16], sgid[12:]) || !bytes.Equal(ip[16:20], dgid[12:]) {
			t.Fatalf("GRH of a RoCEv2 datagram over IPv4: %x, want an IPv4 header (UDP) from %v to %v", ip, sgid, dgid)
		}
		return
	}
	if !bytes.Equal(b.Buf[8:24], sgid[:]) {
		t.Fatalf("GRH source GID %x, want the sender's %v", b.Buf[8:24], sgid)
	}
	if !bytes.Equal(b.Buf[24:40], dgid[:]) {
		t.Fatalf("GRH destination GID %x, want the receiver's %v", b.Buf[24:40], dgid)
	}

	// On an InfiniBand link the 40 bytes are the IBA 8.3 GRH: IPVer 6,
	// NxtHdr 0x1B (IBA transport), PayLen the bytes after the GRH up to and
	// including the ICRC: BTH (12), DETH (8), ImmDt (4, if any), the payload
	// padded to 4 bytes, ICRC (4). A 101-byte datagram checks the padding.
	pa, err := b.Ctx.QueryPort(1)
	if err != nil {
		t.Fatalf("QueryPort: %v", err)
	}
	if pa.LinkLayer != verbs.LinkLayerInfiniBand {
		return
	}
	checkGRH := func(n int, imm bool) {
		t.Helper()
		want := 12 + 8 + (n+3)&^3 + 4
		if imm {
			want += 4
		}
		if b.Buf[0]>>4 != 6 || b.Buf[6] != 0x1B {
			t.Fatalf("GRH %x: IPVer %d NxtHdr %#x, want 6 and 0x1b", b.Buf[:8], b.Buf[0]>>4, b.Buf[6])
		}
		if pl := int(binary.BigEndian.Uint16(b.Buf[4:6])); pl != want {
			t.Fatalf("GRH PayLen %d for a %d-byte datagram (immediate %v), want %d", pl, n, imm, want)
		}
	}
	checkGRH(100, false)
	imm := f.Caps().Immediate
	b.MustPostRecv(t, b.Recv(3, 0, 40+101))
	wr := postUDSend(a, ah, b, 4, 0, 101)
	if imm {
		wr.Opcode, wr.ImmData = verbs.WRSendWithImm, 0x01020304
	}
	a.MustPostSend(t, wr)
	wc = postSendOK(t, a, b, 4, 3, 141)
	if imm && (wc.Flags&verbs.WCFlagWithImm == 0 || wc.ImmData != 0x01020304) {
		t.Fatalf("receive %+v: want the immediate 0x01020304", wc)
	}
	checkGRH(101, imm)
}

// ibv_post_recv(3) on UD: the buffer must hold the 40-byte GRH and the
// payload; 40+len bytes suffice, 40+len-1 complete the receive with
// IBV_WC_LOC_LEN_ERR. The UD sender does not learn of it (success).
func testUDReceiveTooSmallForGRH(t *testing.T, f Fixture) {
	a, b, ah := postNewUD(t, f)
	b.MustPostRecv(t, b.Recv(1, 0, 40+100), b.Recv(2, 1024, 40+100-1))
	Fill(a.Buf[:100], 5)
	a.MustPostSend(t, postUDSend(a, ah, b, 10, 0, 100))
	postSendOK(t, a, b, 10, 1, 140)
	if !bytes.Equal(b.Buf[40:140], a.Buf[:100]) {
		t.Fatal("received data differs from the data sent")
	}
	a.MustPostSend(t, postUDSend(a, ah, b, 11, 0, 100))
	ExpectWC(t, Poll1(t, a.SendCQ), 11, verbs.WCSuccess, verbs.WCSend)
	wc := Poll1(t, b.RecvCQ)
	ExpectWC(t, wc, 2, verbs.WCLocLenErr, 0)
	if wc.QPNum != b.QP.Num() {
		t.Fatalf("receive %s: qp_num %#x, want %#x", Describe(wc), wc.QPNum, b.QP.Num())
	}
}

// IBA Q_Key rule: a datagram whose Q_Key does not match the destination
// QP's is silently dropped; it consumes no receive, and the sender's
// request completes successfully.
func testUDQKeyMismatchDropped(t *testing.T, f Fixture) {
	a, b, ah := postNewUD(t, f)
	b.MustPostRecv(t, b.Recv(1, 0, 256), b.Recv(2, 256, 256))
	wrong := postUDSend(a, ah, b, 10, 0, 50)
	wrong.RemoteQKey = postQKey ^ 0x0F0F_0F0F // bit 31 stays clear: not a controlled Q_Key
	a.MustPostSend(t, wrong)
	ExpectWC(t, Poll1(t, a.SendCQ), 10, verbs.WCSuccess, verbs.WCSend)

	Fill(a.Buf[:20], 6)
	a.MustPostSend(t, postUDSend(a, ah, b, 11, 0, 20))
	postSendOK(t, a, b, 11, 1, 40+20) // the first receive got the second datagram
	if !bytes.Equal(b.Buf[40:60], a.Buf[:20]) {
		t.Fatal("received data differs from the data sent")
	}
	if ids := postFlushRecv(t, b, 3); !slices.Equal(ids, []uint64{2, 3}) {
		t.Fatalf("receives left: %v, want [2 3]", ids)
	}
}

// UD is an unreliable service without RNR NAKs (those are RC's): a datagram that finds no posted receive is
// dropped; the sender completes successfully, the receiver gets nothing and
// stays in RTS, and a later receive and datagram work.
func testUDNoReceiveDropped(t *testing.T, f Fixture) {
	a, b, ah := postNewUD(t, f)
	a.MustPostSend(t, postUDSend(a, ah, b, 10, 0, 10))
	ExpectWC(t, Poll1(t, a.SendCQ), 10, verbs.WCSuccess, verbs.WCSend)
	ExpectEmpty(t, b.RecvCQ)
	if st := b.QP.State(); st != verbs.QPSRTS {
		t.Fatalf("receiver in %v after a dropped datagram, want RTS", st)
	}
	if st := a.QP.State(); st != verbs.QPSRTS {
		t.Fatalf("sender in %v after a dropped datagram, want RTS", st)
	}
	b.MustPostRecv(t, b.Recv(1, 0, 256))
	Fill(a.Buf[:20], 7)
	a.MustPostSend(t, postUDSend(a, ah, b, 11, 0, 20))
	postSendOK(t, a, b, 11, 1, 40+20)
	if !bytes.Equal(b.Buf[40:60], a.Buf[:20]) {
		t.Fatal("received data differs from the data sent")
	}
}

// IBA unreliable datagram service: a UD message is a single packet, at most
// the path (port) MTU; exactly the MTU is delivered, one byte more completes
// at the sender with IBV_WC_LOC_LEN_ERR and is not delivered.
func testUDSendLargerThanMTU(t *testing.T, f Fixture) {
	a, b, ah := postNewUD(t, f)
	port, err := a.Ctx.QueryPort(1)
	if err != nil {
		t.Fatalf("QueryPort: %v", err)
	}
	mtu := port.ActiveMTU.Bytes()
	if mtu == 0 || 2*(40+mtu+1) > len(b.Buf)-64 {
		t.Fatalf("active MTU %v", port.ActiveMTU)
	}
	Fill(a.Buf[:mtu+1], 8)
	b.MustPostRecv(t, b.Recv(1, 0, 40+mtu+1), b.Recv(2, 40+mtu+1, 40+mtu+1))
	a.MustPostSend(t, postUDSend(a, ah, b, 10, 0, mtu))
	postSendOK(t, a, b, 10, 1, 40+mtu)
	if !bytes.Equal(b.Buf[40:40+mtu], a.Buf[:mtu]) {
		t.Fatal("received data differs from the data sent")
	}

	a.MustPostSend(t, postUDSend(a, ah, b, 11, 0, mtu+1))
	ExpectWC(t, Poll1(t, a.SendCQ), 11, verbs.WCLocLenErr, 0)
	if ids := postFlushRecv(t, b, 3); !slices.Equal(ids, []uint64{2, 3}) {
		t.Fatalf("receives left: %v, want [2 3] (the oversized datagram must not be delivered)", ids)
	}
}
