package verbs

import "fmt"

// QP is a queue pair (struct ibv_qp).
//
// A new QP is in RESET. Modify moves it through INIT, RTR and RTS (the
// attributes each step requires are those of libibverbs; see Modify). In RTS
// it executes send work requests; from INIT on it accepts receives. An error
// moves it to ERR, where every outstanding work request completes with
// WCWRFlushErr.
type QP struct {
	pd     *PD
	d      qpDriver
	num    uint32
	typ    QPType
	sendCQ *CQ
	recvCQ *CQ
	srq    *SRQ
	user   any
}

// Num returns the QP number.
func (qp *QP) Num() uint32 { return qp.num }

// Type returns the QP's transport type.
func (qp *QP) Type() QPType { return qp.typ }

// PD returns the QP's protection domain.
func (qp *QP) PD() *PD { return qp.pd }

// SendCQ returns the CQ that send completions go to.
func (qp *QP) SendCQ() *CQ { return qp.sendCQ }

// RecvCQ returns the CQ that receive completions go to.
func (qp *QP) RecvCQ() *CQ { return qp.recvCQ }

// SRQ returns the shared receive queue the QP uses, or nil.
func (qp *QP) SRQ() *SRQ { return qp.srq }

// UserData returns QPInitAttr.UserData.
func (qp *QP) UserData() any { return qp.user }

// PostSend posts send work requests (ibv_post_send). Requests are checked as
// they are posted: processing stops at the first one that cannot be posted
// and the returned *PostError names it (bad_wr); the requests before it are
// posted. A request is refused with ErrInvalidState unless the QP is in RTS
// or SQD (or ERR, where it completes at once with WCWRFlushErr), with
// ErrQueueFull when the send queue holds MaxSendWR requests, and with
// ErrInvalid for more SGEs than MaxSendSGE, inline data beyond MaxInlineData,
// or an opcode the QP type does not allow. Errors found while executing a
// request (a wrong key, an address outside a region, a remote access
// violation) are reported in its work completion instead.
func (qp *QP) PostSend(wr []SendWR) error {
	err := qp.d.PostSend(wr)
	if tracer.Load() != nil {
		traceSend(qp, wr, err)
	}
	return err
}

// PostRecv posts receive work requests (ibv_post_recv), with the same
// first-failure rule as PostSend. It fails with ErrInvalid when the QP uses an
// SRQ (its own receive queue is not used: post to the SRQ instead), with
// ErrInvalidState in RESET, with ErrQueueFull when MaxRecvWR receives are
// outstanding and with ErrInvalid for more SGEs than MaxRecvSGE. A buffer may
// be reused only after its completion was polled. On a UD QP the first 40
// bytes of the buffers receive the GRH and the message follows them.
func (qp *QP) PostRecv(wr []RecvWR) error {
	if qp.srq != nil {
		return &PostError{Index: 0, WRID: firstRecvID(wr), Err: fmt.Errorf("%w: the QP uses an SRQ; post receives to the SRQ", ErrInvalid)}
	}
	err := qp.d.PostRecv(wr)
	if tracer.Load() != nil {
		traceRecv(qp, wr, err)
	}
	return err
}

func firstRecvID(wr []RecvWR) uint64 {
	if len(wr) == 0 {
		return 0
	}
	return wr[0].WRID
}

// Modify changes the QP's attributes and state (ibv_modify_qp). mask names
// the fields of attr to apply. Each state transition requires and allows the
// attribute sets of the InfiniBand specification (as the kernel's
// ib_modify_qp_is_ok checks them); a missing required attribute, an attribute
// not allowed on that transition, or a transition that does not exist fails
// with ErrInvalid and leaves the QP unchanged.
//
// RC:  RESET->INIT  PKEY_INDEX|PORT|ACCESS_FLAGS
//
//	INIT->RTR   AV|PATH_MTU|DEST_QPN|RQ_PSN|MAX_DEST_RD_ATOMIC|MIN_RNR_TIMER
//	RTR->RTS    SQ_PSN|TIMEOUT|RETRY_CNT|RNR_RETRY|MAX_QP_RD_ATOMIC
//
// UD:  RESET->INIT  PKEY_INDEX|PORT|QKEY;  INIT->RTR nothing;  RTR->RTS SQ_PSN
//
// Any state may go to RESET (discarding all work without completions) or to
// ERR (flushing it).
func (qp *QP) Modify(attr *QPAttr, mask QPAttrMask) error {
	if attr == nil {
		return fmt.Errorf("%w: nil attributes", ErrInvalid)
	}
	return qp.d.Modify(attr, mask)
}

// Query returns the QP's current attributes and its creation attributes (ibv_query_qp).
func (qp *QP) Query() (QPAttr, QPInitAttr, error) { return qp.d.Query() }

// State returns the QP's current state.
func (qp *QP) State() QPState {
	a, _, err := qp.d.Query()
	if err != nil {
		return QPSUnknown
	}
	return a.QPState
}

// Destroy destroys the QP (ibv_destroy_qp). Outstanding work requests are
// discarded without completions. A second Destroy returns nil.
func (qp *QP) Destroy() error {
	err := qp.d.Destroy()
	if err == nil && qp.pd.base != nil {
		qp.pd.qps.drop()
	}
	return again(err)
}

// SRQ is a shared receive queue (struct ibv_srq): receive buffers that any
// QP created with it consumes, in posting order.
type SRQ struct {
	pd   *PD
	d    srqDriver
	user any
}

// PD returns the SRQ's protection domain.
func (s *SRQ) PD() *PD { return s.pd }

// UserData returns SRQInitAttr.UserData.
func (s *SRQ) UserData() any { return s.user }

// PostRecv posts receive work requests to the SRQ (ibv_post_srq_recv), with
// the first-failure rule of QP.PostRecv.
func (s *SRQ) PostRecv(wr []RecvWR) error {
	err := s.d.PostRecv(wr)
	if tracer.Load() != nil {
		traceRecv(nil, wr, err)
	}
	return err
}

// Modify changes the SRQ's limit (SRQAttrLimit arms the limit event) (ibv_modify_srq).
func (s *SRQ) Modify(attr *SRQAttr, mask SRQAttrMask) error {
	if attr == nil {
		return fmt.Errorf("%w: nil SRQAttr", ErrInvalid)
	}
	a := *attr // the provider keeps no pointer into the caller's
	return s.d.Modify(&a, mask)
}

// Query returns the SRQ's attributes (ibv_query_srq).
func (s *SRQ) Query() (SRQAttr, error) { return s.d.Query() }

// Destroy destroys the SRQ (ibv_destroy_srq). It returns ErrBusy while QPs
// use it; a second Destroy returns nil.
func (s *SRQ) Destroy() error { return again(s.d.Destroy()) }
