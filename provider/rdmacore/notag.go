//go:build !(rdmacore && linux && cgo)

package rdmacore

// Available reports whether the package was built with the rdmacore tag,
// that is whether it registers rdma-core's devices.
const Available = false

// DeviceNames lists the names of the devices rdma-core found: none in a
// build without the rdmacore tag.
func DeviceNames() []string { return nil }
