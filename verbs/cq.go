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
	events atomic.Int64 // delivered minus acknowledged completion events
	spin   atomic.Int64 // SetWaitSpin's, in nanoseconds
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
// makes it return at once. It first polls for up to WaitSpin (see
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

// SetWaitSpin sets how long the blocking waits for the CQ's completions
// poll the CQ before they sleep: CQ.Wait, and package rdmacm's GetRecvComp
// and GetSendComp. A completion that comes within d is taken without a
// wake-up, which on these machines costs tens of microseconds (a
// goroutine parked, the transport's own goroutine woken, a system call or
// two each way); the price is CPU: a wait that ends up sleeping has kept a
// CPU busy for d first, and an application that waits on many CQs at
// once may want less. On a machine whose CPUs are all busy, a spinning
// wait competes for them with the peer it waits for, and sleeping at once
// is faster: with the 2 vCPUs of the measurement under a load of 4, the
// 8-byte blocking round trip over iWARP took 48 µs without a spin against
// 210 µs with the default one (and 340 µs polling). d <= 0 turns the spin
// off: every wait that finds the CQ empty sleeps at once. The default is
// DefaultWaitSpin. ReqNotify and CompChannel.GetEvent, the C way, never
// spin.
func (cq *CQ) SetWaitSpin(d time.Duration) { cq.spin.Store(int64(max(d, 0))) }

// WaitSpin returns how long blocking waits poll the CQ before they sleep.
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
