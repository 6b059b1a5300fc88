package iwarp

import (
	"net"
	"net/netip"

	"github.com/goverbs/goverbs/internal/hook"
)

// captureFunc receives the stream of every connection (package capture
// sets it through hook.IWARPCapture).
type captureFunc = func(src, dst netip.AddrPort, sent bool, qpn uint32, b [][]byte)

var captureFn = &hook.IWARPCapture

// capturing returns the capture function, or nil.
func capturing() captureFunc {
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
