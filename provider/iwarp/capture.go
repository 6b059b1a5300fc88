package iwarp

import (
	"net"
	"net/netip"

	"github.com/goverbs/goverbs/internal/hook"
)

// CaptureFunc receives the bytes of an iWARP connection's TCP stream as
// they are on the wire, for package capture: src sent b to dst (b nil: src
// closed its side). Sent says which end recorded it: true for bytes this
// process wrote, false for bytes it read (an FPDU is reported once it has
// been read whole and checked, header, payload and trailer). qpn is the
// local QP's number, 0 while none is bound (a rejected request). b is only
// valid during the call.
type CaptureFunc func(src, dst netip.AddrPort, sent bool, qpn uint32, b [][]byte)

var captureFn hook.Hook[CaptureFunc]

// SetCapture sets the function that receives the stream of every iWARP
// connection of the process (nil: none); it returns the one it replaces.
// With none set, the cost is an atomic load per transmitted message and
// per received FPDU.
func SetCapture(f CaptureFunc) CaptureFunc { return captureFn.Set(f, f == nil) }

// capturing returns the capture function, or nil.
func capturing() CaptureFunc {
	if p := captureFn.Get(); p != nil {
		return *p
	}
	return nil
}

func addrPort(a net.Addr) netip.AddrPort {
	if t, ok := a.(*net.TCPAddr); ok {
		ap := t.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	return netip.AddrPort{}
}

// captureOut reports bytes written to nc (nil: nc's write side closed).
func captureOut(nc net.Conn, qpn uint32, b [][]byte) {
	if f := capturing(); f != nil {
		f(addrPort(nc.LocalAddr()), addrPort(nc.RemoteAddr()), true, qpn, b)
	}
}

// captureIn reports bytes read from nc.
func captureIn(nc net.Conn, qpn uint32, b [][]byte) {
	if f := capturing(); f != nil {
		f(addrPort(nc.RemoteAddr()), addrPort(nc.LocalAddr()), false, qpn, b)
	}
}

// writeFrame writes an MPA frame (or a Terminate) of the connection setup
// and reports it to the capture.
func writeFrame(nc net.Conn, qpn uint32, b []byte) error {
	captureOut(nc, qpn, [][]byte{b})
	_, err := nc.Write(b)
	return err
}

// record reports a message about to be written to the capture.
func (c *conn) record(iov [][]byte) {
	if captureFn.Get() != nil {
		captureOut(c.nc, c.ep.Num(), iov)
	}
}
