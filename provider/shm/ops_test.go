package shm_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/conformance"
	"github.com/goverbs/goverbs/internal/leakcheck"
	"github.com/goverbs/goverbs/provider/shm"
	"github.com/goverbs/goverbs/verbs"
)

// pairOn makes two connected sides whose buffers come from AllocBuffer
// (memfd) when memfd is true, and from the Go heap otherwise.
func pairOn(t *testing.T, memfd bool, size int) (a, b *conformance.Side, ca, cb interface {
	Stats() (uint64, uint64, uint64)
	Unacked() bool
}) {
	t.Helper()
	return pairOnTD(t, memfd, size, false)
}

// pairOnTD is pairOn with the QPs in thread domains when td.
func pairOnTD(t *testing.T, memfd bool, size int, td bool) (a, b *conformance.Side, ca, cb interface {
	Stats() (uint64, uint64, uint64)
	Unacked() bool
}) {
	t.Helper()
	o := conformance.PairOpts{BufSize: size, Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: 64}, TD: td}
	if memfd {
		o.Alloc = directFixture{}.Buffer
	}
	a = conformance.NewSide(t, open(t), verbs.QPTRC, o)
	b = conformance.NewSide(t, open(t), verbs.QPTRC, o)
	for _, q := range []*verbs.QP{a.QP, b.QP} {
		if err := conformance.ToInit(q, conformance.DefaultRC.QPAccessFlags); err != nil {
			t.Fatal(err)
		}
	}
	p := shm.Params{IRD: 16, ORD: 16, RNRRetry: 7}
	x, y := connect(t, a.QP, b.QP, p, p)
	return a, b, x, y
}

func wr(id uint64, op verbs.WROpcode, local verbs.SGE, raddr uint64, rkey uint32) verbs.SendWR {
	return verbs.SendWR{WRID: id, Opcode: op, Flags: verbs.SendSignaled, SGList: []verbs.SGE{local}, RemoteAddr: raddr, RKey: rkey}
}

// One-sided operations on memfd memory are done by the initiator alone:
// the target serves no request record; on Go memory they go through it.
func TestOneSidedPaths(t *testing.T) {
	for _, memfd := range []bool{true, false} {
		name := map[bool]string{true: "memfd", false: "heap"}[memfd]
		t.Run(name, func(t *testing.T) {
			leakcheck.Check(t)
			const n = 1 << 20
			a, b, ca, cb := pairOn(t, memfd, 2*n+4096)
			conformance.Fill(a.Buf[:n], 7)
			a.MustPostSend(t, wr(1, verbs.WRRDMAWrite, a.MR.SGE(0, n), b.MR.RemoteAddr(0), b.MR.RKey()))
			conformance.ExpectWC(t, conformance.Poll1(t, a.SendCQ), 1, verbs.WCSuccess, verbs.WCRDMAWrite)
			if !bytes.Equal(b.Buf[:n], a.Buf[:n]) {
				t.Fatal("RDMA WRITE: target memory differs")
			}
			conformance.Fill(b.Buf[n:2*n], 9)
			a.MustPostSend(t, wr(2, verbs.WRRDMARead, a.MR.SGE(n, n), b.MR.RemoteAddr(n), b.MR.RKey()))
			conformance.ExpectWC(t, conformance.Poll1(t, a.SendCQ), 2, verbs.WCSuccess, verbs.WCRDMARead)
			if !bytes.Equal(a.Buf[n:2*n], b.Buf[n:2*n]) {
				t.Fatal("RDMA READ: sink differs")
			}
			off := 2 * n
			binary.NativeEndian.PutUint64(b.Buf[off:], 40)
			fa := wr(3, verbs.WRAtomicFetchAndAdd, a.MR.SGE(off, 8), b.MR.RemoteAddr(off), b.MR.RKey())
			fa.CompareAdd = 2
			cs := wr(4, verbs.WRAtomicCmpAndSwp, a.MR.SGE(off+8, 8), b.MR.RemoteAddr(off), b.MR.RKey())
			cs.CompareAdd, cs.Swap = 42, 7
			a.MustPostSend(t, fa, cs)
			wcs := conformance.PollN(t, a.SendCQ, 2)
			conformance.ExpectWC(t, wcs[0], 3, verbs.WCSuccess, verbs.WCFetchAdd)
			conformance.ExpectWC(t, wcs[1], 4, verbs.WCSuccess, verbs.WCCompSwap)
			if got := binary.NativeEndian.Uint64(a.Buf[off:]); got != 40 {
				t.Fatalf("fetch-add returned %d, want 40", got)
			}
			if got := binary.NativeEndian.Uint64(a.Buf[off+8:]); got != 42 {
				t.Fatalf("compare-swap returned %d, want 42", got)
			}
			if got := binary.NativeEndian.Uint64(b.Buf[off:]); got != 7 {
				t.Fatalf("target word %d, want 7", got)
			}
			direct, ring, _ := ca.Stats()
			_, _, served := cb.Stats()
			if memfd && (direct != 4 || ring != 0 || served != 0) {
				t.Fatalf("memfd: %d direct, %d through the ring, %d served by the target; want 4, 0, 0", direct, ring, served)
			}
			if !memfd && (direct != 0 || ring != 4 || served < 4) {
				t.Fatalf("heap: %d direct, %d through the ring, %d served; want 0, 4, >= 4", direct, ring, served)
			}
		})
	}
}

// Deregistering a region the peer has mapped withdraws it: the next
// access is refused by the target (REM_ACCESS_ERR), and Dereg does not wait
// for the peer to cooperate.
func TestDeregRevokesMapping(t *testing.T) {
	leakcheck.Check(t)
	a, b, ca, _ := pairOn(t, true, 64<<10)
	win, err := b.PD.RegMR(b.Buf[4096:8192], verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	dereged := false
	t.Cleanup(func() {
		if !dereged {
			win.Dereg()
		}
	})
	// The first write asks for the mapping and goes through the target
	// meanwhile; once the mapping is in, writes are direct.
	for i := 0; ; i++ {
		a.MustPostSend(t, wr(1, verbs.WRRDMAWrite, a.MR.SGE(0, 64), win.RemoteAddr(0), win.RKey()))
		conformance.ExpectWC(t, conformance.Poll1(t, a.SendCQ), 1, verbs.WCSuccess, verbs.WCRDMAWrite)
		if d, _, _ := ca.Stats(); d == 1 {
			break
		}
		if i == 10000 {
			t.Fatal("writes never went direct")
		}
		time.Sleep(100 * time.Microsecond)
	}
	dereged = true
	if err := win.Dereg(); err != nil {
		t.Fatal(err)
	}
	before := append([]byte(nil), b.Buf[4096:8192]...)
	conformance.Fill(a.Buf[:64], 3)
	b.MustPostRecv(t, b.Recv(9, 0, 64))
	a.MustPostSend(t, wr(2, verbs.WRRDMAWrite, a.MR.SGE(0, 64), win.RemoteAddr(0), win.RKey()))
	conformance.ExpectWC(t, conformance.Poll1(t, a.SendCQ), 2, verbs.WCRemAccessErr, 0)
	conformance.WaitState(t, b.QP, verbs.QPSErr)
	if !bytes.Equal(b.Buf[4096:8192], before) {
		t.Fatal("a write after Dereg changed the memory")
	}
	conformance.ExpectWC(t, conformance.Poll1(t, b.RecvCQ), 9, verbs.WCWRFlushErr, 0)
}

// Messages larger than the rings go in pieces, both ways: a SEND larger
// than the request ring, a READ of Go memory larger than the response ring.
func TestLargeMessages(t *testing.T) {
	leakcheck.Check(t)
	const n = 1<<20 + 13
	a, b, _, _ := pairOn(t, false, 2*n+64)
	conformance.Fill(a.Buf[:n], 1)
	b.MustPostRecv(t, b.Recv(7, 0, n))
	a.MustPostSend(t, a.Send(1, 0, n))
	conformance.ExpectWC(t, conformance.Poll1(t, a.SendCQ), 1, verbs.WCSuccess, verbs.WCSend)
	wc := conformance.Poll1(t, b.RecvCQ)
	conformance.ExpectWC(t, wc, 7, verbs.WCSuccess, verbs.WCRecv)
	if wc.ByteLen != n || !bytes.Equal(b.Buf[:n], a.Buf[:n]) {
		t.Fatalf("SEND of %d bytes: byte_len %d, data equal %v", n, wc.ByteLen, bytes.Equal(b.Buf[:n], a.Buf[:n]))
	}
	conformance.Fill(b.Buf[n:2*n], 2)
	a.MustPostSend(t, wr(2, verbs.WRRDMARead, a.MR.SGE(n, n), b.MR.RemoteAddr(n), b.MR.RKey()))
	conformance.ExpectWC(t, conformance.Poll1(t, a.SendCQ), 2, verbs.WCSuccess, verbs.WCRDMARead)
	if !bytes.Equal(a.Buf[n:2*n], b.Buf[n:2*n]) {
		t.Fatal("READ: sink differs")
	}
}

// Without polling, completions arrive through the completion channel: the
// peers poke each other over the socket.
func TestBlockingCompletions(t *testing.T) {
	leakcheck.Check(t)
	ca, cb := open(t), open(t)
	mk := func(ctx *verbs.Context) (*conformance.Side, *verbs.CompChannel) {
		ch, err := ctx.CreateCompChannel()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ch.Close() })
		s := &conformance.Side{Ctx: ctx}
		s.PD, _ = ctx.AllocPD()
		s.SendCQ, _ = ctx.CreateCQ(64, ch)
		s.RecvCQ = s.SendCQ
		s.QP, err = s.PD.CreateQP(verbs.QPInitAttr{SendCQ: s.SendCQ, RecvCQ: s.RecvCQ, QPType: verbs.QPTRC,
			Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		s.Buf = make([]byte, 4096)
		s.MR, _ = s.PD.RegMR(s.Buf, verbs.AccessLocalWrite)
		t.Cleanup(s.Close)
		return s, ch
	}
	a, cha := mk(ca)
	b, chb := mk(cb)
	connect(t, a.QP, b.QP, shm.Params{RNRRetry: 7}, shm.Params{RNRRetry: 7})
	wait := func(s *conformance.Side, ch *verbs.CompChannel) verbs.WC {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for {
			var wc [1]verbs.WC
			if n, _ := s.SendCQ.Poll(wc[:]); n == 1 {
				return wc[0]
			}
			if err := s.SendCQ.ReqNotify(false); err != nil {
				t.Fatal(err)
			}
			if n, _ := s.SendCQ.Poll(wc[:]); n == 1 {
				return wc[0]
			}
			cq, err := ch.GetEvent(ctx)
			if err != nil {
				t.Fatalf("GetEvent: %v", err)
			}
			ch.AckEvents(cq, 1)
		}
	}
	for i := range 50 {
		b.MustPostRecv(t, b.Recv(uint64(i), 64, 64))
		a.MustPostSend(t, a.Send(uint64(1000+i), 0, 32))
		var got [2]verbs.WC
		for k := range 2 {
			wc := wait(map[int]*conformance.Side{0: a, 1: b}[k], map[int]*verbs.CompChannel{0: cha, 1: chb}[k])
			if wc.Status != verbs.WCSuccess {
				t.Fatalf("round %d: %+v", i, wc)
			}
			got[k] = wc
		}
		if got[0].WRID != uint64(1000+i) || got[1].WRID != uint64(i) {
			t.Fatalf("round %d: completions %+v", i, got)
		}
	}
}

// A peer that writes garbage into the shared ring fails the connection
// cleanly: the victim's QP goes to ERR and flushes, nothing panics.
func TestCorruptRing(t *testing.T) {
	leakcheck.Check(t)
	a, b := conformance.NewSide(t, open(t), verbs.QPTRC, conformance.PairOpts{}), conformance.NewSide(t, open(t), verbs.QPTRC, conformance.PairOpts{})
	ca, cb := connect(t, a.QP, b.QP, shm.Params{RNRRetry: 7}, shm.Params{RNRRetry: 7})
	b.MustPostRecv(t, b.Recv(5, 0, 64))
	ca.Corrupt()
	conformance.ExpectWC(t, conformance.Poll1(t, b.RecvCQ), 5, verbs.WCWRFlushErr, 0)
	select {
	case <-cb.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the victim's connection did not end")
	}
	if cb.Err() == nil {
		t.Fatal("no error for a corrupt ring")
	}
}

// A large SEND from memory the receiver can map is copied once, by the
// receiver, from the sender's region: the first one offers the mapping
// (and goes through the ring), the next ones go by reference.
func TestLargeSendByReference(t *testing.T) {
	leakcheck.Check(t)
	const n = 1 << 20
	a, b, ca, _ := pairOn(t, true, 2*n)
	refs := ca.(interface{ Refs() uint64 })
	for i := range 4 {
		conformance.Fill(a.Buf[:n], byte(i+1))
		b.MustPostRecv(t, b.Recv(uint64(i), n, n))
		a.MustPostSend(t, a.Send(uint64(10+i), 0, n))
		conformance.ExpectWC(t, conformance.Poll1(t, a.SendCQ), uint64(10+i), verbs.WCSuccess, verbs.WCSend)
		wc := conformance.Poll1(t, b.RecvCQ)
		conformance.ExpectWC(t, wc, uint64(i), verbs.WCSuccess, verbs.WCRecv)
		if wc.ByteLen != n || !bytes.Equal(b.Buf[n:2*n], a.Buf[:n]) {
			t.Fatalf("send %d: %d bytes, equal %v", i, wc.ByteLen, bytes.Equal(b.Buf[n:2*n], a.Buf[:n]))
		}
	}
	if r := refs.Refs(); r != 3 {
		t.Fatalf("%d SENDs by reference, want 3", r)
	}
}

// unsignaledSend posts an unsignaled 8-byte SEND from a and spins b's
// receive CQ until it is in (into receive 9).
func unsignaledSend(t *testing.T, a, b *conformance.Side) {
	t.Helper()
	w := wr(1, verbs.WRSend, a.MR.SGE(0, 8), 0, 0)
	w.Flags = 0
	a.MustPostSend(t, w)
	rwc := make([]verbs.WC, 1)
	if err := conformance.Spin(b.RecvCQ, rwc); err != nil {
		t.Fatal(err)
	}
	conformance.ExpectWC(t, rwc[0], 9, verbs.WCSuccess, verbs.WCRecv)
}

// In polled mode a receiver acknowledges an unsignaled request it consumed
// at its next poll (deferred, see deferAck). The acknowledgement must still
// come when the receiver stops polling altogether (the socket goroutine
// ends polled mode after pollIdle), and when the receiver's QP fails right
// after the receive: what it consumed was executed, so the sender must not
// see the failure's RETRY_EXC_ERR for it.
func TestDeferredAck(t *testing.T) {
	for _, fail := range []bool{false, true} {
		t.Run(map[bool]string{false: "idle", true: "fail"}[fail], func(t *testing.T) {
			leakcheck.Check(t)
			a, b, _, cb := pairOn(t, true, 4096)
			b.MustPostRecv(t, verbs.RecvWR{WRID: 9, SGList: []verbs.SGE{b.MR.SGE(0, 64)}})
			// Both busy-poll (polled mode: the sender asks for no prompt
			// acknowledgement); the receiver until the message is in. The
			// sender polls all along: on a loaded machine a gap past
			// engine.PollIdle would end its polled mode, and then it asks.
			a.SendCQ.Poll(make([]verbs.WC, 1))
			b.RecvCQ.Poll(make([]verbs.WC, 1))
			stop, stopped := make(chan struct{}), make(chan struct{})
			go func() {
				defer close(stopped)
				for wc := make([]verbs.WC, 1); ; a.SendCQ.Poll(wc) {
					select {
					case <-stop:
						return
					default:
					}
				}
			}()
			unsignaledSend(t, a, b)
			unacked := cb.Unacked()
			close(stop)
			<-stopped
			if !unacked {
				t.Fatal("the unsignaled SEND was acknowledged in the poll that received it")
			}
			if fail {
				if err := b.QP.Modify(&verbs.QPAttr{QPState: verbs.QPSErr}, verbs.QPAttrState); err != nil {
					t.Fatal(err)
				}
				// The next request fails; the first, executed, must not.
				a.MustPostSend(t, wr(2, verbs.WRSend, a.MR.SGE(0, 8), 0, 0))
				wc := conformance.Poll1(t, a.SendCQ)
				if wc.WRID != 2 || wc.Status == verbs.WCSuccess {
					t.Fatalf("first completion after the receiver failed: %+v, want wr_id 2 failing", wc)
				}
				return
			}
			// The receiver polls no more; the sender keeps polling.
			deadline := time.Now().Add(5 * time.Second)
			for cb.Unacked() {
				a.SendCQ.Poll(make([]verbs.WC, 1))
				if time.Now().After(deadline) {
					t.Fatal("the SEND was never acknowledged after the receiver stopped polling")
				}
				time.Sleep(100 * time.Microsecond)
			}
		})
	}
}

// The idle check can end polled mode while a poll is consuming: it then
// finds the consumer's lock taken and cannot publish what that poll
// consumed, and the poll, which saw polled mode when it decided to defer
// the acknowledgement, must publish it itself once it lets go of the lock.
// The hook ends polled mode at exactly that moment; the receiver polls no
// more, the sender asked for no poke (it polls), so nobody else would
// publish the head.
func TestDeferredAckPollStop(t *testing.T) {
	leakcheck.Check(t)
	a, b, _, _ := pairOn(t, true, 4096)
	b.MustPostRecv(t, verbs.RecvWR{WRID: 9, SGList: []verbs.SGE{b.MR.SGE(0, 64)}})
	a.SendCQ.Poll(make([]verbs.WC, 1))
	b.RecvCQ.Poll(make([]verbs.WC, 1))
	var rx *shm.Conn
	stopped := make(chan struct{})
	defer shm.OnceAfterConsume(func(c *shm.Conn) {
		rx = c
		go func() { // the idle check's goroutine
			c.StopPolling()
			close(stopped)
		}()
		<-stopped
	})()
	unsignaledSend(t, a, b)
	if rx == nil {
		t.Fatal("the hook did not run in the poll that received the SEND")
	}
	deadline := time.Now().Add(2 * time.Second)
	for !rx.Published() {
		a.SendCQ.Poll(make([]verbs.WC, 1))
		if time.Now().After(deadline) {
			t.Fatal("the consumed SEND was never acknowledged after polled mode ended during its poll")
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// Which consumed requests a polling receiver acknowledges in the same poll:
// a signaled SEND at once (its sender waits for the completion), an
// unsignaled one at the next poll.
func TestAckTiming(t *testing.T) {
	leakcheck.Check(t)
	a, b, _, cb := pairOn(t, true, 4096)
	a.SendCQ.Poll(make([]verbs.WC, 1)) // both in polled mode
	b.RecvCQ.Poll(make([]verbs.WC, 1))
	rwc := make([]verbs.WC, 1)
	for i, signaled := range []bool{true, false, true} {
		b.MustPostRecv(t, verbs.RecvWR{WRID: uint64(i), SGList: []verbs.SGE{b.MR.SGE(0, 64)}})
		w := wr(uint64(i), verbs.WRSend, a.MR.SGE(0, 8), 0, 0)
		if !signaled {
			w.Flags = 0
		}
		a.MustPostSend(t, w)
		if err := conformance.Spin(b.RecvCQ, rwc); err != nil {
			t.Fatal(err)
		}
		if got := cb.Unacked(); got == signaled {
			t.Fatalf("SEND %d (signaled %v): left unacknowledged after the poll that received it: %v", i, signaled, got)
		}
		if signaled {
			conformance.ExpectWC(t, conformance.Poll1(t, a.SendCQ), uint64(i), verbs.WCSuccess, verbs.WCSend)
		}
	}
}

// An RDMA WRITE or READ on a region of the peer's that is mapped here is
// carried out by PostSend itself when nothing of ours waits in the ring:
// its data is in place when PostSend returns, and its completion still
// comes after those of earlier requests. Behind a SEND the peer has not
// consumed (it waits for a receive), neither is carried out (RC order):
// they go the ordinary path, the WRITE lands after the SEND and the READ
// after them returns what the WRITE wrote.
func TestDirectOneSided(t *testing.T) {
	leakcheck.Check(t)
	a, b, ca, _ := pairOn(t, true, 256<<10)
	postedOneSided := ca.(interface{ PostedOneSided() uint64 }).PostedOneSided
	conformance.Fill(a.Buf[:96<<10], 5)
	raddr, rkey := b.MR.RemoteAddr(0), b.MR.RKey()
	// The first WRITE asks for the mapping (the ordinary path). Its
	// answer comes over the socket, apart from the WRITE's completion:
	// wait for it.
	a.MustPostSend(t, wr(1, verbs.WRRDMAWrite, a.MR.SGE(0, 64), raddr, rkey))
	conformance.ExpectWC(t, conformance.Poll1(t, a.SendCQ), 1, verbs.WCSuccess, verbs.WCRDMAWrite)
	mapped := ca.(interface{ Mapped(uint32) (bool, bool) }).Mapped
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		if answered, ok := mapped(rkey); answered {
			if !ok {
				t.Fatal("the peer did not map its region for us")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no answer to the mapping request")
		}
	}

	// Unsignaled WRITEs from SGEs and inline, then a signaled one.
	p0 := postedOneSided()
	for i := range 8 {
		w := wr(uint64(10+i), verbs.WRRDMAWrite, a.MR.SGE(1024*i, 1024), raddr+uint64(1024*i), rkey)
		w.Flags = 0
		a.MustPostSend(t, w)
		if !bytes.Equal(b.Buf[1024*i:1024*(i+1)], a.Buf[1024*i:1024*(i+1)]) {
			t.Fatalf("WRITE %d: not in the target's memory when PostSend returned", i)
		}
	}
	a.MustPostSend(t, verbs.SendWR{WRID: 20, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendInline | verbs.SendSignaled,
		Inline: []byte("inline write"), RemoteAddr: raddr + 9000, RKey: rkey})
	if got := postedOneSided() - p0; got != 9 {
		t.Fatalf("%d of 9 WRITEs carried out by PostSend", got)
	}
	if string(b.Buf[9000:9012]) != "inline write" {
		t.Fatalf("inline WRITE: target holds %q", b.Buf[9000:9012])
	}
	conformance.ExpectWC(t, conformance.Poll1(t, a.SendCQ), 20, verbs.WCSuccess, verbs.WCRDMAWrite)

	// A READ of what the WRITEs wrote, into two SGEs.
	p0 = postedOneSided()
	clear(a.Buf[100<<10 : 104<<10])
	a.MustPostSend(t, verbs.SendWR{WRID: 22, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.MR.SGE(100<<10, 1000), a.MR.SGE(102<<10, 2000)}, RemoteAddr: raddr + 1024, RKey: rkey})
	if got := postedOneSided() - p0; got != 1 {
		t.Fatalf("READ: %d carried out by PostSend, want 1", got)
	}
	if !bytes.Equal(a.Buf[100<<10:100<<10+1000], b.Buf[1024:2024]) || !bytes.Equal(a.Buf[102<<10:102<<10+2000], b.Buf[2024:4024]) {
		t.Fatal("READ: the sink does not hold the target's bytes when PostSend returned")
	}
	if wc := conformance.Poll1(t, a.SendCQ); wc.ByteLen != 3000 {
		t.Fatalf("READ completion %+v, want 3000 bytes", wc)
	} else {
		conformance.ExpectWC(t, wc, 22, verbs.WCSuccess, verbs.WCRDMARead)
	}

	// A large WRITE goes the ordinary path (its copy does not hold the
	// QP's lock), directly into the mapping all the same.
	p0 = postedOneSided()
	a.MustPostSend(t, wr(21, verbs.WRRDMAWrite, a.MR.SGE(0, 96<<10), raddr+(128<<10), rkey))
	conformance.ExpectWC(t, conformance.Poll1(t, a.SendCQ), 21, verbs.WCSuccess, verbs.WCRDMAWrite)
	if got := postedOneSided() - p0; got != 0 || !bytes.Equal(b.Buf[128<<10:224<<10], a.Buf[:96<<10]) {
		t.Fatalf("96 KiB WRITE: %d carried out by PostSend (want 0), data equal %v", got, bytes.Equal(b.Buf[128<<10:224<<10], a.Buf[:96<<10]))
	}

	// A SEND the peer consumed but whose acknowledgement this side has not
	// taken yet (no poll): the WRITE after it is carried out at once, and
	// completes after it.
	b.MustPostRecv(t, b.Recv(30, 32<<10, 64))
	a.MustPostSend(t, a.Send(31, 0, 64))
	conformance.ExpectWC(t, conformance.Poll1(t, b.RecvCQ), 30, verbs.WCSuccess, verbs.WCRecv)
	p0 = postedOneSided()
	a.MustPostSend(t, wr(32, verbs.WRRDMAWrite, a.MR.SGE(0, 128), raddr+12000, rkey))
	if got := postedOneSided() - p0; got != 1 {
		t.Fatalf("WRITE behind a consumed SEND: %d carried out by PostSend, want 1", got)
	}
	wcs := conformance.PollN(t, a.SendCQ, 2)
	conformance.ExpectWC(t, wcs[0], 31, verbs.WCSuccess, verbs.WCSend)
	conformance.ExpectWC(t, wcs[1], 32, verbs.WCSuccess, verbs.WCRDMAWrite)

	// A SEND waiting for a receive: the WRITE and the READ behind it wait too.
	a.MustPostSend(t, a.Send(40, 0, 64))
	conformance.Fill(a.Buf[4096:8192], 11)
	clear(a.Buf[104<<10 : 108<<10])
	p0 = postedOneSided()
	a.MustPostSend(t, wr(41, verbs.WRRDMAWrite, a.MR.SGE(4096, 4096), raddr+16384, rkey))
	a.MustPostSend(t, wr(43, verbs.WRRDMARead, a.MR.SGE(104<<10, 4096), raddr+16384, rkey))
	if got := postedOneSided() - p0; got != 0 {
		t.Fatalf("%d requests behind an unconsumed SEND carried out at once", got)
	}
	deadline := time.Now().Add(50 * time.Millisecond)
	for time.Now().Before(deadline) {
		if n, _ := a.SendCQ.Poll(make([]verbs.WC, 2)); n != 0 {
			t.Fatal("a request completed while the SEND before it waits for a receive")
		}
		if bytes.Equal(b.Buf[16384:20480], a.Buf[4096:8192]) {
			t.Fatal("the WRITE landed before the SEND ahead of it was consumed")
		}
	}
	b.MustPostRecv(t, b.Recv(42, 32<<10, 64))
	wcs = conformance.PollN(t, a.SendCQ, 3)
	conformance.ExpectWC(t, wcs[0], 40, verbs.WCSuccess, verbs.WCSend)
	conformance.ExpectWC(t, wcs[1], 41, verbs.WCSuccess, verbs.WCRDMAWrite)
	conformance.ExpectWC(t, wcs[2], 43, verbs.WCSuccess, verbs.WCRDMARead)
	if !bytes.Equal(b.Buf[16384:20480], a.Buf[4096:8192]) {
		t.Fatal("the WRITE behind the SEND: target memory differs")
	}
	if !bytes.Equal(a.Buf[104<<10:108<<10], a.Buf[4096:8192]) {
		t.Fatal("the READ after the WRITE did not return what the WRITE wrote")
	}
}

// TestDirectPost: a small SEND that finds the send queue idle goes into the
// ring straight from PostSend (engine.DirectWire) with the same results as
// the ordinary path; whatever it cannot take (a large SEND, a list of
// requests, a bad key, a QP in ERR) takes the ordinary path, errors included.
func TestDirectPost(t *testing.T) {
	leakcheck.Check(t)
	a, b, ca, _ := pairOn(t, true, 64<<10)
	posted := ca.(interface{ Posted() uint64 }).Posted
	conformance.Fill(a.Buf[:16<<10], 3)

	// Direct: an inline SEND from an SGE, unsignaled, then a signaled SEND
	// WITH IMM, solicited, from inline data.
	b.MustPostRecv(t, b.Recv(1, 0, 64), b.Recv(2, 64, 64))
	p0 := posted()
	a.MustPostSend(t, verbs.SendWR{WRID: 10, Opcode: verbs.WRSend, Flags: verbs.SendInline, SGList: []verbs.SGE{a.MR.SGE(0, 40)}})
	a.MustPostSend(t, verbs.SendWR{WRID: 11, Opcode: verbs.WRSendWithImm, Flags: verbs.SendInline | verbs.SendSignaled | verbs.SendSolicited,
		Inline: []byte("direct"), ImmData: 0x1234})
	if got := posted() - p0; got != 2 {
		t.Fatalf("%d of 2 small SENDs went the direct path", got)
	}
	wc := conformance.Poll1(t, b.RecvCQ)
	conformance.ExpectWC(t, wc, 1, verbs.WCSuccess, verbs.WCRecv)
	if wc.ByteLen != 40 || !bytes.Equal(b.Buf[:40], a.Buf[:40]) {
		t.Fatalf("first SEND: %d bytes, equal %v", wc.ByteLen, bytes.Equal(b.Buf[:40], a.Buf[:40]))
	}
	wc = conformance.Poll1(t, b.RecvCQ)
	conformance.ExpectWC(t, wc, 2, verbs.WCSuccess, verbs.WCRecv)
	if wc.ByteLen != 6 || string(b.Buf[64:70]) != "direct" || wc.Flags&verbs.WCFlagWithImm == 0 || wc.ImmData != 0x1234 {
		t.Fatalf("second SEND: %+v %q", wc, b.Buf[64:70])
	}
	// Only the signaled one completes, in order behind the unsignaled one.
	conformance.ExpectWC(t, conformance.Poll1(t, a.SendCQ), 11, verbs.WCSuccess, verbs.WCSend)

	// A receiver that sleeps in Wait (not polling) is woken: the direct
	// path owes it a poke, sent once the QP's lock is released.
	b.MustPostRecv(t, b.Recv(20, 0, 64))
	woke := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		woke <- b.RecvCQ.Wait(ctx)
	}()
	time.Sleep(50 * time.Millisecond) // past Wait's spin: asleep
	p0 = posted()
	a.MustPostSend(t, verbs.SendWR{WRID: 21, Opcode: verbs.WRSend, Flags: verbs.SendInline, SGList: []verbs.SGE{a.MR.SGE(0, 8)}})
	if err := <-woke; err != nil {
		t.Fatalf("the sleeping receiver was not woken: %v", err)
	}
	if got := posted() - p0; got != 1 {
		t.Fatalf("%d of 1 SEND to a sleeping peer went the direct path", got)
	}
	conformance.ExpectWC(t, conformance.Poll1(t, b.RecvCQ), 20, verbs.WCSuccess, verbs.WCRecv)

	// Ordinary path: a SEND large enough to go by reference. Two SENDs in
	// one call go the direct path one after the other.
	b.MustPostRecv(t, b.Recv(3, 0, 16<<10), b.Recv(4, 16<<10, 64), b.Recv(5, 16<<10+64, 64))
	p0 = posted()
	a.MustPostSend(t, a.Send(12, 0, 16<<10))
	if got := posted() - p0; got != 0 {
		t.Fatalf("%d requests went the direct path, want 0", got)
	}
	a.MustPostSend(t, a.Send(13, 0, 8), a.Send(14, 8, 8))
	if got := posted() - p0; got != 2 {
		t.Fatalf("%d of a list of 2 SENDs went the direct path", got)
	}
	for _, id := range []uint64{12, 13, 14} {
		conformance.ExpectWC(t, conformance.Poll1(t, a.SendCQ), id, verbs.WCSuccess, verbs.WCSend)
	}
	wc = conformance.Poll1(t, b.RecvCQ)
	conformance.ExpectWC(t, wc, 3, verbs.WCSuccess, verbs.WCRecv)
	if wc.ByteLen != 16<<10 || !bytes.Equal(b.Buf[:16<<10], a.Buf[:16<<10]) {
		t.Fatal("large SEND: data differs")
	}
	conformance.ExpectWC(t, conformance.Poll1(t, b.RecvCQ), 4, verbs.WCSuccess, verbs.WCRecv)
	conformance.ExpectWC(t, conformance.Poll1(t, b.RecvCQ), 5, verbs.WCSuccess, verbs.WCRecv)

	// A bad key: inline, the post fails; otherwise the request completes
	// with a local protection error and the QP fails, which flushes the
	// next SEND.
	p0 = posted()
	bad := verbs.SGE{Addr: a.MR.SGE(0, 8).Addr, Length: 8, LKey: a.MR.LKey() + 1}
	err := a.QP.PostSend([]verbs.SendWR{{WRID: 15, Opcode: verbs.WRSend, Flags: verbs.SendInline | verbs.SendSignaled, SGList: []verbs.SGE{bad}}})
	var pe *verbs.PostError
	if !errors.As(err, &pe) || pe.Index != 0 || pe.WRID != 15 {
		t.Fatalf("inline SEND with a bad lkey: %v", err)
	}
	a.MustPostSend(t, verbs.SendWR{WRID: 16, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: []verbs.SGE{bad}})
	conformance.ExpectWC(t, conformance.Poll1(t, a.SendCQ), 16, verbs.WCLocProtErr, verbs.WCSend)
	a.MustPostSend(t, verbs.SendWR{WRID: 17, Opcode: verbs.WRSend, Flags: verbs.SendInline | verbs.SendSignaled, SGList: []verbs.SGE{a.MR.SGE(0, 8)}})
	if wc := conformance.Poll1(t, a.SendCQ); wc.WRID != 17 || wc.Status != verbs.WCWRFlushErr {
		t.Fatalf("SEND on a QP in ERR: %+v", wc)
	}
	if got := posted() - p0; got != 0 {
		t.Fatalf("%d failing requests went the direct path", got)
	}
}

// TestHandoffOrder: a poll that finds its CQ empty takes receive completions
// straight from the deliveries it drives (engine.Handoff), as many as its
// array holds, while the others go through the ring behind them; the
// application sees them in order, one by one or in batches, each with its
// own data.
func TestHandoffOrder(t *testing.T) {
	leakcheck.Check(t)
	a, b, _, _ := pairOn(t, true, 64<<10)
	for i := range 64 {
		a.Buf[i*8] = byte(i)
	}
	for _, batch := range []int{1, 3, 8} {
		for i := range 8 {
			b.MustPostRecv(t, b.Recv(uint64(100*batch+i), i*64, 64))
		}
		// The receiver polls (polled mode: nobody pokes it, its poll
		// consumes), then the eight records go into its ring at once.
		wc := make([]verbs.WC, batch)
		if n, err := b.RecvCQ.Poll(wc); n != 0 || err != nil {
			t.Fatalf("poll before the sends: %d %v", n, err)
		}
		for i := range 8 {
			a.MustPostSend(t, verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendInline, SGList: []verbs.SGE{a.MR.SGE(i*8, 8)}})
		}
		next := 0
		deadline := time.Now().Add(10 * time.Second)
		for next < 8 {
			n, err := b.RecvCQ.Poll(wc)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range wc[:n] {
				conformance.ExpectWC(t, w, uint64(100*batch+next), verbs.WCSuccess, verbs.WCRecv)
				if w.ByteLen != 8 || b.Buf[next*64] != byte(next) {
					t.Fatalf("batch %d: receive %d holds %d bytes, first %d", batch, next, w.ByteLen, b.Buf[next*64])
				}
				next++
			}
			if time.Now().After(deadline) {
				t.Fatalf("batch %d: %d of 8 receives completed", batch, next)
			}
		}
	}
}

// TestSendHandoffOrder: the send completions that a poll's progress
// makes go into the poll's array (engine.Handoff) while its CQ is empty,
// the rest through the ring behind them: signaled SENDs among unsignaled
// ones complete in order, one by one or in batches.
func TestSendHandoffOrder(t *testing.T) {
	leakcheck.Check(t)
	a, b, _, _ := pairOn(t, true, 64<<10)
	for _, batch := range []int{1, 3, 8} {
		for i := range 16 {
			b.MustPostRecv(t, b.Recv(uint64(i), i*64, 64))
		}
		wc := make([]verbs.WC, batch)
		if n, err := a.SendCQ.Poll(wc); n != 0 || err != nil {
			t.Fatalf("poll before the sends: %d %v", n, err)
		}
		for i := range 16 {
			w := a.Send(uint64(100*batch+i), i*8, 8)
			if i%3 == 1 {
				w.Flags = 0
			}
			a.MustPostSend(t, w)
		}
		conformance.PollN(t, b.RecvCQ, 16) // consumed: every acknowledgement is there to take
		var want []uint64
		for i := range 16 {
			if i%3 != 1 {
				want = append(want, uint64(100*batch+i))
			}
		}
		next := 0
		deadline := time.Now().Add(10 * time.Second)
		for next < len(want) {
			n, err := a.SendCQ.Poll(wc)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range wc[:n] {
				if next == len(want) {
					t.Fatalf("batch %d: completion %d more than the signaled SENDs", batch, w.WRID)
				}
				conformance.ExpectWC(t, w, want[next], verbs.WCSuccess, verbs.WCSend)
				next++
			}
			if time.Now().After(deadline) {
				t.Fatalf("batch %d: %d of %d SENDs completed", batch, next, len(want))
			}
		}
	}
}

// TestRetiredSegmentsUnmapped: a closed connection's segments are retired
// (their pages replaced in place, see segment.retire) and the placeholders
// are unmapped once the connection is garbage: connecting and closing again
// and again does not leave mappings behind.
func TestRetiredSegmentsUnmapped(t *testing.T) {
	const n = 10
	before := shm.Retired()
	for range n {
		t.Run("pair", func(t *testing.T) {
			a, b, _, _ := pairOn(t, true, 4096)
			b.MustPostRecv(t, b.Recv(1, 0, 64))
			a.MustPostSend(t, a.Send(2, 0, 8))
			conformance.ExpectWC(t, conformance.Poll1(t, b.RecvCQ), 1, verbs.WCSuccess, verbs.WCRecv)
		})
	}
	// Each pair is two connections; a collection may leave the last ones
	// for the next, but not most of them.
	deadline := time.Now().Add(10 * time.Second)
	for shm.Retired()-before < n && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if got := shm.Retired() - before; got < n {
		t.Fatalf("%d of %d closed connections had their segments unmapped", got, 2*n)
	}
}

// A list of requests goes out from PostSend one after the other while each
// can (WRITEs into a mapped region, small SENDs); a WRITE behind a SEND in
// the ring waits for it (RC order) and takes the ordinary path with the
// rest; a bad request stops the list with its index, after the ones before
// it went out. Completions come in order, and the data is placed.
func TestPostListDirect(t *testing.T) {
	leakcheck.Check(t)
	a, b, ca, _ := pairOn(t, true, 64<<10)
	oneSided := ca.(interface{ PostedOneSided() uint64 }).PostedOneSided
	w := func(id uint64, off int) verbs.SendWR {
		return wr(id, verbs.WRRDMAWrite, a.MR.SGE(off, 64), b.MR.RemoteAddr(off), b.MR.RKey())
	}
	// Map the region first (the first WRITE asks for it).
	for i := 0; oneSided() == 0; i++ {
		a.MustPostSend(t, w(100, 0))
		conformance.ExpectWC(t, conformance.Poll1(t, a.SendCQ), 100, verbs.WCSuccess, verbs.WCRDMAWrite)
		if i == 10000 {
			t.Fatal("writes never went direct")
		}
		time.Sleep(100 * time.Microsecond)
	}
	conformance.Fill(a.Buf[:4096], 5)
	p0 := oneSided()
	a.MustPostSend(t, w(1, 0), w(2, 64), w(3, 128), w(4, 192))
	if got := oneSided() - p0; got != 4 {
		t.Fatalf("%d of a list of 4 WRITEs went out from PostSend", got)
	}
	for _, id := range []uint64{1, 2, 3, 4} {
		conformance.ExpectWC(t, conformance.Poll1(t, a.SendCQ), id, verbs.WCSuccess, verbs.WCRDMAWrite)
	}
	if !bytes.Equal(b.Buf[:256], a.Buf[:256]) {
		t.Fatal("the list's data was not placed")
	}
	// Carried out in PostSend, they never entered the send queue: they
	// are counted all the same.
	if c, err := a.QP.Counters(); err != nil {
		t.Fatal(err)
	} else if s := c.Sent[verbs.WRRDMAWrite]; s.Msgs < 5 || s.Bytes != 64*s.Msgs {
		t.Fatalf("RDMA WRITE counters %+v, want 64 bytes each, at least 5", s)
	}

	// WRITE, SEND, WRITE: the second WRITE waits for the SEND.
	b.MustPostRecv(t, b.Recv(9, 8192, 64))
	p0 = oneSided()
	a.MustPostSend(t, w(5, 256), a.Send(6, 512, 8), w(7, 320))
	if got := oneSided() - p0; got != 1 {
		t.Fatalf("%d WRITEs went out from PostSend, want 1 (the one before the SEND)", got)
	}
	for _, id := range []uint64{5, 6, 7} {
		wc := conformance.Poll1(t, a.SendCQ)
		if wc.WRID != id || wc.Status != verbs.WCSuccess {
			t.Fatalf("completion %+v, want %d", wc, id)
		}
	}
	conformance.ExpectWC(t, conformance.Poll1(t, b.RecvCQ), 9, verbs.WCSuccess, verbs.WCRecv)
	if !bytes.Equal(b.Buf[256:384], a.Buf[256:384]) {
		t.Fatal("WRITEs around the SEND were not placed")
	}

	// A bad request (an opcode the engine does not implement) stops the
	// list at its index.
	bad := w(10, 0)
	bad.Opcode = verbs.WRBindMW
	err := a.QP.PostSend([]verbs.SendWR{w(8, 384), w(9, 448), bad, w(11, 512)})
	var pe *verbs.PostError
	if !errors.As(err, &pe) || pe.Index != 2 || pe.WRID != 10 {
		t.Fatalf("PostSend: %v, want a PostError at index 2", err)
	}
	for _, id := range []uint64{8, 9} {
		conformance.ExpectWC(t, conformance.Poll1(t, a.SendCQ), id, verbs.WCSuccess, verbs.WCRDMAWrite)
	}
	var wcs [4]verbs.WC
	time.Sleep(10 * time.Millisecond)
	if n, _ := a.SendCQ.Poll(wcs[:]); n != 0 {
		t.Fatalf("%d completions after the refused request: %+v", n, wcs[:n])
	}
}

// A stream of WRITE WITH IMMEDIATEs, some larger than a ring record, on a
// mapped region: while earlier ones are in the ring a WRITE goes through
// it in order, and one that stalls inside its records must go on in them
// when it resumes, even if the ring emptied meanwhile (the direct way
// would then place it a second time, its immediate out of step: rsocket
// streams of 64 KiB failed so). Every message arrives once, in order,
// with its bytes.
func TestWriteWithImmStream(t *testing.T) {
	leakcheck.Check(t)
	const slot, slots, window, n = 64 << 10, 64, 32, 3000
	a, b, _, _ := pairOn(t, true, slot*slots)
	size := func(i int) int { return []int{slot, 8, 4096, slot, slot - 100, 32 << 10, 32 << 10, 32 << 10}[i%8] }
	done := make(chan error, 1)
	go func() {
		done <- func() error {
			wc := make([]verbs.WC, 16)
			for i := range window {
				if err := b.QP.PostRecv([]verbs.RecvWR{{WRID: uint64(i)}}); err != nil {
					return err
				}
			}
			want := make([]byte, slot)
			deadline := time.Now().Add(time.Minute)
			for next := 0; next < n; {
				k, err := b.RecvCQ.Poll(wc)
				if err != nil {
					return err
				}
				if k == 0 && time.Now().After(deadline) {
					return errors.New("receiver: timed out")
				}
				for _, c := range wc[:k] {
					if c.Status != verbs.WCSuccess || c.ImmData != uint32(next) {
						return fmt.Errorf("receive %d: %s imm %d", next, conformance.Describe(c), c.ImmData)
					}
					m, off := size(next), next%slots*slot
					conformance.Fill(want[:m], byte(next))
					if !bytes.Equal(b.Buf[off:off+m], want[:m]) {
						return fmt.Errorf("message %d (%d bytes): target memory differs", next, m)
					}
					next++
					if err := b.QP.PostRecv([]verbs.RecvWR{{WRID: uint64(next)}}); err != nil {
						return err
					}
				}
			}
			return nil
		}()
	}()
	out := 0
	for i := range n {
		for ; out >= window; out-- {
			if c := conformance.Poll1(t, a.SendCQ); c.Status != verbs.WCSuccess {
				t.Fatalf("send: %s", conformance.Describe(c))
			}
		}
		m, off := size(i), i%slots*slot
		conformance.Fill(a.Buf[off:off+m], byte(i))
		w := wr(uint64(i), verbs.WRRDMAWriteWithImm, a.MR.SGE(off, m), b.MR.RemoteAddr(off), b.MR.RKey())
		w.ImmData = uint32(i)
		a.MustPostSend(t, w)
		out++
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A sender whose ring is full stalls until the peer consumes: if the peer
// takes everything between the sender's failed Reserve and its stall, and
// so publishes its head before the sender asks to be poked, the stall
// must still see the move (it once took that head as its starting point,
// and waited for a further move that never came: gRPC streams over
// rsocket hung so).
func TestStallAfterRingDrained(t *testing.T) {
	leakcheck.Check(t)
	const size, n = 32 << 10, 40
	a, b, ca, _ := pairOn(t, false, n*size) // Go memory: every WRITE goes through the ring
	sender := ca.(*shm.Conn)
	// The peer's first consumption waits, so that the ring fills; the
	// sender's first failed Reserve lets it go and drains the ring.
	block := make(chan struct{})
	defer shm.OnceAfterConsume(func(*shm.Conn) { <-block })()
	var filled bool
	wc := make([]verbs.WC, 8)
	defer shm.OnReserveFailed(func() {
		if filled {
			return
		}
		filled = true
		close(block)
		deadline := time.Now().Add(10 * time.Second)
		for !sender.PeerTookAll() && time.Now().Before(deadline) {
			if _, err := b.RecvCQ.Poll(wc); err != nil {
				t.Error(err)
				return
			}
		}
	})()
	for i := range n {
		conformance.Fill(a.Buf[i*size:(i+1)*size], byte(i))
		a.MustPostSend(t, wr(uint64(i), verbs.WRRDMAWrite, a.MR.SGE(i*size, size), b.MR.RemoteAddr(i*size), b.MR.RKey()))
	}
	if !filled {
		close(block)
		t.Fatal("the ring never filled: the test proves nothing")
	}
	for i := range n {
		conformance.ExpectWC(t, conformance.Poll1(t, a.SendCQ), uint64(i), verbs.WCSuccess, verbs.WCRDMAWrite)
	}
	if !bytes.Equal(a.Buf, b.Buf) {
		t.Fatal("target memory differs")
	}
}

// A request the client publishes between the listener's accept and the
// start of its connection is seen: the listener's rings ask to be poked
// from their creation (they asked only from newConn, and such a request
// waited until the listener polled; a listener that only waits, as the
// package example's, never saw it).
func TestRequestBeforeAcceptorStarts(t *testing.T) {
	leakcheck.Check(t)
	o := conformance.PairOpts{BufSize: 4096, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64}}
	a := conformance.NewSide(t, open(t), verbs.QPTRC, o)
	b := conformance.NewSide(t, open(t), verbs.QPTRC, o)
	for _, q := range []*verbs.QP{a.QP, b.QP} {
		if err := conformance.ToInit(q, conformance.DefaultRC.QPAccessFlags); err != nil {
			t.Fatal(err)
		}
	}
	b.MustPostRecv(t, b.Recv(1, 0, 64))
	b.RecvCQ.SetWaitSpin(0) // no poll: only a poke can bring the message in
	posted := make(chan struct{})
	defer shm.OnAccepted(func() {
		select {
		case <-posted:
		case <-time.After(10 * time.Second): // the test failed before it posted
		}
	})()
	connectThen(t, a.QP, b.QP, shm.Params{}, shm.Params{}, func() {
		defer close(posted)
		copy(a.Buf, "early")
		a.MustPostSend(t, a.Send(2, 0, 5))
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := b.RecvCQ.Wait(ctx); err != nil {
		t.Fatalf("the early SEND never arrived: %v", err)
	}
	conformance.ExpectWC(t, conformance.Poll1(t, b.RecvCQ), 1, verbs.WCSuccess, verbs.WCRecv)
	if string(b.Buf[:5]) != "early" {
		t.Fatalf("received %q", b.Buf[:5])
	}
}
