//go:build rdmacore && linux && cgo

package rdmacore

import (
	"bytes"
	"net"
	"net/netip"
	"os"
	"strings"

	"github.com/goverbs/goverbs/verbs"
)

// DeviceAddr returns the first IPv4 address of the network interface an
// rdma-core device sits on (rxe0's parent, siw0's netdev): the address a
// connection through the kernel's CM (rdma://ADDR:port) uses the device by.
func DeviceAddr(name string) (netip.Addr, bool) {
	ifc := deviceNetdev(name)
	if ifc == nil {
		return netip.Addr{}, false
	}
	addrs, _ := ifc.Addrs()
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is4() {
			return p.Addr(), true
		}
	}
	return netip.Addr{}, false
}

// deviceNetdev finds the interface: sysfs names it for rxe (parent) and
// for RoCE NICs (the GID table's netdev); siw's GID is its interface's MAC.
func deviceNetdev(name string) *net.Interface {
	for _, f := range []string{"/sys/class/infiniband/" + name + "/parent", "/sys/class/infiniband/" + name + "/ports/1/gid_attrs/ndevs/0"} {
		if b, err := os.ReadFile(f); err == nil {
			if ifc, err := net.InterfaceByName(strings.TrimSpace(string(b))); err == nil {
				return ifc
			}
		}
	}
	ctx, err := verbs.OpenDevice(name)
	if err != nil {
		return nil
	}
	defer ctx.Close()
	gid, err := ctx.QueryGID(1, 0)
	if err != nil {
		return nil
	}
	ifcs, _ := net.Interfaces()
	for i := range ifcs {
		if hw := ifcs[i].HardwareAddr; len(hw) == 6 && bytes.Equal(hw, gid[:6]) {
			return &ifcs[i]
		}
	}
	return nil
}
