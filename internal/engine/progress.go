package engine

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/goverbs/goverbs/verbs"
	"github.com/goverbs/goverbs/verbs/driver"
)

// PollIdle is how long an application may go without polling before the
// engine ends polled mode and its transports progress on their own again.
// A timer checks it, not the polls (reading the clock on every poll costs
// more than the rest of an empty poll in a VM): a poll clears a mark, and a
// mark still set at the next tick means no poll came for a whole period.
const PollIdle = 2 * time.Millisecond

// progress is the engine's side of a Progressor: whether the application
// polls, decided here once for every transport.
type progress struct {
	t        Progressor
	q        *QP
	polled   atomic.Bool
	idleMark atomic.Bool // set by idleTick, cleared by every poll
	idle     *time.Timer
	idleOn   atomic.Bool // idle is pending (or its tick runs): armIdle need not
	detached atomic.Bool

	bt       Blocker       // t, when it can block a waiter in its descriptor
	owner    atomic.Bool   // a goroutine blocks in bt (one at a time)
	sleepers atomic.Int32  // goroutines asleep on a CQ or channel meanwhile
	parked   atomic.Bool   // it may be parked: completions must Interrupt it
	blocking atomic.Bool   // the idle rule leaves polled mode alone
	waits    atomic.Uint32 // blocking waits that returned (idleTick)
	tickSeen atomic.Uint32 // waits at the last tick that found one blocking
	w        Waker         // the owner's
	intFn    func()        // interrupt, as a value made once
	afMu     sync.Mutex    // afterDone's registration:
	afDone   <-chan struct{}
	afStop   func() bool
}

func newProgress(q *QP, t Progressor) *progress {
	p := &progress{t: t, q: q}
	p.bt, _ = t.(Blocker)
	p.intFn = p.interrupt
	p.idle = time.AfterFunc(time.Hour, p.idleTick)
	p.idle.Stop()
	return p
}

// poll is a poll of cq, which the application found empty: the transport
// makes progress, handing receive completions for cq to wc. A poll between
// arming a CQ and waiting on its channel (the verbs idiom) does not start
// polled mode: the application is about to block. It returns how many
// completions it put in wc.
func (p *progress) poll(cq *CQ, wc []verbs.WC) int {
	if p.idleMark.Load() {
		p.idleMark.Store(false)
	}
	if !p.polled.Load() {
		p.start()
	}
	return p.t.Progress(Handoff{cq: cq, wc: wc})
}

// start begins polled mode unless a CQ of the QP is armed.
func (p *progress) start() {
	if p.q.scq.isArmed() || p.q.rcq.isArmed() || p.detached.Load() {
		return
	}
	if p.polled.CompareAndSwap(false, true) {
		p.t.Polled(true)
		p.armIdle()
	}
}

// armIdle starts the idle rule's timer unless it is pending already.
// Resetting a timer is not free: a timer earlier than every sleeping
// thread's makes the runtime wake a thread (to sleep again with the new
// deadline), which a blocking wait paid on every return when it re-armed
// the timer each time.
func (p *progress) armIdle() { p.armIdleAfter(PollIdle) }

// armIdleAfter is armIdle with the tick d from now.
func (p *progress) armIdleAfter(d time.Duration) {
	if !p.idleOn.Load() && p.idleOn.CompareAndSwap(false, true) {
		p.idle.Reset(d)
	}
}

// stop ends polled mode: the application is about to block, or stopped
// polling.
func (p *progress) stop() {
	if p.polled.CompareAndSwap(true, false) {
		p.t.Polled(false)
	}
}

// BlockIdle is the idle rule's period while blocking waits keep returning
// (a sleeping ping-pong): then the application is there, and a tick only
// confirms it. Each tick runs in a goroutine of its own (time.AfterFunc),
// whose start wakes an idle thread of the runtime (newproc -> wakep); that
// thread then stays behind as the one blocked in the netpoller, often on
// the other CPU, and the peer's next message wakes it there: ticking every
// PollIdle under a sleeping ping-pong cost 13-45% of its CPU (8 B between
// two processes, free placement, shm, iWARP and RoCE). An application that stops after its
// last wait, neither polling nor waiting, has polled mode ended within two
// BlockIdle periods (within two PollIdle ones after its last poll).
const BlockIdle = 16 * time.Millisecond

// idleTick runs every PollIdle while the application polls (BlockIdle while
// its blocking waits keep returning); it re-arms itself while polled mode
// lasts. A tick after waits returned marks the period (a poll clears the
// mark): the next tick ends polled mode if no poll and no wait came since.
// A tick during a blocking wait lets the timer rest (an idle connection
// costs no CPU) when no wait returned since the last tick; the wait re-arms
// it when it returns. Each side clears its flag before it looks at the
// other's (idleOn here, blocking there): one of the two sees the other, so
// the timer is never left resting after a wait. (While waits keep
// returning it keeps ticking rather than rest: a re-arm on a wait's
// return, with no thread in the netpoller then, makes the runtime start
// one, wakeNetPoller -> wakep, a thread wake-up per rest.)
func (p *progress) idleTick() {
	p.idleOn.Store(false)
	idleTicks.Add(1)
	if !p.polled.Load() || p.detached.Load() {
		return
	}
	if w := p.waits.Load(); p.tickSeen.Swap(w) != w {
		p.idleMark.Store(true)
		p.armIdleAfter(BlockIdle)
		return
	}
	if p.blocking.Load() {
		return
	}
	if p.idleMark.Swap(true) {
		p.stop()
		return
	}
	p.armIdle()
}

// idleTicks counts the idle rule's ticks in the process (IdleTicks).
var idleTicks atomic.Uint64

// IdleTicks returns how many times the idle rule's timers fired in this
// process (for tests of the rule).
func IdleTicks() uint64 { return idleTicks.Load() }

// PolledMode reports whether qp, a QP of the engine's, is in polled mode
// (for tests of the idle rule).
func PolledMode(qp *verbs.QP) bool {
	q, ok := driver.QPOf(qp).(*QP)
	if !ok {
		return false
	}
	p := q.prog.Load()
	return p != nil && p.polled.Load()
}

// attach makes the QP's CQs drive t.
func (p *progress) attach() {
	p.q.scq.addPoller(p)
	if p.q.rcq != p.q.scq {
		p.q.rcq.addPoller(p)
	}
}

// detach undoes attach; the transport is shutting down and its own
// goroutines finish without the application's polls.
func (p *progress) detach() {
	p.detached.Store(true)
	p.idle.Stop()
	p.interrupt()
	p.dropAfterDone()
	p.q.scq.removePoller(p)
	p.q.rcq.removePoller(p)
}

// Handoff is the output array of a poll that found its CQ empty, lent by
// the engine to the deliveries the transport makes (Responder.Deliver): a
// receive completion for that CQ made while the CQ holds nothing, nobody
// armed it and nobody waits goes there, instead of through the ring and
// back out (a compare-and-swap and a fenced store to push, another
// compare-and-swap to pop). It lives on the poller's stack.
type Handoff struct {
	cq *CQ
	wc []verbs.WC
	n  int
}

// Len returns how many completions were handed off.
func (ho *Handoff) Len() int { return ho.n }

// take returns the next free entry of the hand-off for a completion of cq,
// or nil when the completion must go through the ring: another CQ's, no
// room, or a CQ that holds completions (they come first), that someone
// armed or waits on (they must be told), or that overflowed.
func (ho *Handoff) take(cq *CQ) *verbs.WC {
	if ho == nil || ho.cq != cq || ho.n == len(ho.wc) || cq.tail.Load() != cq.head.Load() ||
		cq.armed.Load() != armNone || cq.waiters.Load() != 0 || cq.overflow.Load() {
		return nil
	}
	ho.n++
	return &ho.wc[ho.n-1]
}

// EndPolledMode ends polled mode on the QP of e as the idle rule does when
// the application stops polling (for tests of what a transport does then).
func (e Endpoint) EndPolledMode() {
	if p := e.q.prog.Load(); p != nil {
		p.stop()
	}
}
