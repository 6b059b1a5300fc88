package engine

import "github.com/goverbs/goverbs/verbs"

// Wire is what a provider supplies per QP: the transport that carries work
// requests to the peer. The engine has already checked everything a verbs
// implementation checks at post time; the wire resolves local buffers with
// QP.Payload and QP.Sink, and the peer's side places data with the responder
// methods of QP, which do the key, access and bounds checks.
type Wire interface {
	// Modify is called before a state transition commits, without the QP
	// locked. An error refuses the transition and is returned by Modify.
	Modify(q *QP, attr *verbs.QPAttr, mask verbs.QPAttrMask, from, to verbs.QPState) error
	// Transmit starts or executes w. The engine calls it from one goroutine
	// at a time per QP, in send-queue order, without the QP locked.
	Transmit(q *QP, w *WQE) Result
	// RecvPosted reports that receives were posted to q or to its SRQ, so a
	// wire waiting for a receive buffer can go on. Called without the QP locked.
	RecvPosted(q *QP)
	// Shutdown reports that q left the connected states: it entered ERR or
	// RESET, or was destroyed. It is called with the QP locked and must only
	// start the teardown (close a socket, drop a reference), never call the QP.
	Shutdown(q *QP, destroyed bool)
}

// Outcome is how Transmit left a work request.
type Outcome uint8

const (
	// Done: the work request is finished, with Result.Status. An error status
	// moves the QP to ERR (the failing request keeps its status, the rest flush).
	Done Outcome = iota
	// Pending: the request was handed to the transport; the wire calls
	// QP.Complete when it finishes (a read response arrived, an ack came).
	Pending
	// Stall: the request cannot go now (the responder has no receive buffer:
	// RNR). The engine keeps it at the head of the send queue and stops until
	// the wire calls QP.Kick.
	Stall
)

// Result is what Transmit returns.
type Result struct {
	Outcome Outcome
	Status  verbs.WCStatus
}

// Results for the common cases.
var (
	ResultOK      = Result{Outcome: Done, Status: verbs.WCSuccess}
	ResultPending = Result{Outcome: Pending}
	ResultStall   = Result{Outcome: Stall}
)

// Fail returns a Done result with an error status.
func Fail(s verbs.WCStatus) Result { return Result{Outcome: Done, Status: s} }
