package roce

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goverbs/goverbs/internal/engine"
	"github.com/goverbs/goverbs/internal/fdpark"
	"github.com/goverbs/goverbs/internal/ib"
	"github.com/goverbs/goverbs/verbs"
)

// qp is a QP's transport: the IB requester, completer and responder of
// one RC QP, or the datagram path of a UD QP.
//
// Locks: the device's receive lock (d.rx) serialises everything received,
// so the responder's state (r) needs no other; mu guards the requester's
// and the path's. Order: d.rx, then mu, then the engine's (which is never
// held when the engine calls in, but for Shutdown, which takes neither).
type qp struct {
	d    *device
	ep   engine.Endpoint
	req  engine.Requester
	resp engine.Responder
	num  uint32
	typ  verbs.QPType

	opened bool // took a use of the device's socket
	openMu sync.Mutex
	polled atomic.Bool
	dead   atomic.Bool // left the connected states

	mu   sync.Mutex
	path path
	s    sendState
	r    respState
}

// path is where an RC QP's packets go and how: set by Modify.
type path struct {
	dst      netip.Addr
	destQPN  uint32
	pkey     uint16
	mtu      int // bytes
	timeout  uint8
	retryCnt uint8
	rnrRetry uint8
	sqPSN    uint32
	ready    bool // RTS
}

func (d *device) newQP(e engine.Endpoint) *qp {
	q := &qp{d: d, ep: e, req: e.Requester(), resp: e.Responder(), num: e.Num(), typ: e.Type()}
	q.path.mtu = d.mtu.Bytes()
	q.path.pkey = ib.DefaultPKey
	q.s.init(q)
	q.r.init(q)
	d.addQP(q)
	return q
}

// takeSocket opens the device's socket for the QP, once.
func (q *qp) takeSocket() error {
	q.openMu.Lock()
	defer q.openMu.Unlock()
	if q.opened {
		return nil
	}
	if err := q.d.open(); err != nil {
		return err
	}
	q.opened = true
	// The QP's packets leave from one source port for its life (the
	// batches are used only once it is past INIT).
	src := q.d.senderOf(q.num)
	q.s.bat.src, q.r.bat.src = src, src
	return nil
}

// Modify implements engine.Transport: the path and the PSNs come with the
// moves to RTR and RTS.
func (q *qp) Modify(attr *verbs.QPAttr, mask verbs.QPAttrMask, from, to verbs.QPState) error {
	if to == verbs.QPSInit && from == verbs.QPSReset {
		if err := q.takeSocket(); err != nil {
			return err
		}
		// A new life after RESET (or the first).
		q.mu.Lock()
		q.s.reset()
		q.path.ready = false
		q.mu.Unlock()
		q.dead.Store(false)
	}
	if q.typ == verbs.QPTUD {
		if mask&verbs.QPAttrSQPSN != 0 {
			q.mu.Lock()
			q.s.npsn = attr.SQPSN & 0xFFFFFF
			q.mu.Unlock()
		}
		return nil
	}
	if to == verbs.QPSRTR && from == verbs.QPSInit {
		if err := q.takeSocket(); err != nil {
			return err
		}
		dst := netip.AddrFrom16(attr.AHAttr.GRH.DGID).Unmap()
		if !attr.AHAttr.IsGlobal || !dst.IsValid() {
			return errNoGID
		}
		q.d.rx.Lock()
		q.mu.Lock()
		q.path.dst = dst
		q.path.destQPN = attr.DestQPNum
		q.path.mtu = min(attr.PathMTU.Bytes(), q.d.mtu.Bytes())
		q.r.reset(attr.RQPSN)
		q.mu.Unlock()
		q.d.rx.Unlock()
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if mask&verbs.QPAttrPathMTU != 0 && to != verbs.QPSRTR {
		q.path.mtu = min(attr.PathMTU.Bytes(), q.d.mtu.Bytes())
	}
	if mask&verbs.QPAttrTimeout != 0 {
		q.path.timeout = attr.Timeout
	}
	if mask&verbs.QPAttrRetryCnt != 0 {
		q.path.retryCnt = attr.RetryCnt
	}
	if mask&verbs.QPAttrRNRRetry != 0 {
		q.path.rnrRetry = attr.RNRRetry
	}
	if to == verbs.QPSRTS && from == verbs.QPSRTR {
		q.path.sqPSN = attr.SQPSN & 0xFFFFFF
		q.s.start(q.path.sqPSN)
		q.path.ready = true
	}
	return nil
}

// RecvPosted implements engine.Transport: a SEND refused for want of a
// receive (RNR) is retried by its requester after its timer; nothing waits
// here.
func (q *qp) RecvPosted() {}

// Shutdown implements engine.Transport. It runs with the QP locked: it
// stops the timers, sends the ACKs still deferred (a request this QP
// executed is acknowledged even if it leaves RTS before its next poll: a
// Disconnect right after a receive completion left the peer's SEND
// unacknowledged, to be flushed by the DREQ), and lets go of the device;
// the engine has flushed every work request.
func (q *qp) Shutdown(destroyed bool) {
	q.dead.Store(true)
	q.s.stopTimers()
	q.d.flushACKs()
	if q.polled.Swap(false) {
		q.d.setPolled(false)
	}
	if destroyed {
		q.d.removeQP(q)
		go q.release() // not under the QP's lock: it may close a socket
	}
}

func (q *qp) release() {
	q.openMu.Lock()
	opened := q.opened
	q.opened = false
	q.openMu.Unlock()
	if opened {
		q.d.release()
	}
}

// Progress implements engine.Progressor: the application polls, so the
// device's socket is read here.
func (q *qp) Progress(ho engine.Handoff) int { return q.d.poll(ho) }

// Block implements engine.Blocker: the waiting goroutine reads the
// device's socket itself, parked in the netpoller on it between packets,
// while the device's goroutine is aside (polled mode), and hands each
// packet to its QP. One waiter of the device at a time: another one
// sleeps the ordinary way (the first reads its packets too).
func (q *qp) Block(w *engine.Waker) bool {
	d := q.d
	sock := d.sock.Load()
	if sock == nil || q.dead.Load() || !d.blockMu.TryLock() {
		return false
	}
	defer d.blockMu.Unlock()
	if !sock.acquire() {
		return false
	}
	defer sock.release()
	d.bw = w
	err := sock.park.WaitFD(sock.fd, d.blockFn)
	d.bw = nil
	return err == nil || err == fdpark.ErrInterrupted
}

// Interrupt implements engine.Blocker.
func (q *qp) Interrupt() {
	if s := q.d.sock.Load(); s != nil {
		s.park.Interrupt()
	}
}

// Polled implements engine.Progressor.
func (q *qp) Polled(on bool) {
	if q.polled.Swap(on) != on {
		q.d.setPolled(on)
	}
}

// Send implements engine.Transport.
func (q *qp) Send(w *engine.WQE) engine.Result {
	if q.typ == verbs.QPTUD {
		return q.sendUD(w)
	}
	return q.s.send(w)
}

// Flush implements engine.Batcher: the packets a Send left in the batch
// for the next request go out (the next one could not be sent after all).
func (q *qp) Flush() {
	if q.typ == verbs.QPTUD {
		return // a UD post is sent at once
	}
	q.mu.Lock()
	q.s.transmit()
	q.mu.Unlock()
}

// receive handles a packet for this QP (the device holds its receive lock).
func (q *qp) receive(p *ib.Packet, from netip.AddrPort, ho *engine.Handoff) {
	if q.typ == verbs.QPTUD {
		q.receiveUD(p, from, ho)
		return
	}
	if !q.resp.CanReceive() || from.Addr() != q.r.peer {
		q.d.stats.NoQP.Add(1)
		return
	}
	if p.Mask&ib.IsRequest != 0 {
		q.r.request(p, ho)
		return
	}
	q.s.response(p)
}

// ackTimeout is the local ACK timeout 4.096 µs × 2^t (t 0: none).
func ackTimeout(t uint8) time.Duration {
	if t == 0 {
		return 0
	}
	return time.Duration(4096<<min(t, 31)) * time.Nanosecond
}

// Counters implements engine.TransportCounters.
func (q *qp) Counters() (retransmits, rnrNaks uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.s.resent, q.s.rnrNaks
}
