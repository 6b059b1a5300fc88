package rpma

import (
	"net"
	"strings"

	"github.com/goverbs/goverbs/rdmacm"
	"github.com/goverbs/goverbs/verbs"
)

// DeviceContext returns the verbs context of the device that serves addr
// (an IP address or host name; rpma_utils_get_ibv_context), as
// rdmacm.DeviceContext does for rdmacm's addresses. Pure-Go goverbs
// serves every TCP address with its iWARP device, so the result is the same
// context for local and remote addresses; it is the one package rdmacm
// connects with, which NewPeer needs. An address "unix:/path" or
// "unix:@name" gives the shared-memory device shm0 (peers on one host), and
// "roce://IP" the RoCEv2 device of the local address IP, or of the local
// address that routes to a remote IP (the IP's connections go over RoCE).
func DeviceContext(addr string) (*verbs.Context, error) {
	if addr == "" {
		return nil, wrap(ErrInval, "empty address")
	}
	ctx, _, err := rdmacm.DeviceContext(cmAddr(addr, "0"))
	if err != nil {
		return nil, provider("no device for "+addr, err)
	}
	return ctx, nil
}

// cmAddr is the rdmacm address of addr and port. An address "unix:/path"
// or "unix:@name" selects goverbs' shared-memory device (same host): the
// port, unless it is "0", is appended to the socket name (NAME:PORT), so
// that a client given the endpoint's Port reaches it. An address with a
// scheme (roce://host, tcp://host) gets the port on its host.
func cmAddr(addr, port string) string {
	if i := strings.Index(addr, "://"); i > 0 {
		// A scheme (roce://, tcp://): the port goes to its host.
		return addr[:i+3] + net.JoinHostPort(strings.Trim(addr[i+3:], "[]"), port)
	}
	if strings.HasPrefix(addr, "unix:") {
		if port == "0" {
			return addr
		}
		return addr + ":" + port
	}
	return net.JoinHostPort(addr, port)
}

// Peer is a local RDMA device ready for connections and memory
// registrations (struct rpma_peer): it owns a protection domain.
type Peer struct {
	ctx *verbs.Context
	pd  *verbs.PD
	// nativeFlush and nativeAtomicWrite say the device has FLUSH (both
	// types) and ATOMIC_WRITE, as librpma's peer learns them from
	// ibv_query_device_ex; without them regions are registered and
	// connections flush and atomically write as librpma does then.
	nativeFlush, nativeAtomicWrite bool
}

// NewPeer creates a peer on ctx (rpma_peer_new), which must come from
// DeviceContext. Like librpma's, the peer learns from the device's
// capabilities (verbs.DeviceAttr.DeviceCapFlagsEx) whether it has native
// FLUSH (verbs.DeviceFlushGlobal and verbs.DeviceFlushPersistent) and
// ATOMIC_WRITE (verbs.DeviceAtomicWrite): NativeFlush and
// NativeAtomicWrite report it, and the package doc says what follows. It
// returns ErrInval for a nil context and ErrProvider when the protection
// domain cannot be allocated.
func NewPeer(ctx *verbs.Context) (*Peer, error) {
	if ctx == nil {
		return nil, wrap(ErrInval, "nil verbs context")
	}
	caps := ctx.QueryDevice().DeviceCapFlagsEx
	const flush = verbs.DeviceFlushGlobal | verbs.DeviceFlushPersistent
	p := &Peer{ctx: ctx, nativeFlush: caps&flush == flush, nativeAtomicWrite: caps&verbs.DeviceAtomicWrite != 0}
	if !p.nativeFlush {
		logAt(LogInfo, "native flush is not supported: flushes use an RDMA read after the writes", "device", ctx.Device().Name())
	}
	if !p.nativeAtomicWrite {
		logAt(LogInfo, "native atomic write is not supported: atomic writes use a fenced RDMA write", "device", ctx.Device().Name())
	}
	pd, err := ctx.AllocPD()
	if err != nil {
		return nil, provider("ibv_alloc_pd", err)
	}
	p.pd = pd
	return p, nil
}

// NativeFlush reports whether the peer's device has native FLUSH of both
// types. Without it the peer registers flush targets for remote reads and
// its connections flush by a read after the writes, as librpma does.
func (p *Peer) NativeFlush() bool { return p.nativeFlush }

// NativeAtomicWrite reports whether the peer's device has native
// ATOMIC_WRITE. Without it the peer's connections write atomically by a
// fenced 8-byte RDMA Write, as librpma does.
func (p *Peer) NativeAtomicWrite() bool { return p.nativeAtomicWrite }

// PD returns the peer's protection domain.
func (p *Peer) PD() *verbs.PD { return p.pd }

// Delete frees the peer (rpma_peer_delete). It returns ErrProvider while
// regions, connections or SRQs of the peer still exist.
func (p *Peer) Delete() error {
	if p == nil {
		return nil
	}
	if err := p.pd.Dealloc(); err != nil {
		return provider("ibv_dealloc_pd", err)
	}
	return nil
}

// PeerCfgDescriptorSize is the size of a peer configuration descriptor.
const PeerCfgDescriptorSize = 1

// PeerCfg is a peer configuration (struct rpma_peer_cfg): what a peer
// tells the other side about itself.
type PeerCfg struct {
	directWriteToPmem bool
}

// NewPeerCfg returns a configuration with the defaults (rpma_peer_cfg_new):
// no direct write to persistent memory.
func NewPeerCfg() *PeerCfg { return &PeerCfg{} }

// SetDirectWriteToPmem declares whether data written by RDMA to this
// peer's memory reaches persistence without further action of the target's
// CPU (rpma_peer_cfg_set_direct_write_to_pmem). A remote side may use
// FlushPersistent only towards a peer that declares it (see Conn.Flush).
func (c *PeerCfg) SetDirectWriteToPmem(v bool) { c.directWriteToPmem = v }

// DirectWriteToPmem returns the setting (rpma_peer_cfg_get_direct_write_to_pmem).
func (c *PeerCfg) DirectWriteToPmem() bool { return c.directWriteToPmem }

// Descriptor returns the 1-byte descriptor of the configuration
// (rpma_peer_cfg_get_descriptor), byte-compatible with librpma's.
func (c *PeerCfg) Descriptor() []byte {
	if c.directWriteToPmem {
		return []byte{1}
	}
	return []byte{0}
}

// PeerCfgFromDescriptor decodes a configuration descriptor
// (rpma_peer_cfg_from_descriptor). It returns ErrInval unless desc holds
// exactly one byte.
func PeerCfgFromDescriptor(desc []byte) (*PeerCfg, error) {
	if len(desc) != PeerCfgDescriptorSize {
		return nil, wrap(ErrInval, "peer configuration descriptor of %d bytes (want %d)", len(desc), PeerCfgDescriptorSize)
	}
	return &PeerCfg{directWriteToPmem: desc[0] != 0}, nil
}
