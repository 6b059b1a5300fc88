package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/goverbs/goverbs/verbs"
)

// Completion queues, completion channels and notification: ibv_poll_cq(3),
// ibv_req_notify_cq(3), ibv_get_cq_event(3), ibv_ack_cq_events(3),
// ibv_create_comp_channel(3), and the IB spec's CQ rules (C11-..., 11.4.2).

func init() {
	register(
		Case{Name: "PollNeverBlocksAndReturnsZero", Run: testPollNeverBlocksAndReturnsZero},
		Case{Name: "PollPartial", Run: testPollPartial},
		Case{Name: "CompletionsInPostingOrder", Run: testCompletionsInPostingOrder},
		Case{Name: "UnsignaledSendsMakeNoCompletion", Run: testUnsignaledSendsMakeNoCompletion},
		Case{Name: "ReqNotifyAndGetEvent", Run: testReqNotifyAndGetEvent},
		Case{Name: "ReqNotifySolicitedOnly", Run: testReqNotifySolicitedOnly},
		Case{Name: "ReqNotifyWithoutChannel", Run: testReqNotifyWithoutChannel},
		Case{Name: "CompChannelCloseUnblocksGetEvent", Run: testCompChannelCloseUnblocksGetEvent},
		Case{Name: "WaitReturnsWhenCompletionArrives", Run: testWaitReturnsWhenCompletionArrives},
		Case{Name: "CQOverflowReported", Run: testCQOverflowReported},
		Case{Name: "SharedCQForSendAndRecv", Run: testSharedCQForSendAndRecv},
	)
}

// cqRig builds verbs objects on one context, for cases that need CQs with a
// channel, QPs sharing CQs or created with SQSigAll, which NewSide does not
// make. Everything it creates is destroyed, in reverse order, when the test
// ends (destroying an object earlier in the test is fine).
type cqRig struct {
	t   testing.TB
	Ctx *verbs.Context
	PD  *verbs.PD
	MR  *verbs.MR
	Buf []byte
}

// cqRigCap is the QP capability cqRig.qp uses when given a zero QPCap.
var cqRigCap = verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: 64}

func newCQRig(t testing.TB, ctx *verbs.Context, bufSize int) *cqRig {
	t.Helper()
	r := &cqRig{t: t, Ctx: ctx}
	var err error
	if r.PD, err = ctx.AllocPD(); err != nil {
		t.Fatalf("AllocPD: %v", err)
	}
	t.Cleanup(func() { r.PD.Dealloc() })
	r.Buf = make([]byte, bufSize)
	acc := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	if r.MR, err = r.PD.RegMR(r.Buf, acc); err != nil {
		t.Fatalf("RegMR: %v", err)
	}
	t.Cleanup(func() { r.MR.Dereg() })
	return r
}

func (r *cqRig) channel() *verbs.CompChannel {
	r.t.Helper()
	ch, err := r.Ctx.CreateCompChannel()
	if err != nil {
		r.t.Fatalf("CreateCompChannel: %v", err)
	}
	r.t.Cleanup(func() { ch.Close() })
	return ch
}

func (r *cqRig) cq(cqe int, ch *verbs.CompChannel) *verbs.CQ {
	r.t.Helper()
	cq, err := r.Ctx.CreateCQ(cqe, ch)
	if err != nil {
		r.t.Fatalf("CreateCQ(%d): %v", cqe, err)
	}
	r.t.Cleanup(func() { cq.Destroy() })
	return cq
}

func (r *cqRig) qp(scq, rcq *verbs.CQ, c verbs.QPCap, sigAll bool) *verbs.QP {
	r.t.Helper()
	if c == (verbs.QPCap{}) {
		c = cqRigCap
	}
	q, err := r.PD.CreateQP(verbs.QPInitAttr{SendCQ: scq, RecvCQ: rcq, QPType: verbs.QPTRC, Cap: c, SQSigAll: sigAll})
	if err != nil {
		r.t.Fatalf("CreateQP: %v", err)
	}
	r.t.Cleanup(func() { q.Destroy() })
	return q
}

// side wraps q and the rig's buffer as a Side, for the Side helpers. The
// Side's Close must not be called: the rig destroys the objects.
func (r *cqRig) side(q *verbs.QP) *Side {
	return &Side{Ctx: r.Ctx, PD: r.PD, SendCQ: q.SendCQ(), RecvCQ: q.RecvCQ(), QP: q, Buf: r.Buf, MR: r.MR}
}

func cqConnect(t testing.TB, f Fixture, a, b *verbs.QP) {
	t.Helper()
	if err := f.Connect(t, a, b, DefaultRC); err != nil {
		t.Fatalf("Connect: %v", err)
	}
}

// cqWrite is a signaled RDMA WRITE of n bytes from off of s's buffer to off of d's.
func cqWrite(s *Side, wrid uint64, d *Side, off, n int) verbs.SendWR {
	return verbs.SendWR{WRID: wrid, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{s.MR.SGE(off, n)}, RemoteAddr: d.MR.RemoteAddr(off), RKey: d.MR.RKey()}
}

// expectNoEvent checks that ch delivers no event within a short time.
func expectNoEvent(t testing.TB, ch *verbs.CompChannel, why string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	cq, err := ch.GetEvent(ctx)
	if err == nil {
		ch.AckEvents(cq, 1)
		t.Fatalf("%s: got a completion event, want none", why)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%s: GetEvent: %v, want context.DeadlineExceeded", why, err)
	}
}

// getEvent waits for the next event of ch and checks it names cq.
func getEvent(t testing.TB, ch *verbs.CompChannel, cq *verbs.CQ) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), WaitTimeout)
	defer cancel()
	got, err := ch.GetEvent(ctx)
	if err != nil {
		t.Fatalf("GetEvent: %v", err)
	}
	if got != cq {
		t.Fatalf("GetEvent returned another CQ (%p, want %p)", got, cq)
	}
}

// ibv_poll_cq(3): polling an empty CQ returns 0 at once; it never waits.
func testPollNeverBlocksAndReturnsZero(t *testing.T, f Fixture) {
	a, b := NewPair(t, f, PairOpts{})
	done := make(chan error, 1)
	go func() {
		var wc [8]verbs.WC
		for range 1000 {
			n, err := a.SendCQ.Poll(wc[:])
			if err != nil || n != 0 {
				done <- errors.Join(err, errors.New("an empty CQ returned completions"))
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(WaitTimeout):
		t.Fatal("Poll on an empty CQ blocked")
	}
	// Drained, the CQ is empty again; a zero-length slice takes nothing.
	a.MustPostSend(t, cqWrite(a, 1, b, 0, 8))
	if n, err := a.SendCQ.Poll(nil); n != 0 || err != nil {
		t.Fatalf("Poll(nil) = %d, %v; want 0, nil", n, err)
	}
	ExpectWC(t, Poll1(t, a.SendCQ), 1, verbs.WCSuccess, verbs.WCRDMAWrite)
	ExpectEmpty(t, a.SendCQ)
}

// ibv_poll_cq(3): at most num_entries completions are returned, oldest first;
// the rest stay in the CQ for the next poll, and entries beyond the count
// returned are not written.
func testPollPartial(t *testing.T, f Fixture) {
	// Five completions that are all in the CQ at once whatever the
	// provider's timing: receives flushed by the move to ERR, which
	// completes them before Modify returns.
	_, b := NewPair(t, f, PairOpts{})
	for i := range 5 {
		b.MustPostRecv(t, b.Recv(uint64(100+i), i*16, 16))
	}
	if err := b.QP.Modify(&verbs.QPAttr{QPState: verbs.QPSErr}, verbs.QPAttrState); err != nil {
		t.Fatalf("Modify to ERR: %v", err)
	}
	want := []int{2, 2, 1}
	next := uint64(100)
	for i := range want {
		wc := make([]verbs.WC, 3) // the third entry is a sentinel Poll must not touch
		wc[2].WRID = 0xdead
		n, err := b.RecvCQ.Poll(wc[:2])
		if err != nil {
			t.Fatalf("Poll: %v", err)
		}
		if n != want[i] {
			t.Fatalf("poll %d returned %d completions, want %d", i, n, want[i])
		}
		for _, c := range wc[:n] {
			ExpectWC(t, c, next, verbs.WCWRFlushErr, 0)
			next++
		}
		if n < 2 && wc[1] != (verbs.WC{}) {
			t.Fatalf("Poll returned %d but wrote entry 1: %+v", n, wc[1])
		}
		if wc[2].WRID != 0xdead {
			t.Fatal("Poll wrote beyond the slice it was given")
		}
	}
	ExpectEmpty(t, b.RecvCQ)
}

// IB spec 10.8.6 (C10-...): on an RC send queue, work completions are
// returned in the order the work requests were posted, whatever their
// opcodes.
func testCompletionsInPostingOrder(t *testing.T, f Fixture) {
	// 21 requests, so that the last is an RDMA READ: its completion shows
	// that every write before it has been placed (on iWARP a write's own
	// completion only means the bytes were handed to TCP).
	const n = 21
	a, b := NewPair(t, f, PairOpts{Cap: verbs.QPCap{MaxSendWR: 32, MaxRecvWR: 32, MaxSendSGE: 1, MaxRecvSGE: 1}})
	Fill(a.Buf[:n*64], 5)
	Fill(b.Buf[32<<10:32<<10+n*64], 6)
	var wrs []verbs.SendWR
	var ops []verbs.WCOpcode
	var recvs []uint64
	for i := range n {
		off := i * 64
		switch i % 3 {
		case 0:
			b.MustPostRecv(t, b.Recv(uint64(1000+i), 16<<10+off, 64))
			recvs = append(recvs, uint64(1000+i))
			wrs = append(wrs, a.Send(uint64(i), off, 64))
			ops = append(ops, verbs.WCSend)
		case 1:
			wrs = append(wrs, cqWrite(a, uint64(i), b, off, 64))
			ops = append(ops, verbs.WCRDMAWrite)
		case 2:
			wrs = append(wrs, verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
				SGList: []verbs.SGE{a.MR.SGE(32<<10+off, 64)}, RemoteAddr: b.MR.RemoteAddr(32<<10 + off), RKey: b.MR.RKey()})
			ops = append(ops, verbs.WCRDMARead)
		}
	}
	a.MustPostSend(t, wrs...)
	for i, wc := range PollN(t, a.SendCQ, n) {
		ExpectWC(t, wc, uint64(i), verbs.WCSuccess, ops[i])
		if ops[i] == verbs.WCRDMARead && wc.ByteLen != 64 {
			t.Fatalf("RDMA READ completion %s: byte_len %d, want 64", Describe(wc), wc.ByteLen)
		}
	}
	ExpectEmpty(t, a.SendCQ)
	for i, wc := range PollN(t, b.RecvCQ, len(recvs)) {
		ExpectWC(t, wc, recvs[i], verbs.WCSuccess, verbs.WCRecv)
	}
	for i := range n {
		off := i * 64
		var got, want []byte
		switch i % 3 {
		case 0:
			got, want = b.Buf[16<<10+off:16<<10+off+64], a.Buf[off:off+64]
		case 1:
			got, want = b.Buf[off:off+64], a.Buf[off:off+64]
		case 2:
			got, want = a.Buf[32<<10+off:32<<10+off+64], b.Buf[32<<10+off:32<<10+off+64]
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("work request %d (%v): data differs", i, ops[i])
		}
	}
}

// ibv_post_send(3) IBV_SEND_SIGNALED, ibv_create_qp(3) sq_sig_all: a
// successful work request without the signaled flag produces no completion
// on a QP created without sq_sig_all (its effects still happen, and the
// receiver's completion is still produced); with sq_sig_all every request
// completes.
func testUnsignaledSendsMakeNoCompletion(t *testing.T, f Fixture) {
	a, b := NewPair(t, f, PairOpts{})
	Fill(a.Buf[:256], 7)
	w := cqWrite(a, 1, b, 0, 128)
	w.Flags = 0
	s := a.Send(2, 128, 128)
	s.Flags = 0
	b.MustPostRecv(t, b.Recv(20, 4096, 128))
	a.MustPostSend(t, w, s, cqWrite(a, 3, b, 1024, 8))
	ExpectWC(t, Poll1(t, a.SendCQ), 3, verbs.WCSuccess, verbs.WCRDMAWrite)
	ExpectEmpty(t, a.SendCQ)
	ExpectWC(t, Poll1(t, b.RecvCQ), 20, verbs.WCSuccess, verbs.WCRecv)
	if !bytes.Equal(b.Buf[:128], a.Buf[:128]) || !bytes.Equal(b.Buf[4096:4096+128], a.Buf[128:256]) {
		t.Fatal("unsignaled requests did not transfer their data")
	}

	// The same requests on a QP created with sq_sig_all.
	ca, cb := f.Open(t)
	ra, rb := newCQRig(t, ca, 64<<10), newCQRig(t, cb, 64<<10)
	qa := ra.qp(ra.cq(64, nil), ra.cq(64, nil), verbs.QPCap{}, true)
	qb := rb.qp(rb.cq(64, nil), rb.cq(64, nil), verbs.QPCap{}, false)
	cqConnect(t, f, qa, qb)
	sa, sb := ra.side(qa), rb.side(qb)
	w = cqWrite(sa, 1, sb, 0, 128)
	w.Flags = 0
	s = sa.Send(2, 128, 128)
	s.Flags = 0
	sb.MustPostRecv(t, sb.Recv(20, 4096, 128))
	sa.MustPostSend(t, w, s)
	wcs := PollN(t, sa.SendCQ, 2)
	ExpectWC(t, wcs[0], 1, verbs.WCSuccess, verbs.WCRDMAWrite)
	ExpectWC(t, wcs[1], 2, verbs.WCSuccess, verbs.WCSend)
	ExpectEmpty(t, sa.SendCQ)
	ExpectWC(t, Poll1(t, sb.RecvCQ), 20, verbs.WCSuccess, verbs.WCRecv)
}

// ibv_req_notify_cq(3), ibv_get_cq_event(3), ibv_ack_cq_events(3): an armed
// CQ adds one event to its channel for the next completion and is then
// disarmed (no event without re-arming); GetEvent returns the CQ; a CQ
// cannot be destroyed while events obtained from the channel are not
// acknowledged.
func testReqNotifyAndGetEvent(t *testing.T, f Fixture) {
	ca, cb := f.Open(t)
	ra, rb := newCQRig(t, ca, 64<<10), newCQRig(t, cb, 64<<10)
	ch := ra.channel()
	scq := ra.cq(64, ch)
	if scq.Channel() != ch {
		t.Fatal("CQ.Channel does not return the channel it was created with")
	}
	qa := ra.qp(scq, ra.cq(64, nil), verbs.QPCap{}, false)
	qb := rb.qp(rb.cq(64, nil), rb.cq(64, nil), verbs.QPCap{}, false)
	cqConnect(t, f, qa, qb)
	sa, sb := ra.side(qa), rb.side(qb)

	// Not armed: a completion makes no event.
	sa.MustPostSend(t, cqWrite(sa, 1, sb, 0, 8))
	ExpectWC(t, Poll1(t, scq), 1, verbs.WCSuccess, verbs.WCRDMAWrite)
	expectNoEvent(t, ch, "completion on an unarmed CQ")

	// Armed: exactly one event.
	if err := scq.ReqNotify(false); err != nil {
		t.Fatalf("ReqNotify: %v", err)
	}
	sa.MustPostSend(t, cqWrite(sa, 2, sb, 0, 8))
	getEvent(t, ch, scq)
	ExpectWC(t, Poll1(t, scq), 2, verbs.WCSuccess, verbs.WCRDMAWrite)
	expectNoEvent(t, ch, "a second event for one arming")

	// The arming was used up: another completion makes no event.
	sa.MustPostSend(t, cqWrite(sa, 3, sb, 0, 8))
	ExpectWC(t, Poll1(t, scq), 3, verbs.WCSuccess, verbs.WCRDMAWrite)
	expectNoEvent(t, ch, "completion after the event, without re-arming")

	// Re-armed: an event again.
	if err := scq.ReqNotify(false); err != nil {
		t.Fatalf("ReqNotify: %v", err)
	}
	sa.MustPostSend(t, cqWrite(sa, 4, sb, 0, 8))
	getEvent(t, ch, scq)
	ExpectWC(t, Poll1(t, scq), 4, verbs.WCSuccess, verbs.WCRDMAWrite)

	// Two events are unacknowledged: the CQ (no longer used by a QP) cannot be destroyed.
	if err := qa.Destroy(); err != nil {
		t.Fatalf("QP Destroy: %v", err)
	}
	if err := scq.Destroy(); !errors.Is(err, verbs.ErrBusy) {
		t.Fatalf("CQ Destroy with 2 unacknowledged events: %v, want ErrBusy", err)
	}
	ch.AckEvents(scq, 1)
	if err := scq.Destroy(); !errors.Is(err, verbs.ErrBusy) {
		t.Fatalf("CQ Destroy with 1 unacknowledged event: %v, want ErrBusy", err)
	}
	ch.AckEvents(scq, 1)
	if err := scq.Destroy(); err != nil {
		t.Fatalf("CQ Destroy after AckEvents: %v", err)
	}
	if err := ch.Close(); err != nil {
		t.Fatalf("channel Close after its CQ was destroyed: %v", err)
	}
}

// ibv_req_notify_cq(3) solicited_only, IB spec 11.4.2.2: armed for solicited
// completions only, the CQ raises an event for a receive completion of a
// message sent with the solicited flag, or for an unsuccessful completion,
// and not for an ordinary receive completion (which leaves the arming in place).
func testReqNotifySolicitedOnly(t *testing.T, f Fixture) {
	ca, cb := f.Open(t)
	ra, rb := newCQRig(t, ca, 64<<10), newCQRig(t, cb, 64<<10)
	ch := rb.channel()
	rcq := rb.cq(64, ch)
	qa := ra.qp(ra.cq(64, nil), ra.cq(64, nil), verbs.QPCap{}, false)
	qb := rb.qp(rb.cq(64, nil), rcq, verbs.QPCap{}, false)
	cqConnect(t, f, qa, qb)
	sa, sb := ra.side(qa), rb.side(qb)
	sb.MustPostRecv(t, sb.Recv(1, 0, 64), sb.Recv(2, 64, 64))

	if err := rcq.ReqNotify(true); err != nil {
		t.Fatalf("ReqNotify(solicited): %v", err)
	}
	sa.MustPostSend(t, sa.Send(10, 0, 16))
	ExpectWC(t, Poll1(t, sa.SendCQ), 10, verbs.WCSuccess, verbs.WCSend)
	ExpectWC(t, Poll1(t, rcq), 1, verbs.WCSuccess, verbs.WCRecv)
	expectNoEvent(t, ch, "unsolicited receive on a CQ armed for solicited completions")

	sol := sa.Send(11, 0, 16)
	sol.Flags |= verbs.SendSolicited
	sa.MustPostSend(t, sol)
	getEvent(t, ch, rcq)
	ch.AckEvents(rcq, 1)
	ExpectWC(t, Poll1(t, sa.SendCQ), 11, verbs.WCSuccess, verbs.WCSend)
	ExpectWC(t, Poll1(t, rcq), 2, verbs.WCSuccess, verbs.WCRecv)
	expectNoEvent(t, ch, "after the solicited event")

	// An unsuccessful completion (a receive flushed by the QP's move to ERR) raises it too.
	if err := rcq.ReqNotify(true); err != nil {
		t.Fatalf("ReqNotify(solicited): %v", err)
	}
	sb.MustPostRecv(t, sb.Recv(3, 128, 64))
	if err := qb.Modify(&verbs.QPAttr{QPState: verbs.QPSErr}, verbs.QPAttrState); err != nil {
		t.Fatalf("Modify to ERR: %v", err)
	}
	getEvent(t, ch, rcq)
	ch.AckEvents(rcq, 1)
	ExpectWC(t, Poll1(t, rcq), 3, verbs.WCWRFlushErr, verbs.WCRecv)
}

// ibv_req_notify_cq(3): a CQ created without a completion channel cannot be armed (EINVAL).
func testReqNotifyWithoutChannel(t *testing.T, f Fixture) {
	ca, _ := f.Open(t)
	r := newCQRig(t, ca, 4096)
	cq := r.cq(16, nil)
	for _, sol := range []bool{false, true} {
		if err := cq.ReqNotify(sol); !errors.Is(err, verbs.ErrInvalid) {
			t.Fatalf("ReqNotify(%v) on a CQ without a channel: %v, want ErrInvalid", sol, err)
		}
	}
}

// ibv_destroy_comp_channel(3): a channel still used by a CQ cannot be
// destroyed (EBUSY); once it is, a GetEvent blocked on it returns ErrClosed,
// and so does every later GetEvent.
func testCompChannelCloseUnblocksGetEvent(t *testing.T, f Fixture) {
	ca, _ := f.Open(t)
	ch, err := ca.CreateCompChannel()
	if err != nil {
		t.Fatalf("CreateCompChannel: %v", err)
	}
	cq, err := ca.CreateCQ(4, ch)
	if err != nil {
		t.Fatalf("CreateCQ: %v", err)
	}
	if err := ch.Close(); !errors.Is(err, verbs.ErrBusy) {
		t.Fatalf("Close of a channel used by a CQ: %v, want ErrBusy", err)
	}
	if err := cq.Destroy(); err != nil {
		t.Fatalf("CQ Destroy: %v", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), WaitTimeout)
	defer cancel()
	res := make(chan error, 1)
	go func() {
		_, err := ch.GetEvent(ctx)
		res <- err
	}()
	time.Sleep(20 * time.Millisecond) // let GetEvent block (the result is the same if it has not yet)
	select {
	case err := <-res:
		t.Fatalf("GetEvent returned before Close: %v", err)
	default:
	}
	if err := ch.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case err := <-res:
		if !errors.Is(err, verbs.ErrClosed) {
			t.Fatalf("blocked GetEvent after Close: %v, want ErrClosed", err)
		}
	case <-time.After(WaitTimeout):
		t.Fatal("Close did not release a blocked GetEvent")
	}
	if _, err := ch.GetEvent(ctx); !errors.Is(err, verbs.ErrClosed) {
		t.Fatalf("GetEvent on a closed channel: %v, want ErrClosed", err)
	}
}

// CQ.Wait (the Go counterpart of arming plus ibv_get_cq_event): it returns
// once the CQ holds a completion, produced by another goroutine, at once when
// one is already there, and with the context's error when the context ends
// first on an empty CQ.
func testWaitReturnsWhenCompletionArrives(t *testing.T, f Fixture) {
	a, b := NewPair(t, f, PairOpts{})
	ctx, cancel := context.WithTimeout(context.Background(), WaitTimeout)
	defer cancel()
	res := make(chan error, 1)
	go func() { res <- a.SendCQ.Wait(ctx) }()
	time.Sleep(10 * time.Millisecond) // let Wait block (the result is the same if it has not yet)
	select {
	case err := <-res:
		t.Fatalf("Wait returned on an empty CQ: %v", err)
	default:
	}
	a.MustPostSend(t, cqWrite(a, 1, b, 0, 8))
	select {
	case err := <-res:
		if err != nil {
			t.Fatalf("Wait: %v", err)
		}
	case <-time.After(WaitTimeout):
		t.Fatal("Wait did not return after a completion arrived")
	}
	// Wait takes nothing: the completion is still there for Poll, and a
	// second Wait returns at once.
	if err := a.SendCQ.Wait(ctx); err != nil {
		t.Fatalf("Wait with a completion present: %v", err)
	}
	ExpectWC(t, Poll1(t, a.SendCQ), 1, verbs.WCSuccess, verbs.WCRDMAWrite)

	short, cancel2 := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel2()
	if err := a.SendCQ.Wait(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait on an empty CQ past its deadline: %v, want context.DeadlineExceeded", err)
	}
	done, cancel3 := context.WithCancel(context.Background())
	cancel3()
	if err := a.SendCQ.Wait(done); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait on an empty CQ with a cancelled context: %v, want context.Canceled", err)
	}
}

// ibv_create_cq(3), IB spec 11.4.2.1 / ibv_get_async_event(3)
// IBV_EVENT_CQ_ERR: a completion added to a full CQ overflows it; the
// overflow is reported as an asynchronous CQ error naming the CQ, and Poll
// returns the completions the CQ held and then ErrCQOverflow.
func testCQOverflowReported(t *testing.T, f Fixture) {
	a, b := NewPair(t, f, PairOpts{CQE: 4, Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	cqe := a.SendCQ.CQE()
	if cqe < 4 {
		t.Fatalf("CQE() = %d for a CQ created with 4 entries", cqe)
	}
	if cqe+1 > 64 {
		t.Skipf("the provider rounded a 4-entry CQ up to %d entries", cqe)
	}
	for i := range cqe + 1 {
		a.MustPostSend(t, cqWrite(a, uint64(i+1), b, i*8, 8))
	}
	deadline := time.Now().Add(WaitTimeout)
	for {
		ev := NextEvent(t, a.Ctx)
		if ev.Type == verbs.EventCQErr && ev.CQ == a.SendCQ {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no EventCQErr for the overflowed CQ")
		}
		t.Logf("event %v", ev)
	}
	wc := make([]verbs.WC, cqe+1)
	n, err := a.SendCQ.Poll(wc)
	if err != nil || n != cqe {
		t.Fatalf("Poll of an overflowed CQ = %d, %v; want the %d completions it held", n, err, cqe)
	}
	for i, c := range wc[:n] {
		ExpectWC(t, c, uint64(i+1), verbs.WCSuccess, verbs.WCRDMAWrite)
	}
	if n, err := a.SendCQ.Poll(wc); !errors.Is(err, verbs.ErrCQOverflow) || n != 0 {
		t.Fatalf("Poll of a drained overflowed CQ = %d, %v; want 0, ErrCQOverflow", n, err)
	}
}

// ibv_create_qp(3): send_cq and recv_cq may be the same CQ, and one CQ may
// serve several QPs; ibv_poll_cq(3) qp_num tells which QP a completion
// belongs to, and the opcode which queue.
func testSharedCQForSendAndRecv(t *testing.T, f Fixture) {
	ca, _ := f.Open(t)
	r := newCQRig(t, ca, 64<<10)
	cq := r.cq(64, nil)
	q1 := r.qp(cq, cq, verbs.QPCap{}, false)
	q2 := r.qp(cq, cq, verbs.QPCap{}, false)
	cqConnect(t, f, q1, q2)
	s1, s2 := r.side(q1), r.side(q2)
	Fill(r.Buf[:64], 1)
	Fill(r.Buf[64:128], 2)
	s1.MustPostRecv(t, s1.Recv(0x11, 1024, 64))
	s2.MustPostRecv(t, s2.Recv(0x21, 2048, 64))
	s1.MustPostSend(t, s1.Send(0x12, 0, 64))
	s2.MustPostSend(t, s2.Send(0x22, 64, 64))

	type key struct {
		qpn uint32
		op  verbs.WCOpcode
	}
	got := map[key]uint64{}
	for _, wc := range PollN(t, cq, 4) {
		if wc.Status != verbs.WCSuccess {
			t.Fatalf("completion %s", Describe(wc))
		}
		k := key{wc.QPNum, wc.Opcode}
		if _, dup := got[k]; dup {
			t.Fatalf("two %v completions for QP %#x", wc.Opcode, wc.QPNum)
		}
		got[k] = wc.WRID
	}
	want := map[key]uint64{
		{q1.Num(), verbs.WCSend}: 0x12, {q1.Num(), verbs.WCRecv}: 0x11,
		{q2.Num(), verbs.WCSend}: 0x22, {q2.Num(), verbs.WCRecv}: 0x21,
	}
	for k, w := range want {
		if got[k] != w {
			t.Fatalf("QP %#x %v completion: wr_id %#x, want %#x (all: %v)", k.qpn, k.op, got[k], w, got)
		}
	}
	ExpectEmpty(t, cq)
	if !bytes.Equal(r.Buf[2048:2048+64], r.Buf[:64]) || !bytes.Equal(r.Buf[1024:1024+64], r.Buf[64:128]) {
		t.Fatal("received data differs")
	}
}

func init() {
	register(Case{Name: "NoLostWakeup", Run: testNoLostWakeup})
}

// The C sequence of a blocking wait (arm, poll, then wait for the event)
// never sleeps through a completion, however the completion races with
// the arming: a ping-pong whose two sides wait so, with no spinning, runs
// to the end. A lost wakeup leaves a side waiting for an event that does
// not come.
func testNoLostWakeup(t *testing.T, f Fixture) {
	ca, cb := f.Open(t)
	ra, rb := newCQRig(t, ca, 64<<10), newCQRig(t, cb, 64<<10)
	cha, chb := ra.channel(), rb.channel()
	qa := ra.qp(ra.cq(64, nil), ra.cq(64, cha), verbs.QPCap{}, false)
	qb := rb.qp(rb.cq(64, nil), rb.cq(64, chb), verbs.QPCap{}, false)
	cqConnect(t, f, qa, qb)
	sa, sb := ra.side(qa), rb.side(qb)
	const rounds = 3000
	// wait takes the next receive completion the blocking way.
	wait := func(s *Side, ch *verbs.CompChannel) error {
		var wc [1]verbs.WC
		for {
			if n, err := s.RecvCQ.Poll(wc[:]); err != nil || n == 1 {
				if err == nil && wc[0].Status != verbs.WCSuccess {
					return fmt.Errorf("%s", Describe(wc[0]))
				}
				return err
			}
			if err := s.RecvCQ.ReqNotify(false); err != nil {
				return err
			}
			if n, err := s.RecvCQ.Poll(wc[:]); err != nil || n == 1 {
				return err
			}
			ctx, cancel := context.WithTimeout(context.Background(), WaitTimeout)
			cq, err := ch.GetEvent(ctx)
			cancel()
			if err != nil {
				return fmt.Errorf("no event for a completion (lost wakeup): %w", err)
			}
			ch.AckEvents(cq, 1)
		}
	}
	errc := make(chan error, 1)
	// Each side posts its next receive before it sends: iWARP has no RNR.
	sb.MustPostRecv(t, sb.Recv(0, 0, 64))
	go func() {
		for i := range rounds {
			if err := wait(sb, chb); err != nil {
				errc <- fmt.Errorf("round %d, b: %w", i, err)
				return
			}
			if err := sb.QP.PostRecv([]verbs.RecvWR{sb.Recv(uint64(i+1), 0, 64)}); err != nil {
				errc <- err
				return
			}
			if err := sb.QP.PostSend([]verbs.SendWR{{WRID: uint64(i), Opcode: verbs.WRSend, SGList: []verbs.SGE{sb.MR.SGE(0, 8)}}}); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	for i := range rounds {
		sa.MustPostRecv(t, sa.Recv(uint64(i), 0, 64))
		if err := sa.QP.PostSend([]verbs.SendWR{{WRID: uint64(i), Opcode: verbs.WRSend, SGList: []verbs.SGE{sa.MR.SGE(0, 8)}}}); err != nil {
			t.Fatal(err)
		}
		if err := wait(sa, cha); err != nil {
			t.Fatalf("round %d, a: %v", i, err)
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}
