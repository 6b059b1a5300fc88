package roce

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/goverbs/goverbs/internal/cm"
	"github.com/goverbs/goverbs/internal/ib"
	"github.com/goverbs/goverbs/verbs"
)

// rdma_cm's UDP port space (RDMA_PS_UDP) over RoCE: a UD QP learns the
// number and Q_Key of the UD QP that serves an address with IB's service
// ID resolution: a SIDR REQ (rdma_cm's service ID for the port, its
// 36-byte header first in the private data) answered by a SIDR REP
// (status, QP number, Q_Key, private data). Requests are sent again every
// cmRetryGap until the context's deadline (cm.DefaultTimeout without one);
// a listener answers a repeated request with the reply it gave.

// MaxUDPrivateData is the private data a UD resolution carries (the SIDR
// REQ's 216 bytes less rdma_cm's 36-byte header).
const MaxUDPrivateData = 180

// The literal above shows in go doc; the wire's sizes must give it.
var _ = [1]struct{}{}[MaxUDPrivateData-(ib.SIDRReqPrivLen-ib.CMAHdrLen)]

// SIDR REP statuses (IBA table 121).
const (
	sidrOK        = 0
	sidrNoService = 1 // service ID not supported
	sidrRejected  = 2
	sidrNoQP      = 3
)

// sidrWait is a resolution in progress: its request ID and where the
// reply goes.
type sidrWait struct {
	peer  netip.Addr
	reply chan [ib.MADLen]byte
}

// udListener answers SIDR requests for one port.
type udListener struct {
	a    *cmAgent
	port uint16
	reqs chan *udRequest
	done chan struct{}
	once sync.Once

	mu      sync.Mutex
	answers map[sidrKey]*udRequest // by requester: repeated requests get the same answer
}

type sidrKey struct {
	peer netip.Addr
	id   uint32
}

// udState is the SIDR part of a device's CM (cmAgent.mu).
type udState struct {
	lns   map[uint16]*udListener
	waits map[uint32]*sidrWait
}

// resolveUD resolves the UD QP at addr (host:port) for qp, a UD QP of a
// RoCE device (rdma_connect on an identifier of the UDP port space).
func resolveUD(ctx context.Context, addr string, qp *verbs.QP, privateData []byte) (cm.UDPeer, error) {
	ap, err := resolve(addr)
	if err != nil {
		return cm.UDPeer{}, err
	}
	d := deviceOf(qp)
	if d == nil {
		return cm.UDPeer{}, fmt.Errorf("%w: QP is not on a RoCE device", verbs.ErrInvalid)
	}
	if qp.Type() != verbs.QPTUD {
		return cm.UDPeer{}, fmt.Errorf("%w: the UDP port space resolves UD QPs", verbs.ErrInvalid)
	}
	if len(privateData) > MaxUDPrivateData {
		return cm.UDPeer{}, fmt.Errorf("%w: %d bytes of private data (at most %d)", verbs.ErrInvalid, len(privateData), MaxUDPrivateData)
	}
	if err := d.open(); err != nil {
		return cm.UDPeer{}, err
	}
	defer d.release()
	a := d.cm
	w := &sidrWait{peer: ap.Addr(), reply: make(chan [ib.MADLen]byte, 1)}
	var id uint32
	var b [12]byte
	a.mu.Lock()
	for {
		rand.Read(b[:])
		id = binary.BigEndian.Uint32(b[:4])
		if _, used := a.ud.waits[id]; !used {
			break
		}
	}
	if a.ud.waits == nil {
		a.ud.waits = map[uint32]*sidrWait{}
	}
	a.ud.waits[id] = w
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		delete(a.ud.waits, id)
		a.mu.Unlock()
	}()
	req := ib.SIDRReq{RequestID: id, PKey: ib.DefaultPKey, ServiceID: ib.ServiceID(ib.PortSpaceUDP, ap.Port())}
	var pd [ib.SIDRReqPrivLen]byte
	ib.PutCMAHdr(pd[:], d.addr, ap.Addr(), ephemeralPort())
	copy(pd[ib.CMAHdrLen:], privateData)
	var m [ib.MADLen]byte
	req.Marshal(m[:], binary.BigEndian.Uint64(b[4:]), pd[:])
	// A request goes out every cmRetryGap until the caller's deadline,
	// longer or shorter, or for cm.DefaultTimeout when ctx has none.
	dctx, cancel, ended := cm.DialLimit(ctx, cm.DefaultTimeout)
	defer cancel()
	t := time.NewTimer(cmRetryGap)
	defer t.Stop()
	for try := 1; ; try++ {
		a.send(m[:], ap.Addr())
		select {
		case r := <-w.reply:
			var rep ib.SIDRRep
			rep.Unmarshal(r[:])
			pd := append([]byte(nil), ib.Private(r[:], ib.AttrSIDRRep)...)
			switch rep.Status {
			case sidrOK:
				return cm.UDPeer{QPN: rep.QPN, QKey: rep.QKey, PrivateData: pd, Remote: net.UDPAddrFromAddrPort(ap),
					AH: verbs.AHAttr{PortNum: 1, IsGlobal: true, GRH: verbs.GlobalRoute{DGID: verbs.GID(ib.GIDOf(ap.Addr())), HopLimit: 64}}}, nil
			case sidrNoService:
				return cm.UDPeer{}, &cm.RejectedError{Reason: "connection refused: no UD service at that port", Err: syscall.ECONNREFUSED}
			case sidrRejected:
				return cm.UDPeer{}, &cm.RejectedError{PrivateData: pd}
			default:
				return cm.UDPeer{}, &cm.RejectedError{PrivateData: pd, Reason: fmt.Sprintf("SIDR status %d", rep.Status)}
			}
		case <-dctx.Done():
			return cm.UDPeer{}, ended(fmt.Sprintf("no answer from %v to %d UD resolution requests", ap, try), dctx.Err())
		case <-t.C:
			t.Reset(cmRetryGap)
		}
	}
}

// ListenUD answers SIDR requests for port on the device of the local
// address host (host:port; an empty host is the first device's).
func ListenUD(addr string) (*UDListener, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %v", verbs.ErrInvalid, addr, err)
	}
	pn, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("%w: port %q", verbs.ErrInvalid, port)
	}
	d, err := listenDevice(host)
	if err != nil {
		return nil, err
	}
	if err := d.open(); err != nil {
		return nil, err
	}
	a := d.cm
	l := &udListener{a: a, port: uint16(pn), reqs: make(chan *udRequest, 64), done: make(chan struct{}), answers: map[sidrKey]*udRequest{}}
	a.mu.Lock()
	if pn == 0 {
		l.port = freePort(func(p uint16) bool { return a.ud.lns[p] == nil })
	}
	if l.port == 0 || a.ud.lns[l.port] != nil {
		a.mu.Unlock()
		d.release()
		return nil, fmt.Errorf("roce: listen %s: UDP port space port %d: %w", d.addr, pn, errAddrInUse)
	}
	if a.ud.lns == nil {
		a.ud.lns = map[uint16]*udListener{}
	}
	a.ud.lns[l.port] = l
	a.mu.Unlock()
	return &UDListener{l}, nil
}

// UDListener answers UD resolution requests (SIDR) for one port.
type UDListener struct{ l *udListener }

// Addr returns the listening address.
func (x *UDListener) Addr() net.Addr {
	return net.UDPAddrFromAddrPort(netip.AddrPortFrom(x.l.a.d.addr, x.l.port))
}

// Accept waits for the next resolution request.
func (x *UDListener) Accept(ctx context.Context) (*UDRequest, error) {
	select {
	case r := <-x.l.reqs:
		return &UDRequest{r}, nil
	case <-x.l.done:
		return nil, cm.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Close stops answering; requests not taken are rejected.
func (x *UDListener) Close() error {
	l := x.l
	l.once.Do(func() {
		l.a.mu.Lock()
		if l.a.ud.lns[l.port] == l {
			delete(l.a.ud.lns, l.port)
		}
		l.a.mu.Unlock()
		close(l.done)
		for {
			select {
			case r := <-l.reqs:
				(&UDRequest{r}).Reject(nil)
				continue
			default:
			}
			break
		}
		l.a.d.release()
	})
	return nil
}

// udRequest is one SIDR request and, once answered, its reply.
type udRequest struct {
	l     *udListener
	peer  netip.Addr
	port  uint16 // the requester's rdma_cm port
	req   ib.SIDRReq
	tid   uint64
	pdata []byte

	mu    sync.Mutex
	reply []byte // the SIDR REP sent, for repeated requests
}

// UDRequest is a UD resolution request waiting for Accept or Reject.
type UDRequest struct{ r *udRequest }

// PrivateData returns the requester's private data (after rdma_cm's header).
func (x *UDRequest) PrivateData() []byte { return x.r.pdata }

// LocalAddr returns the listener's address.
func (x *UDRequest) LocalAddr() net.Addr { return (&UDListener{x.r.l}).Addr() }

// RemoteAddr returns the requester's address (its IP and rdma_cm port).
func (x *UDRequest) RemoteAddr() net.Addr {
	return net.UDPAddrFromAddrPort(netip.AddrPortFrom(x.r.peer, x.r.port))
}

// Accept answers with qp, a UD QP of the listener's device, and its Q_Key.
func (x *UDRequest) Accept(qp *verbs.QP, privateData []byte) error {
	r := x.r
	if qp.Type() != verbs.QPTUD || deviceOf(qp) != r.l.a.d {
		return fmt.Errorf("%w: the answer to a UD resolution is a UD QP of the listener's device", verbs.ErrInvalid)
	}
	if len(privateData) > ib.SIDRRepPrivLen {
		return fmt.Errorf("%w: %d bytes of private data (at most %d)", verbs.ErrInvalid, len(privateData), ib.SIDRRepPrivLen)
	}
	attr, _, err := qp.Query()
	if err != nil {
		return err
	}
	return r.answer(ib.SIDRRep{Status: sidrOK, QPN: qp.Num(), QKey: attr.QKey}, privateData)
}

// Reject refuses the request, with private data.
func (x *UDRequest) Reject(privateData []byte) error {
	if len(privateData) > ib.SIDRRepPrivLen {
		privateData = privateData[:ib.SIDRRepPrivLen]
	}
	return x.r.answer(ib.SIDRRep{Status: sidrRejected}, privateData)
}

func (r *udRequest) answer(rep ib.SIDRRep, privateData []byte) error {
	r.mu.Lock()
	if r.reply != nil {
		r.mu.Unlock()
		return fmt.Errorf("%w: request already answered", verbs.ErrInvalidState)
	}
	rep.RequestID, rep.ServiceID = r.req.RequestID, r.req.ServiceID
	m := make([]byte, ib.MADLen)
	rep.Marshal(m, r.tid, privateData)
	r.reply = m
	r.mu.Unlock()
	r.l.a.send(m, r.peer)
	return nil
}

// onSIDRReq handles a SIDR request (the device's receive lock is held).
func (a *cmAgent) onSIDRReq(m ib.MAD, peer netip.Addr) {
	var req ib.SIDRReq
	req.Unmarshal(m)
	ps, port, ok := ib.ServicePort(req.ServiceID)
	pd := ib.Private(m, ib.AttrSIDRReq)
	_, _, sport, hdrOK := ib.CMAHdr(pd)
	a.mu.Lock()
	l := a.ud.lns[port]
	a.mu.Unlock()
	if !ok || ps != ib.PortSpaceUDP || l == nil || !hdrOK {
		var rep [ib.MADLen]byte
		(&ib.SIDRRep{RequestID: req.RequestID, Status: sidrNoService, ServiceID: req.ServiceID}).Marshal(rep[:], m.TID(), nil)
		a.send(rep[:], peer)
		return
	}
	k := sidrKey{peer, req.RequestID}
	l.mu.Lock()
	if r := l.answers[k]; r != nil {
		l.mu.Unlock()
		r.mu.Lock()
		reply := r.reply
		r.mu.Unlock()
		if reply != nil {
			a.send(reply, peer) // our reply was lost: again
		}
		return // not answered yet: the application is at it
	}
	r := &udRequest{l: l, peer: peer, port: sport, req: req, tid: m.TID(), pdata: append([]byte(nil), pd[ib.CMAHdrLen:]...)}
	if len(l.answers) >= 1024 {
		clear(l.answers) // old requesters; a repeat of theirs is a new request
	}
	l.answers[k] = r
	l.mu.Unlock()
	select {
	case l.reqs <- r:
	case <-l.done:
	default:
		r.answer(ib.SIDRRep{Status: sidrNoQP}, nil)
	}
}

// onSIDRRep hands a SIDR reply to the resolution waiting for it.
func (a *cmAgent) onSIDRRep(m ib.MAD, peer netip.Addr) {
	id := binary.BigEndian.Uint32(m[ib.MADHdrLen:])
	a.mu.Lock()
	w := a.ud.waits[id]
	a.mu.Unlock()
	if w == nil || w.peer != peer {
		return
	}
	var c [ib.MADLen]byte
	copy(c[:], m)
	select {
	case w.reply <- c:
	default:
	}
}
