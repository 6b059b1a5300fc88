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
// come after: they keep the ACK's deferral past them. The posting QP's own
// deferred ACK goes in the request's system call (sendmmsg: the ACK, then
// the request's GSO batch) from the QP's source port, as rxe sends every
// packet of a QP, ACKs too, from the QP's port; no receiver looks at the
// source port but for the ICRC, which covers it. A ping-pong's round trip
// then costs two sends, not four.
//
// The first packet of a SEND or WRITE of several packets is acknowledged
// too, though it does not ask (AckReq), for the requester's timer. Linux
// rxe's requester (6.1) arms its retransmission timer when it sends a
// packet and none runs, and never stops it: neither an ACK that leaves
// nothing outstanding nor a new request does; only an ACK it handles
// while packets are outstanding puts it off by a whole timeout. Answered
// once per message, at its last packet, the timer runs out one timeout
// after it was armed however quick every ACK is, and if a message is on
// its way then, rxe resends all of it (its completer_retry_err counter:
// a few per 64 KiB send_lat run, with the 2.1 s timeout rdma_cm's
// connection gives it). The resend is harmless to the transport (a
// duplicate, acknowledged again) but holds the message's send completion
// back until the ACK of its resent last packet, after the peer's next
// request may have completed at rxe; perftest's send_lat -e, which polls
// the CQ of the event it expects once per event, then loses step. The
// ACK of the first packet comes while the rest is on its way and puts the
// timer off each message, so that a busy connection no longer lets it
// run out. (rxe asks for an ACK every 64 packets of a longer message.)

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

// takeACK moves q's deferred ACK, if it has one, to the front of batch b
// (q's own, which its request is about to go in), so that the ACK and the
// request leave in one system call from q's source port, as rxe sends a
// QP's ACKs (q.mu is held). Under wire faults (tests) the ACK stays where
// it is, to meet them in flushACKs.
func (d *device) takeACK(q *qp, b *batch) {
	if faults.Get() != nil || len(b.pre) > 0 {
		return
	}
	a := &d.acks
	a.Lock()
	defer a.Unlock()
	i := q.r.ackAt - 1
	if i < 0 || i >= len(a.due) || a.due[i].q != q {
		return
	}
	rec := &a.due[i]
	var h ib.Builder
	h.H = b.preBuf[:0]
	h.BTH(ib.Acknowledge, false, 0, rec.pkey, rec.destQPN, false, rec.psn)
	h.AETH(ib.SyndromeACK|ib.CreditsNone, rec.msn)
	n := len(h.H)
	b.pre = b.preBuf[:n+ib.ICRCLen]
	b.preTo = rec.dst
	ib.PutICRC(b.pre[n:], b.startICRC(d, rec.dst, n, b.pre[:n], 0))
	rec.q = nil // taken: flushACKs passes it by
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
		if rec.q == nil {
			continue // taken (takeACK)
		}
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
