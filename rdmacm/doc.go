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
// Each identifier has its own event queue (NextEvent) unless it is
// attached to an EventChannel (NewEventChannel, ID.Migrate): one queue,
// and one descriptor for epoll, for many identifiers, as
// rdma_create_event_channel gives. Multicast (rdma_join_multicast) is not
// there yet.
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
//   - a bad address or argument wraps verbs.ErrInvalid (and so
//     syscall.EINVAL), at once: an address with no port, a port past
//     65535 or an unbalanced bracket are refused before anything is
//     sent; an unknown scheme wraps verbs.ErrNotSupported;
//   - a second listener at an address is syscall.EADDRINUSE, over every
//     transport;
//   - every method of a closed identifier (but the accessors, and Close,
//     which returns nil the second time as every release in goverbs
//     does) returns ErrClosed, and so do calls blocked in it
//     (GetRequest, NextEvent, GetRecvComp, GetSendComp) when it is
//     closed. ErrClosed matches verbs.ErrClosed and net.ErrClosed.
//
// The errors rdmacm makes carry its prefix, "rdmacm: ", once (a
// transport's own failure, such as a socket's, keeps the transport's
// words); *RejectedError and *AcceptError are this package's types, with
// the fields to look at.
//
// # Zero values
//
// A zero (or nil) ConnParam asks for the most RDMA reads and atomics each
// way, the transport's retries and receiver-not-ready retries for ever;
// a zero verbs.QPInitAttr given to CreateQP or Dial is an RC QP (UD in
// the UDP port space) with 16 work requests, one SGE each way and 64
// bytes of inline data, and its own CQs; a zero IDOptions is CreateID's
// identifier. A negative field asks for none.
package rdmacm

// The transports, one per address scheme.
import (
	_ "github.com/goverbs/goverbs/provider/iwarp"    // the "tcp" transport
	_ "github.com/goverbs/goverbs/provider/rdmacore" // the "rdma" transport, in a build with its tag
	_ "github.com/goverbs/goverbs/provider/roce"     // the "roce" transport
	_ "github.com/goverbs/goverbs/provider/shm"      // the "unix" transport
)
