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
	"syscall"
	"time"

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
	// Source is the local address a Dial leaves from, for a Sourcer
	// ("": the route's).
	Source string
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

// Sourcer is a Transport whose connections can leave from a chosen
// local address (Params.Source) on its one device: iWARP over TCP.
type Sourcer interface {
	// CheckSource says whether src (an IP address with a port, 0 for
	// any) can be a connection's source.
	CheckSource(src string) error
}

// Claimer is a Transport that also serves addresses written without a
// scheme when it claims them: the kernel's rdma_cm (provider rdmacore, in
// a build with its tag) claims the addresses an RDMA device serves.
type Claimer interface {
	Claims(addr string) bool
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

// Explicit turns a resolved Params value (0 meaning none) into a
// provider's Params value, whose 0 means the default and a negative value
// none.
func Explicit(v int) int {
	if v == 0 {
		return -1
	}
	return v
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
	ErrUnreachable = errors.New("peer unreachable")
	ErrRejected    = errors.New("connection rejected")
	ErrClosed      = errors.New("closed")

	// A connection that ended in order has an Err that wraps one of these,
	// whatever its provider: the layers above test these, never a
	// provider's own errors.
	ErrPeerDisconnect  = errors.New("disconnected by the peer")
	ErrLocalDisconnect = errors.New("disconnected locally")
)

// RejectedError is returned by Dial when the connection was refused: by
// the peer (rdma_reject), or by the system before any peer could answer
// (nobody listens at the address; the listener's permissions exclude this
// process), which librdmacm reports as a rejection too.
type RejectedError struct {
	// PrivateData is what the peer sent with its rejection (nil when the
	// system refused the connection).
	PrivateData []byte
	// Reason says why, when the transport knows more than "rejected by
	// the peer" (e.g. "connection refused").
	Reason string
	// Err is the cause when the system refused the connection:
	// syscall.ECONNREFUSED when nobody listens at the address,
	// syscall.EACCES when the listener does not admit this process. It is
	// nil when the peer rejected by its own choice.
	Err error
}

// Error describes the rejection.
func (e *RejectedError) Error() string {
	switch {
	case e.Reason != "":
		return "connection rejected: " + e.Reason
	case e.Err != nil:
		return "connection rejected: " + e.Err.Error()
	}
	return "connection rejected by the peer"
}

// Unwrap lets errors.Is(err, ErrRejected) hold, and errors.Is with the
// cause (syscall.ECONNREFUSED, syscall.EACCES) when there is one.
func (e *RejectedError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrRejected, e.Err}
	}
	return []error{ErrRejected}
}

// Ended is the error of a connection setup cut short because ctx ended
// while what was doing: it wraps ctx.Err() (context.DeadlineExceeded or
// context.Canceled) and, at a deadline, ErrUnreachable too (the peer did
// not answer in the time it was given, librdmacm's
// RDMA_CM_EVENT_UNREACHABLE).
func Ended(ctx context.Context, what string) error {
	err := ctx.Err()
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: %s: %w", ErrUnreachable, what, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// RefusedConnect returns the rejection a failed connect(2) stands for, or nil:
// nobody listening (ECONNREFUSED, and ENOENT for a unix socket path) and a
// listener that does not admit this process (EACCES) are rejections, as
// librdmacm reports them, whose Err is the errno.
func RefusedConnect(err error) *RejectedError {
	for _, e := range []syscall.Errno{syscall.ECONNREFUSED, syscall.EACCES} {
		if errors.Is(err, e) {
			return &RejectedError{Reason: err.Error(), Err: e}
		}
	}
	if errors.Is(err, syscall.ENOENT) {
		// No socket at the path: nobody listens there. Err is both, so
		// that a test for either errno holds.
		return &RejectedError{Reason: err.Error(), Err: errors.Join(syscall.ECONNREFUSED, syscall.ENOENT)}
	}
	return nil
}

// SettleDeadline waits, when err is a socket's timeout at ctx's deadline,
// for ctx to report that deadline: the socket's timer may fire a moment
// before the context's, and the error must say which ended the wait.
func SettleDeadline(ctx context.Context, err error) {
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		return
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < 50*time.Millisecond {
		<-ctx.Done()
	}
}

// DialLimit bounds a transport's Dial: dctx has ctx's deadline, longer or
// shorter, or limit when ctx has none; ended turns the error of a step that
// was cut short into the Dial's error (Ended when ctx ended, TimedOut when
// limit passed) and returns nil for any other error. Call cancel when the
// Dial returns.
func DialLimit(ctx context.Context, limit time.Duration) (dctx context.Context, cancel context.CancelFunc, ended func(what string, err error) error) {
	dctx, cancel = ctx, func() {}
	if _, ok := ctx.Deadline(); !ok {
		dctx, cancel = context.WithTimeout(ctx, limit)
	}
	ended = func(what string, err error) error {
		SettleDeadline(dctx, err)
		switch {
		case ctx.Err() != nil:
			return Ended(ctx, what)
		case dctx.Err() != nil:
			return TimedOut(what, limit)
		}
		return nil
	}
	return dctx, cancel, ended
}

// DefaultTimeout is how long a transport's Dial waits for the peer's
// answer when its context has no deadline (a deadline, shorter or longer,
// replaces it).
const DefaultTimeout = 10 * time.Second

// TimedOut is the error of a connection setup that got no answer within
// the transport's own limit (the context had no deadline): it wraps
// ErrUnreachable and syscall.ETIMEDOUT, the status librdmacm gives
// RDMA_CM_EVENT_UNREACHABLE.
func TimedOut(what string, limit time.Duration) error {
	return fmt.Errorf("%w: %s within %v: %w", ErrUnreachable, what, limit, syscall.ETIMEDOUT)
}

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
