package engine

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goverbs/goverbs/internal/atomicx"
	"github.com/goverbs/goverbs/verbs"
)

// CQ is the engine's completion queue: a bounded multi-producer,
// multi-consumer ring (Vyukov's sequence-numbered slots), so that queue pairs
// on several goroutines push and the application polls without a lock, and
// neither allocates.
type CQ struct {
	v   *verbs.CQ
	ctx *Context
	ch  *CompChannel
	r   atomic.Pointer[cqRing] // replaced only by Resize (cq_resize.go)

	_    [64]byte // keep producer and consumer indices on separate cache lines
	tail atomic.Uint64
	_    [56]byte
	head atomic.Uint64
	_    [56]byte

	armed    atomic.Uint32 // armNone, armSolicited, armAny
	lookOnly atomic.Bool   // the idiom's poll after arming looks at the ring alone (ReqNotify)
	waiters  atomic.Int32  // goroutines in Wait
	overflow atomic.Bool
	wmu      sync.Mutex
	wch      chan struct{}            // closed to wake Wait; replaced after each wake
	blk      atomic.Pointer[progress] // a Wait blocks in its transport (block.go)

	refs      atomic.Int32 // QPs and SRQs using the CQ
	destroyed atomic.Bool
	rmu       sync.Mutex // one Resize at a time

	// pollers are the transports of the CQ's QPs that polled mode drives:
	// Poll calls them when the ring is empty (copy-on-write; read with one
	// atomic load).
	pollers    atomic.Pointer[[]*progress]
	pmu        sync.Mutex
	emptyPolls atomic.Uint64
	lastYield  atomic.Int64 // since yieldEpoch
}

// yieldGap is the longest a busy-polling application goes without letting
// other goroutines run (see Poll).
const yieldGap = 50 * time.Microsecond

var yieldEpoch = time.Now()

func (cq *CQ) pollStop() {
	if ps := cq.pollers.Load(); ps != nil {
		for _, p := range *ps {
			p.stop()
		}
	}
}

// addPoller makes Poll drive p when the CQ is empty.
func (cq *CQ) addPoller(p *progress) {
	cq.pmu.Lock()
	defer cq.pmu.Unlock()
	var n []*progress
	if old := cq.pollers.Load(); old != nil {
		n = append(n, *old...)
	}
	n = append(n, p)
	cq.pollers.Store(&n)
}

// removePoller undoes addPoller.
func (cq *CQ) removePoller(p *progress) {
	cq.pmu.Lock()
	defer cq.pmu.Unlock()
	old := cq.pollers.Load()
	if old == nil {
		return
	}
	var n []*progress
	for _, x := range *old {
		if x != p {
			n = append(n, x)
		}
	}
	cq.pollers.Store(&n)
}

type cqSlot struct {
	seq atomic.Uint64
	wc  verbs.WC
}

const (
	armNone uint32 = iota
	armSolicited
	armAny
)

func newCQ(ctx *Context, v *verbs.CQ, cqe int, ch *CompChannel) *CQ {
	// At least two slots: in a ring of one, a full slot and the empty slot
	// of the next lap have the same sequence number.
	n := 2
	for n < cqe {
		n <<= 1
	}
	cq := &CQ{v: v, ctx: ctx, ch: ch}
	r := &cqRing{slots: make([]cqSlot, n), mask: uint64(n - 1)}
	for i := range r.slots {
		r.slots[i].seq.Store(uint64(i))
	}
	cq.r.Store(r)
	return cq
}

// CQE returns the capacity.
func (cq *CQ) CQE() int { return len(cq.r.Load().slots) }

// push adds a completion. solicited marks a receive completion of a message
// sent with the solicited-event flag. It reports false when the CQ is full:
// the CQ then enters the overflow error state and raises EventCQErr.
func (cq *CQ) push(wc *verbs.WC, solicited bool) bool {
	for {
		pos := cq.tail.Load()
		r := cq.r.Load()
		s := &r.slots[pos&r.mask]
		seq := s.seq.Load()
		switch {
		case seq == pos:
			if !cq.tail.CompareAndSwap(pos, pos+1) {
				continue
			}
			if r2 := cq.r.Load(); r2 != r { // a Resize came between the loads and the CAS
				s = &r2.slots[pos&r2.mask]
			}
			copyWC(&s.wc, wc)
			// The arming is taken before the completion is visible, as a
			// CQ lock makes it in rxe: a poller that sees this completion
			// and re-arms must get an event for the next one, not have
			// its ReqNotify consumed by this one. And again after: an
			// arming made while it was being published, by a poller that
			// then found the CQ still empty, must get this completion's
			// event, or it would wait for ever. (Only an arming made in
			// the few instructions between the two, by a poller that saw
			// the completion, gets an event it did not need.)
			sol := wc.Status != verbs.WCSuccess || solicited
			fire := cq.disarm(sol)
			s.seq.Store(pos + 1)
			if !fire {
				fire = cq.disarm(sol)
			}
			cq.wakeup(fire)
			return true
		case seq < pos:
			// The slot still holds the completion of the previous lap. When
			// a poller has already taken it (head is past it) and is copying
			// it out, it is about to be free: the CQ is not full.
			if pos&cqClosed != 0 || cq.r.Load() != r || cq.head.Load()+r.mask+1 > pos {
				runtime.Gosched()
				continue
			}
			if !cq.overflow.Swap(true) {
				cq.ctx.dev.overflows.Add(1)
				cq.ctx.raise(verbs.AsyncEvent{Type: verbs.EventCQErr, CQ: cq.v})
			}
			cq.signal(true)
			return false
		}
	}
}

// signal delivers the armed completion event and wakes Wait callers. The
// common case (nobody armed, nobody waiting) costs two atomic loads.
func (cq *CQ) signal(solicited bool) { cq.wakeup(cq.disarm(solicited)) }

// disarm takes the arming that a completion of this kind fires, if any.
func (cq *CQ) disarm(solicited bool) bool {
	a := cq.armed.Load()
	return a != armNone && (a == armAny || solicited) && cq.armed.CompareAndSwap(a, armNone)
}

// wakeup delivers the event that disarm took (fire) and wakes Wait callers.
func (cq *CQ) wakeup(fire bool) {
	if fire && cq.ch != nil {
		cq.ch.deliver(cq.v)
	}
	if p := cq.blk.Load(); p != nil {
		p.interrupt()
	}
	if cq.waiters.Load() > 0 {
		cq.wmu.Lock()
		if cq.wch != nil {
			close(cq.wch)
			cq.wch = nil
		}
		cq.wmu.Unlock()
	}
}

// Poll implements driver.CQ. When the ring is empty it lets the
// providers' pollers make progress (polled mode) and looks again.
func (cq *CQ) Poll(wc []verbs.WC) (int, error) {
	// The ring is looked at with inlined loads first: a busy-polling
	// application mostly finds it empty, and the time an empty poll takes
	// is time a message that arrives meanwhile waits to be noticed.
	if len(wc) == 0 || !cq.empty() || cq.overflow.Load() {
		if n, err := cq.poll(wc); n > 0 || err != nil || len(wc) == 0 {
			return n, err
		}
	}
	if cq.lookOnly.Load() && cq.lookOnly.Swap(false) && cq.isArmed() {
		return 0, nil
	}
	ps := cq.pollers.Load()
	if ps == nil || len(*ps) == 0 {
		return 0, nil
	}
	n := 0
	for _, p := range *ps {
		n += p.poll(cq, wc[n:])
	}
	if n < len(wc) && (!cq.empty() || cq.overflow.Load()) {
		m, err := cq.poll(wc[n:])
		if n += m; n == 0 {
			return 0, err // an overflow is reported by a poll that has nothing else
		}
	}
	// A busy-polling loop never enters the scheduler (its reads are
	// raw syscalls), so it yields now and then: the provider's own
	// goroutines (responses, flushes) must get a CPU on small
	// machines. At most once per yieldGap: a yield costs a trip
	// through the scheduler (a netpoll syscall among others), which
	// every 128 polls of a shared-memory ring was 5% of its latency.
	// The count is a plain load and store, not a locked add (a tenth
	// of an empty poll): concurrent pollers may lose increments.
	if n == 0 && cq.countEmpty()&127 == 0 {
		if now := int64(time.Since(yieldEpoch)); now-cq.lastYield.Load() >= int64(yieldGap) {
			cq.lastYield.Store(now)
			runtime.Gosched()
		}
	}
	return n, nil
}

func (cq *CQ) poll(wc []verbs.WC) (int, error) {
	n := 0
	for n < len(wc) {
		pos := cq.head.Load()
		r := cq.r.Load()
		s := &r.slots[pos&r.mask]
		seq := s.seq.Load()
		if seq != pos+1 {
			if seq < pos+1 {
				break // empty (or closed by a Resize)
			}
			continue // another poller took it
		}
		if !cq.head.CompareAndSwap(pos, pos+1) {
			continue
		}
		if r2 := cq.r.Load(); r2 != r { // a Resize came between the loads and the CAS
			r, s = r2, &r2.slots[pos&r2.mask]
		}
		copyWC(&wc[n], &s.wc)
		// The slot is free for the next lap: a release store suffices (the
		// copy above is done before it; push only reads seq).
		atomicx.ReleaseU64(&s.seq, pos+r.mask+1)
		n++
	}
	if n == 0 && cq.overflow.Load() {
		return 0, verbs.ErrCQOverflow
	}
	return n, nil
}

func (cq *CQ) empty() bool {
	pos := cq.head.Load()
	r := cq.r.Load()
	return r.slots[pos&r.mask].seq.Load() != pos+1
}

// isArmed reports whether ReqNotify armed the CQ and no event fired since:
// the application is about to block on its channel, so polled mode must not
// rely on it polling again.
func (cq *CQ) isArmed() bool { return cq.armed.Load() != armNone }

// ReqNotify implements driver.CQ.
func (cq *CQ) ReqNotify(solicitedOnly bool) error {
	if cq.destroyed.Load() {
		return verbs.ErrClosed
	}
	// The application is about to block on the channel: the transports
	// must progress on their own, unless GetEvent will lend them its
	// goroutine (a channel of one endpoint, waited on without epoll).
	//
	// The idiom's poll between this arming and GetEvent then looks at the
	// ring alone: the GetEvent blocks in the transport, whose Block
	// processes what its descriptor has before it parks (and must: the
	// park forgets the readiness reported before it), or sleeps while
	// another goroutine's Block or the transport's own goroutines
	// progress. A completion made before the arming is in the ring, where
	// that poll sees it; input not yet processed becomes a completion
	// after the arming, and its event fires. A progress there would cost
	// a system call (an empty read of a socket) that the Block repeats at
	// once. Only the one poll: a loop of polls after arming progresses
	// from its second. Not after an arming for solicited completions: an
	// unsolicited one the socket holds would then wait for the next
	// solicited one, where the poll returns it.
	if cq.blockable() {
		cq.lookOnly.Store(!solicitedOnly)
	} else {
		cq.lookOnly.Store(false)
		cq.pollStop()
	}
	if solicitedOnly {
		// An arming for any completion already in place is kept, as the verbs spec says.
		cq.armed.CompareAndSwap(armNone, armSolicited)
		return nil
	}
	cq.armed.Store(armAny)
	return nil
}

// Wait implements driver.CQ: a spin of the verbs CQ's SpinFor (driving
// polled mode, when the CQ's transports have it), then a blocking wait:
// in the descriptor of the CQ's transport endpoint when it is the only one
// and a Blocker (block.go), otherwise on the CQ's wake-up channel. The
// spin covers a completion due within microseconds, which then comes
// without the system calls of a wake-up; it adapts to how soon the CQ's
// waits are answered (verbs.CQ.WaitTook), so an idle CQ costs no CPU.
func (cq *CQ) Wait(ctx context.Context) error {
	if !cq.empty() || cq.overflow.Load() {
		return nil
	}
	start := time.Now()
	polls, err := cq.wait(ctx, start)
	if err == nil {
		d := time.Since(start)
		cq.v.WaitTook(d, verbs.SpinResultOf(polls, d))
	}
	return err
}

// wait reports, when its spin found the completion, how many rounds of
// polls it took (at least 1).
func (cq *CQ) wait(ctx context.Context, start time.Time) (int, error) {
	if spin := cq.v.SpinFor(); spin > 0 {
		for i := 1; ; i++ {
			if !cq.empty() || cq.overflow.Load() {
				return max(i-1, 1), nil
			}
			if ps := cq.pollers.Load(); ps != nil {
				for _, p := range *ps {
					p.poll(nil, nil)
				}
			}
			if i%16 == 0 {
				if ctx.Err() != nil || cq.destroyed.Load() || time.Since(start) > spin {
					break
				}
				runtime.Gosched()
			}
		}
	}
	for {
		if !cq.empty() || cq.overflow.Load() {
			return 0, nil
		}
		if cq.destroyed.Load() {
			return 0, verbs.ErrClosed
		}
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		blocked, busy := cq.block(ctx)
		if blocked {
			continue
		}
		if busy == nil {
			cq.pollStop() // nobody else progresses the transports
		}
		cq.wmu.Lock()
		if cq.wch == nil {
			cq.wch = make(chan struct{})
		}
		ch := cq.wch
		cq.waiters.Add(1)
		cq.wmu.Unlock()
		// A completion pushed before waiters was raised is seen here;
		// one that another goroutine blocking in the transport makes
		// later closes ch, and so does its leaving (release).
		if !cq.empty() || cq.destroyed.Load() || (busy != nil && !busy.sleep()) {
			cq.waiters.Add(-1)
			continue
		}
		select {
		case <-ch:
		case <-ctx.Done():
		}
		cq.waiters.Add(-1)
		if busy != nil {
			busy.sleepers.Add(-1)
		}
		if err := ctx.Err(); err != nil && cq.empty() {
			return 0, err
		}
	}
}

// Destroy implements driver.CQ.
func (cq *CQ) Destroy() error {
	if n := cq.refs.Load(); n > 0 {
		return fmt.Errorf("%w: CQ used by %d queue pairs or SRQs", verbs.ErrBusy, n)
	}
	if cq.destroyed.Swap(true) {
		return verbs.ErrClosed
	}
	cq.signal(true)
	if cq.ch != nil {
		cq.ch.removeCQ(cq)
		cq.ch.refs.Add(-1)
	}
	cq.ctx.cqs.Add(-1)
	return nil
}

// CompChannel is the engine's completion channel: a queue of CQ events and,
// once Fd is asked for, an eventfd that is readable while the queue is not
// empty. The descriptor is made only then: a channel waited on through
// GetEvent (rdmacm makes two per connection) costs no descriptor and no
// system call per event.
type CompChannel struct {
	ctx    *Context
	mu     sync.Mutex
	q      []*verbs.CQ
	wake   chan struct{} // capacity 1: a hint that q may be non-empty
	fd     eventFD       // none until Fd
	fdMade bool
	refs   atomic.Int32 // CQs using the channel
	closed bool
	done   chan struct{}

	n        atomic.Int32             // len(q), for a blocked GetEvent's look
	isClosed atomic.Bool              // closed, likewise
	fdMadeA  atomic.Bool              // fdMade, for ReqNotify's look
	cqs      atomic.Pointer[[]*CQ]    // the CQs reporting to the channel
	blk      atomic.Pointer[progress] // a GetEvent blocks in its transport
	waiters  atomic.Int32             // GetEvents asleep on wake
}

func newCompChannel(ctx *Context) (*CompChannel, error) {
	return &CompChannel{ctx: ctx, wake: make(chan struct{}, 1), fd: noEventFD, done: make(chan struct{})}, nil
}

func (ch *CompChannel) deliver(cq *verbs.CQ) {
	ch.mu.Lock()
	if ch.closed {
		ch.mu.Unlock()
		return
	}
	ch.q = append(ch.q, cq)
	ch.n.Add(1)
	ch.fd.add()
	ch.mu.Unlock()
	select {
	case ch.wake <- struct{}{}:
	default:
	}
	if p := ch.blk.Load(); p != nil {
		p.interrupt()
	}
}

// GetEvent implements driver.CompChannel.
func (ch *CompChannel) GetEvent(ctx context.Context) (*verbs.CQ, error) {
	for {
		ch.mu.Lock()
		if ch.closed {
			ch.mu.Unlock()
			return nil, verbs.ErrClosed
		}
		if len(ch.q) > 0 {
			cq := ch.q[0]
			copy(ch.q, ch.q[1:])
			ch.q[len(ch.q)-1] = nil
			ch.q = ch.q[:len(ch.q)-1]
			ch.n.Add(-1)
			ch.fd.take()
			more := len(ch.q) > 0
			ch.mu.Unlock()
			if more { // pass the hint on to another waiter
				select {
				case ch.wake <- struct{}{}:
				default:
				}
			}
			return cq, nil
		}
		ch.mu.Unlock()
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		blocked, busy := ch.block(ctx)
		if blocked {
			continue
		}
		// Asleep the ordinary way: the transports progress on their own
		// (ReqNotify left polled mode on, expecting the block above),
		// unless another goroutine blocks in the channel's transport: it
		// progresses, and its leaving wakes this one (release).
		ch.waiters.Add(1)
		if busy == nil {
			ch.stopPolls()
		} else if !busy.sleep() {
			ch.waiters.Add(-1)
			continue
		}
		select {
		case <-ch.wake:
		case <-ch.done:
		case <-ctx.Done():
		}
		ch.waiters.Add(-1)
		if busy != nil {
			busy.sleepers.Add(-1)
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
}

// Fd implements driver.CompChannel: the first call makes the eventfd,
// readable at once if events are queued; -1 when it cannot be made (out
// of descriptors: the next call tries again).
func (ch *CompChannel) Fd() int {
	ch.mu.Lock()
	made := false
	if !ch.fdMade && !ch.closed {
		fd, err := newEventFD()
		if err != nil {
			ch.mu.Unlock()
			return -1
		}
		ch.fd, ch.fdMade, made = fd, true, true
		ch.fdMadeA.Store(true)
		for range ch.q {
			ch.fd.add()
		}
	}
	fd := ch.fd.fd()
	ch.mu.Unlock()
	if made {
		// epoll waits on the descriptor, not GetEvent: the transports
		// must progress on their own (outside mu: Polled may deliver).
		ch.stopPolls()
	}
	return fd
}

// Close implements driver.CompChannel.
func (ch *CompChannel) Close() error {
	if n := ch.refs.Load(); n > 0 {
		return fmt.Errorf("%w: completion channel used by %d CQs", verbs.ErrBusy, n)
	}
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.closed {
		return verbs.ErrClosed
	}
	ch.closed = true
	ch.isClosed.Store(true)
	close(ch.done)
	if p := ch.blk.Load(); p != nil {
		p.interrupt()
	}
	return ch.fd.close()
}

// countEmpty counts an empty poll and returns the count.
func (cq *CQ) countEmpty() uint64 {
	n := cq.emptyPolls.Load() + 1
	atomicx.ReleaseU64(&cq.emptyPolls, n)
	return n
}

// copyWC copies a completion field by field. A struct copy is made of
// 16-byte loads, and a completion was just written with narrower stores (by
// its producer, or by push a moment ago in the same goroutine): a load that
// spans several stores still in the store buffer cannot be forwarded from
// them and waits for them to reach the cache.
func copyWC(d, s *verbs.WC) {
	d.WRID = s.WRID
	d.Status = s.Status
	d.Opcode = s.Opcode
	d.VendorErr = s.VendorErr
	d.ByteLen = s.ByteLen
	d.ImmData = s.ImmData
	d.QPNum = s.QPNum
	d.SrcQP = s.SrcQP
	d.Flags = s.Flags
	d.PKeyIndex = s.PKeyIndex
	d.SLID = s.SLID
	d.SL = s.SL
	d.DLIDPathBits = s.DLIDPathBits
}
