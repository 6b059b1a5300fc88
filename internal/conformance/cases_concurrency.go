package conformance

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goverbs/goverbs/verbs"
)

// Concurrency: verbs objects are thread-safe (libibverbs: "all verbs are
// thread safe"; ibv_post_send(3), ibv_poll_cq(3) may be called from several
// threads on one QP or CQ). These cases are meant to run under -race.

func init() {
	register(
		Case{Name: "ConcurrentPostersOnePoller", Run: testConcurrentPostersOnePoller},
		Case{Name: "ConcurrentPollers", Run: testConcurrentPollers},
		Case{Name: "ManyQPsSharedCQ", Run: testManyQPsSharedCQ},
		Case{Name: "CloseWhileBlocked", Run: testCloseWhileBlocked},
	)
}

// progressGuard fails a test that makes no progress for WaitTimeout (a hang
// guard, not a performance assertion).
type progressGuard struct{ last time.Time }

func (g *progressGuard) check(t testing.TB, progressed bool, what func() string) {
	t.Helper()
	now := time.Now()
	if progressed || g.last.IsZero() {
		g.last = now
		return
	}
	if now.Sub(g.last) > WaitTimeout {
		t.Fatalf("no progress for %v: %s", WaitTimeout, what())
	}
	runtime.Gosched()
}

// putMsg and getMsg encode the 8-byte message (sender id, sequence number).
func putMsg(b []byte, id, seq int) {
	binary.LittleEndian.PutUint32(b, uint32(id))
	binary.LittleEndian.PutUint32(b[4:], uint32(seq))
}

func getMsg(b []byte) (id, seq int) {
	return int(binary.LittleEndian.Uint32(b)), int(binary.LittleEndian.Uint32(b[4:]))
}

// libibverbs threading rules, ibv_post_send(3), IB spec 10.8.3 (RC ordering):
// several goroutines may post to one QP at once; each request is executed
// exactly once, the messages of each poster arrive in its posting order, and
// a full send queue is reported as ErrQueueFull (flow control), not lost work.
func testConcurrentPostersOnePoller(t *testing.T, f Fixture) {
	const posters, perPoster, depth = 4, 500, 64
	const total = posters * perPoster
	// Without RNR (iWARP) a send that finds no receive is fatal, so every
	// receive is posted up front; with RNR the receiver tops up as it goes.
	recvDepth := depth
	if !f.Caps().RNR {
		recvDepth = total
	}
	ca, cb := f.Open(t)
	ra, rb := newCQRig(t, ca, total*8), newCQRig(t, cb, recvDepth*8)
	c := verbs.QPCap{MaxSendWR: depth, MaxRecvWR: recvDepth, MaxSendSGE: 1, MaxRecvSGE: 1}
	qa := ra.qp(ra.cq(256, nil), ra.cq(16, nil), c, false)
	qb := rb.qp(rb.cq(16, nil), rb.cq(max(256, recvDepth), nil), c, false) // room for every receive that may complete unpolled
	cqConnect(t, f, qa, qb)
	for posted := 0; !f.Caps().RNR && posted < total; posted++ {
		rwr := []verbs.RecvWR{{WRID: uint64(posted), SGList: []verbs.SGE{rb.MR.SGE(posted*8, 8)}}}
		if err := qb.PostRecv(rwr); err != nil {
			t.Fatalf("PostRecv %d: %v", posted, err)
		}
	}
	scq, rcq := qa.SendCQ(), qb.RecvCQ()
	// Every message has its own source bytes, so none is reused before its completion.
	for i := range total {
		putMsg(ra.Buf[i*8:], i/perPoster, i%perPoster)
	}

	// Send completions not yet polled are bounded by the send CQ's size, as
	// an application must bound them to avoid a CQ overflow.
	limit := int64(scq.CQE())
	var inflight, queueFull atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	errc := make(chan error, posters)
	defer func() {
		stop.Store(true)
		wg.Wait()
	}()
	for g := range posters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wr := []verbs.SendWR{{Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: make([]verbs.SGE, 1)}}
			for seq := 0; seq < perPoster && !stop.Load(); {
				if inflight.Add(1) > limit {
					inflight.Add(-1)
					runtime.Gosched()
					continue
				}
				wr[0].WRID = uint64(g)<<32 | uint64(seq)
				wr[0].SGList[0] = ra.MR.SGE((g*perPoster+seq)*8, 8)
				err := qa.PostSend(wr)
				if err == nil {
					seq++
					continue
				}
				inflight.Add(-1)
				if errors.Is(err, verbs.ErrQueueFull) {
					queueFull.Add(1)
					runtime.Gosched()
					continue
				}
				errc <- fmt.Errorf("poster %d, message %d: %w", g, seq, err)
				stop.Store(true)
				return
			}
		}()
	}

	// This goroutine keeps the receive queue topped up and polls both CQs.
	var nextRecv, nextSend [posters]int
	posted, received, sent := 0, 0, 0
	if !f.Caps().RNR {
		posted = total
	}
	wc := make([]verbs.WC, 16)
	rwr := []verbs.RecvWR{{SGList: make([]verbs.SGE, 1)}}
	var guard progressGuard
	for received < total || sent < total {
		select {
		case err := <-errc:
			t.Fatal(err)
		default:
		}
		progressed := false
		for posted-received < recvDepth && posted < total {
			rwr[0].WRID = uint64(posted)
			rwr[0].SGList[0] = rb.MR.SGE(posted%recvDepth*8, 8)
			if err := qb.PostRecv(rwr); err != nil {
				t.Fatalf("PostRecv %d: %v", posted, err)
			}
			posted++
			progressed = true
		}
		n, err := rcq.Poll(wc)
		if err != nil {
			t.Fatalf("Poll receive CQ: %v", err)
		}
		for _, w := range wc[:n] {
			// Receives complete in the order they were posted; wr_id is the posting index.
			ExpectWC(t, w, uint64(received), verbs.WCSuccess, verbs.WCRecv)
			if w.ByteLen != 8 {
				t.Fatalf("receive %s: byte_len %d, want 8", Describe(w), w.ByteLen)
			}
			g, seq := getMsg(rb.Buf[int(w.WRID)%recvDepth*8:])
			if g >= posters || seq != nextRecv[g] {
				t.Fatalf("receive %d holds message %d of poster %d; want poster %d's next to be %d",
					received, seq, g, g, nextRecv[min(g, posters-1)])
			}
			nextRecv[g]++
			received++
		}
		progressed = progressed || n > 0
		n, err = scq.Poll(wc)
		if err != nil {
			t.Fatalf("Poll send CQ: %v", err)
		}
		for _, w := range wc[:n] {
			g, seq := int(w.WRID>>32), int(uint32(w.WRID))
			if w.Status != verbs.WCSuccess || w.Opcode != verbs.WCSend || g >= posters || seq != nextSend[g] {
				t.Fatalf("send completion %s: want a successful SEND, poster %d's next (%v)", Describe(w), g, nextSend)
			}
			nextSend[g]++
			sent++
		}
		inflight.Add(-int64(n))
		progressed = progressed || n > 0
		guard.check(t, progressed, func() string {
			return fmt.Sprintf("%d of %d received, %d send completions, %d receives posted", received, total, sent, posted)
		})
	}
	stop.Store(true)
	wg.Wait()
	select {
	case err := <-errc:
		t.Fatal(err)
	default:
	}
	for g := range posters {
		if nextRecv[g] != perPoster || nextSend[g] != perPoster {
			t.Fatalf("poster %d: %d messages received, %d send completions; want %d", g, nextRecv[g], nextSend[g], perPoster)
		}
	}
	ExpectEmpty(t, scq)
	ExpectEmpty(t, rcq)
	t.Logf("%d posts refused with ErrQueueFull and retried", queueFull.Load())
}

// ibv_poll_cq(3) from several threads: each completion is returned to
// exactly one poller, and each poller sees completions in CQ order.
func testConcurrentPollers(t *testing.T, f Fixture) {
	const total, pollers = 2000, 2
	ca, cb := f.Open(t)
	ra, rb := newCQRig(t, ca, 4096), newCQRig(t, cb, 4096)
	c := verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}
	qa := ra.qp(ra.cq(128, nil), ra.cq(4, nil), c, false)
	qb := rb.qp(rb.cq(4, nil), rb.cq(4, nil), c, false)
	cqConnect(t, f, qa, qb)
	sa, sb := ra.side(qa), rb.side(qb)
	cq := qa.SendCQ()
	limit := int64(cq.CQE())

	var inflight, taken atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	errc := make(chan error, pollers+1)
	got := make([][]uint64, pollers)
	fail := func(err error) {
		select {
		case errc <- err:
		default:
		}
		stop.Store(true)
	}
	wg.Add(1 + pollers)
	go func() { // producer: signaled RDMA WRITEs, wr_id = posting index
		defer wg.Done()
		wr := []verbs.SendWR{cqWrite(sa, 0, sb, 0, 8)}
		for i := 0; i < total && !stop.Load(); {
			if inflight.Add(1) > limit {
				inflight.Add(-1)
				runtime.Gosched()
				continue
			}
			wr[0].WRID = uint64(i)
			err := qa.PostSend(wr)
			if err == nil {
				i++
				continue
			}
			inflight.Add(-1)
			if !errors.Is(err, verbs.ErrQueueFull) {
				fail(fmt.Errorf("PostSend %d: %w", i, err))
				return
			}
			runtime.Gosched()
		}
	}()
	for p := range pollers {
		go func() {
			defer wg.Done()
			wc := make([]verbs.WC, 3)
			for taken.Load() < total && !stop.Load() {
				n, err := cq.Poll(wc)
				if err != nil {
					fail(fmt.Errorf("poller %d: Poll: %w", p, err))
					return
				}
				for _, w := range wc[:n] {
					if w.Status != verbs.WCSuccess || w.Opcode != verbs.WCRDMAWrite {
						fail(fmt.Errorf("poller %d: completion %s", p, Describe(w)))
						return
					}
					got[p] = append(got[p], w.WRID)
				}
				inflight.Add(-int64(n))
				taken.Add(int64(n))
				if n == 0 {
					runtime.Gosched()
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(4 * WaitTimeout):
		stop.Store(true)
		<-done
		t.Fatalf("pollers took %d of %d completions before the time limit", taken.Load(), total)
	}
	select {
	case err := <-errc:
		t.Fatal(err)
	default:
	}
	seen := make([]int, total)
	for p, ids := range got {
		for i, id := range ids {
			if id >= total {
				t.Fatalf("poller %d: unknown wr_id %d", p, id)
			}
			if i > 0 && id <= ids[i-1] {
				t.Fatalf("poller %d saw wr_id %d after %d: out of CQ order", p, id, ids[i-1])
			}
			seen[id]++
		}
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("completion %d returned %d times", id, n)
		}
	}
	ExpectEmpty(t, cq)
	t.Logf("completions per poller: %d, %d", len(got[0]), len(got[1]))
}

// ibv_create_qp(3), ibv_poll_cq(3): many QPs may share one send CQ and one
// receive CQ while they run in parallel; qp_num attributes each completion
// to its QP and each QP's completions keep their order.
func testManyQPsSharedCQ(t *testing.T, f Fixture) {
	const nqp, per = 8, 100
	const total = nqp * per
	ca, cb := f.Open(t)
	ra, rb := newCQRig(t, ca, total*8), newCQRig(t, cb, total*8)
	ascq, arcq := ra.cq(1024, nil), ra.cq(16, nil)
	bscq, brcq := rb.cq(16, nil), rb.cq(1024, nil)
	c := verbs.QPCap{MaxSendWR: 16, MaxRecvWR: per, MaxSendSGE: 1, MaxRecvSGE: 1}
	var aq, bq [nqp]*verbs.QP
	aIdx, bIdx := map[uint32]int{}, map[uint32]int{}
	for i := range nqp {
		aq[i] = ra.qp(ascq, arcq, c, false)
		bq[i] = rb.qp(bscq, brcq, c, false)
		cqConnect(t, f, aq[i], bq[i])
		aIdx[aq[i].Num()], bIdx[bq[i].Num()] = i, i
		rs := make([]verbs.RecvWR, per)
		for s := range per {
			k := i*per + s
			rs[s] = verbs.RecvWR{WRID: uint64(k), SGList: []verbs.SGE{rb.MR.SGE(k*8, 8)}}
			putMsg(ra.Buf[k*8:], i, s)
		}
		if err := bq[i].PostRecv(rs); err != nil {
			t.Fatalf("PostRecv: %v", err)
		}
	}
	if len(aIdx) != nqp || len(bIdx) != nqp {
		t.Fatal("QP numbers are not unique")
	}

	var stop atomic.Bool
	var wg sync.WaitGroup
	errc := make(chan error, nqp)
	defer func() {
		stop.Store(true)
		wg.Wait()
	}()
	for i := range nqp {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wr := []verbs.SendWR{{Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: make([]verbs.SGE, 1)}}
			for s := 0; s < per && !stop.Load(); {
				k := i*per + s
				wr[0].WRID = uint64(k)
				wr[0].SGList[0] = ra.MR.SGE(k*8, 8)
				err := aq[i].PostSend(wr)
				if err == nil {
					s++
					continue
				}
				if !errors.Is(err, verbs.ErrQueueFull) {
					errc <- fmt.Errorf("QP %d, message %d: %w", i, s, err)
					stop.Store(true)
					return
				}
				runtime.Gosched()
			}
		}()
	}

	var nextSend, nextRecv [nqp]int
	sent, received := 0, 0
	wc := make([]verbs.WC, 32)
	var guard progressGuard
	for sent < total || received < total {
		select {
		case err := <-errc:
			t.Fatal(err)
		default:
		}
		n, err := ascq.Poll(wc)
		if err != nil {
			t.Fatalf("Poll send CQ: %v", err)
		}
		for _, w := range wc[:n] {
			i, ok := aIdx[w.QPNum]
			if !ok || w.Status != verbs.WCSuccess || w.Opcode != verbs.WCSend {
				t.Fatalf("send completion %s on QP %#x", Describe(w), w.QPNum)
			}
			if w.WRID != uint64(i*per+nextSend[i]) {
				t.Fatalf("send completion of QP %d has wr_id %d, want %d", i, w.WRID, i*per+nextSend[i])
			}
			nextSend[i]++
			sent++
		}
		m, err := brcq.Poll(wc)
		if err != nil {
			t.Fatalf("Poll receive CQ: %v", err)
		}
		for _, w := range wc[:m] {
			i, ok := bIdx[w.QPNum]
			if !ok || w.Status != verbs.WCSuccess || w.Opcode != verbs.WCRecv || w.ByteLen != 8 {
				t.Fatalf("receive completion %s on QP %#x", Describe(w), w.QPNum)
			}
			if w.WRID != uint64(i*per+nextRecv[i]) {
				t.Fatalf("receive completion of QP %d has wr_id %d, want %d", i, w.WRID, i*per+nextRecv[i])
			}
			if g, s := getMsg(rb.Buf[w.WRID*8:]); g != i || s != nextRecv[i] {
				t.Fatalf("QP %d's receive %d holds message %d of QP %d", i, nextRecv[i], s, g)
			}
			nextRecv[i]++
			received++
		}
		guard.check(t, n+m > 0, func() string {
			return fmt.Sprintf("%d send and %d receive completions of %d", sent, received, total)
		})
	}
	for i := range nqp {
		if nextSend[i] != per || nextRecv[i] != per {
			t.Fatalf("QP pair %d: %d send and %d receive completions, want %d", i, nextSend[i], nextRecv[i], per)
		}
	}
	ExpectEmpty(t, ascq)
	ExpectEmpty(t, brcq)
	ExpectEmpty(t, arcq)
	ExpectEmpty(t, bscq)
}

// CQ.Wait and CompChannel.GetEvent honour their context: goroutines blocked
// in them are released, with the context's error, when it is cancelled, and
// nothing stays behind (the suite's leak check verifies it); the CQ and the
// channel remain usable.
func testCloseWhileBlocked(t *testing.T, f Fixture) {
	ca, cb := f.Open(t)
	ra, rb := newCQRig(t, ca, 4096), newCQRig(t, cb, 4096)
	ch := ra.channel()
	cq := ra.cq(16, ch)
	qa := ra.qp(cq, ra.cq(16, nil), verbs.QPCap{}, false)
	qb := rb.qp(rb.cq(16, nil), rb.cq(16, nil), verbs.QPCap{}, false)
	cqConnect(t, f, qa, qb)
	if err := cq.ReqNotify(false); err != nil {
		t.Fatalf("ReqNotify: %v", err)
	}

	const each = 3
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	res := make(chan error, 2*each)
	for range each {
		go func() { res <- cq.Wait(ctx) }()
		go func() {
			_, err := ch.GetEvent(ctx)
			res <- err
		}()
	}
	time.Sleep(20 * time.Millisecond) // let them block (the result is the same if some have not yet)
	select {
	case err := <-res:
		t.Fatalf("a waiter returned before its context was cancelled: %v", err)
	default:
	}
	cancel()
	for range 2 * each {
		select {
		case err := <-res:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("released waiter returned %v, want context.Canceled", err)
			}
		case <-time.After(WaitTimeout):
			t.Fatal("cancelling the context did not release a blocked Wait or GetEvent")
		}
	}

	// Still usable: the arming survived, and a completion wakes new waiters.
	sa, sb := ra.side(qa), rb.side(qb)
	ctx2, cancel2 := context.WithTimeout(context.Background(), WaitTimeout)
	defer cancel2()
	waitRes := make(chan error, 1)
	go func() { waitRes <- cq.Wait(ctx2) }()
	sa.MustPostSend(t, cqWrite(sa, 1, sb, 0, 8))
	getEvent(t, ch, cq)
	ch.AckEvents(cq, 1)
	if err := <-waitRes; err != nil {
		t.Fatalf("Wait after earlier waiters were cancelled: %v", err)
	}
	ExpectWC(t, Poll1(t, cq), 1, verbs.WCSuccess, verbs.WCRDMAWrite)
}
