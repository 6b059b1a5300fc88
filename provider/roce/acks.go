package roce

import (
	"net/netip"
	"sync"

	"github.com/goverbs/goverbs/internal/ib"
)

// A responder's ACK for an executed request (not a NAK, not a READ's or
// atomic's response, which carry data) is deferred: it goes out when the
// application next posts or polls on the device, or when the device's
// goroutine has read what the socket holds, and one ACK stands for every
// earlier PSN. So a receive completion reaches a polling application one
// system call sooner, and a burst gets one ACK. The delay is bounded by
// the application's gap between two polls, and past the engine's poll
// idle time (a few ms) by the device's goroutine: well within any ACK
// timeout but the shortest.
//
// But a post of a request that makes a receive completion at the peer (a
// SEND, a WRITE with immediate data) sends the deferred ACKs before its
// own packets: an HCA acknowledges a request when it executes it, before
// the application sees its completion, so a reply follows the ACK of what
// it answers, and the peer's send completion comes before its receive
// completion of the reply. Peers count on that order: perftest's send_lat
// with -e waits for one completion event, then polls the CQ it expects
// once, and a reply that overtakes the ACK stalls it. Other requests
// (WRITE, READ, atomics) make no completion at the peer that the ACK could
// come after: they keep the ACK's deferral past them.

// ackRec is a deferred ACK: what it says and where it goes.
type ackRec struct {
	q       *qp // whose ACK it is (one per QP: a newer one replaces it)
	dst     netip.Addr
	destQPN uint32
	pkey    uint16
	psn     uint32
	msn     uint32
}

type ackQueue struct {
	sync.Mutex // innermost: taken with q.mu or the receive lock held
	due        []ackRec
	bat        *batch
}

// deferACK queues the responder's ACK of psn (the receive lock is held).
func (r *respState) deferACK(psn uint32) {
	q := r.q
	a := &q.d.acks
	a.Lock()
	rec := ackRec{q: q, dst: r.peer, destQPN: q.path.destQPN, pkey: q.path.pkey, psn: psn, msn: r.msn}
	r.ackedTo(ib.PSNAdd(psn, 1)) // (due: sent before anything else of this QP's is)
	if r.ackAt > 0 && r.ackAt <= len(a.due) && a.due[r.ackAt-1].q == q {
		a.due[r.ackAt-1] = rec
	} else {
		a.due = append(a.due, rec)
		r.ackAt = len(a.due)
	}
	a.Unlock()
}

// flushACKs sends the deferred ACKs.
func (d *device) flushACKs() {
	a := &d.acks
	a.Lock()
	if len(a.due) == 0 {
		a.Unlock()
		return
	}
	for i := range a.due {
		rec := &a.due[i]
		var b ib.Builder
		b.H = a.bat.tail()
		b.BTH(ib.Acknowledge, false, 0, rec.pkey, rec.destQPN, false, rec.psn)
		b.AETH(ib.SyndromeACK|ib.CreditsNone, rec.msn)
		a.bat.add(d, rec.dst, len(b.H))
		rec.q = nil
	}
	a.due = a.due[:0]
	a.bat.flush(d)
	a.Unlock()
}
