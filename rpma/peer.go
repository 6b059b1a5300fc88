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
// that a client given the endpoint's Port reaches it.
func cmAddr(addr, port string) string {
	if h, ok := strings.CutPrefix(addr, "roce://"); ok {
		return "roce://" + net.JoinHostPort(strings.Trim(h, "[]"), port)
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
}

// NewPeer creates a peer on ctx (rpma_peer_new), which must come from
// DeviceContext. It returns ErrInval for a nil context and ErrProvider when the
// protection domain cannot be allocated.
func NewPeer(ctx *verbs.Context) (*Peer, error) {
	if ctx == nil {
		return nil, wrap(ErrInval, "nil verbs context")
	}
	pd, err := ctx.AllocPD()
	if err != nil {
		return nil, provider("ibv_alloc_pd", err)
	}
	return &Peer{ctx: ctx, pd: pd}, nil
}

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
