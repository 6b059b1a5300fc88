// Package rdmacm is the librdmacm layer of goverbs: connection identifiers
// that listen, connect, accept and reject with private data, connection
// events, disconnect, and the helpers of rdma_verbs.h (PostRecv, PostSendv,
// GetRecvComp, ...), over any provider that makes connections.
//
// # Addresses
//
// An address names its transport by its scheme:
//
//	host:port, tcp://host:port  iWARP over TCP (provider iwarp; interoperates
//	                            with Linux siw and librdmacm programs)
//	roce://host:port            RoCEv2 over UDP (provider roce; the IB CM;
//	                            interoperates with Linux rxe and RoCE NICs)
//	unix:/path                  shared memory between processes of one host
//	unix:@name                  (provider shm), over a Unix socket at a path
//	                            or an abstract name
//	rdma://host:port            the kernel's rdma_cm (librdmacm) on a real
//	                            RDMA device (provider rdmacore: a build with
//	                            the tag rdmacore only)
//
// Real RDMA devices: in a program built with the tag rdmacore, an address
// without a scheme goes to the kernel's CM when an RDMA device serves it
// (the local address to listen on, or the route to the peer, is on an RDMA
// device's interface: rxe0, siw0, mlx5_0, ...), and to goverbs' iWARP over
// TCP otherwise. GOVERBS_CM=kernel sends every address without a scheme to
// the kernel's CM, GOVERBS_CM=goverbs none; "tcp://" always means goverbs'
// iWARP and "rdma://" the kernel's CM. Without the tag nothing changes.
//
// The address LocalAddr and RemoteAddr return prints in the same form (an
// *Addr carries the scheme of unix: and roce:// addresses), so that a
// listener's LocalAddr().String() is what a client dials.
//
// A RoCE connection leaves from the device of the local address the route
// chooses, or of the one given to CreateIDFrom or DialFrom; a listener is
// on its own address's device.
//
// Identifiers are in rdma_cm's TCP port space (reliable connections)
// unless NewID puts them in the UDP one (UD QPs that resolve their peer's
// QP; over roce://).
//
// Private data arrives as the transport carries it: exactly over iWARP and
// shared memory; over RoCE, padded with zeros to the size of the IB CM
// message's field (56 bytes in a connection request after rdma_cm's
// header, 196 in a reply, 148 in a rejection), because the IB CM puts no
// length on the wire; librdmacm delivers it the same way.
//
// The Go-style entry points are Dial (rdma_create_ep + rdma_connect) and
// Listen + GetRequest + Accept; CreateEP gives rdma_create_ep's model for
// code ported from C. Every blocking call takes a context.
//
// # Errors
//
// Errors are tested with errors.Is and errors.As, as those of package net:
//
//   - a connection the peer refuses is a *RejectedError (errors.Is
//     ErrRejected); so is one nobody listens for, as librdmacm reports
//     it, which also wraps syscall.ECONNREFUSED, and one the listener's
//     permissions refuse (a unix: listener's peer check), which wraps
//     syscall.EACCES;
//   - a peer that does not answer gives an error wrapping ErrUnreachable.
//     Connect (and Dial) wait for the answer until the context's
//     deadline; without a deadline they give up after 10 seconds
//     (errors.Is syscall.ETIMEDOUT). A deadline, shorter or longer than
//     that, is the one that counts. When the context ends, the error also
//     wraps its error (context.DeadlineExceeded, context.Canceled);
//   - a bad address or argument wraps verbs.ErrInvalid, an unknown scheme
//     verbs.ErrNotSupported;
//   - every method of a closed identifier (but Close, which may be called
//     again, and the accessors) returns ErrClosed, and so do calls blocked
//     in it (GetRequest, NextEvent, GetRecvComp, GetSendComp) when it is
//     closed.
package rdmacm

// The transports, one per address scheme.
import (
	_ "github.com/goverbs/goverbs/provider/iwarp"    // the "tcp" transport
	_ "github.com/goverbs/goverbs/provider/rdmacore" // the "rdma" transport, in a build with its tag
	_ "github.com/goverbs/goverbs/provider/roce"     // the "roce" transport
	_ "github.com/goverbs/goverbs/provider/shm"      // the "unix" transport
)
