package roce

import (
	"net/netip"

	"github.com/goverbs/goverbs/internal/hook"
)

// What happens to a datagram a device sends, under SetWireFaults.
const (
	FaultPass = faultPass // sent
	FaultDrop = faultDrop // lost on the wire
	FaultDup  = faultDup  // delivered twice
	FaultHold = faultHold // delivered after the next datagram to the same address (reordered)
)

// FaultKind is what happens to a datagram.
type FaultKind = faultKind

// SetWireFaults makes every RoCE device of the process decide the fate of
// each datagram it sends with f (nil: none), for tests of what the
// transport's rules do with loss, duplication and reordering; it returns
// a function that restores the previous choice. While f is set, batches
// go out one datagram at a time. Package faults drives it from a seeded
// plan.
func SetWireFaults(f func(pkt []byte) FaultKind) (restore func()) {
	var p *wireFault
	if f != nil {
		w := wireFault(f)
		p = &w
	}
	old := faults.Swap(p)
	return func() { faults.Store(old) }
}

// CaptureFunc receives a copy of each datagram a device sends or receives:
// its addresses and ports, the IPv4 identification it carries (which the
// ICRC covers), and the RoCE packet (BTH to ICRC), valid during the call.
type CaptureFunc func(dev string, src, dst netip.AddrPort, ipID uint16, pkt []byte)

var captureFn hook.Hook[CaptureFunc]

// SetCapture makes every RoCE device of the process show its datagrams to
// f (nil: none), for package capture; it returns the previous one.
func SetCapture(f CaptureFunc) CaptureFunc { return captureFn.Set(f, f == nil) }

// captured shows a datagram to the capture function, if one is set.
func (d *device) captured(src, dst netip.AddrPort, id uint16, pkt []byte) {
	if f := captureFn.Get(); f != nil {
		(*f)(d.eng.Name(), src, dst, id, pkt)
	}
}
