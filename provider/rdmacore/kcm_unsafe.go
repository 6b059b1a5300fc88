//go:build rdmacore && linux && cgo

package rdmacore

/*
#include "gv.h"
*/
import "C"

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"github.com/goverbs/goverbs/internal/cm"
	"github.com/goverbs/goverbs/verbs"
	"github.com/goverbs/goverbs/verbs/driver"
)

// Scheme is the rdmacm address scheme of the kernel's rdma_cm: with this
// package built in, "rdma://host:port" connects through librdmacm and the
// kernel, on the RDMA device the kernel routes the address to.
const Scheme = "rdma"

func init() { cm.Register(kernelCM{}) }

// kernelCM is the cm.Transport of the kernel's rdma_cm. QPs are goverbs'
// own (created before the connection, on the device the address routes
// to, which DeviceFor tells rdmacm); the CM connects them by number, and
// on InfiniBand and RoCE devices the CM's attributes move them to RTR and
// RTS (rdma_init_qp_attr), as librdmacm does for QPs it did not create.
type kernelCM struct{}

func (kernelCM) Name() string        { return Scheme }
func (kernelCM) DeviceName() string  { return "" }
func (kernelCM) MaxPrivateData() int { return 56 } // an IB CM REQ's, after rdma_cm's header: the smallest

// resolveTimeout bounds address and route resolution (librdmacm's
// examples use 2 s).
const resolveTimeout = 2000

func parseAddr(addr string) (netip.AddrPort, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("%w: address %q: %v", verbs.ErrInvalid, addr, err)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("%w: port %q", verbs.ErrInvalid, port)
	}
	if host == "" {
		return netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(p)), nil
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		ips, lerr := net.LookupIP(host)
		if lerr != nil {
			return netip.AddrPort{}, fmt.Errorf("%w: %v", cm.ErrUnreachable, lerr)
		}
		for _, a := range ips {
			if a4 := a.To4(); a4 != nil {
				ip = netip.AddrFrom4([4]byte(a4))
				break
			}
		}
		if !ip.IsValid() {
			return netip.AddrPort{}, fmt.Errorf("%w: %s has no IPv4 address", verbs.ErrNotSupported, host)
		}
	}
	ip = ip.Unmap()
	if !ip.Is4() {
		return netip.AddrPort{}, fmt.Errorf("%w: %v: the kernel CM transport takes IPv4 addresses", verbs.ErrNotSupported, ip)
	}
	return netip.AddrPortFrom(ip, uint16(p)), nil
}

// routeDevice returns the RDMA device the kernel's CM uses for ap: the one
// that owns it when it is a local address, otherwise the one the route to
// it leaves from; "" when no RDMA device serves it.
func routeDevice(ap netip.AddrPort) (string, error) {
	ch, err := newCMChannel()
	if err != nil {
		return "", err
	}
	defer ch.close()
	ip4 := ap.Addr().As4()
	var id C.uint64_t
	if rc := C.gv_cm_create_id(ch.ch, &id); rc != 0 {
		return "", cmErr("rdma_create_id", rc)
	}
	if C.gv_cm_bind(id, (*C.uint8_t)(&ip4[0]), 0) == 0 {
		name := C.GoString(C.gv_cm_device_name(id))
		C.gv_cm_destroy_id(id)
		return name, nil
	}
	C.gv_cm_destroy_id(id)
	if ap.Addr().IsUnspecified() {
		return "", nil
	}
	if rc := C.gv_cm_create_id(ch.ch, &id); rc != 0 {
		return "", cmErr("rdma_create_id", rc)
	}
	defer C.gv_cm_destroy_id(id)
	if rc := C.gv_cm_resolve_addr(id, (*C.uint8_t)(&ip4[0]), C.uint16_t(ap.Port()), resolveTimeout); rc != 0 {
		return "", nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*resolveTimeout*time.Millisecond)
	defer cancel()
	if _, err := ch.expect(ctx, C.RDMA_CM_EVENT_ADDR_RESOLVED); err != nil {
		return "", nil
	}
	return C.GoString(C.gv_cm_device_name(id)), nil
}

// DeviceFor is cm.Router's: the device a connection to addr, or a listener
// on it, uses.
func (kernelCM) DeviceFor(addr string, listen bool) (string, error) {
	ap, err := parseAddr(addr)
	if err != nil {
		return "", err
	}
	name, err := routeDevice(ap)
	if err != nil {
		return "", err
	}
	if name == "" {
		return "", fmt.Errorf("%w: no RDMA device serves %v (the kernel's rdma_cm found none)", verbs.ErrNoDevice, ap.Addr())
	}
	return name, nil
}

// Claims reports whether the kernel's CM should serve addr when it names
// no scheme: whether an RDMA device serves it (see package rdmacm).
func (kernelCM) Claims(addr string) bool {
	ap, err := parseAddr(addr)
	if err != nil {
		return false
	}
	name, err := routeDevice(ap)
	return err == nil && name != ""
}

func sockAddr(ip [4]C.uint8_t, port C.uint16_t) net.Addr {
	return &net.TCPAddr{IP: net.IPv4(byte(ip[0]), byte(ip[1]), byte(ip[2]), byte(ip[3])), Port: int(port)}
}

func addrsOf(id C.uint64_t) (local, remote net.Addr) {
	var lip, rip [4]C.uint8_t
	var lport, rport C.uint16_t
	C.gv_cm_addrs(id, &lip[0], &lport, &rip[0], &rport)
	return sockAddr(lip, lport), sockAddr(rip, rport)
}

func pdOf(ev *C.struct_gv_cm_event) []byte {
	n := int(ev.pd_len)
	if n == 0 {
		return nil
	}
	return C.GoBytes(unsafe.Pointer(&ev.pd[0]), C.int(n))
}

func qpOf(qp *verbs.QP, dev string) (*queuePair, error) {
	q, _ := driver.QPOf(qp).(*queuePair)
	if q == nil {
		return nil, fmt.Errorf("%w: the QP is not an rdma-core device's", verbs.ErrInvalid)
	}
	if q.ctx.dev.name != dev {
		return nil, fmt.Errorf("%w: the address is served by %s, the QP is on %s", verbs.ErrInvalid, dev, q.ctx.dev.name)
	}
	return q, nil
}

// cmModify moves q to state with the attributes the CM gives for id.
func cmModify(id C.uint64_t, q *queuePair, st verbs.QPState) error {
	q.life.RLock()
	defer q.life.RUnlock()
	if q.dead {
		return errQPClosed
	}
	if err := cmErr(fmt.Sprintf("rdma_init_qp_attr/ibv_modify_qp to %v", st), C.gv_cm_modify_qp(id, q.qp, C.int(st))); err != nil {
		return err
	}
	q.state.Store(uint32(st))
	return nil
}

// connParam fills rdma_conn_param: IRD and ORD within the device's limits.
func connParam(q *queuePair, p cm.Params, ird, ord int) C.struct_gv_conn_param {
	a := q.ctx.attr
	retry := p.RetryCount
	if retry == 0 {
		retry = 7
	}
	return C.struct_gv_conn_param{
		qpn: C.uint32_t(q.Num()), rr: C.uint8_t(min(ird, a.MaxQPRdAtom, 255)), idepth: C.uint8_t(min(ord, a.MaxQPInitRdAtom, 255)),
		retry: C.uint8_t(retry), rnr_retry: C.uint8_t(p.RNRRetry), pd_len: C.uint8_t(len(p.PrivateData)),
	}
}

func pdPtr(pd []byte) *C.uint8_t {
	if len(pd) == 0 {
		return nil
	}
	return (*C.uint8_t)(&pd[0])
}

func (k kernelCM) Dial(ctx context.Context, addr string, qp *verbs.QP, p cm.Params) (_ cm.Conn, err error) {
	ap, err := parseAddr(addr)
	if err != nil {
		return nil, err
	}
	if len(p.PrivateData) > k.MaxPrivateData() {
		return nil, fmt.Errorf("%w: %d bytes of private data", verbs.ErrInvalid, len(p.PrivateData))
	}
	ch, err := newCMChannel()
	if err != nil {
		return nil, err
	}
	var id C.uint64_t
	defer func() {
		if err != nil {
			if id != 0 {
				C.gv_cm_destroy_id(id)
			}
			ch.close()
		}
	}()
	if rc := C.gv_cm_create_id(ch.ch, &id); rc != 0 {
		return nil, cmErr("rdma_create_id", rc)
	}
	ip4 := ap.Addr().As4()
	if rc := C.gv_cm_resolve_addr(id, (*C.uint8_t)(&ip4[0]), C.uint16_t(ap.Port()), resolveTimeout); rc != 0 {
		return nil, fmt.Errorf("%w: %v", cm.ErrUnreachable, cmErr("rdma_resolve_addr", rc))
	}
	if _, err := ch.expect(ctx, C.RDMA_CM_EVENT_ADDR_RESOLVED); err != nil {
		return nil, fmt.Errorf("%w: %v", cm.ErrUnreachable, err)
	}
	if rc := C.gv_cm_resolve_route(id, resolveTimeout); rc != 0 {
		return nil, fmt.Errorf("%w: %v", cm.ErrUnreachable, cmErr("rdma_resolve_route", rc))
	}
	if _, err := ch.expect(ctx, C.RDMA_CM_EVENT_ROUTE_RESOLVED); err != nil {
		return nil, fmt.Errorf("%w: %v", cm.ErrUnreachable, err)
	}
	q, err := qpOf(qp, C.GoString(C.gv_cm_device_name(id)))
	if err != nil {
		return nil, err
	}
	if verbs.QPState(q.state.Load()) == verbs.QPSReset {
		if err := cmModify(id, q, verbs.QPSInit); err != nil {
			return nil, err
		}
	}
	cp := connParam(q, p, p.IRD, p.ORD)
	if err := cmErr("rdma_connect", C.gv_cm_connect(id, &cp, pdPtr(p.PrivateData))); err != nil {
		return nil, err
	}
	ev, err := ch.next(ctx)
	if err != nil {
		return nil, err
	}
	switch ev.event {
	case C.RDMA_CM_EVENT_ESTABLISHED:
	case C.RDMA_CM_EVENT_CONNECT_RESPONSE:
		for _, st := range []verbs.QPState{verbs.QPSRTR, verbs.QPSRTS} {
			if err := cmModify(id, q, st); err != nil {
				return nil, err
			}
		}
		if err := cmErr("rdma_establish", C.gv_cm_establish(id)); err != nil {
			return nil, err
		}
	case C.RDMA_CM_EVENT_REJECTED:
		return nil, &cm.RejectedError{PrivateData: pdOf(&ev), Reason: fmt.Sprintf("rdma_cm status %d", int(ev.status))}
	default:
		return nil, fmt.Errorf("%w: rdma_cm event %s (status %d)", cm.ErrUnreachable,
			C.GoString(C.rdma_event_str(C.enum_rdma_cm_event_type(ev.event))), int(ev.status))
	}
	q.state.Store(uint32(verbs.QPSRTS))
	// Negotiated: this side's ORD no more than the peer's IRD.
	ord := int(cp.idepth)
	if ev.responder_resources != 0 {
		ord = min(ord, int(ev.responder_resources))
	}
	return newKConn(id, ch, q, pdOf(&ev), int(cp.rr), ord), nil
}

func (kernelCM) Listen(addr string, cfg any) (_ cm.Listener, err error) {
	ap, err := parseAddr(addr)
	if err != nil {
		return nil, err
	}
	ch, err := newCMChannel()
	if err != nil {
		return nil, err
	}
	var id C.uint64_t
	if rc := C.gv_cm_create_id(ch.ch, &id); rc != 0 {
		ch.close()
		return nil, cmErr("rdma_create_id", rc)
	}
	ip4 := ap.Addr().As4()
	var port C.uint16_t
	if rc := C.gv_cm_bind_listen(id, (*C.uint8_t)(&ip4[0]), C.uint16_t(ap.Port()), 64, &port); rc != 0 {
		C.gv_cm_destroy_id(id)
		ch.close()
		return nil, cmErr(fmt.Sprintf("rdma_bind_addr/rdma_listen %v", ap), rc)
	}
	l := &kListener{ch: ch, id: id, addr: &net.TCPAddr{IP: ap.Addr().AsSlice(), Port: int(port)}}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	return l, nil
}

// kListener is a listening CM ID.
type kListener struct {
	ch     *cmChannel
	id     C.uint64_t
	addr   net.Addr
	ctx    context.Context
	cancel context.CancelFunc
	once   sync.Once
}

func (l *kListener) Addr() net.Addr { return l.addr }

func (l *kListener) Next(ctx context.Context) (cm.Request, error) {
	ctx, stop := mergeCtx(ctx, l.ctx)
	defer stop()
	for {
		ev, err := l.ch.next(ctx)
		if err != nil {
			if l.ctx.Err() != nil {
				return nil, cm.ErrClosed
			}
			return nil, err
		}
		if ev.event != C.RDMA_CM_EVENT_CONNECT_REQUEST {
			continue
		}
		// The request's own events (ESTABLISHED, DISCONNECTED) go to a
		// channel of its own.
		cch, err := newCMChannel()
		if err != nil {
			C.gv_cm_reject(ev.id, nil, 0)
			C.gv_cm_destroy_id(ev.id)
			continue
		}
		if rc := C.gv_cm_migrate(ev.id, cch.ch); rc != 0 {
			C.gv_cm_reject(ev.id, nil, 0)
			C.gv_cm_destroy_id(ev.id)
			cch.close()
			continue
		}
		if cm.Refused() {
			C.gv_cm_reject(ev.id, nil, 0)
			C.gv_cm_destroy_id(ev.id)
			cch.close()
			continue
		}
		r := &kRequest{id: ev.id, ch: cch, pd: pdOf(&ev), ird: int(ev.responder_resources), ord: int(ev.initiator_depth)}
		r.local, r.remote = addrsOf(ev.id)
		return r, nil
	}
}

func (l *kListener) Close() error {
	l.once.Do(func() {
		l.cancel()
		C.gv_cm_destroy_id(l.id)
		l.ch.close()
	})
	return nil
}

// mergeCtx is a context done when either is.
func mergeCtx(a, b context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancel(a)
	stop := context.AfterFunc(b, cancel)
	return ctx, func() { stop(); cancel() }
}

// kRequest is a connection request on its own CM ID.
type kRequest struct {
	id            C.uint64_t
	ch            *cmChannel
	pd            []byte
	ird, ord      int
	local, remote net.Addr
	answered      bool
}

func (r *kRequest) PrivateData() []byte  { return r.pd }
func (r *kRequest) IRD() int             { return r.ird }
func (r *kRequest) ORD() int             { return r.ord }
func (r *kRequest) LocalAddr() net.Addr  { return r.local }
func (r *kRequest) RemoteAddr() net.Addr { return r.remote }

func (r *kRequest) Accept(qp *verbs.QP, p cm.Params) (_ cm.Conn, err error) {
	if r.answered {
		return nil, fmt.Errorf("%w: request already answered", verbs.ErrInvalidState)
	}
	q, err := qpOf(qp, C.GoString(C.gv_cm_device_name(r.id)))
	if err != nil {
		return nil, err
	}
	r.answered = true
	defer func() {
		if err != nil {
			C.gv_cm_reject(r.id, nil, 0)
			C.gv_cm_destroy_id(r.id)
			r.ch.close()
		}
	}()
	if verbs.QPState(q.state.Load()) == verbs.QPSReset {
		if err := cmModify(r.id, q, verbs.QPSInit); err != nil {
			return nil, err
		}
	}
	if q.ctx.dev.transport != verbs.TransportIWARP {
		for _, st := range []verbs.QPState{verbs.QPSRTR, verbs.QPSRTS} {
			if err := cmModify(r.id, q, st); err != nil {
				return nil, err
			}
		}
	}
	// This side's IRD serves the peer's ORD, its ORD the peer's IRD.
	cp := connParam(q, p, min(p.IRD, r.ord), min(p.ORD, r.ird))
	if err := cmErr("rdma_accept", C.gv_cm_accept(r.id, &cp, pdPtr(p.PrivateData))); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := r.ch.expect(ctx, C.RDMA_CM_EVENT_ESTABLISHED); err != nil {
		return nil, err
	}
	q.state.Store(uint32(verbs.QPSRTS))
	return newKConn(r.id, r.ch, q, r.pd, int(cp.rr), int(cp.idepth)), nil
}

func (r *kRequest) Reject(privateData []byte) error {
	if r.answered {
		return fmt.Errorf("%w: request already answered", verbs.ErrInvalidState)
	}
	r.answered = true
	rc := C.gv_cm_reject(r.id, pdPtr(privateData), C.int(len(privateData)))
	C.gv_cm_destroy_id(r.id)
	r.ch.close()
	return cmErr("rdma_reject", rc)
}

// kConn is an established connection. A goroutine waits (in the
// netpoller) for its DISCONNECTED event, moves the QP to ERR (its work
// flushes) and frees the CM ID.
type kConn struct {
	id       C.uint64_t
	ch       *cmChannel
	q        *queuePair
	pd       []byte
	ird, ord int
	local    net.Addr
	remote   net.Addr

	done  chan struct{}
	mu    sync.Mutex
	err   error
	byUs  bool // Disconnect was called
	freed bool // the CM ID was destroyed (under mu)
	stop  context.CancelFunc
}

func newKConn(id C.uint64_t, ch *cmChannel, q *queuePair, pd []byte, ird, ord int) *kConn {
	c := &kConn{id: id, ch: ch, q: q, pd: pd, ird: ird, ord: ord, done: make(chan struct{})}
	c.local, c.remote = addrsOf(id)
	ctx, cancel := context.WithCancel(context.Background())
	c.stop = cancel
	go c.watch(ctx)
	return c
}

func (c *kConn) watch(ctx context.Context) {
	var why error
	for {
		ev, err := c.ch.next(ctx)
		if err != nil {
			why = err
			break
		}
		if ev.event == C.RDMA_CM_EVENT_DISCONNECTED || ev.event == C.RDMA_CM_EVENT_DEVICE_REMOVAL {
			why = cm.ErrPeerDisconnect
			break
		}
	}
	c.toErr()
	c.mu.Lock()
	if c.byUs {
		why = cm.ErrLocalDisconnect
	}
	c.err = why
	c.freed = true
	C.gv_cm_destroy_id(c.id)
	c.mu.Unlock()
	c.ch.close()
	close(c.done)
}

// toErr moves the QP to ERR, flushing its work: the CM does not, for a
// QP it was given by number.
func (c *kConn) toErr() {
	c.q.life.RLock()
	defer c.q.life.RUnlock()
	if c.q.dead {
		return
	}
	a := C.struct_ibv_qp_attr{qp_state: C.IBV_QPS_ERR}
	if C.ibv_modify_qp(c.q.qp, &a, C.IBV_QP_STATE) == 0 {
		c.q.state.Store(uint32(verbs.QPSErr))
	}
}

func (c *kConn) PrivateData() []byte   { return c.pd }
func (c *kConn) IRD() int              { return c.ird }
func (c *kConn) ORD() int              { return c.ord }
func (c *kConn) LocalAddr() net.Addr   { return c.local }
func (c *kConn) RemoteAddr() net.Addr  { return c.remote }
func (c *kConn) Done() <-chan struct{} { return c.done }

func (c *kConn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// disconnectWait is how long Disconnect waits for the CM's DISCONNECTED
// before it stops waiting for the peer.
const disconnectWait = 3 * time.Second

func (c *kConn) Disconnect() error {
	c.mu.Lock()
	first := !c.byUs && !c.freed
	c.byUs = true
	if first {
		C.gv_cm_disconnect(c.id)
	}
	c.mu.Unlock()
	if first {
		c.toErr()
	}
	select {
	case <-c.done:
	case <-time.After(disconnectWait):
		c.stop()
		<-c.done
	}
	return nil
}
