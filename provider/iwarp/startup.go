package iwarp

import (
	"sync/atomic"
	"time"

	"github.com/goverbs/goverbs/internal/wire"
)

// startup is the connection's start: MPA's rule that the responder waits
// for the initiator's first FPDU, and the nudge of a silent siw responder.
type startup struct {
	rxSeen      atomic.Bool // the responder may transmit only after the first FPDU arrived
	hold        *time.Timer // ends the responder's wait for a silent initiator (see conn.start)
	nudgeArmed  atomic.Bool // the start-up nudge is scheduled (see sent)
	nudgeNeeded atomic.Bool // the transmit goroutine should send the start-up nudge
	nudge       *time.Timer
}

// sendNudge sends the start-up nudge (see sent) unless an FPDU arrived
// meanwhile; the transmit goroutine calls it, holding the stream.
func (c *conn) sendNudge() error {
	if !c.su.nudgeNeeded.Swap(false) || c.rx.any.Load() {
		return nil
	}
	iov := c.begin()
	b := c.control(wire.TaggedHeaderLen)
	wire.PutTagged(b, wire.OpWrite, true, 1, 0, wire.TaggedHeaderLen-wire.MPALenLen)
	c.tx.iov = append(iov, wire.FinishFPDU(b, 0, c.crc))
	c.tx.rest = c.tx.iov
	c.record(c.tx.iov)
	return c.wait()
}

// nudgeDelay is how long an initiator waits for the peer's first FPDU
// before nudging it (see sent).
const nudgeDelay = 200 * time.Millisecond

// sent notes that FPDUs went out. siw has a start-up race: an FPDU that
// arrives between its MPA Reply and the installation of its QP's receive
// upcall stays unread in its socket until the next TCP event (seen with
// siw's debug log in the vmlab). Against a peer that is not a goverbs peer,
// an initiator that has sent and received nothing for nudgeDelay therefore
// sends one zero-length RDMA Write (STag 1, TO 0: the form of siw's own
// Write RTR, which iWARP receivers accept without a check); its arrival
// makes siw read what was waiting.
func (c *conn) sent() {
	if c.passive || c.ext || c.su.nudgeArmed.Load() || !c.su.nudgeArmed.CompareAndSwap(false, true) {
		return
	}
	c.su.nudge = time.AfterFunc(nudgeDelay, func() {
		if !c.rx.any.Load() {
			c.su.nudgeNeeded.Store(true)
			c.wakeTx()
		}
	})
}
