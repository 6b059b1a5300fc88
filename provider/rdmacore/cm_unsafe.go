//go:build rdmacore && linux && cgo

package rdmacore

/*
#include "gv.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/goverbs/goverbs/verbs"
	"github.com/goverbs/goverbs/verbs/driver"
)

// cmChannel is a librdmacm event channel waited on through the netpoller.
type cmChannel struct {
	ch *C.struct_rdma_event_channel
	w  *fdWaiter
}

func newCMChannel() (*cmChannel, error) {
	ch, err := C.rdma_create_event_channel()
	if ch == nil {
		return nil, errnoErr("rdma_create_event_channel", errnoOf(err))
	}
	w, err := newFdWaiter(int(ch.fd), "rdma_cm event channel")
	if err != nil {
		C.rdma_destroy_event_channel(ch)
		return nil, err
	}
	return &cmChannel{ch: ch, w: w}, nil
}

// next returns the channel's next event, acknowledged.
func (c *cmChannel) next(ctx context.Context) (C.struct_gv_cm_event, error) {
	var ev C.struct_gv_cm_event
	err := c.w.wait(ctx, func() (bool, error) {
		rc := C.gv_cm_next(c.ch, &ev)
		if rc == C.EAGAIN {
			return false, nil
		}
		if rc != 0 {
			return true, errnoErr("rdma_get_cm_event", syscallErrno(rc))
		}
		return true, nil
	})
	return ev, err
}

// expect waits for the next event and checks that it is want.
func (c *cmChannel) expect(ctx context.Context, want C.uint32_t) (C.struct_gv_cm_event, error) {
	ev, err := c.next(ctx)
	if err != nil {
		return ev, err
	}
	if ev.event != want {
		return ev, fmt.Errorf("%w: rdma_cm event %s (status %d), want %s", verbs.ErrInvalidState,
			C.GoString(C.rdma_event_str(C.enum_rdma_cm_event_type(ev.event))), int(ev.status),
			C.GoString(C.rdma_event_str(C.enum_rdma_cm_event_type(want))))
	}
	return ev, nil
}

func (c *cmChannel) close() {
	c.w.close()
	C.rdma_destroy_event_channel(c.ch)
}

func cmErr(call string, rc C.int) error {
	if rc == 0 {
		return nil
	}
	return errnoErr(call, syscallErrno(rc))
}

// cmPair is a connection made by connectPair: the CM IDs and channels that
// keep it up. Close disconnects it.
type cmPair struct {
	lch, ach *cmChannel
	ids      []C.uint64_t
}

func (p *cmPair) Close() error {
	for i := len(p.ids) - 1; i >= 0; i-- {
		C.gv_cm_disconnect(p.ids[i])
		C.gv_cm_destroy_id(p.ids[i])
	}
	p.ach.close()
	p.lch.close()
	return nil
}

// connectPair connects RC QPs a and b (both in INIT, on the device that
// owns ip) through the kernel's rdma_cm, b listening on ip: what iWARP
// needs (its QPs are connected by the CM, not by Modify), and works on
// InfiniBand and RoCE too, where the CM's attributes move the QPs to RTR
// and RTS. attr gives IRD (MaxDestRdAtomic) and ORD (MaxRdAtomic).
func connectPair(ctx context.Context, a, b *verbs.QP, ip netip.Addr, attr verbs.QPAttr) (_ *cmPair, err error) {
	qa, _ := driver.QPOf(a).(*queuePair)
	qb, _ := driver.QPOf(b).(*queuePair)
	if qa == nil || qb == nil {
		return nil, fmt.Errorf("%w: QPs of another provider", verbs.ErrInvalid)
	}
	if !ip.Is4() {
		return nil, fmt.Errorf("%w: %v: only IPv4 addresses", verbs.ErrNotSupported, ip)
	}
	ip4 := ip.As4()
	p := &cmPair{}
	if p.lch, err = newCMChannel(); err != nil {
		return nil, err
	}
	if p.ach, err = newCMChannel(); err != nil {
		p.lch.close()
		return nil, err
	}
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	var lid, aid C.uint64_t
	if rc := C.gv_cm_create_id(p.lch.ch, &lid); rc != 0 {
		return nil, cmErr("rdma_create_id", rc)
	}
	p.ids = append(p.ids, lid)
	var port C.uint16_t
	if err := cmErr("rdma_bind_addr/rdma_listen", C.gv_cm_bind_listen(lid, (*C.uint8_t)(&ip4[0]), 0, 4, &port)); err != nil {
		return nil, err
	}
	if rc := C.gv_cm_create_id(p.ach.ch, &aid); rc != 0 {
		return nil, cmErr("rdma_create_id", rc)
	}
	p.ids = append(p.ids, aid)
	if err := cmErr("rdma_resolve_addr", C.gv_cm_resolve_addr(aid, (*C.uint8_t)(&ip4[0]), port, 2000)); err != nil {
		return nil, err
	}
	if _, err := p.ach.expect(ctx, C.RDMA_CM_EVENT_ADDR_RESOLVED); err != nil {
		return nil, err
	}
	if err := cmErr("rdma_resolve_route", C.gv_cm_resolve_route(aid, 2000)); err != nil {
		return nil, err
	}
	if _, err := p.ach.expect(ctx, C.RDMA_CM_EVENT_ROUTE_RESOLVED); err != nil {
		return nil, err
	}
	cp := C.struct_gv_conn_param{qpn: C.uint32_t(a.Num()), rr: C.uint8_t(attr.MaxDestRdAtomic), idepth: C.uint8_t(attr.MaxRdAtomic), retry: 7, rnr_retry: 7}
	if err := cmErr("rdma_connect", C.gv_cm_connect(aid, &cp, nil)); err != nil {
		return nil, err
	}
	req, err := p.lch.expect(ctx, C.RDMA_CM_EVENT_CONNECT_REQUEST)
	if err != nil {
		return nil, err
	}
	pid := req.id
	p.ids = append(p.ids, pid)
	iwarp := qb.ctx.dev.transport == verbs.TransportIWARP
	if !iwarp {
		for _, st := range []C.int{C.IBV_QPS_RTR, C.IBV_QPS_RTS} {
			if err := cmErr("rdma_init_qp_attr/ibv_modify_qp (passive)", C.gv_cm_modify_qp(pid, qb.qp, st)); err != nil {
				return nil, err
			}
		}
	}
	cp.qpn = C.uint32_t(b.Num())
	if err := cmErr("rdma_accept", C.gv_cm_accept(pid, &cp, nil)); err != nil {
		return nil, err
	}
	ev, err := p.ach.next(ctx)
	if err != nil {
		return nil, err
	}
	switch ev.event {
	case C.RDMA_CM_EVENT_ESTABLISHED:
	case C.RDMA_CM_EVENT_CONNECT_RESPONSE:
		for _, st := range []C.int{C.IBV_QPS_RTR, C.IBV_QPS_RTS} {
			if err := cmErr("rdma_init_qp_attr/ibv_modify_qp (active)", C.gv_cm_modify_qp(aid, qa.qp, st)); err != nil {
				return nil, err
			}
		}
		if err := cmErr("rdma_establish", C.gv_cm_establish(aid)); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("%w: active side: rdma_cm event %s (status %d)", verbs.ErrInvalidState,
			C.GoString(C.rdma_event_str(C.enum_rdma_cm_event_type(ev.event))), int(ev.status))
	}
	if _, err := p.lch.expect(ctx, C.RDMA_CM_EVENT_ESTABLISHED); err != nil {
		return nil, err
	}
	qa.state.Store(uint32(verbs.QPSRTS))
	qb.state.Store(uint32(verbs.QPSRTS))
	return p, nil
}

var errNoAddr = errors.New("rdmacore: no IPv4 address on the device's network interface")
