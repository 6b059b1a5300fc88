package roce

import (
	"net/netip"

	"github.com/goverbs/goverbs/internal/ib"
)

// cmAgent is the device's Communication Manager: the MADs of QP1.
type cmAgent struct {
	d *device
}

func newCMAgent(d *device) *cmAgent { return &cmAgent{d: d} }

// receive handles a MAD for QP1.
func (a *cmAgent) receive(p *ib.Packet, from netip.AddrPort) {}
