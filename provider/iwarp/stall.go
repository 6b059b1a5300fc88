package iwarp

import (
	"time"

	"golang.org/x/sys/unix"

	"github.com/goverbs/goverbs/internal/wire"
	"github.com/goverbs/goverbs/verbs"
)

// The frame stall bound (Config.FrameTimeout): a frame that has begun and
// then gets no byte for that long ends the connection. It costs the
// receive path nothing per frame: a receive that leaves a frame incomplete
// arms the connection's timer only when it is not running (pump), and the
// timer, ticking a quarter of the bound, looks whether a read brought bytes
// since its last tick (rxSide.prog); it stops once no frame is incomplete.
// So a connection is cut between FrameTimeout and 1.5 FrameTimeout after
// its last byte, and a slow peer that keeps sending is never cut.

// stallTick is how often the check looks at a connection with an
// incomplete frame.
func (c *conn) stallTick() time.Duration { return max(c.frameTimeout/4, 10*time.Millisecond) }

// armStall starts the check; rx.mu is held, and the check is not running.
func (c *conn) armStall() {
	s := &c.rx
	s.stallArmed, s.stallSeen, s.stallSince = true, s.prog, time.Now()
	c.stall.Reset(c.stallTick())
}

// checkStall is the timer's tick.
func (c *conn) checkStall() {
	s := &c.rx
	if !s.mu.TryLock() {
		// A driver is receiving: the socket was readable, which is progress.
		c.rearmStall()
		return
	}
	defer s.mu.Unlock()
	select {
	case <-c.dying:
		return
	default:
	}
	now := time.Now()
	switch {
	case !s.partial():
		s.stallArmed = false // the next incomplete frame arms it again
	case s.prog != s.stallSeen || c.unread():
		// Bytes came, or they wait in the socket for a reader of ours
		// that is late (an application that polls another CQ): the peer
		// is not the one stalling.
		s.stallSeen, s.stallSince = s.prog, now
		c.stall.Reset(c.stallTick())
	case now.Sub(s.stallSince) >= c.frameTimeout:
		// The FPDU stream is lost by timeout: MPA's "TCP connection
		// closed, terminated or lost" (LLP/MPA/0x01), with nothing
		// attached (the frame's header may be incomplete itself).
		c.terminate(wire.TermMPA(wire.MPAStreamLost), nil, evp(verbs.EventQPFatal),
			"a frame stalled for "+now.Sub(s.stallSince).Round(time.Millisecond).String())
	default:
		c.stall.Reset(c.stallTick())
	}
}

// rearmStall runs the check again a tick later, unless the connection is ending.
func (c *conn) rearmStall() {
	select {
	case <-c.dying:
	default:
		c.stall.Reset(c.stallTick())
	}
}

// unread reports whether the socket holds bytes nobody has read yet.
func (c *conn) unread() bool {
	n := 0
	c.raw.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ) })
	return n > 0
}
