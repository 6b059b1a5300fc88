// Package cm is the contract between package rdmacm and the providers that
// make connections (iwarp over TCP, shm over a Unix socket): rdmacm's
// Listen / Dial / Accept / Reject / Disconnect code is written once against
// these interfaces, and each provider registers a Transport for its address
// scheme.
package cm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"

	"github.com/goverbs/goverbs/verbs"
)

// Params are the connection parameters of rdma_conn_param that a transport carries.
type Params struct {
	PrivateData []byte
	// IRD (responder_resources): RDMA reads/atomics this side accepts outstanding.
	IRD int
	// ORD (initiator_depth): RDMA reads/atomics this side issues outstanding.
	ORD int
	// RNRRetry is the QP's rnr_retry (rnr_retry_count): how often a SEND
	// that finds no receive is retried before it fails; 7 is for ever.
	// Transports with RNR (shm) apply it; iWARP has none.
	RNRRetry uint8
	// RetryCount is the QP's retry_cnt on transports that retransmit
	// (RoCE): how often a request without an ACK is sent again before it
	// fails with RETRY_EXC_ERR; 0 means 7.
	RetryCount uint8
	// Extensions offers a provider's extensions beyond what the standard
	// peers speak (iwarp: RFC 7306 immediate data and atomics between
	// goverbs peers). Dial only; a responder answers an offer by itself.
	Extensions bool
	// Config is the transport's own configuration (*iwarp.Config,
	// *shm.Config), or nil for its defaults; one of another transport is
	// ignored. Dial only: a listener's comes with Listen.
	Config any
}

// Transport is a provider's connection manager.
type Transport interface {
	// Name is the address scheme ("tcp", "unix").
	Name() string
	// DeviceName is the verbs device whose QPs the transport connects.
	DeviceName() string
	// Listen starts accepting connection requests at addr, configured by
	// cfg (see Params.Config).
	Listen(addr string, cfg any) (Listener, error)
	// Dial connects qp (on the transport's device, in RESET or INIT) to the
	// listener at addr. On success the QP is in RTS. A rejection returns a
	// *RejectedError; no answer in time returns an error wrapping ErrUnreachable.
	Dial(ctx context.Context, addr string, qp *verbs.QP, p Params) (Conn, error)
	// MaxPrivateData is the largest private data the transport carries.
	MaxPrivateData() int
}

// Router is a Transport whose device depends on the address: RoCE's is
// the device of the local address a peer is reached from.
type Router interface {
	// DeviceFor returns the device a listener at addr (listen) or a
	// connection to addr uses.
	DeviceFor(addr string, listen bool) (string, error)
}

// UDResolver is a Transport that also serves rdma_cm's UDP port space:
// a UD QP learns the number and Q_Key of the UD QP that serves an address
// (IB's service ID resolution, SIDR), with private data both ways.
type UDResolver interface {
	// ListenUD answers resolution requests for addr: each is a Request
	// whose Accept gives the requester the number and Q_Key of its (UD)
	// QP, and whose Conn, which nothing ends, has the requester's address.
	ListenUD(addr string, cfg any) (Listener, error)
	// ResolveUD asks the service at addr for its UD QP, on behalf of qp
	// (whose device the request leaves from). A refusal returns a
	// *RejectedError; no answer in time an error wrapping ErrUnreachable.
	ResolveUD(ctx context.Context, addr string, qp *verbs.QP, p Params) (UDPeer, error)
}

// UDPeer is a resolved UD destination.
type UDPeer struct {
	AH          verbs.AHAttr // the path to the peer (an address handle's attributes)
	QPN         uint32
	QKey        uint32
	PrivateData []byte
	Remote      net.Addr
}

// UDPQKey is the Q_Key of rdma_cm's UDP port space (RDMA_UDP_QKEY).
const UDPQKey = 0x01234567

// Listener yields connection requests.
type Listener interface {
	// Next waits for the next valid connection request.
	Next(ctx context.Context) (Request, error)
	Addr() net.Addr
	Close() error
}

// Request is a connection request not yet answered.
type Request interface {
	PrivateData() []byte
	// IRD and ORD are the peer's values (its responder resources and initiator depth).
	IRD() int
	ORD() int
	LocalAddr() net.Addr
	RemoteAddr() net.Addr
	// Accept connects qp to the requester; the QP is in RTS on success.
	Accept(qp *verbs.QP, p Params) (Conn, error)
	// Reject refuses the request, sending private data to the requester.
	Reject(privateData []byte) error
}

// Conn is an established connection.
type Conn interface {
	// PrivateData is what the peer sent with its reply (for the active side)
	// or request (for the passive side).
	PrivateData() []byte
	// IRD and ORD are the negotiated local values.
	IRD() int
	ORD() int
	LocalAddr() net.Addr
	RemoteAddr() net.Addr
	// Done is closed when the connection ends, for any reason; Err then says why.
	Done() <-chan struct{}
	Err() error
	// Disconnect ends the connection: the QP goes to ERR and its outstanding
	// work is flushed, on both sides.
	Disconnect() error
}

// Errors of the connection setup.
var (
	ErrUnreachable = errors.New("cm: peer unreachable")
	ErrRejected    = errors.New("cm: connection rejected")
	ErrClosed      = errors.New("cm: closed")

	// A connection that ended in order has an Err that wraps one of these,
	// whatever its provider: the layers above test these, never a
	// provider's own errors.
	ErrPeerDisconnect  = errors.New("disconnected by the peer")
	ErrLocalDisconnect = errors.New("disconnected locally")
)

// RejectedError is returned by Dial when the peer rejected the request.
type RejectedError struct {
	PrivateData []byte
	Reason      string
}

// Error describes the rejection.
func (e *RejectedError) Error() string {
	if e.Reason != "" {
		return fmt.Sprintf("cm: connection rejected: %s", e.Reason)
	}
	return "cm: connection rejected by the peer"
}

// Unwrap lets errors.Is(err, ErrRejected) hold.
func (e *RejectedError) Unwrap() error { return ErrRejected }

var registry struct {
	sync.Mutex
	ts map[string]Transport
}

// Register makes a transport available under its Name.
func Register(t Transport) {
	registry.Lock()
	defer registry.Unlock()
	if registry.ts == nil {
		registry.ts = map[string]Transport{}
	}
	registry.ts[t.Name()] = t
}

// Lookup returns the transport for a scheme.
func Lookup(scheme string) (Transport, bool) {
	registry.Lock()
	defer registry.Unlock()
	t, ok := registry.ts[scheme]
	return t, ok
}

var refuseHook atomic.Pointer[func() bool]

// SetRefuseHook sets the fault-injection hook that decides, for each
// connection request a listener takes, whether it is refused (rejected
// before the application sees it); nil removes it.
func SetRefuseHook(f func() bool) {
	if f == nil {
		refuseHook.Store(nil)
		return
	}
	refuseHook.Store(&f)
}

// Refused reports whether the hook refuses the next request.
func Refused() bool {
	f := refuseHook.Load()
	return f != nil && (*f)()
}
