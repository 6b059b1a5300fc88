package verbs

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// CQ is a completion queue (struct ibv_cq).
//
// Three ways to wait for completions:
//   - Poll in a loop (lowest latency, never blocks, never allocates);
//   - the C way: ReqNotify, then CompChannel.GetEvent (or epoll on
//     CompChannel.Fd), AckEvents, ReqNotify again, then Poll until empty;
//   - the Go way: Wait(ctx), then Poll.
type CQ struct {
	ctx    *Context
	ch     *CompChannel
	d      cqDriver
	events atomic.Int64  // delivered minus acknowledged completion events
	spin   atomic.Int64  // SetWaitSpin's, in nanoseconds: the cap of the adaptive spin
	adapt  atomic.Int64  // how long the next wait spins (SpinFor), in nanoseconds
	probes atomic.Uint32 // waits while the adaptive spin is off
	// UserData is free for the application (the cq_context of the C API).
	UserData any
}

// Context returns the CQ's context.
func (cq *CQ) Context() *Context { return cq.ctx }

// Channel returns the completion channel the CQ reports events to, or nil.
func (cq *CQ) Channel() *CompChannel { return cq.ch }

// CQE returns the number of completions the CQ can hold.
func (cq *CQ) CQE() int { return cq.d.CQE() }

// Poll moves up to len(wc) completions into wc and returns how many
// (ibv_poll_cq). It never blocks and never allocates. After an overflow it
// returns the completions the CQ still holds and then ErrCQOverflow.
func (cq *CQ) Poll(wc []WC) (int, error) {
	n, err := cq.d.Poll(wc)
	if b := tracer.Load(); b != nil {
		for i := range n {
			b.t.Completed(cq, &wc[i])
		}
	}
	return n, err
}

// ReqNotify arms the CQ: the next completion (with solicitedOnly, the next
// solicited or unsuccessful receive completion) adds one event to the CQ's
// completion channel (ibv_req_notify_cq). Re-arm after each event. It
// returns ErrInvalid when the CQ has no channel.
func (cq *CQ) ReqNotify(solicitedOnly bool) error {
	if cq.ch == nil {
		return fmt.Errorf("%w: CQ has no completion channel", ErrInvalid)
	}
	return cq.d.ReqNotify(solicitedOnly)
}

// Wait blocks until the CQ holds at least one completion, or ctx is done.
// It needs no channel and no arming. A completion that is already there
// makes it return at once. It first polls for up to SpinFor (see
// SetWaitSpin), then sleeps.
func (cq *CQ) Wait(ctx context.Context) error { return cq.d.Wait(ctx) }

// DefaultWaitSpin is how long a new CQ's blocking waits poll before they
// sleep (SetWaitSpin). It covers a small message's round trip over shared
// memory and loopback TCP with room for a busy machine's hiccups, so that
// blocking code runs near the speed of polling code at small sizes: in
// package rdmacm's BenchmarkPingPong (8 bytes, 2 vCPUs), a blocking round
// trip took 1.3 µs over shm and 14 µs over iWARP against 1.2 and 13 µs
// polling; 50 µs gave 2.5 and 17 µs, and no spin 26 and 30 µs.
const DefaultWaitSpin = 100 * time.Microsecond

// SetWaitSpin sets the most that the blocking waits for the CQ's
// completions poll the CQ before they sleep: CQ.Wait, and package rdmacm's
// GetRecvComp and GetSendComp. A completion that comes within the spin is
// taken without a wake-up; the price is CPU: a wait that ends up sleeping
// has kept a CPU busy for the spin first. The spin adapts, per CQ, below
// d (SpinFor): it is spent in full while recent waits were answered
// within it, and halves with each wait that was not, down to nothing, so
// that a CQ whose waits sleep (a server idle between requests, replies
// slower than d) costs no CPU past them, and a wait that sleeps costs
// about what it costs with the spin off; one wait answered within d
// brings the spin back. d <= 0 turns the spin off: every wait that finds
// the CQ empty sleeps at once (in the transport's descriptor where it can:
// see package verbs's section Blocking waits). The default is
// DefaultWaitSpin. ReqNotify and CompChannel.GetEvent, the C way, never
// spin.
func (cq *CQ) SetWaitSpin(d time.Duration) {
	cq.spin.Store(int64(max(d, 0)))
	cq.adapt.Store(int64(max(d, 0)))
}

// SpinFor returns how long the next blocking wait polls the CQ before it
// sleeps: WaitSpin at most, less while recent waits were not answered
// within it (see SetWaitSpin). Code that implements a blocking wait of
// its own reports each wait's outcome with WaitTook.
func (cq *CQ) SpinFor() time.Duration {
	capd := cq.spin.Load()
	a := cq.adapt.Load()
	if a == 0 && capd > 0 && cq.probes.Add(1)%spinProbe == 0 {
		// Off, the spin cannot see replies come back within it (a wait
		// that sleeps costs the wake-up's tens of microseconds on top of
		// the reply's): now and then a wait spins in full to find out.
		return time.Duration(capd)
	}
	return time.Duration(min(a, capd))
}

// spinFloor is the shortest spin worth making: below it, the spin is off
// until a wait answered within WaitSpin brings it back. One wait in
// spinProbe spins in full meanwhile.
const (
	spinFloor = time.Microsecond
	spinProbe = 16
)

// WaitTook tells the CQ's adaptive spin how long a blocking wait took,
// from its start until a completion was there: within WaitSpin, the
// spin doubles (at least twice the wait, so that it covers the variation
// of such waits), up to WaitSpin; past it, the spin halves, since spinning
// only delayed the sleep. The updates are racy on purpose: concurrent
// waits may lose one, which only makes the spin adapt a wait later.
func (cq *CQ) WaitTook(d time.Duration) {
	capd := cq.spin.Load()
	if capd == 0 {
		return
	}
	a := cq.adapt.Load()
	if int64(d) <= capd {
		cq.adapt.Store(min(capd, max(2*a, 2*int64(d)+int64(spinFloor))))
		return
	}
	if a /= 2; a < int64(spinFloor) {
		a = 0
	}
	cq.adapt.Store(a)
}

// WaitSpin returns the most that blocking waits poll the CQ before they
// sleep (SetWaitSpin).
func (cq *CQ) WaitSpin() time.Duration { return time.Duration(cq.spin.Load()) }

// Destroy destroys the CQ (ibv_destroy_cq). It returns ErrBusy while
// completion events obtained with GetEvent are not acknowledged with
// AckEvents, or while queue pairs or SRQs still use it. A second Destroy
// returns nil.
func (cq *CQ) Destroy() error {
	if n := cq.events.Load(); n != 0 {
		return fmt.Errorf("%w: %d completion events not acknowledged", ErrBusy, n)
	}
	return again(cq.d.Destroy())
}

// CompChannel is a completion event channel (struct ibv_comp_channel).
type CompChannel struct {
	ctx *Context
	d   compChannelDriver
}

// GetEvent blocks until one of the channel's CQs has an event, and returns
// that CQ (ibv_get_cq_event). Each event must be acknowledged with AckEvents
// before the CQ is destroyed. It returns ctx's error when ctx is done first,
// and ErrClosed after Close.
func (ch *CompChannel) GetEvent(ctx context.Context) (*CQ, error) {
	cq, err := ch.d.GetEvent(ctx)
	if err != nil {
		return nil, err
	}
	cq.events.Add(1)
	return cq, nil
}

// AckEvents acknowledges n events of cq obtained with GetEvent (ibv_ack_cq_events).
func (ch *CompChannel) AckEvents(cq *CQ, n int) {
	cq.events.Add(-int64(n))
}

// Fd returns a file descriptor that is readable while events are pending,
// for epoll or poll. Read events with GetEvent, not from the descriptor.
func (ch *CompChannel) Fd() int { return ch.d.Fd() }

// Close destroys the channel (ibv_destroy_comp_channel). A GetEvent blocked
// on it returns ErrClosed. A second Close returns nil.
func (ch *CompChannel) Close() error { return again(ch.d.Close()) }
