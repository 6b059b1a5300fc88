package shm_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/conformance"
	"github.com/goverbs/goverbs/internal/engine"
	"github.com/goverbs/goverbs/internal/leakcheck"
	"github.com/goverbs/goverbs/provider/shm"
	"github.com/goverbs/goverbs/verbs"
	"golang.org/x/sys/unix"
)

// waitOne blocks in CQ.Wait (no spin: the wait sleeps at once) until cq
// has a completion, and returns it.
func waitOne(t *testing.T, cq *verbs.CQ) verbs.WC {
	t.Helper()
	cq.SetWaitSpin(0)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	wc := make([]verbs.WC, 1)
	for {
		if n, err := cq.Poll(wc); err != nil || n == 1 {
			if err != nil {
				t.Fatal(err)
			}
			return wc[0]
		}
		if err := cq.Wait(ctx); err != nil {
			t.Fatalf("no completion: %v", err)
		}
	}
}

// A requester that sleeps until its signaled SEND completes asks the
// responder for a poke when it acknowledges it. A responder whose
// application polls hands the message over and leaves that poke to the
// application's next call: here its reply, whose one poke wakes the
// requester for both the acknowledgement and the reply (two pokes
// before: one for each).
func TestAckPokeRidesOnReply(t *testing.T) {
	leakcheck.Check(t)
	a, b, _, x := pairOn(t, true, 4096)
	cb := x.(*shm.Conn)
	twice := 0
	for i := range 20 {
		b.MustPostRecv(t, b.Recv(uint64(i), 64, 64))
		a.MustPostRecv(t, a.Recv(uint64(100+i), 64, 64))
		before := cb.Pokes()
		done := make(chan [2]verbs.WC, 1)
		go func() { // the requester: SEND, sleep until it completes, then the reply
			a.MustPostSend(t, a.Send(uint64(1000+i), 0, 8))
			done <- [2]verbs.WC{waitOne(t, a.SendCQ), waitOne(t, a.RecvCQ)}
		}()
		// The responder polls until the request is in, then replies.
		rwc := make([]verbs.WC, 1)
		if err := conformance.Spin(b.RecvCQ, rwc); err != nil {
			t.Fatal(err)
		}
		conformance.ExpectWC(t, rwc[0], uint64(i), verbs.WCSuccess, verbs.WCRecv)
		b.MustPostSend(t, b.Send(uint64(2000+i), 0, 8))
		got := <-done
		conformance.ExpectWC(t, got[0], uint64(1000+i), verbs.WCSuccess, verbs.WCSend)
		conformance.ExpectWC(t, got[1], uint64(100+i), verbs.WCSuccess, verbs.WCRecv)
		if err := conformance.Spin(b.SendCQ, rwc); err != nil {
			t.Fatal(err)
		}
		if n := cb.Pokes() - before; n > 1 && i > 0 {
			// (Once in a while the engine's poll idle time may run out
			// between the receive and the reply on a loaded machine.)
			twice++
		}
	}
	if twice > 5 {
		t.Fatalf("in %d of 19 rounds the responder poked twice for an acknowledgement and its reply, want once", twice)
	}
}

// The poke left to the responder's next call still comes when that call
// never does: the responder takes the message and stops calling, and the
// requester's SEND completes once polled mode ends (engine.PollIdle).
func TestAckPokeWithoutReply(t *testing.T) {
	leakcheck.Check(t)
	a, b, _, _ := pairOn(t, true, 4096)
	b.MustPostRecv(t, b.Recv(1, 64, 64))
	done := make(chan verbs.WC, 1)
	go func() {
		a.MustPostSend(t, a.Send(7, 0, 8))
		done <- waitOne(t, a.SendCQ)
	}()
	rwc := make([]verbs.WC, 1)
	if err := conformance.Spin(b.RecvCQ, rwc); err != nil {
		t.Fatal(err)
	}
	select {
	case wc := <-done:
		conformance.ExpectWC(t, wc, 7, verbs.WCSuccess, verbs.WCSend)
	case <-time.After(5 * time.Second):
		t.Fatal("the SEND never completed after its responder stopped calling")
	}
}

// A wait that blocks in the socket (Block) while the socket goroutine
// still holds the socket (it is leaving its read for the Block) cannot
// read the socket itself; a message that arrives meanwhile and that only
// the socket carries (here the answer to a mapping request, which a
// WRITE larger than the direct limit waits for) must not be left there
// with both goroutines waiting: the socket goroutine, stepping aside,
// has the Block look again.
func TestBlockWhileSocketHeld(t *testing.T) {
	leakcheck.Check(t)
	a, b, _, _ := pairOn(t, true, 256<<10)
	a.SendCQ.SetWaitSpin(0)
	// The socket goroutine reads the socket: a SEND's poke has it
	// receive for a, which does not poll yet.
	a.MustPostRecv(t, a.Recv(5, 0, 64))
	b.MustPostSend(t, b.Send(6, 0, 8))
	conformance.ExpectWC(t, conformance.Poll1(t, a.RecvCQ), 5, verbs.WCSuccess, verbs.WCRecv)
	time.Sleep(10 * time.Millisecond) // and is back in its read
	var once sync.Once
	held := make(chan struct{})
	defer shm.OnRxDeadline(func() {
		once.Do(func() {
			// The Block has begun (its deadline took this goroutine out
			// of its read). The WRITE is posted, asks for the mapping,
			// and its answer arrives while this goroutine holds the
			// socket; the Block parks meanwhile.
			close(held)
			time.Sleep(300 * time.Millisecond)
		})
	})()
	go func() {
		<-held
		time.Sleep(50 * time.Millisecond)
		// Larger than the direct limit: it waits for the mapping.
		a.MustPostSend(t, wr(1, verbs.WRRDMAWrite, a.MR.SGE(0, 128<<10), b.MR.RemoteAddr(0), b.MR.RKey()))
	}()
	wc := waitOne(t, a.SendCQ)
	conformance.ExpectWC(t, wc, 1, verbs.WCSuccess, verbs.WCRDMAWrite)
}

// A wait that blocks in the socket, with a context that has a deadline
// (the usual server loop: one context for every wait), allocates
// nothing.
func TestBlockingWaitAllocateNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	a, b, _, _ := pairOn(t, true, 4096)
	a.RecvCQ.SetWaitSpin(0)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kick, sent := make(chan struct{}), make(chan struct{})
	defer close(kick)
	go func() { // the peer: a SEND a moment after it is asked, so that the wait sleeps
		swc := make([]verbs.WC, 1)
		w := []verbs.SendWR{b.Send(2, 0, 8)}
		for range kick {
			time.Sleep(200 * time.Microsecond)
			if err := b.QP.PostSend(w); err != nil {
				panic(err)
			}
			for n, _ := b.SendCQ.Poll(swc); n == 0; n, _ = b.SendCQ.Poll(swc) {
			}
			sent <- struct{}{}
		}
	}()
	r := []verbs.RecvWR{a.Recv(1, 0, 64)}
	wc := make([]verbs.WC, 1)
	round := func() {
		if err := a.QP.PostRecv(r); err != nil {
			t.Fatal(err)
		}
		kick <- struct{}{}
		for {
			if n, _ := a.RecvCQ.Poll(wc); n == 1 {
				break
			}
			if err := a.RecvCQ.Wait(ctx); err != nil {
				t.Fatal(err)
			}
		}
		<-sent
	}
	round()
	if n := testing.AllocsPerRun(200, round); n != 0 {
		t.Fatalf("%.1f allocations per blocking wait, want 0", n)
	}
}

// The acknowledgement of an unsignaled request makes no completion: a
// requester blocked waiting for its reply asks no poke for it, so the
// responder's consumption wakes nobody, and its reply wakes the requester
// once. (rsocket signals few of its messages; each of their
// acknowledgements woke a reader waiting for the reply, for nothing.)
// Draining the send queue (SQD) waits for every acknowledgement: the
// unsignaled request's still comes.
func TestUnsignaledAckWakesNobody(t *testing.T) {
	leakcheck.Check(t)
	a, b, _, x := pairOn(t, true, 4096)
	cb := x.(*shm.Conn)
	rwc := make([]verbs.WC, 1)
	for i := range 10 {
		b.MustPostRecv(t, b.Recv(uint64(i), 64, 64))
		a.MustPostRecv(t, a.Recv(uint64(100+i), 64, 64))
		done := make(chan verbs.WC, 1)
		go func() { // the requester: an unsignaled SEND, then it sleeps until the reply
			w := a.Send(uint64(1000+i), 0, 8)
			w.Flags &^= verbs.SendSignaled
			a.MustPostSend(t, w)
			done <- waitOne(t, a.RecvCQ)
		}()
		if err := conformance.Spin(b.RecvCQ, rwc); err != nil {
			t.Fatal(err)
		}
		conformance.ExpectWC(t, rwc[0], uint64(i), verbs.WCSuccess, verbs.WCRecv)
		before := cb.Pokes()
		// The responder's polled mode ends (engine.PollIdle) and it
		// publishes what it consumed: no poke for it.
		time.Sleep(5 * engine.PollIdle)
		if n := cb.Pokes() - before; n != 0 {
			t.Fatalf("round %d: the responder poked %d times for an unsignaled request's acknowledgement", i, n)
		}
		b.MustPostSend(t, b.Send(uint64(2000+i), 0, 8))
		conformance.ExpectWC(t, <-done, uint64(100+i), verbs.WCSuccess, verbs.WCRecv)
		if n := cb.Pokes() - before; n != 1 {
			t.Fatalf("round %d: the reply took %d pokes, want 1", i, n)
		}
		if err := conformance.Spin(b.SendCQ, rwc); err != nil {
			t.Fatal(err)
		}
	}
	// An unsignaled SEND that the responder holds (no receive yet), then
	// SQD: the drained event comes once the responder takes it.
	w := a.Send(50, 0, 8)
	w.Flags &^= verbs.SendSignaled
	a.MustPostSend(t, w)
	time.Sleep(5 * engine.PollIdle)
	sqd := verbs.QPAttr{QPState: verbs.QPSSQD, EnSQDAsyncNotify: true}
	if err := a.QP.Modify(&sqd, verbs.QPAttrState|verbs.QPAttrEnSQDAsyncNotify); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * engine.PollIdle)
	b.MustPostRecv(t, b.Recv(51, 64, 64))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ev, err := a.Ctx.GetAsyncEvent(ctx)
	if err != nil {
		t.Fatalf("no drained event: %v", err)
	}
	if ev.Type != verbs.EventSQDrained {
		t.Fatalf("event %v, want SQ_DRAINED", ev)
	}
}

// The waits on a connection's socket ask it for input only: it becomes
// writable whenever the peer reads what we wrote (every poke), and a
// wait's registration for output woke that wait for nothing each time.
// One registration asks for output, the warm-up's (warmUp), which no
// goroutine waits on, and only when the connection has one.
func TestSocketPolledForOutputOnce(t *testing.T) {
	leakcheck.Check(t)
	a, b, x, _ := pairOn(t, true, 4096)
	// Both kinds of waits have run: the socket goroutine's read, a Block.
	a.MustPostRecv(t, a.Recv(1, 0, 64))
	go func() {
		time.Sleep(5 * time.Millisecond)
		b.MustPostSend(t, b.Send(2, 0, 8))
	}()
	conformance.ExpectWC(t, waitOne(t, a.RecvCQ), 1, verbs.WCSuccess, verbs.WCRecv)
	var st unix.Stat_t
	if err := unix.Fstat(x.(*shm.Conn).SockFD(), &st); err != nil {
		t.Fatal(err)
	}
	regs := epollRegistrations(t, st.Ino)
	in, out := 0, 0
	for _, ev := range regs {
		if ev&unix.EPOLLOUT != 0 {
			out++
		} else {
			in++
		}
	}
	if in == 0 { // (the Block's; the socket goroutine's once it read)
		t.Fatalf("no wait parked in the socket: registrations %#x", regs)
	}
	want := 0
	if x.(*shm.Conn).Warm() {
		want = 1
	}
	if out != want {
		t.Fatalf("%d registrations ask the socket for output, want %d (warm-up %v): %#x", out, want, want == 1, regs)
	}
}

// epollRegistrations returns the events of every registration of the file
// with inode ino in the process's epoll sets (/proc/self/fdinfo).
func epollRegistrations(t *testing.T, ino uint64) []uint32 {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var regs []uint32
	for _, e := range ents {
		if l, _ := os.Readlink("/proc/self/fd/" + e.Name()); l != "anon_inode:[eventpoll]" {
			continue
		}
		info, err := os.ReadFile("/proc/self/fdinfo/" + e.Name())
		if err != nil {
			continue // closed meanwhile
		}
		for _, line := range strings.Split(string(info), "\n") {
			// tfd:        7 events: 80002001 data: ... ino:1a2b sdev:8
			f := strings.Fields(line)
			if len(f) < 4 || f[0] != "tfd:" || f[2] != "events:" {
				continue
			}
			var fino uint64
			for _, w := range f {
				if v, ok := strings.CutPrefix(w, "ino:"); ok {
					fino, _ = strconv.ParseUint(v, 16, 64)
				}
			}
			if fino != ino {
				continue
			}
			ev, err := strconv.ParseUint(f[3], 16, 32)
			if err != nil {
				t.Fatalf("fdinfo: %q", line)
			}
			regs = append(regs, uint32(ev))
		}
	}
	return regs
}
