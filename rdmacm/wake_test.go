package rdmacm_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/engine"
	"github.com/goverbs/goverbs/internal/leakcheck"
	"github.com/goverbs/goverbs/rdmacm"
	"github.com/goverbs/goverbs/verbs"
)

// wakeRounds is how many round trips TestBlockingPingPongStress makes per
// transport: GOVERBS_WAKE_ROUNDS, or 10^4 (2000 under the race detector
// or -short).
func wakeRounds() int {
	if s := os.Getenv("GOVERBS_WAKE_ROUNDS"); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n > 0 {
			return n
		}
	}
	if raceEnabled || testing.Short() {
		return 2000
	}
	return 10000
}

// spins are the wait spins the stress test picks from: off, shorter than
// any round trip, about one, and longer than most.
var spins = []time.Duration{0, time.Microsecond, 20 * time.Microsecond, verbs.DefaultWaitSpin, time.Millisecond}

// A blocking ping-pong, each side's waits made in a way picked at random
// per round (GetRecvComp and GetSendComp, the C way on the identifiers'
// channels; or CQ.Wait and Poll), with a random wait spin, and a random
// delay on either side before it answers now and then (so that waits
// sleep, are answered within the spin, or find the completion already
// there), loses no completion and no wake-up: every round trip comes
// back, in order, with its own payload, before the test's deadline.
func TestBlockingPingPongStress(t *testing.T) { both(t, testBlockingStress) }

func testBlockingStress(t *testing.T, tr transport) {
	leakcheck.Check(t)
	c, s := pair(t, tr, nil, nil)
	n := wakeRounds()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute+time.Duration(n)*2*time.Millisecond)
	defer cancel()
	cbuf, sbuf, cmr, smr := msgBufs(t, c, s)
	// The first receives are posted before either side sends (no RNR
	// wait: the server reposts before it answers, the client before it
	// asks).
	if err := s.PostRecv(0, sbuf[32:40], smr); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		rng := rand.New(rand.NewPCG(2, uint64(n)))
		for i := range n {
			tweak(rng, s)
			wc, err := take(ctx, rng, s, false)
			if err == nil && (wc.ByteLen != 8 || binary.LittleEndian.Uint64(sbuf[32:40]) != uint64(i)) {
				err = fmt.Errorf("server round %d: got %d bytes, %d", i, wc.ByteLen, binary.LittleEndian.Uint64(sbuf[32:40]))
			}
			if err == nil {
				err = s.PostRecv(uint64(i+1), sbuf[32:40], smr)
			}
			if err != nil {
				errc <- err
				return
			}
			delay(rng)
			binary.LittleEndian.PutUint64(sbuf[:8], ^uint64(i))
			if err := s.PostSend(uint64(i), sbuf[:8], smr, verbs.SendSignaled); err != nil {
				errc <- err
				return
			}
			if _, err := take(ctx, rng, s, true); err != nil {
				errc <- fmt.Errorf("server round %d: send: %w", i, err)
				return
			}
		}
		errc <- nil
	}()
	rng := rand.New(rand.NewPCG(1, uint64(n)))
	for i := range n {
		tweak(rng, c)
		if err := c.PostRecv(uint64(i), cbuf[32:40], cmr); err != nil {
			t.Fatal(err)
		}
		delay(rng)
		binary.LittleEndian.PutUint64(cbuf[:8], uint64(i))
		if err := c.PostSend(uint64(i), cbuf[:8], cmr, verbs.SendSignaled); err != nil {
			t.Fatal(err)
		}
		if _, err := take(ctx, rng, c, true); err != nil {
			t.Fatalf("client round %d: send: %v", i, err)
		}
		wc, err := take(ctx, rng, c, false)
		if err != nil {
			t.Fatalf("client round %d: receive: %v", i, err)
		}
		if wc.ByteLen != 8 || binary.LittleEndian.Uint64(cbuf[32:40]) != ^uint64(i) {
			t.Fatalf("client round %d: got %d bytes, %x", i, wc.ByteLen, cbuf[32:40])
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// msgBufs registers a 64-byte message buffer on each side, deregistered
// when the test ends.
func msgBufs(t *testing.T, c, s *rdmacm.ID) (cbuf, sbuf []byte, cmr, smr *verbs.MR) {
	t.Helper()
	cbuf, sbuf = make([]byte, 64), make([]byte, 64)
	var err error
	if cmr, err = c.RegMsgs(cbuf); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmr.Dereg() })
	if smr, err = s.RegMsgs(sbuf); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { smr.Dereg() })
	return cbuf, sbuf, cmr, smr
}

// tweak gives the identifier's CQs random wait spins now and then.
func tweak(rng *rand.Rand, id *rdmacm.ID) {
	if rng.IntN(8) == 0 {
		id.SendCQ().SetWaitSpin(spins[rng.IntN(len(spins))])
		id.RecvCQ().SetWaitSpin(spins[rng.IntN(len(spins))])
	}
}

// delay sleeps now and then, so that the other side's wait sleeps.
func delay(rng *rand.Rand) {
	switch rng.IntN(16) {
	case 0:
		time.Sleep(time.Duration(rng.IntN(300)) * time.Microsecond)
	case 1:
		for end := time.Now().Add(time.Duration(rng.IntN(50)) * time.Microsecond); time.Now().Before(end); {
		}
	}
}

// take waits for one successful completion on the identifier's send or
// receive CQ, the rdmacm way or with CQ.Wait and Poll.
func take(ctx context.Context, rng *rand.Rand, id *rdmacm.ID, send bool) (verbs.WC, error) {
	if rng.IntN(2) == 0 {
		var wc verbs.WC
		var err error
		if send {
			wc, err = id.GetSendComp(ctx)
		} else {
			wc, err = id.GetRecvComp(ctx)
		}
		if err == nil {
			err = wc.Err()
		}
		return wc, err
	}
	cq := id.RecvCQ()
	if send {
		cq = id.SendCQ()
	}
	var wc [1]verbs.WC
	for {
		n, err := cq.Poll(wc[:])
		if err != nil {
			return wc[0], err
		}
		if n == 1 {
			return wc[0], wc[0].Err()
		}
		if err := cq.Wait(ctx); err != nil {
			return wc[0], err
		}
	}
}

// Many goroutines waiting on one CQ (CQ.Wait, then Poll) all return:
// those that take the messages that come, each message taken once, and
// the others when their context ends. One of them may block in the
// transport's socket, the others sleep on the CQ; none is left behind.
func TestManyWaitersOneCQ(t *testing.T) { both(t, testManyWaiters) }

func testManyWaiters(t *testing.T, tr transport) {
	leakcheck.Check(t)
	c, s := pair(t, tr, nil, nil)
	const k, waiters = 8, 24 // k: the receive queue's depth
	ctx := timeout(t)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	buf := make([]byte, 8*(k+1))
	cmr, _ := c.RegMsgs(buf[:8])
	smr, _ := s.RegMsgs(buf[8:])
	defer cmr.Dereg()
	defer smr.Dereg()
	for i := range k {
		if err := s.PostRecv(uint64(i), buf[8+8*i:16+8*i], smr); err != nil {
			t.Fatal(err)
		}
	}
	cq := s.RecvCQ()
	cq.SetWaitSpin(0)
	var mu sync.Mutex
	got := map[uint64]bool{}
	var wg sync.WaitGroup
	errs := make(chan error, waiters)
	for range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var wc [1]verbs.WC
			for {
				if err := cq.Wait(wctx); err != nil {
					if wctx.Err() == nil {
						errs <- err
					}
					return
				}
				n, err := cq.Poll(wc[:])
				if err != nil {
					errs <- err
					return
				}
				if n == 1 {
					mu.Lock()
					dup := got[wc[0].WRID]
					got[wc[0].WRID] = true
					if len(got) == k {
						cancel() // the rest end their waits
					}
					mu.Unlock()
					if dup || wc[0].Err() != nil {
						errs <- fmt.Errorf("completion %+v twice or failed", wc[0])
					}
					return
				}
			}
		}()
	}
	time.Sleep(20 * time.Millisecond) // they all wait
	for i := range k {
		if i%3 == 0 {
			time.Sleep(2 * time.Millisecond)
		}
		if err := c.PostSend(uint64(i), buf[:8], cmr, verbs.SendSignaled); err != nil {
			t.Fatal(err)
		}
		if wc, err := c.GetSendComp(ctx); err != nil || wc.Err() != nil {
			t.Fatal(err, wc)
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("waiters still blocked 10 s after the last message (%d taken)", len(got))
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if len(got) != k {
		t.Fatalf("%d receive completions, want %d", len(got), k)
	}
}

// Close while a goroutine waits (spin off, so it sleeps: in the
// transport's socket where it can) ends the wait promptly: GetRecvComp
// with the receive's flush or ErrClosed, CQ.Wait likewise.
func TestCloseWhileWaiting(t *testing.T) { both(t, testCloseWhileWaiting) }

func testCloseWhileWaiting(t *testing.T, tr transport) {
	leakcheck.Check(t)
	for _, how := range []string{"GetRecvComp", "Wait"} {
		c, s := pair(t, tr, nil, nil)
		s.RecvCQ().SetWaitSpin(0)
		buf := make([]byte, 8)
		smr, _ := s.RegMsgs(buf)
		if err := s.PostRecv(1, buf, smr); err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		cq := s.RecvCQ()
		go func() {
			if how == "Wait" {
				got <- cq.Wait(context.Background())
				return
			}
			wc, err := s.GetRecvComp(context.Background())
			if err == nil && wc.Status != verbs.WCWRFlushErr {
				err = fmt.Errorf("a completion that is not the flush: %+v", wc)
			} else if err == nil {
				err = errFlushed
			}
			got <- err
		}()
		time.Sleep(20 * time.Millisecond) // it sleeps
		start := time.Now()
		s.Close()
		select {
		case err := <-got:
			// The wait ends with the receive's flush, or with the
			// error of the identifier closed under it (a Wait: nil for
			// the flush, an error once the CQ is gone).
			if how == "GetRecvComp" && !errors.Is(err, rdmacm.ErrClosed) && err != errFlushed {
				t.Errorf("%s: GetRecvComp after Close: %v", tr.name, err)
			}
			t.Logf("%s: %s returned %v after %v", tr.name, how, err, time.Since(start))
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: %s still waits 5 s after Close", tr.name, how)
		}
		c.Close()
		smr.Dereg()
	}
}

// Connections whose goroutines all block in waits (spin off: an idle
// server) cost no CPU: the process uses under 1% of one CPU over the
// measurement (10 s; 2 s with -short), with 100 connections (50 over shm,
// 50 over iWARP) each with a goroutine in GetRecvComp and another in
// CQ.Wait on the send CQ. The default spin spins first, then adapts; the
// measurement starts after it.
func TestIdleWaitsCostNoCPU(t *testing.T) {
	leakcheck.Check(t)
	d := 10 * time.Second
	if testing.Short() {
		d = 2 * time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var ids []*rdmacm.ID
	for i := range 100 {
		tr := transports[i%2] // tcp (iWARP), unix (shm)
		c, s := pair(t, tr, nil, nil)
		ids = append(ids, c, s)
		buf := make([]byte, 8)
		smr, _ := s.RegMsgs(buf)
		t.Cleanup(func() { smr.Dereg() })
		if err := s.PostRecv(1, buf, smr); err != nil {
			t.Fatal(err)
		}
		wg.Add(2)
		go func() {
			defer wg.Done()
			s.GetRecvComp(ctx)
		}()
		go func() {
			defer wg.Done()
			s.SendCQ().Wait(ctx)
		}()
	}
	time.Sleep(200 * time.Millisecond) // the spins end; everyone sleeps
	before := cpuTime(t)
	time.Sleep(d)
	used := cpuTime(t) - before
	cancel()
	wg.Wait()
	for _, id := range ids {
		id.Close()
	}
	t.Logf("100 idle connections, 200 blocked waits: %v of CPU in %v (%.2f%%)", used, d, 100*float64(used)/float64(d))
	if used > d/100 {
		t.Fatalf("idle waits used %v of CPU in %v (over 1%%)", used, d)
	}
}

var errFlushed = errors.New("the receive was flushed")

// cpuTime is the process's user and system CPU time.
func cpuTime(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// A CQ that several QPs share, their receives from one SRQ, is waited on
// the ordinary way (more than one endpoint feeds it: no waiter blocks in
// one of their sockets), with CQ.Wait and with its channel, while the
// messages of two connections come at random moments: every one arrives,
// none is lost or taken twice. (A CQ belongs to one device's context, so
// QPs of different transports cannot share one: loop0, shm0 and iwarp0
// are separate devices.)
func TestSharedCQAndSRQ(t *testing.T) { both(t, testSharedCQ) }

func testSharedCQ(t *testing.T, tr transport) {
	leakcheck.Check(t)
	ctx := timeout(t)
	ln, err := rdmacm.Listen(tr.listen())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const conns, msgs, depth = 2, 200, 16
	type server struct {
		cq  *verbs.CQ
		ch  *verbs.CompChannel
		scq *verbs.CQ
		srq *verbs.SRQ
		mr  *verbs.MR
	}
	var sv server
	buf := make([]byte, 8*depth)
	accepted := make(chan *rdmacm.ID, conns)
	go func() {
		for range conns {
			req, err := ln.GetRequest(ctx)
			if err != nil {
				accepted <- nil
				return
			}
			if sv.cq == nil { // the first request's device makes the shared objects
				vctx, pd := req.DeviceContext(), req.PD()
				sv.ch, _ = vctx.CreateCompChannel()
				sv.cq, _ = vctx.CreateCQ(4*depth, sv.ch)
				sv.scq, _ = vctx.CreateCQ(4*depth, nil)
				sv.srq, err = pd.CreateSRQ(verbs.SRQInitAttr{Attr: verbs.SRQAttr{MaxWR: depth, MaxSGE: 1}})
				if err != nil {
					t.Error(err)
					accepted <- nil
					return
				}
				sv.mr, _ = pd.RegMR(buf, verbs.AccessLocalWrite)
				for i := range depth {
					sv.srq.PostRecv([]verbs.RecvWR{{WRID: uint64(i), SGList: []verbs.SGE{sv.mr.SGE(8*i, 8)}}})
				}
			}
			attr := verbs.QPInitAttr{SendCQ: sv.scq, RecvCQ: sv.cq, SRQ: sv.srq, Cap: verbs.QPCap{MaxSendWR: 4, MaxSendSGE: 1}}
			if err := req.CreateQP(nil, attr); err != nil {
				t.Error(err)
				accepted <- nil
				return
			}
			if err := req.Accept(ctx, nil); err != nil {
				t.Error(err)
				accepted <- nil
				return
			}
			accepted <- req
		}
	}()
	var clients []*rdmacm.ID
	for range conns {
		c, err := rdmacm.Dial(ctx, ln.LocalAddr().String(), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients = append(clients, c)
		s := <-accepted
		if s == nil {
			t.Fatal("accept failed")
		}
		defer s.Close()
	}
	defer func() {
		sv.srq.Destroy()
		sv.mr.Dereg()
		sv.cq.Destroy()
		sv.scq.Destroy()
		sv.ch.Close()
	}()
	sv.cq.SetWaitSpin(0)
	// Credits: no more messages in flight than the SRQ holds (iWARP has
	// no RNR: a message with no receive posted fails the connection).
	credits := make(chan struct{}, depth)
	for range depth {
		credits <- struct{}{}
	}
	errs := make(chan error, conns)
	for k, c := range clients {
		go func() {
			rng := rand.New(rand.NewPCG(uint64(k), 7))
			cb := make([]byte, 8)
			mr, _ := c.RegMsgs(cb)
			defer mr.Dereg()
			for i := range msgs {
				delay(rng)
				select {
				case <-credits:
				case <-ctx.Done():
					errs <- ctx.Err()
					return
				}
				binary.LittleEndian.PutUint64(cb, uint64(k<<32|i))
				if err := c.PostSend(uint64(i), cb, mr, verbs.SendSignaled); err != nil {
					errs <- err
					return
				}
				if wc, err := c.GetSendComp(ctx); err != nil || wc.Err() != nil {
					errs <- fmt.Errorf("client %d send %d: %v %v", k, i, err, wc.Err())
					return
				}
			}
			errs <- nil
		}()
	}
	got := make([][]bool, conns)
	for k := range got {
		got[k] = make([]bool, msgs)
	}
	rng := rand.New(rand.NewPCG(9, 9))
	var wc [4]verbs.WC
	for n := 0; n < conns*msgs; {
		k, err := sv.cq.Poll(wc[:])
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range wc[:k] {
			if w.Status != verbs.WCSuccess {
				t.Fatalf("receive %+v", w)
			}
			v := binary.LittleEndian.Uint64(buf[8*w.WRID:])
			c, i := v>>32, v&0xffffffff
			if c >= conns || i >= msgs || got[c][i] {
				t.Fatalf("message %d of connection %d: twice or unknown", i, c)
			}
			got[c][i] = true
			n++
			sv.srq.PostRecv([]verbs.RecvWR{{WRID: w.WRID, SGList: []verbs.SGE{sv.mr.SGE(8*int(w.WRID), 8)}}})
			credits <- struct{}{}
		}
		if k > 0 {
			continue
		}
		if rng.IntN(2) == 0 {
			if err := sv.cq.Wait(ctx); err != nil {
				t.Fatalf("Wait after %d messages: %v", n, err)
			}
			continue
		}
		if err := sv.cq.ReqNotify(false); err != nil {
			t.Fatal(err)
		}
		if k, _ := sv.cq.Poll(wc[:1]); k == 1 {
			// Taken above, next time round: put it back in the count.
			w := wc[0]
			v := binary.LittleEndian.Uint64(buf[8*w.WRID:])
			c, i := v>>32, v&0xffffffff
			if w.Status != verbs.WCSuccess || c >= conns || i >= msgs || got[c][i] {
				t.Fatalf("receive %+v: failed, twice or unknown", w)
			}
			got[c][i] = true
			n++
			sv.srq.PostRecv([]verbs.RecvWR{{WRID: w.WRID, SGList: []verbs.SGE{sv.mr.SGE(8*int(w.WRID), 8)}}})
			credits <- struct{}{}
			continue
		}
		evcq, err := sv.ch.GetEvent(ctx)
		if err != nil {
			t.Fatalf("GetEvent after %d messages: %v", n, err)
		}
		sv.ch.AckEvents(evcq, 1)
	}
	for range conns {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// The idle rule under a sleeping ping-pong: while blocking waits keep
// returning, its timers tick every engine.BlockIdle, not every PollIdle
// (each tick starts a goroutine, and with it a runtime thread that then
// holds the netpoller: a fifth of such a ping-pong's CPU when it ticked
// every PollIdle); and once the application stops, neither polling nor
// waiting, each side's polled mode still ends, within about BlockIdle.
func TestIdleRuleUnderBlockingPingPong(t *testing.T) { both(t, testIdleRuleBlocking) }

func testIdleRuleBlocking(t *testing.T, tr transport) {
	leakcheck.Check(t)
	c, s := pair(t, tr, nil, nil)
	for _, id := range []*rdmacm.ID{c, s} {
		id.SendCQ().SetWaitSpin(0) // every wait that finds nothing sleeps
		id.RecvCQ().SetWaitSpin(0)
	}
	ctx := timeout(t)
	cbuf, sbuf, cmr, smr := msgBufs(t, c, s)
	if err := s.PostRecv(0, sbuf[32:40], smr); err != nil {
		t.Fatal(err)
	}
	const last = ^uint64(0) // the client's last message
	errc := make(chan error, 1)
	go func() { // the server echoes until the client's last message
		for {
			wc, err := s.GetRecvComp(ctx)
			if err == nil {
				err = wc.Err()
			}
			copy(sbuf[:8], sbuf[32:40])
			if err == nil {
				err = s.PostRecv(0, sbuf[32:40], smr)
			}
			if err == nil {
				err = s.PostSend(1, sbuf[:8], smr, verbs.SendSignaled)
			}
			if err == nil {
				_, err = s.GetSendComp(ctx)
			}
			if err != nil || binary.LittleEndian.Uint64(sbuf[:8]) == last {
				errc <- err
				return
			}
		}
	}()
	round := func(v uint64) {
		t.Helper()
		binary.LittleEndian.PutUint64(cbuf[:8], v)
		if err := c.PostRecv(0, cbuf[32:40], cmr); err != nil {
			t.Fatal(err)
		}
		if err := c.PostSend(1, cbuf[:8], cmr, verbs.SendSignaled); err != nil {
			t.Fatal(err)
		}
		for _, get := range []func(context.Context) (verbs.WC, error){c.GetSendComp, c.GetRecvComp} {
			wc, err := get(ctx)
			if err == nil {
				err = wc.Err()
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		if got := binary.LittleEndian.Uint64(cbuf[32:40]); got != v {
			t.Fatalf("echo %d, want %d", got, v)
		}
	}
	for i := range 50 {
		round(uint64(i))
	}
	ticks0 := engine.IdleTicks()
	start, rounds := time.Now(), 0
	for time.Since(start) < 300*time.Millisecond {
		round(uint64(rounds))
		rounds++
	}
	elapsed := time.Since(start)
	ticks := engine.IdleTicks() - ticks0
	// Two QPs, each ticking at most once a BlockIdle (and a few times
	// sooner, after a rest); every PollIdle would be eight times as many.
	t.Logf("%d idle ticks in %v (%d round trips)", ticks, elapsed, rounds)
	if limit := 2 * (uint64(elapsed/engine.BlockIdle) + 5); ticks > limit {
		t.Fatalf("%d idle ticks in %v of sleeping ping-pong (%d round trips), want at most %d", ticks, elapsed, rounds, limit)
	}
	round(last)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	// Nobody polls or waits now: each side's polled mode ends.
	deadline := time.Now().Add(2 * time.Second)
	for _, id := range []*rdmacm.ID{c, s} {
		for engine.PolledMode(id.QP()) {
			if time.Now().After(deadline) {
				t.Fatal("polled mode still on 2 s after the ping-pong stopped")
			}
			time.Sleep(time.Millisecond)
		}
	}
}
