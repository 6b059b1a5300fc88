package roce

import (
	"net/netip"

	"github.com/goverbs/goverbs/internal/hook"
)

// captureFn is package capture's, set through hook.RoCECapture.
var captureFn = &hook.RoCECapture

// captured shows a datagram to the capture function, if one is set.
func (d *device) captured(src, dst netip.AddrPort, id uint16, pkt []byte) {
	if f := captureFn.Get(); f != nil {
		(*f)(d.eng.Name(), src, dst, id, pkt)
	}
}
