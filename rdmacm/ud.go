package rdmacm

import (
	"context"
	"errors"
	"fmt"

	"github.com/goverbs/goverbs/internal/cm"
	"github.com/goverbs/goverbs/internal/udqp"
	"github.com/goverbs/goverbs/provider/iwarp"
	"github.com/goverbs/goverbs/provider/roce"
	"github.com/goverbs/goverbs/provider/shm"
	"github.com/goverbs/goverbs/verbs"
)

// PortSpace is rdma_cm's port space (enum rdma_port_space): what an
// identifier's port names.
type PortSpace int

const (
	// PortSpaceTCP (RDMA_PS_TCP) is for reliable connections: the default.
	PortSpaceTCP PortSpace = iota
	// PortSpaceUDP (RDMA_PS_UDP) is for UD QPs: Connect learns the number
	// and Q_Key of the UD QP that serves the address (over RoCE, IB's
	// service ID resolution), Accept gives the requester its own. The
	// identifier's QP is a UD QP, ready (RTS, Q_Key UDPQKey) once created.
	// Transports that have it: roce.
	PortSpaceUDP
)

// UDPQKey is the Q_Key of the UDP port space's QPs (RDMA_UDP_QKEY).
const UDPQKey = 0x01234567

// The literal above shows in go doc; the CM's must be the same.
var _ = [1]struct{}{}[UDPQKey-cm.UDPQKey]

// maxUDPrivateData bounds what rdmacm passes on for UD; the provider holds
// its own, smaller limits.
const maxUDPrivateData = 256

// IDOptions shape an identifier (rdma_create_id's port space,
// rdma_resolve_addr's source address, and what rdma_set_option sets of a
// provider's). The zero value is CreateID's identifier.
type IDOptions struct {
	// Source is the local address connections leave from ("": the
	// route's; see CreateIDFrom).
	Source string
	// PortSpace is the identifier's port space (default PortSpaceTCP).
	PortSpace PortSpace
	// TCP configures the iWARP provider for a host:port or tcp://
	// address: its Listen, or its Connect (nil: the provider's
	// defaults). Requests a listener yields are accepted with the
	// listener's.
	TCP *iwarp.Config
	// Unix configures the shared-memory provider for a unix: address, as
	// TCP does iWARP.
	Unix *shm.Config
	// RoCE configures the RoCE provider for a roce:// address, as TCP
	// does iWARP.
	RoCE *roce.Config
}

// NewID creates an identifier for addr with options (CreateID is NewID
// with none).
func NewID(addr string, o IDOptions) (*ID, error) {
	id, err := CreateIDFrom(o.Source, addr)
	if err != nil {
		return nil, err
	}
	switch o.PortSpace {
	case PortSpaceTCP:
	case PortSpaceUDP:
		if _, ok := id.tr.(cm.UDResolver); !ok {
			id.Close()
			return nil, fmt.Errorf("%w: the UDP port space over %s", errNotSupported, id.tr.Name())
		}
	default:
		id.Close()
		return nil, fmt.Errorf("%w: port space %d", errInvalid, o.PortSpace)
	}
	id.ps = o.PortSpace
	switch id.tr.Name() {
	case "tcp":
		if o.TCP != nil {
			id.pcfg = o.TCP
		}
	case "unix":
		if o.Unix != nil {
			id.pcfg = o.Unix
		}
	case "roce":
		if o.RoCE != nil {
			id.pcfg = o.RoCE
		}
	}
	return id, nil
}

// UDParam is what a UD identifier learned of its peer (the ud member of
// rdma_cm's established event): the path for an address handle, and the
// peer QP's number and Q_Key.
type UDParam struct {
	AH   verbs.AHAttr
	QPN  uint32
	QKey uint32
}

// UDPeer returns the peer a UD identifier resolved (Connect), if it did.
func (id *ID) UDPeer() (UDParam, bool) {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.ud == nil {
		return UDParam{}, false
	}
	return *id.ud, true
}

// readyUD moves a new UD QP of the UDP port space to RTS, as librdmacm
// does when it creates one.
func readyUD(qp *verbs.QP) error { return udqp.Activate(qp, UDPQKey) }

// resolveUD is Connect in the UDP port space.
func (id *ID) resolveUD(ctx context.Context, qp *verbs.QP, p *ConnParam) error {
	cp, err := params(p, maxUDPrivateData)
	if err != nil {
		return err
	}
	cp.Config = id.providerConfig()
	peer, err := id.tr.(cm.UDResolver).ResolveUD(ctx, id.addr, qp, cp)
	if err != nil {
		err = public(err)
		var rej *RejectedError
		switch {
		case errors.As(err, &rej):
			id.post(Event{Type: EventRejected, Err: err, PrivateData: rej.PrivateData})
		case errors.Is(err, ErrUnreachable):
			id.post(Event{Type: EventUnreachable, Err: err})
		default:
			id.post(Event{Type: EventConnectError, Err: err})
		}
		return err
	}
	ud := &UDParam{AH: peer.AH, QPN: peer.QPN, QKey: peer.QKey}
	id.mu.Lock()
	if id.state == stateClosed {
		id.mu.Unlock()
		return ErrClosed
	}
	id.ud, id.peerPD = ud, peer.PrivateData
	id.state = stateConnected
	id.mu.Unlock()
	u := *ud
	id.post(Event{Type: EventEstablished, PrivateData: peer.PrivateData, UD: &u})
	return nil
}

// PostUDSend sends buf, which must lie in the registered region mr, as a
// datagram to the UD QP remoteQPN behind ah, with the UDP port space's
// Q_Key (rdma_post_ud_send).
func (id *ID) PostUDSend(wrid uint64, buf []byte, mr *verbs.MR, flags verbs.SendFlags, ah *verbs.AH, remoteQPN uint32) error {
	qp, err := id.liveQP()
	if err != nil {
		return err
	}
	wr := verbs.SendWR{WRID: wrid, Opcode: verbs.WRSend, Flags: flags, AH: ah, RemoteQPN: remoteQPN, RemoteQKey: UDPQKey}
	if flags&verbs.SendInline != 0 && mr == nil {
		wr.Inline = buf
		if wr.Inline == nil {
			wr.Inline = []byte{}
		}
	} else {
		sge, err := sgeOf(buf, mr)
		if err != nil {
			return err
		}
		return postSend(qp, &wr, &sge)
	}
	return postSend(qp, &wr, nil)
}
