package rsocket

import (
	"context"
	"io"
	"net"
	"os"
	"runtime"
	"time"

	"github.com/goverbs/goverbs/verbs"
)

// Read reads data from the connection. After the peer's CloseWrite or
// Close, and once everything it sent was read, it returns io.EOF. Errors:
// os.ErrDeadlineExceeded after the read deadline, net.ErrClosed after
// Close, syscall.ECONNRESET when the peer's side failed (each wrapped in a
// *net.OpError).
func (c *Conn) Read(p []byte) (int, error) {
	c.readMu.Lock()
	defer c.readMu.Unlock()
	c.busy()
	defer c.idle()
	if c.closed.Load() {
		return 0, c.opErr("read", net.ErrClosed)
	}
	if c.rd.expired() {
		return 0, c.opErr("read", os.ErrDeadlineExceeded)
	}
	if len(p) == 0 {
		return 0, nil
	}
	var w waitState
	if w.spin, w.spun = c.rd.spin.For(), true; w.spin == 0 {
		// No spin: arm before the first look, which is then the look
		// before the wait (the second poll of the spin's way finds
		// nothing the first did not).
		w.blocking = true
	}
	for {
		w.arm(&c.rd)
		c.mu.Lock()
		// Poll only when nothing is queued (rrecv's way): credits then go
		// back when the reader wants more, not after every read, and none
		// crosses a peer's close at the end of a stream (librdmacm's close
		// over iWARP resets the connection when one arrives late).
		count := c.rmsgTail - c.rmsgHead
		if count == 0 {
			c.pollLocked()
			count = c.rmsgTail - c.rmsgHead
		}
		if count != 0 {
			tail := c.rmsgTail
			c.mu.Unlock()
			w.done(&c.rd)
			return c.copyOut(p, tail), nil
		}
		eof, err := c.peerEOF, c.err
		c.mu.Unlock()
		if eof {
			w.done(&c.rd)
			return 0, io.EOF
		}
		if err != nil {
			return 0, c.opErr("read", err)
		}
		if err := c.block(&c.rd, &w); err != nil {
			return 0, c.opErr("read", err)
		}
	}
}

// busy starts a Read or Write; the first one takes polling back from the
// waiter.
func (c *Conn) busy() {
	if c.active.Add(1) == 1 {
		c.idleMu.Lock()
		if c.idleCancel != nil {
			c.idleCancel()
			c.idleCancel = nil
		}
		c.idleMu.Unlock()
	}
}

// idle ends a Read or Write; when none follows within idleHandoff, the
// waiter takes over polling (at once it would only compete with the next
// call's own polling, in a request/response loop). The end is only
// noted: the timer, when not already pending, is set once, and its
// function sets it again for what is left of idleHandoff since the last
// end (idleFired), rather than every call resetting it.
func (c *Conn) idle() {
	if c.active.Add(-1) == 0 {
		c.idleAt.Store(int64(time.Since(c.epoch)))
		if !c.idlePending.Swap(true) {
			c.idleTimer.Reset(idleHandoff)
		}
	}
}

// idleFired is the idle timer's function. A call that ends after it
// cleared idlePending sets the timer again itself, or finds it set here.
func (c *Conn) idleFired() {
	c.idlePending.Store(false)
	if c.active.Load() != 0 {
		return // the next idle sets it again
	}
	if left := idleHandoff - (time.Since(c.epoch) - time.Duration(c.idleAt.Load())); left > 0 {
		if !c.idlePending.Swap(true) {
			c.idleTimer.Reset(left)
		}
		return
	}
	notify(c.needWait)
}

// copyOut copies received data into p (rrecv), up to the message tail
// the caller saw under c.mu, and returns the credits and buffer space it
// frees.
func (c *Conn) copyOut(p []byte, tail int) int {
	n, msgs := 0, 0
	head := c.rmsgHead
	for n < len(p) && head != tail {
		size := int(c.rmsg[head])
		if left := len(p) - n; left < size {
			size = left
			c.rmsg[head] -= uint32(left)
		} else {
			msgs++
			if head++; head == len(c.rmsg) {
				head = 0
			}
		}
		for size > 0 {
			k := copy(p[n:n+size], c.rbuf[c.rbufOffset:c.rbufSize])
			n += k
			size -= k
			if c.rbufOffset += k; c.rbufOffset == c.rbufSize {
				c.rbufOffset = 0
			}
		}
	}
	c.mu.Lock()
	c.rmsgHead = head
	c.rbufQueued -= n
	c.rbufAvail += n
	c.rseqNo += uint16(msgs)
	c.mu.Unlock()
	return n
}

// waitState is one call's way through spinning and blocking.
type waitState struct {
	i        int
	start    time.Time
	spin     time.Duration   // how long this call spins (the direction's spin.For)
	spun     bool            // spin is set
	watch    verbs.SpinWatch // did the spin lose its CPU (one-CPU processes)
	blocking bool            // the spin is over: arm before each look
	nudged   bool            // the nudge timer ran out for this call
	timed    bool            // the nudge timer is set
}

func (w *waitState) arm(d *direction) {
	if w.blocking {
		d.wc.arm()
	}
}

// done ends a call's wait and tells the direction's adaptive spin how it
// went (verbs.AdaptiveSpin, whose rules are verbs.CQ's): a spin that found
// its event, or a wait that slept but was over within the spin's cap,
// makes the spin longer; one that lasted longer halves it, down to none,
// so that a call that always blocks for long (a server idle between
// requests) stops burning a CPU that the other goroutines need; and in a
// process confined to one CPU (GOMAXPROCS 1), a spin that found its event
// only after its thread lost the CPU (verbs.SpinWatch) counts as one
// that slept and keeps sleeping waits from bringing the spin back for a
// while: there the peer may share the CPU, and spinning only delays it.
// The wait that slept but was over within the cap is what brings two
// sleeping ends of a conversation (gRPC's calls: 200 us and more a call
// while both sleep, 60 while both spin) back to spinning.
func (w *waitState) done(d *direction) {
	if w.timed {
		d.nudge.Stop()
	}
	if w.blocking {
		d.wc.disarm()
	}
	if w.i == 0 {
		return // no wait: nothing learnt
	}
	took := time.Since(w.start)
	r := verbs.SpinSlept
	if !w.blocking {
		r = w.watch.Result(w.i, took)
	}
	d.spin.Took(took, r)
}

// block waits for the connection to change: a bounded spin first (a
// parked goroutine takes tens of microseconds to wake), then CQ.Wait on
// the direction's armed context, which a poll with news, a deadline or
// Close fires.
func (c *Conn) block(d *direction, w *waitState) error {
	if c.closed.Load() {
		return net.ErrClosed
	}
	if !w.blocking {
		w.i++
		if w.i == 1 {
			if d.expired() {
				return os.ErrDeadlineExceeded
			}
			w.start = time.Now()
			if !w.spun {
				w.spin, w.spun = d.spin.For(), true
			}
			if w.spin == 0 {
				w.blocking = true // arm, look once more, then wait
				return nil
			}
			w.watch.Start()
		}
		if w.i&15 == 0 {
			if d.expired() {
				return os.ErrDeadlineExceeded
			}
			spun := time.Since(w.start)
			if spun >= w.spin {
				w.blocking = true // arm, look once more, then wait
				return nil
			}
			runtime.Gosched()
		}
		return nil
	}
	if d.expired() {
		return os.ErrDeadlineExceeded
	}
	if w.i == 0 { // armed from the start (Read with no spin)
		w.i, w.start = 1, time.Now()
	}
	if c.msgSend && !w.timed {
		w.timed = true
		d.nudge.Reset(nudgeAfter)
	}
	err := c.cq.Wait(&d.wc)
	if c.closed.Load() {
		return net.ErrClosed
	}
	if w.timed && !w.nudged && time.Since(w.start) >= nudgeAfter {
		w.nudged = true
		c.mu.Lock()
		if c.err == nil && !c.peerGone && !c.sentDisc && c.ctrlAvail() {
			c.postMsg(msgSet(opCtrl, ctrlKeepalive))
		}
		c.mu.Unlock()
	}
	if d.expired() {
		return os.ErrDeadlineExceeded
	}
	if err != nil && err != context.Canceled {
		return err
	}
	return nil
}
