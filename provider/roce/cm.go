package roce

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/goverbs/goverbs/internal/cm"
	"github.com/goverbs/goverbs/internal/defaults"
	"github.com/goverbs/goverbs/internal/engine"
	"github.com/goverbs/goverbs/internal/ib"
	"github.com/goverbs/goverbs/verbs"
)

// The Communication Manager: IB CM MADs (REQ, MRA, REJ, REP, RTU, DREQ,
// DREP) on QP1, as UD packets with the GSI Q_Key, the way rdma_cm uses
// them over RoCE: the service ID is rdma_cm's for the port (RDMA_PS_TCP),
// and the REQ's private data starts with rdma_cm's 36-byte header (the IP
// addresses and the source port). A message that is not answered is sent
// again every cmRetryGap, up to cmRetries times; a REQ until the Dial's
// deadline, a REP as the REQ asks (rtuWait). An exchange the peer leaves
// unfinished is dropped then and counted (Counters.CMTimeout).

// Config configures a listener (Listen) or a connection (Dial), as
// iwarp's and shm's do; package rdmacm passes one through
// (IDOptions.RoCE). A nil *Config, or a zero field, means the default.
type Config struct {
	// ConnectTimeout bounds a Dial whose context has no deadline (a
	// deadline, shorter or longer, replaces it); the REQ is sent again
	// every half second until then. Default 10 s, as over iWARP.
	ConnectTimeout time.Duration
	// AcceptTimeout bounds an Accept's wait for the requester's RTU, the
	// REP being sent again at the pace the REQ asks. Default: as long as
	// the REQ asks (its CM response timeout times its max_cm_retries).
	AcceptTimeout time.Duration
}

func (c *Config) connectTimeout() time.Duration {
	if c == nil || c.ConnectTimeout <= 0 {
		return cm.DefaultTimeout
	}
	return c.ConnectTimeout
}

// acceptTries is how many REPs, gap apart, an Accept sends before it
// gives up: def, the REQ's, unless AcceptTimeout says otherwise.
func (c *Config) acceptTries(gap time.Duration, def int) int {
	if c == nil || c.AcceptTimeout <= 0 {
		return def
	}
	return max(int(c.AcceptTimeout/gap), 1)
}

// Tuning of the CM.
const (
	cmRetryGap  = 500 * time.Millisecond
	cmRetries   = 15
	cmRespTime  = 20 // 4.096 µs × 2^20 ≈ 4.3 s: the response time we announce (rdma_cm's)
	ackTimeout0 = 19 // the local ACK timeout rdma_cm gives RoCE QPs (≈ 2.1 s)
	// MaxPrivateData is the private data a Dial carries (the REQ's 92 bytes
	// less rdma_cm's header).
	MaxPrivateData = ib.REQPrivateLen - ib.CMAHdrLen
)

// cmAgent is a device's CM: connections by local communication ID and the
// listeners by port.
type cmAgent struct {
	d     *device
	mu    sync.Mutex
	conns map[uint32]*cmConn
	lns   map[uint16]*Listener
	ud    udState
	psn   uint32 // of the MADs we send (UD: nobody checks them)

	txMu  sync.Mutex
	txBuf []byte
	sa    sockaddr
}

func newCMAgent(d *device) *cmAgent {
	return &cmAgent{d: d, conns: map[uint32]*cmConn{}, lns: map[uint16]*Listener{}, txBuf: make([]byte, 0, 512)}
}

// send sends a MAD (256 bytes) to to's QP1.
func (a *cmAgent) send(mad []byte, to netip.Addr) {
	a.txMu.Lock()
	defer a.txMu.Unlock()
	var b ib.Builder
	b.H = a.txBuf[:0]
	b.BTH(ib.UDSendOnly, false, 0, ib.DefaultPKey, ib.GSIQPN, false, a.psn)
	a.psn = ib.PSNAdd(a.psn, 1)
	b.DETH(ib.GSIQKey, ib.GSIQPN)
	b.H = append(b.H, mad[:ib.MADLen]...)
	a.txBuf = b.H[:0]
	a.d.sendWait(b.H, to, &a.sa)
}

// receive handles a MAD for QP1 (the device holds its receive lock).
func (a *cmAgent) receive(p *ib.Packet, from netip.AddrPort) {
	if p.Op != ib.UDSendOnly || p.QKey != ib.GSIQKey || len(p.Payload) < ib.MADLen || ib.CheckCM(p.Payload) != nil {
		a.d.stats.Malformed.Add(1)
		return
	}
	m := ib.MAD(p.Payload[:ib.MADLen])
	peer := from.Addr()
	switch m.AttrID() {
	case ib.AttrREQ:
		a.onREQ(m, peer)
		return
	case ib.AttrSIDRReq:
		a.onSIDRReq(m, peer)
		return
	case ib.AttrSIDRRep:
		a.onSIDRRep(m, peer)
		return
	}
	_, remote := ib.CommIDs(m) // their local ID, our remote: the message names our connection second
	a.mu.Lock()
	c := a.conns[remote]
	a.mu.Unlock()
	if c == nil || c.peer != peer {
		if m.AttrID() == ib.AttrDREQ {
			// A DREQ for a connection we do not know (it ended): answer it,
			// so that the peer's disconnect completes.
			local, _ := ib.CommIDs(m)
			var rep [ib.MADLen]byte
			ib.PutCMHeader(rep[:], ib.AttrDREP, m.TID())
			ib.PutCommIDs(rep[:], remote, local)
			a.send(rep[:], peer)
		}
		return
	}
	var msg [ib.MADLen]byte
	copy(msg[:], m)
	c.event(msg)
}

// cmConn is one connection's CM state.
type cmConn struct {
	a         *cmAgent
	localID   uint32
	remoteID  uint32
	peer      netip.Addr
	peerPort  uint16 // rdma_cm port (the REQ's source port, or the one dialled)
	localPort uint16
	tid       uint64
	qp        *verbs.QP
	peerQPN   uint32
	pdata     []byte // the peer's private data
	ird, ord  int
	events    chan [ib.MADLen]byte
	drep      chan struct{} // watch saw the DREP of our DREQ

	once   sync.Once
	err    error
	done   chan struct{}
	closed atomic.Bool
}

func (a *cmAgent) newConn(peer netip.Addr) *cmConn {
	c := &cmConn{a: a, peer: peer, events: make(chan [ib.MADLen]byte, 16), drep: make(chan struct{}, 1), done: make(chan struct{})}
	var b [12]byte
	rand.Read(b[:])
	c.tid = binary.BigEndian.Uint64(b[4:])
	a.mu.Lock()
	for {
		c.localID = binary.BigEndian.Uint32(b[:4])
		if _, used := a.conns[c.localID]; !used && c.localID != 0 {
			break
		}
		rand.Read(b[:4])
	}
	a.conns[c.localID] = c
	a.mu.Unlock()
	return c
}

func (c *cmConn) event(m [ib.MADLen]byte) {
	select {
	case c.events <- m:
	default: // a flood of retransmissions: the ones kept suffice
	}
}

// forget removes the connection from the agent.
func (c *cmConn) forget() {
	c.a.mu.Lock()
	if c.a.conns[c.localID] == c {
		delete(c.a.conns, c.localID)
	}
	c.a.mu.Unlock()
}

// end ends the connection once with err.
func (c *cmConn) end(err error) {
	c.once.Do(func() {
		c.err = err
		close(c.done)
	})
}

// randPSN returns a random 24-bit starting PSN.
func randPSN() uint32 {
	var b [4]byte
	rand.Read(b[:])
	return binary.BigEndian.Uint32(b[:]) & 0xFFFFFF
}

// mtuEnum is the IB MTU code of n bytes.
func mtuEnum(m verbs.MTU) uint8 { return uint8(m) }

// toRTR and toRTS connect qp with the CM's results.
func toRTR(qp *verbs.QP, peer netip.Addr, peerQPN, rqPSN uint32, mtu verbs.MTU, ird int) error {
	a := verbs.QPAttr{QPState: verbs.QPSRTR, PathMTU: mtu, DestQPNum: peerQPN, RQPSN: rqPSN,
		MaxDestRdAtomic: uint8(ird), MinRNRTimer: 12,
		AHAttr: verbs.AHAttr{IsGlobal: true, PortNum: 1, GRH: verbs.GlobalRoute{DGID: verbs.GID(ib.GIDOf(peer)), HopLimit: 64}}}
	return qp.Modify(&a, verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|
		verbs.QPAttrMaxDestRdAtomic|verbs.QPAttrMinRNRTimer)
}

func toRTS(qp *verbs.QP, sqPSN uint32, timeout, retry, rnrRetry uint8, ord int) error {
	a := verbs.QPAttr{QPState: verbs.QPSRTS, SQPSN: sqPSN, Timeout: timeout, RetryCnt: retry, RNRRetry: rnrRetry, MaxRdAtomic: uint8(ord)}
	return qp.Modify(&a, verbs.QPAttrState|verbs.QPAttrSQPSN|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|verbs.QPAttrMaxQPRdAtomic)
}

// toInit brings a QP in RESET to INIT as rdma_cm does.
func toInit(qp *verbs.QP) error {
	if qp.State() != verbs.QPSReset {
		return nil
	}
	a := verbs.QPAttr{QPState: verbs.QPSInit, PortNum: 1,
		QPAccessFlags: verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic}
	return qp.Modify(&a, verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags)
}

// deviceOf returns the RoCE device of qp, or nil.
func deviceOf(qp *verbs.QP) *device {
	devs.Lock()
	defer devs.Unlock()
	for _, d := range devs.list {
		if _, ok := engine.Lookup(qp, d.eng); ok {
			return d
		}
	}
	return nil
}

// qpOf checks that qp is an RC QP of device d.
func (d *device) qpOf(qp *verbs.QP) error {
	e, ok := engine.Lookup(qp, d.eng)
	if !ok {
		return fmt.Errorf("%w: QP is not on device %s", verbs.ErrInvalid, d.eng.Name())
	}
	if e.Type() != verbs.QPTRC {
		return fmt.Errorf("%w: rdmacm connects RC QPs over RoCE (UD: not yet)", verbs.ErrNotSupported)
	}
	if st := e.State(); st != verbs.QPSReset && st != verbs.QPSInit {
		return fmt.Errorf("%w: QP in %v (RESET or INIT needed)", verbs.ErrInvalidState, st)
	}
	return nil
}

// Params are a connection's parameters (rdma_conn_param's).
type Params struct {
	// PrivateData goes in the REQ (Dial, at most MaxPrivateData bytes after
	// rdma_cm's header) or the REP (Accept, at most 196) or the REJ.
	PrivateData []byte
	// IRD (responder_resources) and ORD (initiator_depth), at most 128;
	// 0 means 128, a negative value none.
	IRD, ORD int
	// RNRRetry is the rnr_retry the peer uses towards us (7: for ever), as
	// rdma_conn_param's rnr_retry_count; 0 means 7, a negative value none.
	RNRRetry int
	// RetryCount is the transport's retry count, 7 at most; 0 means 7, a
	// negative value none.
	RetryCount int
}

// clamp is a Params depth as the CM carries it: 0 is the most, a negative
// value none.
func clamp(v int) int {
	if v == 0 {
		return maxIRDORD
	}
	return max(0, min(v, maxIRDORD))
}

// retries is a Params retry count: 0 is 7, a negative value none.
func retries(v int) uint8 { return uint8(min(defaults.Int(v, 7), 7)) }

// Conn is an established connection.
type Conn struct {
	c     *cmConn
	local netip.AddrPort
}

// PrivateData returns the peer's private data (its REP, or its REQ after
// rdma_cm's header).
func (x *Conn) PrivateData() []byte { return x.c.pdata }

// IRD returns the negotiated inbound read depth.
func (x *Conn) IRD() int { return x.c.ird }

// ORD returns the negotiated outbound read depth.
func (x *Conn) ORD() int { return x.c.ord }

// LocalAddr returns the local address (rdma_cm's address: IP and port).
func (x *Conn) LocalAddr() net.Addr { return net.UDPAddrFromAddrPort(x.local) }

// RemoteAddr returns the peer's address.
func (x *Conn) RemoteAddr() net.Addr {
	return net.UDPAddrFromAddrPort(netip.AddrPortFrom(x.c.peer, x.c.peerPort))
}

// Done is closed when the connection has ended.
func (x *Conn) Done() <-chan struct{} { return x.c.done }

// Err says why the connection ended (after Done).
func (x *Conn) Err() error {
	select {
	case <-x.c.done:
		return x.c.err
	default:
		return nil
	}
}

// Errors a connection ends with.
var (
	ErrDisconnected    = fmt.Errorf("roce: %w", cm.ErrPeerDisconnect)
	ErrLocalDisconnect = fmt.Errorf("roce: %w", cm.ErrLocalDisconnect)
)

// Disconnect sends a DREQ (again until the DREP, up to a bound) and moves
// the QP to ERR, flushing its work; the peer does the same when the DREQ
// arrives.
func (x *Conn) Disconnect() error {
	c := x.c
	if c.closed.Swap(true) {
		<-c.done
		return nil
	}
	fail(c.qp)
	var m [ib.MADLen]byte
	ib.PutDREQ(m[:], c.tid, c.localID, c.remoteID, c.peerQPN, nil)
	t := time.NewTimer(cmRetryGap)
	defer t.Stop()
retry:
	for range 3 {
		c.a.send(m[:], c.peer)
		t.Reset(cmRetryGap)
		select {
		case <-c.drep:
			break retry
		case <-t.C:
		}
	}
	c.forget()
	c.end(ErrLocalDisconnect)
	return nil
}

// fail moves qp to ERR (a verbs call: the CM holds no lock of it).
func fail(qp *verbs.QP) {
	a := verbs.QPAttr{QPState: verbs.QPSErr}
	qp.Modify(&a, verbs.QPAttrState)
}

// watch runs for an established connection: it answers the peer's DREQ
// (DREP, the QP to ERR, the end of the connection), tells Disconnect of
// the DREP of its DREQ, and sends the RTU again when the peer sends its REP
// again.
func (c *cmConn) watch() {
	for {
		select {
		case m := <-c.events:
			switch ib.MAD(m[:]).AttrID() {
			case ib.AttrDREQ:
				var rep [ib.MADLen]byte
				ib.PutCMHeader(rep[:], ib.AttrDREP, ib.MAD(m[:]).TID())
				ib.PutCommIDs(rep[:], c.localID, c.remoteID)
				c.a.send(rep[:], c.peer)
				if !c.closed.Swap(true) {
					fail(c.qp)
					c.forget()
					c.end(ErrDisconnected)
				}
				return
			case ib.AttrDREP:
				select {
				case c.drep <- struct{}{}:
				default:
				}
			case ib.AttrREP:
				// Our RTU was lost: the peer sends its REP again.
				var rtu [ib.MADLen]byte
				ib.PutCMHeader(rtu[:], ib.AttrRTU, c.tid)
				ib.PutCommIDs(rtu[:], c.localID, c.remoteID)
				c.a.send(rtu[:], c.peer)
			}
		case <-c.done:
			return
		}
	}
}

// Dial connects qp (an RC QP of a RoCE device, in RESET or INIT) to the
// rdma_cm listener at addr (host:port). A rejection returns a
// *cm.RejectedError with the peer's private data (a port nobody listens on
// is one too, as rdma_cm reports it, wrapping syscall.ECONNREFUSED). A REQ
// is sent every cmRetryGap until ctx's deadline, or for cfg's
// ConnectTimeout when ctx has none; no answer by then is an error wrapping
// cm.ErrUnreachable (and ctx.Err() when ctx ended).
func Dial(ctx context.Context, addr string, qp *verbs.QP, p Params, cfg *Config) (*Conn, error) {
	ap, err := resolve(addr)
	if err != nil {
		return nil, err
	}
	// The QP's device is the local end (rdmacm chose it from the route).
	d := deviceOf(qp)
	if d == nil {
		return nil, fmt.Errorf("%w: QP is not on a RoCE device", verbs.ErrInvalid)
	}
	if err := d.qpOf(qp); err != nil {
		return nil, err
	}
	local := d.addr
	if len(p.PrivateData) > MaxPrivateData {
		return nil, fmt.Errorf("%w: %d bytes of private data (at most %d over RoCE)", verbs.ErrInvalid, len(p.PrivateData), MaxPrivateData)
	}
	if err := toInit(qp); err != nil {
		return nil, err
	}
	a := d.cm
	c := a.newConn(ap.Addr())
	c.qp, c.peerPort = qp, ap.Port()
	c.localPort = ephemeralPort()
	psn := randPSN()
	req := ib.REQ{LocalCommID: c.localID, ServiceID: ib.ServiceID(ib.PortSpaceTCP, ap.Port()), LocalCAGUID: d.eng.GUID(),
		LocalQPN: qp.Num(), ResponderResources: uint8(clamp(p.IRD)), InitiatorDepth: uint8(clamp(p.ORD)),
		RemoteCMRespTimeout: cmRespTime, StartingPSN: psn, LocalCMRespTimeout: cmRespTime, RetryCount: retries(p.RetryCount),
		PKey: ib.DefaultPKey, PathMTU: mtuEnum(d.mtu), RNRRetryCount: retries(p.RNRRetry), MaxCMRetries: cmRetries,
		LocalLID: 0xFFFF, RemoteLID: 0xFFFF, LocalGID: ib.GIDOf(local), RemoteGID: ib.GIDOf(ap.Addr()), HopLimit: 64,
		LocalAckTimeout: ackTimeout0}
	ib.PutCMAHdr(req.PrivateData[:], local, ap.Addr(), c.localPort)
	copy(req.PrivateData[ib.CMAHdrLen:], p.PrivateData)
	var m [ib.MADLen]byte
	req.Marshal(m[:], c.tid)
	failDial := func(err error) (*Conn, error) {
		c.forget()
		c.end(err)
		return nil, err
	}
	// A REQ goes out every cmRetryGap until the caller's deadline, longer
	// or shorter, or for cm.DefaultTimeout when ctx has none.
	dctx, cancel, ended := cm.DialLimit(ctx, cfg.connectTimeout())
	defer cancel()
	for try := 1; ; try++ {
		a.send(m[:], ap.Addr())
		reply, ok, err := c.waitReply(dctx, cmRetryGap)
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				d.stats.CMTimeout.Add(1) // no answer to any REQ before the deadline
			}
			if e := ended(fmt.Sprintf("no answer from %v to %d connection requests", ap, try), err); e != nil {
				err = e
			}
			return failDial(err)
		}
		if !ok {
			continue
		}
		switch ib.MAD(reply[:]).AttrID() {
		case ib.AttrMRA:
			continue // the peer asked for time: wait on
		case ib.AttrREJ:
			_, reason := ib.REJReason(reply[:])
			pd := append([]byte(nil), ib.Private(reply[:], ib.AttrREJ)...)
			rej := &cm.RejectedError{PrivateData: pd, Reason: rejReason(reason)}
			if reason == ib.RejInvalidSID {
				rej.Err = syscall.ECONNREFUSED // nobody listens on the port
			}
			return failDial(rej)
		case ib.AttrREP:
			var rep ib.REP
			rep.Unmarshal(reply[:])
			c.remoteID, c.peerQPN = rep.LocalCommID, rep.LocalQPN
			c.pdata = append([]byte(nil), rep.PrivateData[:]...)
			c.ird = min(int(req.ResponderResources), int(rep.InitiatorDepth))
			c.ord = min(int(req.InitiatorDepth), int(rep.ResponderResources))
			// Linux's CM reads a message's starting PSN as the one its
			// sender will receive from: ours in the REQ, the peer's
			// send PSN is in the REP.
			if err := toRTR(qp, ap.Addr(), rep.LocalQPN, psn, d.mtu, c.ird); err != nil {
				return failDial(err)
			}
			if err := toRTS(qp, rep.StartingPSN, ackTimeout0, req.RetryCount, rep.RNRRetryCount, c.ord); err != nil {
				return failDial(err)
			}
			var rtu [ib.MADLen]byte
			ib.PutCMHeader(rtu[:], ib.AttrRTU, c.tid)
			ib.PutCommIDs(rtu[:], c.localID, c.remoteID)
			a.send(rtu[:], ap.Addr())
			go c.watch()
			return &Conn{c: c, local: netip.AddrPortFrom(local, c.localPort)}, nil
		}
	}
}

// waitReply waits up to d for the answer to a REQ (REP, REJ or MRA).
func (c *cmConn) waitReply(ctx context.Context, d time.Duration) (m [ib.MADLen]byte, ok bool, err error) {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case m = <-c.events:
			switch ib.MAD(m[:]).AttrID() {
			case ib.AttrREP, ib.AttrREJ, ib.AttrMRA:
				return m, true, nil
			}
		case <-t.C:
			return m, false, nil
		case <-ctx.Done():
			return m, false, ctx.Err()
		}
	}
}

func rejReason(r uint16) string {
	switch r {
	case ib.RejConsumer:
		return ""
	case ib.RejInvalidSID:
		return "connection refused (nobody listens on the port)"
	case ib.RejTimeout:
		return "the peer timed out"
	case ib.RejStaleConn:
		return "stale connection"
	case ib.RejNoResources, ib.RejNoQP:
		return "the peer has no resources"
	}
	return fmt.Sprintf("reason %d", r)
}

// resolve parses host:port.
func resolve(addr string) (netip.AddrPort, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("%w: %q: %v", verbs.ErrInvalid, addr, err)
	}
	pn, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("%w: port %q", verbs.ErrInvalid, port)
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		ips, lerr := net.DefaultResolver.LookupNetIP(context.Background(), "ip", host)
		if lerr != nil || len(ips) == 0 {
			return netip.AddrPort{}, fmt.Errorf("%w: %q: %v", cm.ErrUnreachable, host, lerr)
		}
		ip = ips[0]
	}
	return netip.AddrPortFrom(ip.Unmap(), uint16(pn)), nil
}

// sourceFor returns the local address the kernel would send to dst from;
// for a local dst, dst itself, as the kernel's rdma_cm binds a loopback
// connection to the device of the address (the route's source for
// 127.x.y.z would be 127.0.0.1, another device).
func sourceFor(dst netip.Addr) (netip.Addr, error) {
	if c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, 0))); err == nil {
		c.Close() // a local address: only those can be bound
		return dst, nil
	}
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, ib.UDPPort)))
	if err != nil {
		return netip.Addr{}, err
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap(), nil
}

var portSeq atomic.Uint32

// ephemeralPort is a source port for rdma_cm's header (it names the
// connection's local end; nothing listens on it).
func ephemeralPort() uint16 {
	return uint16(0xC000 + portSeq.Add(1)%0x3FFF)
}

// Listener accepts RoCE connection requests for one rdma_cm port on one
// device.
type Listener struct {
	a    *cmAgent
	cfg  *Config
	port uint16
	reqs chan *Request
	done chan struct{}
	once sync.Once
}

// Listen listens for connection requests for port on the device of the
// local address host (host:port; an empty or unspecified host is the first
// device's). cfg's AcceptTimeout holds for the requests it yields.
func Listen(addr string, cfg *Config) (*Listener, error) {
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
	l := &Listener{a: a, port: uint16(pn), reqs: make(chan *Request, 64), done: make(chan struct{}), cfg: cfg}
	a.mu.Lock()
	if pn == 0 {
		l.port = freePort(func(p uint16) bool { return a.lns[p] == nil })
	}
	if l.port == 0 || a.lns[l.port] != nil {
		a.mu.Unlock()
		d.release()
		return nil, fmt.Errorf("roce: listen %s: port %d: %w", d.addr, pn, errAddrInUse)
	}
	a.lns[l.port] = l
	a.mu.Unlock()
	return l, nil
}

var errAddrInUse error = syscall.EADDRINUSE

// freePort picks a port for a listener at port 0, as the kernel's rdma_cm
// does: a random one of the ephemeral range that free says is free, or 0
// when none is.
func freePort(free func(uint16) bool) uint16 {
	const lo, n = 32768, 28232 // Linux's default ip_local_port_range
	start := mrand.IntN(n)
	for i := range n {
		if p := uint16(lo + (start+i)%n); free(p) {
			return p
		}
	}
	return 0
}

// listenDevice is the device a listener at host uses: the address's, or
// for an empty or unspecified host the first device.
func listenDevice(host string) (*device, error) {
	if ip, err := netip.ParseAddr(host); err == nil && !ip.IsUnspecified() {
		return addDevice(ip.Unmap()), nil
	}
	devs.Lock()
	defer devs.Unlock()
	if len(devs.list) == 0 {
		return nil, fmt.Errorf("%w: no RoCE device", verbs.ErrNoDevice)
	}
	return devs.list[0], nil
}

// Addr returns the listening address.
func (l *Listener) Addr() net.Addr {
	return net.UDPAddrFromAddrPort(netip.AddrPortFrom(l.a.d.addr, l.port))
}

// Accept waits for the next connection request.
func (l *Listener) Accept(ctx context.Context) (*Request, error) {
	select {
	case r := <-l.reqs:
		return r, nil
	case <-l.done:
		return nil, cm.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Close stops listening; requests not taken are rejected.
func (l *Listener) Close() error {
	l.once.Do(func() {
		l.a.mu.Lock()
		if l.a.lns[l.port] == l {
			delete(l.a.lns, l.port)
		}
		l.a.mu.Unlock()
		close(l.done)
		for {
			select {
			case r := <-l.reqs:
				r.Reject(nil)
				continue
			default:
			}
			break
		}
		l.a.d.release()
	})
	return nil
}

// onREQ handles a connection request.
func (a *cmAgent) onREQ(m ib.MAD, peer netip.Addr) {
	var req ib.REQ
	req.Unmarshal(m)
	// A REQ sent again (our REP was lost, or not sent yet): answered by
	// the connection it made.
	a.mu.Lock()
	for _, c := range a.conns {
		if c.remoteID == req.LocalCommID && c.peer == peer {
			a.mu.Unlock()
			var mm [ib.MADLen]byte
			copy(mm[:], m)
			c.event(mm)
			return
		}
	}
	ps, port, ok := ib.ServicePort(req.ServiceID)
	l := a.lns[port]
	a.mu.Unlock()
	_, _, sport, hdrOK := ib.CMAHdr(req.PrivateData[:])
	if !ok || ps != ib.PortSpaceTCP || l == nil || req.TransportType != 0 || !hdrOK {
		var rej [ib.MADLen]byte
		ib.PutREJ(rej[:], m.TID(), 0, req.LocalCommID, ib.RejMsgREQ, ib.RejInvalidSID, nil)
		a.send(rej[:], peer)
		return
	}
	c := a.newConn(peer)
	c.remoteID, c.tid, c.peerQPN, c.peerPort, c.localPort = req.LocalCommID, m.TID(), req.LocalQPN, sport, l.port
	c.pdata = append([]byte(nil), req.PrivateData[ib.CMAHdrLen:]...)
	r := &Request{l: l, c: c, req: req}
	select {
	case l.reqs <- r:
	default:
		// The backlog is full: dropped unanswered, as a TCP listener
		// drops a SYN then. The requester sends its REQ again (every
		// cmRetryGap for a goverbs Dial, after its CM response timeout
		// for rdma_cm) and gets in once the application has taken some;
		// a REJ would have ended its attempt for good (a burst of forged
		// REQs kept every real client out: TestHostileCM).
		c.forget()
	}
}

// Request is a connection request waiting for Accept or Reject.
type Request struct {
	l        *Listener
	c        *cmConn
	req      ib.REQ
	mu       sync.Mutex
	answered bool
}

// PrivateData returns the requester's private data (after rdma_cm's header).
func (r *Request) PrivateData() []byte { return r.c.pdata }

// IRD returns the requester's responder resources.
func (r *Request) IRD() int { return int(r.req.ResponderResources) }

// ORD returns the requester's initiator depth.
func (r *Request) ORD() int { return int(r.req.InitiatorDepth) }

// LocalAddr returns the listener's address.
func (r *Request) LocalAddr() net.Addr { return r.l.Addr() }

// RemoteAddr returns the requester's address (its IP and rdma_cm port).
func (r *Request) RemoteAddr() net.Addr {
	return net.UDPAddrFromAddrPort(netip.AddrPortFrom(r.c.peer, r.c.peerPort))
}

func (r *Request) answer() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.answered {
		return fmt.Errorf("%w: request already answered", verbs.ErrInvalidState)
	}
	r.answered = true
	return nil
}

// Accept connects qp (an RC QP of the listener's device, in RESET or INIT)
// to the requester: REP, then the RTU. The REP is sent again each time the
// REQ's Local CM Response Timeout passes without the RTU (at least 50 ms,
// at most rdma_cm's 4.3 s), as many times as its Max CM Retries; then the
// exchange is dropped: a REJ (timeout) goes to the requester, the QP to
// ERR (its posted receives flush), Counters.CMTimeout counts it, and the
// error wraps cm.ErrUnreachable. Other requests are served meanwhile by
// other calls of Accept.
func (r *Request) Accept(qp *verbs.QP, p Params) (*Conn, error) {
	a, c := r.l.a, r.c
	d := a.d
	if err := d.qpOf(qp); err != nil {
		return nil, err
	}
	if len(p.PrivateData) > ib.REPPrivateLen {
		return nil, fmt.Errorf("%w: %d bytes of private data (at most %d)", verbs.ErrInvalid, len(p.PrivateData), ib.REPPrivateLen)
	}
	if err := r.answer(); err != nil {
		return nil, err
	}
	fail := func(err error) (*Conn, error) {
		var rej [ib.MADLen]byte
		ib.PutREJ(rej[:], c.tid, c.localID, c.remoteID, ib.RejMsgREQ, ib.RejNoResources, nil)
		a.send(rej[:], c.peer)
		c.forget()
		c.end(err)
		return nil, err
	}
	if err := toInit(qp); err != nil {
		return fail(err)
	}
	c.qp = qp
	c.ird = min(clamp(p.IRD), int(r.req.InitiatorDepth))
	c.ord = min(clamp(p.ORD), int(r.req.ResponderResources))
	mtu := min(verbs.MTU(r.req.PathMTU), d.mtu)
	if mtu < verbs.MTU256 {
		mtu = verbs.MTU256
	}
	// The REQ's starting PSN is the one the peer receives from (we
	// send with it); the REP's is ours to receive from, as Linux's CM
	// reads them.
	psn := randPSN()
	if err := toRTR(qp, c.peer, r.req.LocalQPN, psn, mtu, c.ird); err != nil {
		return fail(err)
	}
	rep := ib.REP{LocalCommID: c.localID, RemoteCommID: c.remoteID, LocalQPN: qp.Num(), StartingPSN: psn,
		ResponderResources: uint8(c.ird), InitiatorDepth: uint8(c.ord), TargetAckDelay: 15,
		RNRRetryCount: retries(p.RNRRetry), LocalCAGUID: d.eng.GUID()}
	copy(rep.PrivateData[:], p.PrivateData)
	var m [ib.MADLen]byte
	rep.Marshal(m[:], c.tid)
	gap, tries := rtuWait(&r.req)
	tries = r.l.cfg.acceptTries(gap, tries)
	for try := 0; ; try++ {
		if try == tries {
			// The peer left the exchange unfinished: counted, refused
			// (REJ, timeout), the QP to ERR so that its receives flush.
			d.stats.CMTimeout.Add(1)
			var rej [ib.MADLen]byte
			ib.PutREJ(rej[:], c.tid, c.localID, c.remoteID, ib.RejMsgREQ, ib.RejTimeout, nil)
			var guid [8]byte
			binary.BigEndian.PutUint64(guid[:], d.eng.GUID())
			ib.PutREJInfo(rej[:], guid[:])
			a.send(rej[:], c.peer)
			qp.Modify(&verbs.QPAttr{QPState: verbs.QPSErr}, verbs.QPAttrState)
			c.forget()
			err := fmt.Errorf("%w: %v: no RTU after %d replies %v apart", cm.ErrUnreachable, c.peer, tries, gap)
			c.end(err)
			return nil, err
		}
		a.send(m[:], c.peer)
		if c.waitRTU(gap) {
			break
		}
	}
	retry := r.req.RetryCount
	if retry == 0 {
		retry = 7
	}
	if err := toRTS(qp, r.req.StartingPSN, max(r.req.LocalAckTimeout, 14), retry, r.req.RNRRetryCount, c.ord); err != nil {
		return fail(err)
	}
	go c.watch()
	return &Conn{c: c, local: netip.AddrPortFrom(d.addr, c.localPort)}, nil
}

// Bounds of the wait for an RTU, whatever a REQ asks.
const (
	rtuGapMin = 50 * time.Millisecond
	rtuGapMax = 1 << cmRespTime * 4096 * time.Nanosecond // rdma_cm's 4.3 s
)

// rtuWait is how long Accept waits for the RTU after each REP, and how many
// REPs it sends: the REQ's Local CM Response Timeout (the time its sender
// takes to answer a REP) and Max CM Retries, as IBA 12.7 and Linux's CM
// read them, the time kept within [rtuGapMin, rtuGapMax] so that no REQ
// makes an Accept wait more than 16 × 4.3 s or send REPs in a burst.
func rtuWait(req *ib.REQ) (time.Duration, int) {
	t := time.Duration(4096) << min(req.LocalCMRespTimeout, 31) * time.Nanosecond
	return min(max(t, rtuGapMin), rtuGapMax), int(req.MaxCMRetries&0xF) + 1
}

// waitRTU waits up to d for the RTU (a REQ sent again is answered by the
// caller's next REP).
func (c *cmConn) waitRTU(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case m := <-c.events:
			switch ib.MAD(m[:]).AttrID() {
			case ib.AttrRTU:
				return true
			case ib.AttrREQ:
				return false // send the REP again now
			}
		case <-t.C:
			return false
		}
	}
}

// Reject refuses the request with a REJ (consumer reason) carrying
// privateData.
func (r *Request) Reject(privateData []byte) error {
	if len(privateData) > ib.REJPrivateLen {
		return fmt.Errorf("%w: %d bytes of private data (at most %d)", verbs.ErrInvalid, len(privateData), ib.REJPrivateLen)
	}
	if err := r.answer(); err != nil {
		return err
	}
	c := r.c
	var rej [ib.MADLen]byte
	ib.PutREJ(rej[:], c.tid, c.localID, c.remoteID, ib.RejMsgREQ, ib.RejConsumer, privateData)
	r.l.a.send(rej[:], c.peer)
	c.forget()
	c.end(cm.ErrRejected)
	return nil
}
