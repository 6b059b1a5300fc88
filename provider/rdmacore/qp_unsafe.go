//go:build rdmacore && linux && cgo

package rdmacore

/*
#include <stdlib.h>
#include "gv.h"
*/
import "C"

import (
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/goverbs/goverbs/verbs"
	"github.com/goverbs/goverbs/verbs/driver"
)

// batch is how many work requests one cgo crossing posts.
const batch = C.GV_BATCH

// queuePair is a queue pair (struct ibv_qp). Posting fills plain C structs
// (struct gv_swr, struct ibv_sge) in memory the QP owns, under a lock, and
// hands up to a batch of them to one C call, which links them into an
// ibv_send_wr list and posts it: no allocation, one crossing per batch.
type queuePair struct {
	v      *verbs.QP
	qp     *C.struct_ibv_qp
	ptr    C.uint64_t
	handle uint64
	ctx    *devContext
	typ    verbs.QPType
	init   verbs.QPInitAttr
	cap    verbs.QPCap // as the device sized the queues

	smu  sync.Mutex
	swr  [batch]C.struct_gv_swr
	ssge []C.struct_ibv_sge
	inl  []byte // C memory: inline payloads given as SendWR.Inline, copied at post time
	sbad C.int

	recv recvPoster

	// life is read-held by Modify and Query and write-held by Destroy;
	// the posting paths check dead under their own locks, which Destroy
	// takes too: no call reaches a destroyed QP (ErrClosed instead).
	life sync.RWMutex
	dead bool

	// state is the QP's state as goverbs last saw it (Modify, Query). Some
	// devices (rxe) accept posts in RESET, INIT or RTR and run them later;
	// verbs refuses them. A post in a state that does not allow it is
	// checked against the device's own state (a CM may have moved the QP)
	// before it is refused, so the check costs nothing in RTS.
	state atomic.Uint32
	// iwarp: the device does not report the QP's state (siw's query says
	// RESET throughout), so the cached state is the QP's state: Modify,
	// the CM and error events keep it.
	iwarp bool
}

var errQPClosed = fmt.Errorf("%w: QP destroyed", verbs.ErrClosed)

func (p *protDomain) CreateQP(v *verbs.QP, attr *verbs.QPInitAttr) (driver.QP, error) {
	if err := p.hold(); err != nil {
		return nil, err
	}
	defer p.mu.Unlock()
	scq, _ := driver.CQOf(attr.SendCQ).(*complQueue)
	rcq, _ := driver.CQOf(attr.RecvCQ).(*complQueue)
	if scq == nil || rcq == nil {
		return nil, fmt.Errorf("%w: CQ of another provider", verbs.ErrInvalid)
	}
	q := &queuePair{v: v, ctx: p.ctx, typ: attr.QPType, init: *attr}
	var ia C.struct_ibv_qp_init_attr
	ia.send_cq, ia.recv_cq = scq.cq, rcq.cq
	if attr.SRQ != nil {
		s, _ := driver.SRQOf(attr.SRQ).(*sharedRQ)
		if s == nil {
			return nil, fmt.Errorf("%w: SRQ of another provider", verbs.ErrInvalid)
		}
		ia.srq = s.srq
	}
	ia.cap.max_send_wr = C.uint32_t(attr.Cap.MaxSendWR)
	ia.cap.max_recv_wr = C.uint32_t(attr.Cap.MaxRecvWR)
	ia.cap.max_send_sge = C.uint32_t(attr.Cap.MaxSendSGE)
	ia.cap.max_recv_sge = C.uint32_t(attr.Cap.MaxRecvSGE)
	ia.cap.max_inline_data = C.uint32_t(attr.Cap.MaxInlineData)
	ia.qp_type = C.enum_ibv_qp_type(attr.QPType)
	if attr.SQSigAll {
		ia.sq_sig_all = 1
	}
	q.handle = newHandle(q)
	ia.qp_context = C.gv_voidp(C.uint64_t(q.handle))
	qp, err := C.ibv_create_qp(p.pd, &ia)
	if qp == nil {
		handles.Delete(q.handle)
		return nil, errnoErr(fmt.Sprintf("ibv_create_qp (%v, %+v)", attr.QPType, attr.Cap), errnoOf(err))
	}
	q.qp, q.ptr = qp, C.gv_ptr(unsafePointer(qp))
	q.cap = verbs.QPCap{
		MaxSendWR: int(ia.cap.max_send_wr), MaxRecvWR: int(ia.cap.max_recv_wr),
		MaxSendSGE: int(ia.cap.max_send_sge), MaxRecvSGE: int(ia.cap.max_recv_sge),
		MaxInlineData: int(ia.cap.max_inline_data),
	}
	// Some devices (siw) report larger capabilities to ibv_query_qp than
	// ibv_create_qp returned: what the device enforces is the larger.
	var qa C.struct_ibv_qp_attr
	var qia C.struct_ibv_qp_init_attr
	if C.ibv_query_qp(qp, &qa, C.IBV_QP_CAP, &qia) == 0 {
		q.cap.MaxSendSGE = max(q.cap.MaxSendSGE, int(qa.cap.max_send_sge))
		q.cap.MaxRecvSGE = max(q.cap.MaxRecvSGE, int(qa.cap.max_recv_sge))
		q.cap.MaxInlineData = max(q.cap.MaxInlineData, int(qa.cap.max_inline_data))
	}
	q.init.Cap = q.cap
	q.ssge = make([]C.struct_ibv_sge, batch*max(q.cap.MaxSendSGE, 1))
	if q.cap.MaxInlineData > 0 {
		// C memory, which SGEs may name by address (a QP dropped without
		// Destroy leaks it, as it leaks the device's QP).
		q.inl = unsafe.Slice((*byte)(C.malloc(C.size_t(batch*q.cap.MaxInlineData))), batch*q.cap.MaxInlineData)
	}
	q.iwarp = p.ctx.dev.transport == verbs.TransportIWARP
	p.ctx.qps.Store(q.Num(), q)
	q.recv.init(q.ptr, false, q.cap.MaxRecvSGE)
	return q, nil
}

func (q *queuePair) Num() uint32 { return uint32(q.qp.qp_num) }

// sendErr is why a work request cannot be posted, found before the device
// sees it.
func (q *queuePair) sendErr(w *verbs.SendWR) error {
	if len(w.SGList) > q.cap.MaxSendSGE {
		return fmt.Errorf("%w: %d SGEs, the QP has max_send_sge %d", verbs.ErrInvalid, len(w.SGList), q.cap.MaxSendSGE)
	}
	switch w.Opcode {
	case verbs.WRSend, verbs.WRSendWithImm:
	case verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm, verbs.WRRDMARead, verbs.WRAtomicCmpAndSwp,
		verbs.WRAtomicFetchAndAdd, verbs.WRSendWithInv:
		if q.typ == verbs.QPTUD {
			return fmt.Errorf("%w: opcode %v on a UD QP", verbs.ErrInvalid, w.Opcode)
		}
	case verbs.WRFlush, verbs.WRAtomicWrite:
		return fmt.Errorf("%w: %v needs the extended post API (ibv_wr_*), not in this build", verbs.ErrNotSupported, w.Opcode)
	case verbs.WRLocalInv, verbs.WRBindMW:
		return fmt.Errorf("%w: %v (memory windows)", verbs.ErrNotSupported, w.Opcode)
	default:
		return fmt.Errorf("%w: opcode %v", verbs.ErrInvalid, w.Opcode)
	}
	if q.typ == verbs.QPTUD {
		if w.AH == nil {
			return fmt.Errorf("%w: UD send without an address handle", verbs.ErrInvalid)
		}
		if ah, _ := driver.AHOf(w.AH).(*addrHandle); ah == nil {
			return fmt.Errorf("%w: address handle of another provider", verbs.ErrInvalid)
		} else if ah.dead.Load() {
			return fmt.Errorf("%w: address handle destroyed", verbs.ErrClosed)
		}
	}
	if w.Flags&verbs.SendInline != 0 {
		switch w.Opcode {
		case verbs.WRSend, verbs.WRSendWithImm, verbs.WRSendWithInv, verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm:
		default:
			return fmt.Errorf("%w: inline data on %v (only sends and RDMA writes carry it)", verbs.ErrInvalid, w.Opcode)
		}
		n := len(w.Inline)
		if w.Inline == nil {
			n = 0
			for _, s := range w.SGList {
				n += int(s.Length)
			}
		}
		if n > q.cap.MaxInlineData {
			return fmt.Errorf("%w: %d bytes inline, the QP has max_inline_data %d", verbs.ErrInvalid, n, q.cap.MaxInlineData)
		}
	}
	return nil
}

func (q *queuePair) PostSend(wr []verbs.SendWR) error {
	q.smu.Lock()
	defer q.smu.Unlock()
	if q.dead {
		return &verbs.PostError{Index: 0, WRID: firstSendID(wr), Err: errQPClosed}
	}
	if st := verbs.QPState(q.state.Load()); st != verbs.QPSRTS && st != verbs.QPSSQD && st != verbs.QPSErr && len(wr) > 0 {
		if st = q.refreshState(); st != verbs.QPSRTS && st != verbs.QPSSQD && st != verbs.QPSErr {
			return &verbs.PostError{Index: 0, WRID: wr[0].WRID, Err: fmt.Errorf("%w: post send in state %v", verbs.ErrInvalidState, st)}
		}
	}
	for start := 0; start < len(wr); {
		n, ns := 0, 0
		var bad error
		for n < batch && start+n < len(wr) {
			w := &wr[start+n]
			if bad = q.sendErr(w); bad != nil {
				break
			}
			s := &q.swr[n]
			*s = C.struct_gv_swr{
				wr_id: C.uint64_t(w.WRID), remote_addr: C.uint64_t(w.RemoteAddr),
				compare_add: C.uint64_t(w.CompareAdd), swap: C.uint64_t(w.Swap),
				rkey: C.uint32_t(w.RKey), imm: C.uint32_t(w.ImmData), inv_rkey: C.uint32_t(w.InvalidateRKey),
				remote_qpn: C.uint32_t(w.RemoteQPN), remote_qkey: C.uint32_t(w.RemoteQKey),
				opcode: C.uint32_t(w.Opcode), flags: C.uint32_t(w.Flags), sge_off: C.uint32_t(ns),
			}
			if w.AH != nil {
				s.ah = driver.AHOf(w.AH).(*addrHandle).ptr
			}
			if w.Flags&verbs.SendInline != 0 && w.Inline != nil {
				if len(w.Inline) > 0 {
					off := n * q.cap.MaxInlineData
					copy(q.inl[off:], w.Inline)
					q.ssge[ns] = C.struct_ibv_sge{addr: C.uint64_t(addrOf(q.inl[off:])), length: C.uint32_t(len(w.Inline))}
					ns++
				}
			} else {
				for _, g := range w.SGList {
					q.ssge[ns] = C.struct_ibv_sge{addr: C.uint64_t(g.Addr), length: C.uint32_t(g.Length), lkey: C.uint32_t(g.LKey)}
					ns++
				}
			}
			s.nsge = C.uint32_t(ns) - s.sge_off
			n++
		}
		if n > 0 {
			if rc := C.gv_post_send(q.ptr, &q.swr[0], C.int(n), &q.ssge[0], &q.sbad); rc != 0 {
				i := start + int(q.sbad)
				return &verbs.PostError{Index: i, WRID: wr[i].WRID, Err: q.postErr("ibv_post_send", rc)}
			}
		}
		if bad != nil {
			i := start + n
			return &verbs.PostError{Index: i, WRID: wr[i].WRID, Err: bad}
		}
		start += n
	}
	return nil
}

// postErr names a post failure: ENOMEM is a full queue, and EINVAL on a QP
// in a state that does not accept the request is ErrInvalidState.
func (q *queuePair) postErr(call string, rc C.int) error {
	e := errnoFromRC(rc)
	switch e {
	case C.ENOMEM:
		return fmt.Errorf("%w: %s: %v", verbs.ErrQueueFull, call, e)
	case C.EINVAL, C.ENOTCONN:
		if a, _, err := q.Query(); err == nil {
			if st := a.QPState; st == verbs.QPSReset || st == verbs.QPSInit || st == verbs.QPSRTR || (call == "ibv_post_recv" && st == verbs.QPSReset) {
				return fmt.Errorf("%w: %s in state %v: %v", verbs.ErrInvalidState, call, st, e)
			}
		}
	}
	return errnoErr(call, e)
}

func (q *queuePair) PostRecv(wr []verbs.RecvWR) error {
	if st := verbs.QPState(q.state.Load()); st == verbs.QPSReset && len(wr) > 0 {
		if st = q.refreshState(); st == verbs.QPSReset {
			return &verbs.PostError{Index: 0, WRID: wr[0].WRID, Err: fmt.Errorf("%w: post receive in state %v", verbs.ErrInvalidState, st)}
		}
	}
	return q.recv.post(wr, q.postErr)
}

// refreshState asks the device for the QP's state and caches it.
func (q *queuePair) refreshState() verbs.QPState {
	if q.iwarp {
		return verbs.QPState(q.state.Load())
	}
	var a C.struct_ibv_qp_attr
	var ia C.struct_ibv_qp_init_attr
	if C.ibv_query_qp(q.qp, &a, C.IBV_QP_STATE, &ia) != 0 {
		return verbs.QPState(q.state.Load())
	}
	st := verbs.QPState(a.qp_state)
	q.state.Store(uint32(st))
	return st
}

func firstSendID(wr []verbs.SendWR) uint64 {
	if len(wr) == 0 {
		return 0
	}
	return wr[0].WRID
}

func (q *queuePair) Modify(attr *verbs.QPAttr, mask verbs.QPAttrMask) error {
	q.life.RLock()
	defer q.life.RUnlock()
	if q.dead {
		return errQPClosed
	}
	var a C.struct_ibv_qp_attr
	a.qp_state = C.enum_ibv_qp_state(attr.QPState)
	a.cur_qp_state = C.enum_ibv_qp_state(attr.CurQPState)
	a.path_mtu = C.enum_ibv_mtu(attr.PathMTU)
	a.qkey = C.uint32_t(attr.QKey)
	a.rq_psn = C.uint32_t(attr.RQPSN)
	a.sq_psn = C.uint32_t(attr.SQPSN)
	a.dest_qp_num = C.uint32_t(attr.DestQPNum)
	a.qp_access_flags = C.uint(attr.QPAccessFlags)
	a.cap.max_send_wr = C.uint32_t(attr.Cap.MaxSendWR)
	a.cap.max_recv_wr = C.uint32_t(attr.Cap.MaxRecvWR)
	a.cap.max_send_sge = C.uint32_t(attr.Cap.MaxSendSGE)
	a.cap.max_recv_sge = C.uint32_t(attr.Cap.MaxRecvSGE)
	a.cap.max_inline_data = C.uint32_t(attr.Cap.MaxInlineData)
	fillAH(&a.ah_attr, &attr.AHAttr)
	fillAH(&a.alt_ah_attr, &attr.AltAHAttr)
	a.pkey_index = C.uint16_t(attr.PKeyIndex)
	a.alt_pkey_index = C.uint16_t(attr.AltPKeyIndex)
	if attr.EnSQDAsyncNotify {
		a.en_sqd_async_notify = 1
	}
	a.max_rd_atomic = C.uint8_t(attr.MaxRdAtomic)
	a.max_dest_rd_atomic = C.uint8_t(attr.MaxDestRdAtomic)
	a.min_rnr_timer = C.uint8_t(attr.MinRNRTimer)
	a.port_num = C.uint8_t(attr.PortNum)
	a.timeout = C.uint8_t(attr.Timeout)
	a.retry_cnt = C.uint8_t(attr.RetryCnt)
	a.rnr_retry = C.uint8_t(attr.RNRRetry)
	a.alt_port_num = C.uint8_t(attr.AltPortNum)
	a.alt_timeout = C.uint8_t(attr.AltTimeout)
	if rc := C.ibv_modify_qp(q.qp, &a, C.int(mask)); rc != 0 {
		return errnoErr(fmt.Sprintf("ibv_modify_qp to %v (mask %v)", attr.QPState, mask), errnoFromRC(rc))
	}
	if mask&verbs.QPAttrState != 0 {
		q.state.Store(uint32(attr.QPState))
	}
	return nil
}

// queryMask is every attribute ibv_query_qp reports.
const queryMask = C.IBV_QP_STATE | C.IBV_QP_CUR_STATE | C.IBV_QP_EN_SQD_ASYNC_NOTIFY | C.IBV_QP_ACCESS_FLAGS |
	C.IBV_QP_PKEY_INDEX | C.IBV_QP_PORT | C.IBV_QP_QKEY | C.IBV_QP_AV | C.IBV_QP_PATH_MTU | C.IBV_QP_TIMEOUT |
	C.IBV_QP_RETRY_CNT | C.IBV_QP_RNR_RETRY | C.IBV_QP_RQ_PSN | C.IBV_QP_MAX_QP_RD_ATOMIC | C.IBV_QP_ALT_PATH |
	C.IBV_QP_MIN_RNR_TIMER | C.IBV_QP_SQ_PSN | C.IBV_QP_MAX_DEST_RD_ATOMIC | C.IBV_QP_CAP | C.IBV_QP_DEST_QPN

func (q *queuePair) Query() (verbs.QPAttr, verbs.QPInitAttr, error) {
	q.life.RLock()
	defer q.life.RUnlock()
	if q.dead {
		return verbs.QPAttr{}, verbs.QPInitAttr{}, errQPClosed
	}
	var a C.struct_ibv_qp_attr
	var ia C.struct_ibv_qp_init_attr
	if rc := C.ibv_query_qp(q.qp, &a, queryMask, &ia); rc != 0 {
		return verbs.QPAttr{}, verbs.QPInitAttr{}, errnoErr("ibv_query_qp", errnoFromRC(rc))
	}
	v := verbs.QPAttr{
		QPState: verbs.QPState(a.qp_state), CurQPState: verbs.QPState(a.cur_qp_state), PathMTU: verbs.MTU(a.path_mtu),
		QKey: uint32(a.qkey), RQPSN: uint32(a.rq_psn), SQPSN: uint32(a.sq_psn), DestQPNum: uint32(a.dest_qp_num),
		QPAccessFlags: verbs.AccessFlags(a.qp_access_flags),
		Cap: verbs.QPCap{
			MaxSendWR: int(a.cap.max_send_wr), MaxRecvWR: int(a.cap.max_recv_wr), MaxSendSGE: int(a.cap.max_send_sge),
			MaxRecvSGE: int(a.cap.max_recv_sge), MaxInlineData: int(a.cap.max_inline_data),
		},
		AHAttr: convAH(&a.ah_attr), AltAHAttr: convAH(&a.alt_ah_attr),
		PKeyIndex: uint16(a.pkey_index), AltPKeyIndex: uint16(a.alt_pkey_index),
		EnSQDAsyncNotify: a.en_sqd_async_notify != 0, SQDraining: a.sq_draining != 0,
		MaxRdAtomic: uint8(a.max_rd_atomic), MaxDestRdAtomic: uint8(a.max_dest_rd_atomic),
		MinRNRTimer: uint8(a.min_rnr_timer), PortNum: uint8(a.port_num), Timeout: uint8(a.timeout),
		RetryCnt: uint8(a.retry_cnt), RNRRetry: uint8(a.rnr_retry), AltPortNum: uint8(a.alt_port_num),
		AltTimeout: uint8(a.alt_timeout),
	}
	if q.iwarp {
		v.QPState = verbs.QPState(q.state.Load())
		v.CurQPState = v.QPState
	} else {
		q.state.Store(uint32(v.QPState))
	}
	init := q.init
	init.Cap = v.Cap
	return v, init, nil
}

func (q *queuePair) Destroy() error {
	q.life.Lock()
	defer q.life.Unlock()
	q.smu.Lock()
	defer q.smu.Unlock()
	q.recv.mu.Lock()
	defer q.recv.mu.Unlock()
	if q.dead {
		return errQPClosed
	}
	if rc := C.ibv_destroy_qp(q.qp); rc != 0 {
		return errnoErr("ibv_destroy_qp", errnoFromRC(rc))
	}
	q.dead, q.recv.dead = true, true
	handles.Delete(q.handle)
	q.ctx.qps.CompareAndDelete(q.Num(), q)
	if q.inl != nil {
		C.free(unsafe.Pointer(unsafe.SliceData(q.inl)))
		q.inl = nil
	}
	return nil
}

// recvPoster posts receives of a QP or an SRQ in batches.
type recvPoster struct {
	mu     sync.Mutex
	ptr    C.uint64_t
	srq    bool
	maxSGE int
	rwr    [batch]C.struct_gv_rwr
	sge    []C.struct_ibv_sge
	bad    C.int
	dead   bool // the queue was destroyed (under mu)
}

func (r *recvPoster) init(ptr C.uint64_t, srq bool, maxSGE int) {
	r.ptr, r.srq, r.maxSGE = ptr, srq, maxSGE
	r.sge = make([]C.struct_ibv_sge, batch*max(maxSGE, 1))
}

func (r *recvPoster) post(wr []verbs.RecvWR, postErr func(string, C.int) error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	call := "ibv_post_recv"
	if r.srq {
		call = "ibv_post_srq_recv"
	}
	if r.dead {
		var id uint64
		if len(wr) > 0 {
			id = wr[0].WRID
		}
		return &verbs.PostError{Index: 0, WRID: id, Err: fmt.Errorf("%w: receive queue destroyed", verbs.ErrClosed)}
	}
	for start := 0; start < len(wr); {
		n, ns := 0, 0
		var bad error
		for n < batch && start+n < len(wr) {
			w := &wr[start+n]
			if len(w.SGList) > r.maxSGE {
				bad = fmt.Errorf("%w: %d SGEs, the queue has max_recv_sge %d", verbs.ErrInvalid, len(w.SGList), r.maxSGE)
				break
			}
			r.rwr[n] = C.struct_gv_rwr{wr_id: C.uint64_t(w.WRID), sge_off: C.uint32_t(ns), nsge: C.uint32_t(len(w.SGList))}
			for _, g := range w.SGList {
				r.sge[ns] = C.struct_ibv_sge{addr: C.uint64_t(g.Addr), length: C.uint32_t(g.Length), lkey: C.uint32_t(g.LKey)}
				ns++
			}
			n++
		}
		if n > 0 {
			var rc C.int
			if r.srq {
				rc = C.gv_post_srq_recv(r.ptr, &r.rwr[0], C.int(n), &r.sge[0], &r.bad)
			} else {
				rc = C.gv_post_recv(r.ptr, &r.rwr[0], C.int(n), &r.sge[0], &r.bad)
			}
			if rc != 0 {
				i := start + int(r.bad)
				return &verbs.PostError{Index: i, WRID: wr[i].WRID, Err: postErr(call, rc)}
			}
		}
		if bad != nil {
			i := start + n
			return &verbs.PostError{Index: i, WRID: wr[i].WRID, Err: bad}
		}
		start += n
	}
	return nil
}

// sharedRQ is a shared receive queue (struct ibv_srq).
type sharedRQ struct {
	v *verbs.SRQ
	// attr is what the SRQ was created and modified with, for devices
	// whose provider has no ibv_query_srq (siw): Query reports it then.
	attr   verbs.SRQAttr
	srq    *C.struct_ibv_srq
	handle uint64
	recv   recvPoster
	life   sync.RWMutex // as queuePair's
	dead   bool
}

var errSRQClosed = fmt.Errorf("%w: SRQ destroyed", verbs.ErrClosed)

func (p *protDomain) CreateSRQ(v *verbs.SRQ, attr *verbs.SRQInitAttr) (driver.SRQ, error) {
	if err := p.hold(); err != nil {
		return nil, err
	}
	defer p.mu.Unlock()
	s := &sharedRQ{v: v}
	var ia C.struct_ibv_srq_init_attr
	ia.attr.max_wr = C.uint32_t(attr.Attr.MaxWR)
	ia.attr.max_sge = C.uint32_t(attr.Attr.MaxSGE)
	ia.attr.srq_limit = C.uint32_t(attr.Attr.SRQLimit)
	s.handle = newHandle(s)
	ia.srq_context = C.gv_voidp(C.uint64_t(s.handle))
	srq, err := C.ibv_create_srq(p.pd, &ia)
	if srq == nil {
		handles.Delete(s.handle)
		return nil, errnoErr(fmt.Sprintf("ibv_create_srq %+v", attr.Attr), errnoOf(err))
	}
	s.srq = srq
	s.attr = verbs.SRQAttr{MaxWR: int(ia.attr.max_wr), MaxSGE: int(ia.attr.max_sge), SRQLimit: attr.Attr.SRQLimit}
	s.recv.init(C.gv_ptr(unsafePointer(srq)), true, int(ia.attr.max_sge))
	return s, nil
}

// limitFired records that the limit event disarmed the limit.
func (s *sharedRQ) limitFired() {
	s.life.Lock()
	s.attr.SRQLimit = 0
	s.life.Unlock()
}

func (s *sharedRQ) PostRecv(wr []verbs.RecvWR) error {
	return s.recv.post(wr, func(call string, rc C.int) error {
		if e := errnoFromRC(rc); e == C.ENOMEM {
			return fmt.Errorf("%w: %s: %v", verbs.ErrQueueFull, call, e)
		}
		return errnoErr(call, errnoFromRC(rc))
	})
}

func (s *sharedRQ) Modify(attr *verbs.SRQAttr, mask verbs.SRQAttrMask) error {
	s.life.RLock()
	defer s.life.RUnlock()
	if s.dead {
		return errSRQClosed
	}
	var a C.struct_ibv_srq_attr
	a.max_wr = C.uint32_t(attr.MaxWR)
	a.max_sge = C.uint32_t(attr.MaxSGE)
	a.srq_limit = C.uint32_t(attr.SRQLimit)
	if rc := C.ibv_modify_srq(s.srq, &a, C.int(mask)); rc != 0 {
		return errnoErr("ibv_modify_srq", errnoFromRC(rc))
	}
	if mask&verbs.SRQAttrLimit != 0 {
		s.attr.SRQLimit = attr.SRQLimit
	}
	if mask&verbs.SRQAttrMaxWR != 0 {
		s.attr.MaxWR = attr.MaxWR
	}
	return nil
}

func (s *sharedRQ) Query() (verbs.SRQAttr, error) {
	s.life.RLock()
	defer s.life.RUnlock()
	if s.dead {
		return verbs.SRQAttr{}, errSRQClosed
	}
	var a C.struct_ibv_srq_attr
	if rc := C.ibv_query_srq(s.srq, &a); rc != 0 {
		if e := errnoFromRC(rc); e == C.EOPNOTSUPP || e == C.ENOSYS {
			return s.attr, nil
		}
		return verbs.SRQAttr{}, errnoErr("ibv_query_srq", errnoFromRC(rc))
	}
	return verbs.SRQAttr{MaxWR: int(a.max_wr), MaxSGE: int(a.max_sge), SRQLimit: int(a.srq_limit)}, nil
}

func (s *sharedRQ) Destroy() error {
	s.life.Lock()
	defer s.life.Unlock()
	s.recv.mu.Lock()
	defer s.recv.mu.Unlock()
	if s.dead {
		return errSRQClosed
	}
	if rc := C.ibv_destroy_srq(s.srq); rc != 0 {
		return errnoErr("ibv_destroy_srq", errnoFromRC(rc))
	}
	s.dead, s.recv.dead = true, true
	handles.Delete(s.handle)
	return nil
}
