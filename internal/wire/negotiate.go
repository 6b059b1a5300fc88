package wire

import "errors"

// MPA connection setup rules (docs/iwarp-wire.md sections 2.3-2.5, 3.2-3.5),
// as pure functions over MPAFrame values.

// Local is what the local endpoint brings to an MPA negotiation.
type Local struct {
	IRD int // inbound RDMA Read depth: the rdma_cm responder_resources
	ORD int // outbound RDMA Read depth: the rdma_cm initiator_depth
	Max int // device maximum for IRD and ORD; 0 means DefaultMaxIRDORD (siw's 128)

	CRC bool // ask for CRC (C=1); CRC is on when either side asks
	RTR RTR  // initiator: RTR kinds to offer; non-zero requests P2P mode (A=1)

	Private []byte // ULP private data
}

func (l *Local) max() int {
	if l.Max <= 0 {
		return DefaultMaxIRDORD
	}
	if l.Max > MPAMaxIRDORD {
		return MPAMaxIRDORD
	}
	return l.Max
}

func (l *Local) check() error {
	m := l.max()
	if l.IRD < 0 || l.ORD < 0 || l.IRD > m || l.ORD > m {
		return ErrIRDORDRange
	}
	return nil
}

// Negotiated is the outcome of a successful MPA exchange.
type Negotiated struct {
	IRD int  // Read Requests the peer may have outstanding to us
	ORD int  // Read Requests we may have outstanding to the peer
	CRC bool // FPDUs carry and check CRC32C
	V2  bool // IRD/ORD were exchanged (both frames carried the RFC 6581 block)
	// RTR is the RTR kind of P2P mode, or 0. The initiator sends it as its
	// first FPDU; the responder neither reports the connection established
	// nor transmits before it has processed it.
	RTR RTR
}

// NewRequest builds the MPA Request siw sends as initiator (section 2.3):
// revision 2, Enhanced, M=0, C as asked, the v2 block carrying IRD and ORD,
// and P2P with the offered RTR kinds when l.RTR is not empty.
//
// Errors: ErrIRDORDRange (IRD or ORD negative or above the maximum),
// ErrMPAPrivateTooLong (more than MPAMaxPrivate-4 bytes of private data).
func NewRequest(l Local) (MPAFrame, error) {
	if err := l.check(); err != nil {
		return MPAFrame{}, err
	}
	if len(l.Private)+MPAV2Len > MPAMaxPrivate {
		return MPAFrame{}, ErrMPAPrivateTooLong
	}
	return MPAFrame{
		CRC:      l.CRC,
		Enhanced: true,
		Rev:      MPARev2,
		V2:       true,
		P2P:      l.RTR != 0,
		RTR:      l.RTR & (RTRSend | RTRWrite | RTRRead),
		IRD:      uint16(l.IRD),
		ORD:      uint16(l.ORD),
		Private:  l.Private,
	}, nil
}

// rejectReply is the Reply siw's responder sends when it refuses a Request
// itself (siw_proc_mpareq's reject path): the request's flag and revision
// bytes echoed with M cleared and R set, and no private data at all, not even
// the v2 block.
func rejectReply(req *MPAFrame) MPAFrame {
	return MPAFrame{
		Reply:    true,
		Reject:   true,
		CRC:      req.CRC,
		Enhanced: req.Enhanced,
		Rev:      req.Rev,
	}
}

// NegotiateResponder applies the responder's rules to a parsed Request
// (sections 2.4, 3.2): it returns the Reply to send and the negotiated
// parameters.
//
// The Reply echoes the Request's revision and Enhanced flag; C is set when
// either side asks for CRC. With a v2 Request, my ORD is clamped to the
// peer's IRD and my IRD raised to the peer's ORD (both capped at l.Max); in
// P2P mode the Reply picks Write-RTR when offered, else Read-RTR, else
// proposes Write-RTR. A revision 0/1 (or non-enhanced) peer exchanges no
// IRD/ORD: l.IRD and l.ORD are used as they are.
//
// On error there are two cases. If the returned Reply has Reject set, send
// it and close: that is ErrMPAEnhancedShort (Enhanced rev 2, PD_Length < 4)
// and ErrMPAMarkers (M=1). Otherwise drop the connection without a Reply:
// ErrMPAKey (the frame is a Reply), ErrMPARevision (Rev > 2),
// ErrIRDORDRange (l.IRD or l.ORD out of range), ErrMPAPrivateTooLong
// (l.Private does not fit).
func NegotiateResponder(req MPAFrame, l Local) (MPAFrame, Negotiated, error) {
	if req.Reply {
		return MPAFrame{}, Negotiated{}, ErrMPAKey
	}
	if req.Rev > MPARev2 {
		return MPAFrame{}, Negotiated{}, ErrMPARevision
	}
	if err := l.check(); err != nil {
		return MPAFrame{}, Negotiated{}, err
	}
	if req.Rev == MPARev2 && req.Enhanced && !req.V2 {
		return rejectReply(&req), Negotiated{}, ErrMPAEnhancedShort
	}
	if req.Markers {
		return rejectReply(&req), Negotiated{}, ErrMPAMarkers
	}
	rep := MPAFrame{
		Reply:    true,
		CRC:      req.CRC || l.CRC,
		Enhanced: req.Enhanced,
		Rev:      req.Rev,
		Private:  l.Private,
	}
	n := Negotiated{IRD: l.IRD, ORD: l.ORD, CRC: rep.CRC}
	if req.V2 {
		m := l.max()
		peerIRD := min(int(req.IRD), m) // siw cep->ord
		peerORD := min(int(req.ORD), m) // siw cep->ird
		n.ORD = min(l.ORD, peerIRD)     // clamp my ORD to your IRD
		n.IRD = max(l.IRD, peerORD)     // raise my IRD to your ORD (never above m)
		n.V2 = true
		rep.V2 = true
		rep.IRD, rep.ORD = uint16(n.IRD), uint16(n.ORD)
		if req.P2P {
			rep.P2P = true
			switch {
			case req.RTR&RTRWrite != 0:
				rep.RTR = RTRWrite
			case req.RTR&RTRRead != 0:
				rep.RTR = RTRRead
			default:
				rep.RTR = RTRWrite
			}
			n.RTR = rep.RTR
		}
	}
	if rep.PDLen() > MPAMaxPrivate {
		return MPAFrame{}, Negotiated{}, ErrMPAPrivateTooLong
	}
	return rep, n, nil
}

// RejectReply builds the Reply for an application's reject (rdma_reject,
// siw_reject): the Request's flags and revision echoed with M cleared and R
// set, the v2 block (IRD = ORD = 0) when the Request had one, then private.
// ok is false for a revision 0 Request, which siw answers by closing without
// a Reply.
func RejectReply(req MPAFrame, private []byte) (reply MPAFrame, ok bool) {
	if req.Rev < MPARev1 {
		return MPAFrame{}, false
	}
	rep := rejectReply(&req)
	rep.V2 = req.V2
	rep.Private = private
	return rep, true
}

// NegotiateInitiator applies the initiator's rules (sections 2.5, 3.3) to the
// Reply received for the Request sent, and returns the negotiated
// parameters. l supplies Max, and IRD/ORD when no v2 block was exchanged.
//
// When a v2 block was sent the Reply must be revision 2 with Enhanced and a
// v2 block. The initiator then adopts IRD := the peer's ORD and ORD := the
// peer's IRD (capped at l.Max), failing only when its own IRD is below the
// peer's ORD and that ORD exceeds l.Max. In P2P mode the Reply must pick an
// RTR kind that was offered. CRC is on when either frame has C=1.
//
// Errors: ErrMPAKey (not a Reply), ErrMPARevision, ErrMPARejected (R=1),
// ErrMPAMarkers (M=1), ErrMPANotEnhanced, ErrInsufficientIRD,
// ErrNoMatchingRTR, ErrIRDORDRange (l out of range). MPATerm tells which
// of them siw answers with a Terminate before closing.
func NegotiateInitiator(sent, reply MPAFrame, l Local) (Negotiated, error) {
	if !reply.Reply {
		return Negotiated{}, ErrMPAKey
	}
	if reply.Rev > MPARev2 {
		return Negotiated{}, ErrMPARevision
	}
	if reply.Reject {
		return Negotiated{}, ErrMPARejected
	}
	if reply.Markers {
		return Negotiated{}, ErrMPAMarkers
	}
	if err := l.check(); err != nil {
		return Negotiated{}, err
	}
	n := Negotiated{IRD: l.IRD, ORD: l.ORD, CRC: sent.CRC || reply.CRC}
	if !sent.V2 {
		return n, nil
	}
	if reply.Rev != MPARev2 || !reply.Enhanced || !reply.V2 {
		return Negotiated{}, ErrMPANotEnhanced
	}
	m := l.max()
	repIRD, repORD := int(reply.IRD), int(reply.ORD)
	if int(sent.IRD) < repORD && repORD > m {
		return Negotiated{}, ErrInsufficientIRD
	}
	n.V2 = true
	n.IRD = repORD
	n.ORD = min(repIRD, m)
	if sent.P2P {
		switch {
		case sent.RTR&reply.RTR&RTRWrite != 0:
			n.RTR = RTRWrite
		case sent.RTR&reply.RTR&RTRRead != 0:
			n.RTR = RTRRead
		case sent.RTR&reply.RTR&RTRSend != 0:
			n.RTR = RTRSend
		default:
			return Negotiated{}, ErrNoMatchingRTR
		}
	}
	return n, nil
}

// MPATerm returns the Terminate cause siw sends before closing when MPA
// setup fails with err on the initiator side (section 2.5): invalid
// Request/Reply frame (LLP/MPA/0x04) for ErrMPAKey, insufficient IRD (0x06),
// no matching RTR (0x07). For every other error it returns nil: close
// without a Terminate.
func MPATerm(err error) *TermError {
	switch {
	case errors.Is(err, ErrMPAKey):
		return &TermError{Layer: LayerLLP, EType: uint8(LLPMPA), Code: uint8(MPAInvalidReqRep)}
	case errors.Is(err, ErrInsufficientIRD):
		return &TermError{Layer: LayerLLP, EType: uint8(LLPMPA), Code: uint8(MPAInsufficientIRD)}
	case errors.Is(err, ErrNoMatchingRTR):
		return &TermError{Layer: LayerLLP, EType: uint8(LLPMPA), Code: uint8(MPANoMatchingRTR)}
	}
	return nil
}
