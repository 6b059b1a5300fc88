// Package roce is goverbs' RoCEv2 provider in userspace: the InfiniBand
// transport over UDP, as Linux rxe and RoCE NICs speak it, from an ordinary
// UDP socket. A Go program with no RDMA device, no kernel module, no root
// and no locked-memory limit connects with rdma_cm (package rdmacm, roce://
// addresses) to a server on a RoCE NIC or rxe, and does RDMA SEND, WRITE,
// READ and atomics against it, byte-compatible on the wire.
//
// # Devices and addresses
//
// Each local IP address is a device (roce0, roce1, ...; AddDevice makes
// one for an address that has none, such as another loopback address),
// whose GID is the address (an IPv4 address as ::ffff:a.b.c.d). A device
// takes UDP port 4791 on its address the first time one of its QPs is
// created: RoCEv2 has a fixed destination port, so only one process of a
// host can serve an address (another gets an error saying so); processes
// that share a host use different addresses (127.0.0.1, 127.0.0.2, ...
// are all local). Every QP of the device shares the socket, which is
// demultiplexed by destination QP number. A QP's packets leave from a UDP
// source port of its own (one of eight sockets on ephemeral ports, chosen
// by its QPN for its life, as rxe derives a port from the QPN), so that
// ECMP spreads a host's flows and keeps each in order; CM datagrams and
// coalesced ACKs leave from 4791, but for the ACK that goes ahead of a
// QP's request (see acks.go), which leaves with it, in its system call,
// from the QP's port (as rxe sends all of a QP's packets from its port).
//
// Packets go out with DF set and a predictable IPv4 identification (an
// unconnected socket with IP_PMTUDISC_DO sends 0), which their ICRC
// covers. A burst (a message's packets, a READ's responses) leaves in
// batches of one system call each: UDP GSO, the kernel cutting the batch
// into datagrams whose identifications count from 0, and a receiving
// socket asks for UDP GRO, so that a burst arrives in few reads. (A
// capture on loopback sees a batch as one frame, as the kernel passes it:
// GOVERBS_ROCE_GSO=0 in the environment sends datagram by datagram.) Received packets
// are checked: the ICRC over every field a UDP socket shows (the IPv4
// identification and DF flag are not shown; package ib explains how the
// check does without them, and the kernel has checked the IP header's
// checksum, which covers them), then every header against the transport's
// rules. A malformed packet, one with a bad ICRC, and one for a QP that
// does not exist are dropped and counted (DeviceCounters).
//
// # Transport
//
// RC and UD queue pairs run on goverbs' shared engine. RC is the IB
// reliable connection as rxe implements it: SEND, WRITE (with immediate
// and invalidate), READ and the atomics cut into packets of the path MTU,
// 24-bit PSNs, ACKs coalesced and requested (AckReq) at the end of each
// message and every ackEvery packets (and given, unasked, for the first
// packet of a longer message: see acks.go), duplicate detection (re-ACK, reads
// re-executed, atomics answered from a cache), go-back-N on a sequence NAK
// or the local ACK timeout (4.096 µs × 2^timeout) within retry_cnt, RNR
// NAK with its timer and rnr_retry (7: for ever), IRD/ORD, and the
// statuses of verbs: RETRY_EXC_ERR, RNR_RETRY_EXC_ERR, REM_ACCESS_ERR,
// REM_INV_REQ_ERR, REM_OP_ERR and the flush of what follows. A UD receive
// gets the 40-byte GRH first, as rxe gives it for RoCEv2 (for IPv4, the IP
// header in its last 20 bytes).
//
// QPs are connected by rdmacm (IB CM MADs over QP1, with rdma_cm's
// service IDs and header) or, between goverbs peers that exchange QP
// numbers themselves, by Modify as on any verbs device. In rdma_cm's UDP
// port space (rdmacm.PortSpaceUDP) a UD QP learns the number and Q_Key of
// the UD QP that serves an address by IB's service ID resolution (SIDR
// REQ/REP), as librdmacm's udaddy does. An exchange a peer leaves
// unfinished is dropped within the CM's timeouts and counted
// (Counters.CMTimeout): an Accept whose REP gets no RTU gives up after the
// REQ's Local CM Response Timeout × (Max CM Retries + 1), at most 16 ×
// 4.3 s, with a REJ (timeout) and its QP in ERR; a Dial whose REQs get no
// answer, at its deadline.
package roce

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"sort"
	"sync"
	"syscall"

	"github.com/goverbs/goverbs/internal/cm"
	"github.com/goverbs/goverbs/verbs"
	"github.com/goverbs/goverbs/verbs/driver"
)

// maxIRDORD bounds IRD and ORD (rxe's 128).
const maxIRDORD = 128

var devs struct {
	sync.Mutex
	list   []*device
	byAddr map[netip.Addr]*device
}

type provider struct{}

func (provider) Devices() []driver.Device {
	devs.Lock()
	defer devs.Unlock()
	out := make([]driver.Device, len(devs.list))
	for i, d := range devs.list {
		out[i] = d.eng
	}
	return out
}

func init() {
	for _, a := range localAddrs() {
		addDevice(a)
	}
	driver.Register("roce", provider{})
	cm.Register(transport{})
}

// localAddrs returns this host's unicast addresses that RoCEv2 can use:
// not link-local, the loopback ones last.
func localAddrs() []netip.Addr {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil
	}
	var out, lo []netip.Addr
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagUp == 0 {
			continue
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			p, err := netip.ParsePrefix(a.String())
			if err != nil {
				continue
			}
			ip := p.Addr().Unmap()
			switch {
			case ip.IsLinkLocalUnicast() || ip.IsMulticast() || ip.IsUnspecified():
			case ip.IsLoopback():
				lo = append(lo, ip)
			default:
				out = append(out, ip)
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Is4() && !out[j].Is4() })
	return append(out, lo...)
}

// AddDevice returns the name of the device for the local address addr,
// making it if there is none. The address must be this host's (any
// 127.x.y.z is); the device takes UDP port 4791 on it when its first QP is
// created.
func AddDevice(addr netip.Addr) (string, error) {
	addr = addr.Unmap()
	if !addr.IsValid() || addr.IsUnspecified() || addr.IsMulticast() {
		return "", fmt.Errorf("%w: address %v", verbs.ErrInvalid, addr)
	}
	return addDevice(addr).eng.Name(), nil
}

// DeviceFor returns the name of the device that serves the local address addr.
func DeviceFor(addr netip.Addr) (string, bool) {
	devs.Lock()
	defer devs.Unlock()
	d := devs.byAddr[addr.Unmap()]
	if d == nil {
		return "", false
	}
	return d.eng.Name(), true
}

// DeviceAddr returns the local address the device name serves.
func DeviceAddr(name string) (netip.Addr, bool) {
	devs.Lock()
	defer devs.Unlock()
	for _, d := range devs.list {
		if d.eng.Name() == name {
			return d.addr, true
		}
	}
	return netip.Addr{}, false
}

func addDevice(addr netip.Addr) *device {
	devs.Lock()
	defer devs.Unlock()
	if d := devs.byAddr[addr]; d != nil {
		return d
	}
	if devs.byAddr == nil {
		devs.byAddr = map[netip.Addr]*device{}
	}
	d := newDevice(fmt.Sprintf("roce%d", len(devs.list)), addr)
	devs.list = append(devs.list, d)
	devs.byAddr[addr] = d
	return d
}

// guidOf derives a node GUID from an address, as an RNIC derives one from
// its MAC.
func guidOf(a netip.Addr) uint64 {
	b := a.As16()
	return 0x02005e0000000000 | uint64(binary.BigEndian.Uint32(b[12:])) | uint64(b[11])<<32
}

// activeMTU is the largest IB MTU that fits the interface MTU of addr
// (rxe's rule: the interface MTU less room for the headers).
func activeMTU(addr netip.Addr) verbs.MTU {
	ifMTU := 1500
	if ifs, err := net.Interfaces(); err == nil {
	loop:
		for _, ifc := range ifs {
			as, _ := ifc.Addrs()
			for _, a := range as {
				if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Unmap() == addr {
					ifMTU = ifc.MTU
					break loop
				}
			}
		}
		if addr.IsLoopback() && ifMTU == 1500 {
			ifMTU = 65536 // an added loopback address is on lo
		}
	}
	for m := verbs.MTU4096; m > verbs.MTU256; m-- {
		if m.Bytes()+80 <= ifMTU {
			return m
		}
	}
	return verbs.MTU256
}

// Errors of the provider.
var (
	// ErrPortInUse reports that another process serves UDP port 4791 on the
	// device's address (only one can). It matches syscall.EADDRINUSE too.
	ErrPortInUse = fmt.Errorf("UDP port 4791 of the address is another process's (one process per address; use another address, e.g. 127.0.0.2): %w", syscall.EADDRINUSE)

	errNoGID = fmt.Errorf("%w: an RC QP of a RoCE device needs a global address (AHAttr.IsGlobal, GRH.DGID) to connect", verbs.ErrInvalid)
)
