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
	spin   AdaptiveSpin // the blocking waits' spin (SetWaitSpin)
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
// polling; 50 µs gave 2.5 and 17 µs, and no spin 26 and 30 µs. A wait
// that slept brings the spin back only if it was over within the cap, so
// a service whose requests take their server longer than the cap leaves
// both ends asleep: an 8-byte request over shm that its server answered
// in 150 µs cost 215-221 µs a round trip, and 153-159 µs with
// SetWaitSpin(300 * time.Microsecond) on both ends (a Unix socket:
// 223-259). 300 µs as the default cost 2-10% with both processes on one
// CPU, and more CPU on two, where requests take no time to serve
// (bench/blocking); package rsocket, whose users are such services
// (gRPC, HTTP), spins up to 300 µs.
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
// brings the spin back (and while the spin is off, a wait now and then
// spins in full to find out: one in 16, one in 1024 at the rarest while
// these probes keep failing). In a process confined to one CPU
// (GOMAXPROCS 1: both processes pinned to one CPU with taskset, or
// GOMAXPROCS=1 set), a spin that lost its CPU to another thread before
// its completion came was not answered: the completion came because it
// stopped, as it does when the peer shares the CPU, where spinning only
// delays the peer; and for a while after such a spin, a wait that slept
// is not taken as answered within d however soon it was (the peer ran
// because it slept). See WaitTook. A CPU quota (a cgroup's CFS bandwidth)
// is not that: Go may keep GOMAXPROCS above 1 under it (it kept 2 under
// a one-CPU quota on a two-CPU machine), the spin then spins, and a
// spinning ping-pong uses up the quota and is throttled for the rest of
// each period; SetWaitSpin(0) there if such stalls matter more than the
// average. d <= 0 turns the spin off: every wait
// that finds the CQ empty sleeps at once (in the transport's descriptor
// where it can: see package verbs's section Blocking waits). The default
// is DefaultWaitSpin. ReqNotify and CompChannel.GetEvent, the C way,
// never spin.
func (cq *CQ) SetWaitSpin(d time.Duration) { cq.spin.SetMax(d) }

// SpinFor returns how long the next blocking wait polls the CQ before it
// sleeps: WaitSpin at most, less while recent waits were not answered
// within it (see SetWaitSpin). Code that implements a blocking wait of
// its own reports each wait's outcome with WaitTook (and SpinResultOf).
func (cq *CQ) SpinFor() time.Duration { return cq.spin.For() }

// spinFloor is the shortest spin worth making: below it, the spin is off
// until a wait answered within WaitSpin brings it back. One wait in
// spinProbe spins in full meanwhile, one in spinProbeMax once many such
// probes in a row were not answered. A spin that lost its CPU, or
// spinMisses spins in a row that slept although a sleeping wait had just
// set them longer than its own time, make sleeping waits count as not
// answered for the next spinShared waits.
const (
	spinFloor    = time.Microsecond
	spinProbe    = 16
	spinProbeMax = 1024
	spinShared   = 256
	spinMisses   = 2
)

// A SpinResult is how a blocking wait went (CQ.WaitTook, SpinResultOf).
type SpinResult uint8

const (
	// SpinSlept: the spin (if any) ended without the completion, and the
	// wait slept.
	SpinSlept SpinResult = iota
	// SpinAnswered: a poll of the spin found the completion.
	SpinAnswered
	// SpinLost: a poll of the spin found the completion after the spin's
	// thread had lost its CPU (SpinResultOf).
	SpinLost
)

// WaitTook tells the CQ's adaptive spin how a blocking wait went: d is how
// long it took, from its start until a completion was there, and r how.
//
// Answered during the spin, the spin doubles (at least twice the wait, so
// that it covers the variation of such waits), up to WaitSpin. Asleep but
// within WaitSpin, the same: the reply may come within a longer spin (and
// both ends of a sleeping ping-pong need this to start spinning: neither
// can answer the other's spin while it sleeps). Otherwise the spin halves,
// since spinning only delayed the sleep. A peer that shares the CPU
// answers a sleeping wait soon because the wait let it run, and never
// answers a spin unless the spin loses its CPU. In a process confined to
// one CPU (GOMAXPROCS 1: taskset to one CPU, or GOMAXPROCS=1), a spin that
// lost its CPU (SpinLost) halves the spin, and it or spinMisses spins in
// a row that slept although a sleeping wait had just made them longer
// than its own time (which also turn the spin off) stop sleeping waits
// from bringing the spin back for spinShared waits. Not with more CPUs,
// where SpinLost counts as answered: there a peer that shares the CPU now
// is one the kernel moves to an idle CPU once both spin (the wake-ups of
// a sleeping ping-pong keep its two processes on one CPU; spinning puts
// them apart), and the spin must stay on for that to happen. The updates
// are racy on purpose: concurrent waits may lose one, which only makes
// the spin adapt a wait later.
func (cq *CQ) WaitTook(d time.Duration, r SpinResult) { cq.spin.Took(d, r) }

// spinPollMax is the longest that a spin's polls may take on average for
// a completion they found to be the spin's (SpinResultOf).
const spinPollMax = 5 * time.Microsecond

// SpinResultOf says how a blocking wait went whose spin found its
// completion with its polls-th poll, spun after the spin began (polls 0:
// the spin did not find it, the wait slept). A completion found by polls
// that took spinPollMax or more each on average was not the spin's: a
// poll rarely takes that long unless its thread lost the CPU in it (a
// poll's own system call, a socket write that wakes the peer, is where a
// peer on the same CPU takes the CPU over), or it did that much work on a
// completion that was there already.
func SpinResultOf(polls int, spun time.Duration) SpinResult {
	if polls <= 0 {
		return SpinSlept
	}
	if spun >= time.Duration(polls)*spinPollMax {
		return SpinLost
	}
	return SpinAnswered
}

// WaitSpin returns the most that blocking waits poll the CQ before they
// sleep (SetWaitSpin).
func (cq *CQ) WaitSpin() time.Duration { return cq.spin.Max() }

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
