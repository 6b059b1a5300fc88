package roce

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/goverbs/goverbs/internal/engine"
	"github.com/goverbs/goverbs/internal/ib"
	"github.com/goverbs/goverbs/verbs"
)

// device is one local address: its engine device, its UDP socket and the
// QPs that share it.
type device struct {
	eng  *engine.Device
	addr netip.Addr
	mtu  verbs.MTU

	life   sync.Mutex // open and release, which binds and frees the port
	mu     sync.Mutex
	sock   atomic.Pointer[socket] // addr:4791 (open; after release, shut)
	users  int                    // QPs and CM listeners
	done   chan struct{}          // closed when the socket closes
	exited chan struct{}          // closed when the device's goroutine ends
	evfd   int                    // wakes the device's goroutine from poll(2)

	qmu sync.RWMutex
	qps map[uint32]*qp

	// rx is the receive side: whoever holds its lock (the device's
	// goroutine, or an application's poll) reads and processes packets, one
	// at a time and in order.
	rx struct {
		sync.Mutex
		buf [1 << 16]byte
		sa  sockaddr
		msg groMsg
		pkt ib.Packet
		ho  engine.Handoff // the polling application's, during poll
		crc ib.Scratch
	}
	// tx sends from port 4791: the CM's datagrams, ACKs, and a QP's
	// packets when the senders could not be opened.
	tx sender
	// out are the sockets a QP's packets leave from, each bound to its own
	// ephemeral port: the UDP source port is a flow's entropy (ECMP spreads
	// flows by it), and a QP keeps one so that its packets keep their order
	// on a multipath fabric, as rxe derives it from the QPN.
	out    []*sender
	noGSO  atomic.Bool  // the kernel refused a GSO send: batches go one by one
	rcvbuf atomic.Int64 // the receive buffer of port 4791's socket, in bytes as the kernel counts them
	acks   ackQueue     // deferred ACKs
	polled atomic.Int32 // QPs whose application polls
	wake   chan struct{}
	// One waiter at a time blocks in the socket (qp.Block): blockMu is
	// its, bw its Waker, blockFn its callback (a method value made once).
	blockMu sync.Mutex
	bw      *engine.Waker
	blockFn func(fd uintptr) bool

	cm *cmAgent

	stats counters
}

// counters counts what a device received, sent and dropped.
type counters struct {
	BadICRC   atomic.Uint64 // the ICRC did not check
	Malformed atomic.Uint64 // headers that break the transport's rules
	NoQP      atomic.Uint64 // for a QP that does not exist or is not ready
	Received  atomic.Uint64
	Sent      atomic.Uint64
	Writes    atomic.Uint64 // system calls that sent datagrams
	SendFail  atomic.Uint64 // the socket refused the packet (counted as lost)
	CMTimeout atomic.Uint64 // connection exchanges the peer left unfinished
}

// Counters is what a device received, sent and dropped (as rxe's
// hw_counters), since the program started.
type Counters struct {
	Received  uint64 // datagrams read from the socket
	Sent      uint64 // datagrams the socket took
	Writes    uint64 // system calls that sent them (a GSO batch is one)
	SendFail  uint64 // datagrams the socket refused (lost, as on a wire)
	BadICRC   uint64 // dropped: the ICRC did not check
	Malformed uint64 // dropped: headers that break the transport's rules
	NoQP      uint64 // dropped: for a QP that does not exist or is not ready
	// CMTimeout counts connection exchanges dropped because the peer
	// left them unfinished: an Accept whose REP got no RTU, a Dial whose
	// REQs got no answer before its deadline.
	CMTimeout uint64
}

// DeviceCounters returns the counters of the device name.
func DeviceCounters(name string) (Counters, bool) {
	d := deviceNamed(name)
	if d == nil {
		return Counters{}, false
	}
	s := &d.stats
	return Counters{Received: s.Received.Load(), Sent: s.Sent.Load(), Writes: s.Writes.Load(), SendFail: s.SendFail.Load(),
		BadICRC: s.BadICRC.Load(), Malformed: s.Malformed.Load(), NoQP: s.NoQP.Load(), CMTimeout: s.CMTimeout.Load()}, true
}

// deviceNamed returns the device called name, or nil.
func deviceNamed(name string) *device {
	devs.Lock()
	defer devs.Unlock()
	var d *device
	for _, x := range devs.list {
		if x.eng.Name() == name {
			d = x
		}
	}
	return d
}

// nSenders is how many source ports a device's QPs spread over.
const nSenders = 8

// A sender is a socket packets leave from; its lock orders the sends.
type sender struct {
	sync.Mutex
	sock *socket // nil until the device opens
	port uint16  // the UDP source port, which the ICRC covers
	crc  ib.Scratch
}

func newDevice(name string, addr netip.Addr) *device {
	d := &device{addr: addr, qps: map[uint32]*qp{}, wake: make(chan struct{}, 1)}
	d.blockFn = d.blockFD
	d.tx.port = ib.UDPPort
	d.mtu = activeMTU(addr)
	guid := guidOf(addr)
	gid := ib.GIDOf(addr)
	d.eng = engine.NewDevice(engine.Config{
		Name:       name,
		GUID:       guid,
		NodeType:   verbs.NodeCA,
		Transport:  verbs.TransportIB,
		OwnCapture: true,
		GID:        verbs.GID(gid),
		Attr: verbs.DeviceAttr{
			FWVer:           "goverbs-roce 1",
			MaxMRSize:       1 << 40,
			PageSizeCap:     4096,
			VendorID:        0xFFFFFF,
			MaxQP:           1 << 14,
			MaxQPWR:         1 << 14,
			MaxSGE:          32,
			MaxSGERd:        32,
			MaxCQ:           1 << 14,
			MaxCQE:          1 << 20,
			MaxMR:           1 << 20,
			MaxPD:           1 << 14,
			MaxQPRdAtom:     maxIRDORD,
			MaxQPInitRdAtom: maxIRDORD,
			MaxResRdAtom:    maxIRDORD << 14,
			AtomicCap:       verbs.AtomicHCA,
			MaxAH:           1 << 16,
			MaxSRQ:          1 << 14,
			MaxSRQWR:        1 << 14,
			MaxSRQSGE:       32,
			MaxInlineData:   1024,
			MaxPKeys:        1,

			// FLUSH and ATOMIC_WRITE towards goverbs peers with the extensions on (nothing on the IB wire negotiates them).
			DeviceCapFlagsEx: verbs.DeviceFlushGlobal | verbs.DeviceFlushPersistent | verbs.DeviceAtomicWrite,
		},
		Port: verbs.PortAttr{
			State:      verbs.PortActive,
			MaxMTU:     verbs.MTU4096,
			ActiveMTU:  d.mtu,
			GIDTblLen:  1,
			MaxMsgSz:   1 << 31,
			PKeyTblLen: 1,
			LinkLayer:  verbs.LinkLayerEthernet,
			PhysState:  5,
		},
		NewTransport: func(e engine.Endpoint) engine.Transport { return d.newQP(e) },
	})
	d.cm = newCMAgent(d)
	d.acks.bat = newBatch(true)
	d.noGSO.Store(os.Getenv("GOVERBS_ROCE_GSO") == "0")
	return d
}

// open takes a use of the device's socket, opening it if it is not open;
// it returns why it cannot be. release ends the use; the last one closes
// the socket and ends the device's goroutine.
func (d *device) open() error {
	d.life.Lock()
	defer d.life.Unlock()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.users > 0 {
		d.users++
		return nil
	}
	sock, err := openSocket(netip.AddrPortFrom(d.addr, ib.UDPPort))
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("roce: device %s (%s): %w", d.eng.Name(), d.addr, ErrPortInUse)
		}
		return fmt.Errorf("roce: device %s: %w", d.eng.Name(), err)
	}
	evfd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		sock.close()
		return fmt.Errorf("roce: %s: %w", d.eng.Name(), os.NewSyscallError("eventfd", err))
	}
	d.setOpts(sock.fd, true)
	d.users, d.done, d.exited, d.evfd = 1, make(chan struct{}), make(chan struct{}), evfd
	d.tx.Lock()
	d.tx.sock = sock
	d.tx.Unlock()
	d.out = d.openSenders()
	d.sock.Store(sock)
	go d.rxLoop(sock, evfd, d.done, d.exited)
	return nil
}

// setOpts sets a socket's options: DF and IP identification 0, which the
// ICRC covers; large buffers, so that a burst of packets (a READ's
// responses) is not dropped: beyond net.core.rmem_max only with
// CAP_NET_ADMIN. A socket that receives asks for UDP GRO: datagrams that
// arrive together in one read (a batch sent with GSO on loopback, or a
// burst a NIC's GRO merged).
func (d *device) setOpts(fd int, receives bool) {
	if d.addr.Is4() {
		unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO)
	} else {
		unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_DO)
	}
	opts := [][2]int{{unix.SO_SNDBUFFORCE, unix.SO_SNDBUF}}
	if receives {
		unix.SetsockoptInt(fd, unix.SOL_UDP, unix.UDP_GRO, 1)
		opts = append(opts, [2]int{unix.SO_RCVBUFFORCE, unix.SO_RCVBUF})
	} else {
		// Nothing is read from it: what a stray datagram would queue
		// stays small.
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 4096)
	}
	for _, opt := range opts {
		if unix.SetsockoptInt(fd, unix.SOL_SOCKET, opt[0], 16<<20) != nil {
			unix.SetsockoptInt(fd, unix.SOL_SOCKET, opt[1], 16<<20)
		}
	}
	if receives {
		if n, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF); err == nil {
			d.rcvbuf.Store(int64(n))
		}
	}
}

// openSenders opens the sockets QPs send from. They are a refinement:
// when the machine has no descriptor or port to spare, QPs send from
// port 4791 instead (d.mu held).
func (d *device) openSenders() []*sender {
	out := make([]*sender, 0, nSenders)
	for range nSenders {
		sock, err := openSocket(netip.AddrPortFrom(d.addr, 0))
		if err != nil {
			break
		}
		d.setOpts(sock.fd, false)
		out = append(out, &sender{sock: sock, port: sock.port})
	}
	return out
}

// senderOf is the socket the QP qpn sends from.
func (d *device) senderOf(qpn uint32) *sender {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.out) == 0 {
		return &d.tx
	}
	h := qpn * 0x9E3779B1 // spreads consecutive QPNs
	return d.out[(h>>16)%uint32(len(d.out))]
}

func (d *device) release() {
	d.life.Lock()
	defer d.life.Unlock() // an open waits until the port is free again
	d.mu.Lock()
	if d.users == 0 {
		d.mu.Unlock()
		return // not open
	}
	if d.users--; d.users > 0 {
		d.mu.Unlock()
		return
	}
	close(d.done)
	sock, out, exited, evfd := d.sock.Load(), d.out, d.exited, d.evfd
	d.out = nil
	// d.sock stays, shut: a late poll or send sees a closed socket, not nil.
	d.mu.Unlock()
	// Without d.mu: the device's goroutine may be sending ACKs (write
	// takes d.mu), and is waited for before its socket closes.
	sock.shut()
	for _, s := range out {
		s.sock.shut()
	}
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	unix.Write(evfd, one[:])
	<-exited
	unix.Close(evfd)
	sock.close()
	for _, s := range out {
		s.sock.close()
	}
}

// rxLoop reads the socket while no application polls a QP of the device
// (polled mode: the polls read it), until the device closes: it sleeps in
// poll(2) on the socket and evfd, which release signals.
func (d *device) rxLoop(sock *socket, evfd int, done, exited chan struct{}) {
	defer close(exited)
	pfd := []unix.PollFd{{Fd: int32(sock.fd), Events: unix.POLLIN}, {Fd: int32(evfd), Events: unix.POLLIN}}
	for {
		for d.polled.Load() > 0 {
			select {
			case <-d.wake:
			case <-done:
				return
			}
		}
		select {
		case <-done:
			return
		default:
		}
		d.pump(sock, nil)
		d.flushACKs()
		if _, err := unix.Poll(pfd, -1); err != nil && err != unix.EINTR {
			return // (not seen: the descriptors are valid until exited)
		}
	}
}

// pump processes every packet the socket holds now; ho is the hand-off of
// the poll it runs in, or nil.
func (d *device) pump(sock *socket, ho *engine.Handoff) {
	d.rx.Lock()
	defer d.rx.Unlock()
	if sock.acquire() {
		d.pumpLocked(sock.fd, ho)
		sock.release()
	}
}

// pumpLocked is pump with d.rx held and a use of the socket fd.
//
// Packets may arrive as fast as they are handled (each ACK a sender
// handles sends a batch, whose ACK follows), so that the socket is never
// found empty; a pump stops anyway. The device's goroutine (ho nil) stops
// once an application polls: else it kept the pump, while the
// application's polls, finding d.rx taken, spun beside it: two threads of
// a sender busy where one does the work. An application's poll stops
// after pollReads reads: a poll that lasted past the engine's PollIdle
// ended polled mode, and the device's goroutine took over (28 times a
// second in a loopback write_bw).
func (d *device) pumpLocked(fd int, ho *engine.Handoff) {
	for i := 0; ho == nil || i < pollReads; i++ {
		if ho == nil && d.polled.Load() > 0 {
			return
		}
		n, seg, from, err := recvGRO(fd, d.rx.buf[:], &d.rx.sa, &d.rx.msg)
		if err != nil {
			return
		}
		raceAcquire()
		for off := 0; off < n; off += seg {
			d.stats.Received.Add(1)
			d.receive(d.rx.buf[off:min(off+seg, n)], from, ho)
		}
	}
}

// blockFD is the callback of a waiter blocked in the socket (qp.Block):
// it reads every packet the socket holds (the device's goroutine is aside:
// polled mode), each to its QP, this waiter's or not, sends the ACKs due,
// and reports whether the wait is over.
func (d *device) blockFD(fd uintptr) bool {
	w := d.bw
	w.Busy()
	d.rx.Lock()
	for {
		n, seg, from, err := recvGRO(int(fd), d.rx.buf[:], &d.rx.sa, &d.rx.msg)
		if err != nil {
			break // EAGAIN; another error is the device goroutine's to meet
		}
		raceAcquire()
		for off := 0; off < n; off += seg {
			d.stats.Received.Add(1)
			d.receive(d.rx.buf[off:min(off+seg, n)], from, nil)
		}
	}
	d.rx.Unlock()
	if !w.Idle() {
		// The wait is over: the ACKs due go with the application's next
		// post (back to back with its reply's packets) or poll, so that
		// a requester blocked until its SEND completes wakes once for
		// both (the ACK alone woke it before the reply did). The engine's
		// poll idle time bounds the delay, as for a polling application's.
		return true
	}
	d.flushACKs() // parking: the peer may wait for them
	return false
}

// pollReads bounds the socket reads of one application poll: a read is
// up to a GSO batch (64 KB), so a poll stays well within PollIdle.
const pollReads = 16

// poll is the device's part of a QP's Progress: it reads the socket unless
// another goroutine is at it, and returns how many completions it handed
// off in ho (a value, copied in and out: a pointer kept in the device
// would make every poll's escape to the heap).
func (d *device) poll(ho engine.Handoff) int {
	sock := d.sock.Load()
	if sock == nil {
		return 0
	}
	d.flushACKs() // those of the previous poll's requests, after its completions
	if !d.rx.TryLock() {
		return 0
	}
	if !sock.acquire() {
		d.rx.Unlock()
		return 0
	}
	d.rx.ho = ho
	d.pumpLocked(sock.fd, &d.rx.ho)
	n := d.rx.ho.Len()
	d.rx.ho = engine.Handoff{}
	sock.release()
	d.rx.Unlock()
	return n
}

// setPolled counts a QP whose application starts (on) or stops polling.
func (d *device) setPolled(on bool) {
	if on {
		d.polled.Add(1)
		return
	}
	if d.polled.Add(-1) == 0 {
		select {
		case d.wake <- struct{}{}:
		default:
		}
	}
}

// receive checks a datagram and hands it to its QP.
func (d *device) receive(b []byte, from netip.AddrPort, ho *engine.Handoff) {
	if captureFn.Get() != nil {
		d.captured(from, netip.AddrPortFrom(d.addr, ib.UDPPort), 0, b)
	}
	if len(b) < ib.BTHLen+ib.ICRCLen {
		d.stats.Malformed.Add(1)
		return
	}
	body, crc := b[:len(b)-ib.ICRCLen], ib.GetICRC(b[len(b)-ib.ICRCLen:])
	if !d.checkICRC(from, body, crc) {
		d.stats.BadICRC.Add(1)
		return
	}
	p := &d.rx.pkt
	if ib.Parse(body, p) != nil {
		d.stats.Malformed.Add(1)
		return
	}
	if p.DestQP == ib.GSIQPN {
		d.cm.receive(p, from)
		return
	}
	d.qmu.RLock()
	q := d.qps[p.DestQP]
	d.qmu.RUnlock()
	if q == nil {
		d.stats.NoQP.Add(1)
		return
	}
	q.receive(p, from, ho)
}

func (d *device) checkICRC(from netip.AddrPort, body []byte, crc uint32) bool {
	src := from.Addr()
	if src.Is4() && d.addr.Is4() {
		return d.rx.crc.CheckV4(src.As4(), d.addr.As4(), from.Port(), ib.UDPPort, body, crc)
	}
	return d.rx.crc.V6(src.As16(), d.addr.As16(), from.Port(), ib.UDPPort, body) == crc
}

// icrc returns the ICRC of a packet this device sends from port 4791 to
// to; d.tx is held.
func (d *device) icrc(to netip.Addr, pkt []byte) uint32 {
	if d.addr.Is4() && to.Is4() {
		return d.tx.crc.V4(d.addr.As4(), to.As4(), ib.UDPPort, ib.UDPPort, 0, true, pkt)
	}
	return d.tx.crc.V6(d.addr.As16(), to.As16(), ib.UDPPort, ib.UDPPort, pkt)
}

// sendWait sends pkt (headers, payload and pad, with room for the ICRC
// after them: cap(pkt) >= len(pkt)+4) to to:4791, waiting for room in the
// socket's buffer. The transport's bursts go in batches instead.
func (d *device) sendWait(pkt []byte, to netip.Addr, sa *sockaddr) {
	if d.sock.Load() == nil {
		d.stats.SendFail.Add(1)
		return
	}
	if sa.n == 0 || sa.addrPort().Addr() != to {
		sa.set(netip.AddrPortFrom(to, ib.UDPPort))
	}
	d.tx.Lock()
	c := d.icrc(to, pkt)
	pkt = pkt[:len(pkt)+ib.ICRCLen]
	ib.PutICRC(pkt[len(pkt)-ib.ICRCLen:], c)
	if captureFn.Get() != nil {
		d.captured(netip.AddrPortFrom(d.addr, ib.UDPPort), netip.AddrPortFrom(to, ib.UDPPort), 0, pkt)
	}
	err := d.tx.write(nil, pkt, sa, true)
	d.tx.Unlock()
	if err != nil {
		d.stats.SendFail.Add(1)
		return
	}
	d.stats.Writes.Add(1)
	d.stats.Sent.Add(1)
}

func (d *device) addQP(q *qp) {
	d.qmu.Lock()
	d.qps[q.num] = q
	d.qmu.Unlock()
}

func (d *device) removeQP(q *qp) {
	d.qmu.Lock()
	if d.qps[q.num] == q {
		delete(d.qps, q.num)
	}
	d.qmu.Unlock()
}

// write sends pkt, one packet of batch b, or with pkt nil all of b in one
// GSO send, from b's socket, waiting for room in it if b waits.
func (d *device) write(b *batch, pkt []byte) error {
	s := b.src
	if s == nil {
		s = &d.tx
	}
	s.Lock()
	err := s.write(b, pkt, &b.sa, b.wait)
	s.Unlock()
	if err == nil {
		d.stats.Writes.Add(1)
	}
	return err
}

// writePre sends batch b's pre and then all of b (UDP GSO) with one system
// call from b's socket, without waiting for room in it; it returns how
// many of the two went.
func (d *device) writePre(b *batch) (int, error) {
	s := b.src
	if s == nil {
		s = &d.tx
	}
	s.Lock()
	defer s.Unlock()
	sock := s.sock
	if sock == nil || !sock.acquire() {
		return 0, net.ErrClosed
	}
	defer sock.release()
	raceRelease()
	seg := b.seg
	if b.n == 1 {
		seg = 0
	}
	sent, err := sendPre(sock.fd, b.pre, b.vec, seg, &b.sa, &b.msg, &b.pmsg)
	if err == nil {
		d.stats.Writes.Add(1)
	}
	return sent, err
}

// write sends pkt to sa, or with pkt nil all of batch b (UDP GSO), waiting
// for room in the socket if wait (s held).
func (s *sender) write(b *batch, pkt []byte, sa *sockaddr, wait bool) error {
	sock := s.sock
	if sock == nil || !sock.acquire() {
		return net.ErrClosed
	}
	raceRelease()
	var err error
	for {
		if pkt == nil {
			seg := b.seg
			if b.n == 1 {
				seg = 0
			}
			err = sendGSO(sock.fd, b.vec, seg, sa, &b.msg)
		} else {
			err = sendNB(sock.fd, pkt, sa)
		}
		if err != unix.EAGAIN || !wait {
			break
		}
		if !sock.waitWritable() {
			err = net.ErrClosed
			break
		}
	}
	sock.release()
	return err
}
