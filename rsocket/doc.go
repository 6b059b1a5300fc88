// Package rsocket gives net.Conn and net.Listener over RDMA: stream sockets
// on RC queue pairs, on every goverbs transport that connects through
// package rdmacm ("host:port" over iWARP, "unix:@name" or "unix:/path" over
// shared memory, "roce://host:port" over RoCEv2), and in one process over
// the loop provider (Pipe). Dial has the signature of a context dialer and
// Listener is a net.Listener, so that HTTP, gRPC (grpc.WithContextDialer
// and Server.Serve, see examples/grpc) and the rest of the net.Conn world
// run over it unchanged:
//
//	ln, _ := rsocket.Listen("unix:@my-service")
//	go http.Serve(ln, handler)
//	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
//		return rsocket.Dial(ctx, "unix:@my-service")
//	}}
//
// # Protocol
//
// The wire is that of librdmacm's rsocket (rdma-core's rsocket.c, stream
// sockets), so a goverbs Conn talks to C programs that use rsocket calls
// (rstream, and programs preloaded with librspreload) over iWARP; see
// interop/rsocket.sh. Each side registers a receive buffer and offers it
// to the peer in two halves; the peer RDMA-WRITEs data into the half it
// was offered and announces each write with a 32-bit message (its length),
// as the immediate value of an RDMA WRITE WITH IMMEDIATE or, over iWARP
// (no immediate data towards standard peers), as a 4-byte SEND after a
// plain WRITE. The receiver gives buffer space back (an RDMA WRITE of the
// freed half into the sender's target SGL) and credits (how many messages
// the sender may have unread) as it reads. Control messages carry
// shutdown (CloseWrite) and disconnect (Close).
//
// What matches rsocket exactly: the connection data in the connect request
// and accept (struct rs_conn_data: version 1, flags, credits, the target SGL
// and the first half of the data buffer, in network order), the message
// formats (RS_OP_DATA, RS_OP_SGL, RS_OP_CTRL with RS_CTRL_DISCONNECT,
// RS_CTRL_SHUTDOWN, RS_CTRL_KEEPALIVE), the two-entry target SGL written in
// the receiver's byte order (RS_CONN_FLAG_NET), the credit arithmetic
// (16-bit sequence numbers, credits granted as rseq_no + rq_size) and
// iWARP's WRITE-then-SEND framing with 4-byte receive buffers. Sizes are
// each side's own choice, as in rsocket (this side offers 256 credits and
// a 512 KiB receive buffer by default, and Options, through a Dialer or a
// ListenConfig, sets them as rsetsockopt does; a write is sent as
// messages of up to 128 KiB, over shared memory as large as the peer's
// target, half its buffer).
//
// What does not: riomap/riowrite (RS_OP_IOMAP_SGL, RS_OP_WRITE): a Conn
// offers an iomap of size 0 and never writes into a peer's, so riostream's
// direct placement is not supported (its plain rsend/rrecv traffic is).
// Datagram rsockets (SOCK_DGRAM) are not implemented. rsocket's keepalive
// messages are accepted and ignored; over iWARP a call blocked for 200 ms
// sends one (once per call, never from an idle connection), because Linux
// siw can hold a request its application posted until the next frame
// arrives, and rsocket peers ignore the message. Between goverbs
// peers Close answers the peer's disconnect with its own and waits (at most
// a second) for that answer before it tears the transport down, so that
// nothing in flight meets a closed socket; librdmacm does not answer, and
// against it Close takes that second.
//
// # Semantics
//
// Read returns what has arrived (at least one byte), io.EOF once the peer
// shut down writing and everything was read. Write returns when all of p
// is in the send staging buffer or on the wire. Deadlines are real: a
// blocked call returns os.ErrDeadlineExceeded (wrapped in a *net.OpError,
// Timeout() true) when its deadline passes, and a deadline set while a
// call is blocked applies to it. CloseWrite sends rsocket's shutdown; Close
// sends its disconnect, waits boundedly for what was written to leave,
// and ends blocked calls with net.ErrClosed. A peer whose transport ends
// without rsocket's disconnect (its process died, the network failed)
// gives syscall.ECONNRESET, after the data it sent before.
//
// Calls spin on the completion queue for a while before they block (a
// woken goroutine costs tens of microseconds): each direction of a
// connection has a verbs.AdaptiveSpin, with the rules of a CQ's blocking
// waits, up to Options.Spin (300 µs by default). It spins while recent
// waits were over within it, also those that slept (two ends that both
// sleep answer each other only once they spin: a gRPC call between two
// processes took 200 µs and more while they slept, 45-100 µs once they
// spun), and fades to nothing while waits last longer (a server idle
// between requests costs no CPU); in a process confined to one CPU, a
// spin that lost its CPU to the peer turns it off for a while
// (verbs.SpinWatch). The data
// path does not allocate; a call that blocks allocates one channel when
// something woke the one before.
package rsocket
