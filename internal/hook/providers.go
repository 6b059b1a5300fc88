package hook

import "net/netip"

// WireFault is what happens to a datagram a RoCE device sends, under
// RoCEWire.
type WireFault int

// The fates of a datagram.
const (
	WirePass WireFault = iota // sent
	WireDrop                  // lost on the wire
	WireDup                   // delivered twice
	WireHold                  // delivered after the next datagram to the same address (reordered)
)

// The providers' hooks, here so that packages faults and capture can set
// them without the providers exporting machinery.
var (
	// RoCEWire decides the fate of each datagram every RoCE device of the
	// process sends (package faults, roce's loss tests). While it is set,
	// batches go out one datagram at a time.
	RoCEWire Hook[func(pkt []byte) WireFault]

	// RoCECapture receives a copy of each datagram a RoCE device sends or
	// receives: its addresses and ports, the IPv4 identification it
	// carries (which the ICRC covers), and the RoCE packet (BTH to ICRC),
	// valid during the call.
	RoCECapture Hook[func(dev string, src, dst netip.AddrPort, ipID uint16, pkt []byte)]

	// IWARPCapture receives the bytes of an iWARP connection's TCP stream
	// as they are on the wire: src sent b to dst (b nil: src closed its
	// side). Sent says which end recorded it: true for bytes this process
	// wrote, false for bytes it read (an FPDU is reported once it has
	// been read whole and checked). qpn is the local QP's number, 0 while
	// none is bound. b is only valid during the call. With none set, the
	// cost is an atomic load per transmitted message and received FPDU.
	IWARPCapture Hook[func(src, dst netip.AddrPort, sent bool, qpn uint32, b [][]byte)]
)
