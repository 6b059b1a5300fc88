//go:build !(rdmacore && linux && cgo)

package rdmacore

import "net/netip"

// Available reports whether the package was built with the rdmacore tag,
// that is whether it registers rdma-core's devices.
const Available = false

// DeviceNames lists the names of the devices rdma-core found: none in a
// build without the rdmacore tag.
func DeviceNames() []string { return nil }

// DeviceAddr returns the IPv4 address of an rdma-core device's network
// interface: none in a build without the rdmacore tag.
func DeviceAddr(name string) (netip.Addr, bool) { return netip.Addr{}, false }
