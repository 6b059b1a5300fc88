package engine

import (
	"context"
	"runtime"

	"github.com/goverbs/goverbs/internal/atomicx"
)

// Blocker is a Progressor whose input arrives on a descriptor that a
// waiting goroutine can park on in Go's netpoller: the engine lends it the
// goroutine of a blocking wait (CQ.Wait, CompChannel.GetEvent) so that the
// peer's write wakes that goroutine itself, as a socket's reader is woken,
// instead of the transport's goroutine first and the waiter after it.
type Blocker interface {
	Progressor
	// Block is called in polled mode (so the transport's own goroutines
	// are aside), from one goroutine at a time, when a wait found its CQ
	// or channel empty. The transport processes what it has; then, while
	// w.Idle reports that the wait goes on, it parks the goroutine on its
	// descriptor until input arrives or Interrupt is called, calls w.Busy,
	// processes the input, and asks w.Idle again. It returns true when
	// w.Idle said the wait is over or Interrupt was called (the engine
	// looks again), false when it cannot block now: its goroutines have
	// work that the descriptor's readability does not announce, a message
	// arrived that only they handle, or the connection is closing. The
	// engine then ends polled mode and waits the ordinary way.
	Block(w *Waker) bool
	// Interrupt makes the Block in progress, or the next one, return
	// promptly. Any goroutine may call it, at any time.
	Interrupt()
}

// Waker is what a Blocker reports to while it blocks: one per progress,
// reused by its successive blocking waits (only one at a time).
type Waker struct {
	p    *progress
	cq   *CQ          // CQ.Wait: the CQ waited on
	ch   *CompChannel // GetEvent: the channel waited on
	done <-chan struct{}
}

// Busy says the transport is processing input: a completion it makes
// meanwhile needs no Interrupt, since Idle looks at the CQ afterwards.
func (w *Waker) Busy() { w.p.parked.Store(false) }

// Idle says the transport has processed what it had and is about to park,
// and reports whether it should (the wait goes on). From here until Busy,
// a completion, an event, Close or the end of the wait's context
// interrupts it: the store of parked and the look at the CQ here, and the
// publication of a completion and the load of parked in push, are
// sequentially consistent, so one of the two sides sees the other.
func (w *Waker) Idle() bool {
	w.p.parked.Store(true)
	return w.waiting()
}

// waiting reports whether the wait still has nothing.
func (w *Waker) waiting() bool {
	if cq := w.cq; cq != nil && (!cq.empty() || cq.overflow.Load() || cq.destroyed.Load()) {
		return false
	}
	if ch := w.ch; ch != nil && (ch.n.Load() != 0 || ch.isClosed.Load()) {
		return false
	}
	if w.done != nil {
		select {
		case <-w.done:
			return false
		default:
		}
	}
	return !w.p.detached.Load()
}

// interrupt ends a Block of p that may be parked.
func (p *progress) interrupt() {
	if p.parked.Load() {
		p.bt.Interrupt()
	}
}

// block lends the goroutine of a wait to p's transport (Blocker.Block) for
// w's wait; w is p.w, set by the caller, which holds p.owner. It reports
// false when the transport declined: polled mode has ended then.
func (p *progress) block(ctx context.Context) bool {
	if p.detached.Load() {
		return false
	}
	// Polled mode, whatever the arming: the waiter itself progresses.
	if p.polled.CompareAndSwap(false, true) {
		p.t.Polled(true)
	}
	// The idle rule must not end polled mode under a waiter that has
	// been parked for long, and its timer would cost an idle connection
	// CPU: it rests (its next tick does not re-arm it) while the
	// goroutine blocks.
	p.blocking.Store(true)
	if runtime.GOMAXPROCS(0) == 1 {
		// With one processor the timer is stopped for the wait and
		// reset after it, rather than left running: resetting wakes
		// no thread (there is no idle processor to start one for), and a
		// timer left to fire under the waits cost more (RoCE 64 KiB round
		// trips 134 -> 188 µs, both processes on one CPU).
		p.idle.Stop()
		p.idleOn.Store(false)
	}
	// Poll's yield is for busy-polling loops: the empty polls of a waiter
	// that sleeps (the arm-and-poll idiom's) start no count towards one,
	// whose wake-up of another thread a sleeping round trip paid once in
	// every forty or so.
	atomicx.ReleaseU64(&p.q.scq.emptyPolls, 0)
	atomicx.ReleaseU64(&p.q.rcq.emptyPolls, 0)
	ws, _ := ctx.(wakeSetter)
	if ws != nil {
		ws.SetWake(p.intFn)
	} else if d := ctx.Done(); d != nil {
		p.afterDone(ctx, d)
	}
	ok := p.bt.Block(&p.w)
	p.waits.Add(1)
	p.parked.Store(false)
	if ws != nil {
		ws.SetWake(nil)
	}
	p.blocking.Store(false)
	p.idleMark.Store(false)
	if !ok {
		p.stop()
	} else if p.polled.Load() {
		p.armIdle()
	}
	return ok
}

// afterDone has the end of ctx (whose Done is d) interrupt a Block of p.
// The registration is kept for the waits that follow with the same
// context (a server's loop waits with one context again and again):
// context.AfterFunc allocates, twice per wait. It interrupts nothing
// between waits (interrupt looks at parked), and detach drops it.
func (p *progress) afterDone(ctx context.Context, d <-chan struct{}) {
	p.afMu.Lock()
	defer p.afMu.Unlock()
	if p.afDone == d || p.detached.Load() {
		return
	}
	if p.afStop != nil {
		p.afStop()
	}
	p.afDone, p.afStop = d, context.AfterFunc(ctx, p.interrupt)
}

// dropAfterDone undoes afterDone's registration.
func (p *progress) dropAfterDone() {
	p.afMu.Lock()
	if p.afStop != nil {
		p.afStop()
	}
	p.afDone, p.afStop = nil, nil
	p.afMu.Unlock()
}

// wakeSetter is a context of the caller's own type that calls the
// function it is given when it ends (after Done is closed), so that a
// blocking wait learns of its end without context.AfterFunc, which for
// such a context starts a goroutine per wait: rsocket's per-direction
// wait context.
type wakeSetter interface {
	SetWake(f func())
}

// soleBlocker returns the progress of the CQ's one transport endpoint when
// it is a Blocker, or nil.
func (cq *CQ) soleBlocker() *progress {
	ps := cq.pollers.Load()
	if ps == nil || len(*ps) != 1 || (*ps)[0].bt == nil {
		return nil
	}
	return (*ps)[0]
}

// block parks the waiting goroutine in the descriptor of the CQ's one
// transport endpoint when it is a Blocker that no other goroutine blocks
// in. It reports blocked when it did (the caller looks at the CQ again);
// otherwise busy is that endpoint's progress when another goroutine
// blocks in it (the caller sleeps on the CQ as one of its sleepers: that
// goroutine's progress wakes it), nil when the CQ has no such endpoint
// (the transports must progress on their own).
func (cq *CQ) block(ctx context.Context) (blocked bool, busy *progress) {
	p := cq.soleBlocker()
	if p == nil {
		return false, nil
	}
	if !p.owner.CompareAndSwap(false, true) {
		return false, p
	}
	p.w = Waker{p: p, cq: cq, done: ctx.Done()}
	cq.blk.Store(p)
	ok := p.block(ctx)
	cq.blk.Store(nil)
	p.w = Waker{}
	p.release()
	return ok, nil
}

// release ends a goroutine's ownership of p's blocking: the goroutines
// that slept while it blocked are woken to take it over (or, after a
// decline, to sleep with the transport progressing on its own). A
// sleeper registers before it looks at owner, and this looks at sleepers
// after clearing owner: one of the two sees the other.
func (p *progress) release() {
	p.owner.Store(false)
	if p.sleepers.Load() == 0 {
		return
	}
	for _, cq := range [2]*CQ{p.q.scq, p.q.rcq} {
		cq.wmu.Lock()
		if cq.wch != nil {
			close(cq.wch)
			cq.wch = nil
		}
		cq.wmu.Unlock()
		if cq.ch != nil {
			select {
			case cq.ch.wake <- struct{}{}:
			default:
			}
		}
	}
}

// sleep registers a goroutine about to sleep on a CQ or channel while
// another blocks in p; false when that one has left already (the caller
// looks again instead of sleeping).
func (p *progress) sleep() bool {
	p.sleepers.Add(1)
	if !p.owner.Load() {
		p.sleepers.Add(-1)
		return false
	}
	return true
}

// blockable reports whether a wait on the CQ's channel would block in a
// transport's descriptor (GetEvent): ReqNotify then leaves polled mode on.
// An application that arms and then waits some other way (not GetEvent,
// not epoll on the channel's Fd, which ends polled mode) gets its event
// once the idle rule ends polled mode (PollIdle).
func (cq *CQ) blockable() bool {
	return cq.ch != nil && cq.ch.soleBlocker() != nil
}

// soleBlocker returns the progress of the one transport endpoint of the
// channel's CQs when it is a Blocker, the channel has few CQs and no
// descriptor (a channel waited on with epoll needs the transports to
// progress on their own), or nil.
func (ch *CompChannel) soleBlocker() *progress {
	if ch.fdMadeA.Load() {
		return nil
	}
	cqs := ch.cqs.Load()
	if cqs == nil || len(*cqs) == 0 || len(*cqs) > maxBlockCQs {
		return nil
	}
	var p *progress
	for _, cq := range *cqs {
		ps := cq.pollers.Load()
		if ps == nil || len(*ps) == 0 {
			continue
		}
		if len(*ps) != 1 || (p != nil && (*ps)[0] != p) {
			return nil
		}
		p = (*ps)[0]
	}
	if p == nil || p.bt == nil {
		return nil
	}
	return p
}

// maxBlockCQs is the most CQs a channel may have for GetEvent to block in
// their transport's descriptor (a QP's send and receive CQs, and a few).
const maxBlockCQs = 4

// block is CQ.block for GetEvent.
func (ch *CompChannel) block(ctx context.Context) (blocked bool, busy *progress) {
	p := ch.soleBlocker()
	if p == nil {
		return false, nil
	}
	if !p.owner.CompareAndSwap(false, true) {
		return false, p
	}
	p.w = Waker{p: p, ch: ch, done: ctx.Done()}
	ch.blk.Store(p)
	ok := p.block(ctx)
	ch.blk.Store(nil)
	p.w = Waker{}
	p.release()
	return ok, nil
}

// stopPolls ends polled mode on the transports of the channel's CQs: a
// goroutine sleeps on the channel the ordinary way.
func (ch *CompChannel) stopPolls() {
	if cqs := ch.cqs.Load(); cqs != nil {
		for _, cq := range *cqs {
			cq.pollStop()
		}
	}
}

// addCQ and removeCQ keep the channel's list of CQs (copy-on-write).
func (ch *CompChannel) addCQ(cq *CQ) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	var n []*CQ
	if old := ch.cqs.Load(); old != nil {
		n = append(n, *old...)
	}
	n = append(n, cq)
	ch.cqs.Store(&n)
}

func (ch *CompChannel) removeCQ(cq *CQ) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	old := ch.cqs.Load()
	if old == nil {
		return
	}
	var n []*CQ
	for _, x := range *old {
		if x != cq {
			n = append(n, x)
		}
	}
	ch.cqs.Store(&n)
}
