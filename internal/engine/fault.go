package engine

import (
	"time"

	"github.com/goverbs/goverbs/internal/hook"
	"github.com/goverbs/goverbs/verbs"
)

// Fault injection: a hook (package faults sets it) asked once about every
// send request as it is about to go out, and one asked about every receive
// an incoming message consumes. When no hook is set, the cost is one
// atomic load per request or receive, and the direct path stays open.

// FaultPoint names a send request for the fault hook.
type FaultPoint struct {
	Device string
	QPNum  uint32
	QPOrd  uint64 // the QP's creation order on its device, from 1: stable across runs, unlike QPNum
	Seq    uint64 // the request's posting order on its QP, from 1
	WR     *verbs.SendWR
}

// FaultAction is the hook's decision. The zero value lets the request go.
type FaultAction struct {
	// Status, if not success, completes the request with this status once
	// it has been carried out (its completion is the one changed, in its
	// place among the QP's completions), and the QP then fails as the
	// verbs rules say: it moves to ERR and flushes what follows.
	Status verbs.WCStatus
	// Delay holds the request, and so everything posted after it, back
	// for this long before it goes out.
	Delay time.Duration
	// Fatal fails the QP instead of sending the request: EventQPFatal,
	// ERR, the request and everything after it flushed.
	Fatal bool
	// Disconnect ends the connection instead of sending the request: the
	// QP moves to ERR (its transport closes the connection, the peer sees
	// a disconnect) and flushes.
	Disconnect bool
}

// FaultHook decides the fate of each send request.
type FaultHook func(p *FaultPoint) FaultAction

var faultHook hook.Hook[FaultHook]

// SetFaultHook sets the process's fault hook (nil: none) and returns the
// one it replaces.
func SetFaultHook(h FaultHook) FaultHook { return faultHook.Set(h, h == nil) }

// askFault consults the hook about w, which is about to go out; q.mu is
// held. It reports whether w goes out now; when it does not, w is held
// back (delay) or flushed (fatal, disconnect) already.
func (q *QP) askFault(h FaultHook, w *WQE) bool {
	w.asked = true
	q.faultSeq++
	a := h(&FaultPoint{Device: q.dev.cfg.Name, QPNum: q.num, QPOrd: q.ord, Seq: q.faultSeq, WR: &w.WR})
	w.fault = a.Status
	switch {
	case a.Fatal || a.Disconnect:
		w.state = wqeQueued // flushed with the rest
		q.sq.next = w.seq
		if q.state != verbs.QPSErr {
			q.enterErr()
			if a.Fatal {
				q.faultEv = verbs.EventQPFatal
			}
		}
		return false
	case a.Delay > 0:
		w.state = wqeQueued
		q.sq.next = w.seq
		q.stalled.Store(true)
		time.AfterFunc(a.Delay, Requester{q}.Resume)
		return false
	}
	return true
}

// faultStatus is the status request w finished with, status, or the one a
// fault gave it.
func faultStatus(w *WQE, status verbs.WCStatus) verbs.WCStatus {
	if w.fault != verbs.WCSuccess && status == verbs.WCSuccess {
		return w.fault
	}
	return status
}

// RecvFaultPoint names a receive that an incoming message consumes.
type RecvFaultPoint struct {
	Device string
	QPNum  uint32
	QPOrd  uint64 // the QP's creation order on its device, from 1
	Seq    uint64 // the receive's consumption order on the QP, from 1
	WRID   uint64
}

// RecvFaultHook decides whether a receive fails: WCLocLenErr or
// WCLocProtErr make it fail as if its buffers were too small or not
// accessible (the transport then answers the sender as for a real one and
// fails the QP); success lets it go.
type RecvFaultHook func(p *RecvFaultPoint) verbs.WCStatus

var recvFaultHook hook.Hook[RecvFaultHook]

// SetRecvFaultHook sets the process's receive fault hook (nil: none) and
// returns the one it replaces.
func SetRecvFaultHook(h RecvFaultHook) RecvFaultHook { return recvFaultHook.Set(h, h == nil) }

// askRecvFault consults the hook about the receive wrid, which an incoming
// message is about to fill.
func (q *QP) askRecvFault(h RecvFaultHook, wrid uint64) verbs.WCStatus {
	seq := q.recvFaultSeq.Add(1)
	return h(&RecvFaultPoint{Device: q.dev.cfg.Name, QPNum: q.num, QPOrd: q.ord, Seq: seq, WRID: wrid})
}

// NAKStatus is the status a requester's SEND completes with when the
// receive it consumed failed with st, by the IB rules (a too-small buffer
// is an invalid request, anything else a remote operational error).
func NAKStatus(st verbs.WCStatus) verbs.WCStatus {
	if st == verbs.WCLocLenErr {
		return verbs.WCRemInvReqErr
	}
	return verbs.WCRemOpErr
}
