// Package rpma is the librpma layer of goverbs: remote persistent memory
// access in librpma's model, over goverbs' connections (package rdmacm) and
// verbs.
//
// A Peer (a device with a protection domain) registers memory regions for
// usages (UsageWriteDst, UsageFlushTypePersistent, ...). A region's 21-byte
// descriptor, and a PeerCfg's 1-byte descriptor, are byte-compatible with
// librpma's: a goverbs program and a librpma program exchange them, usually
// in the connection's private data. The server listens with Peer.Listen and
// takes requests with Ep.NextConnReq; the client makes one with NewConnReq;
// either side turns its ConnReq into a Conn with Connect. A Conn has events
// (NextEvent: ESTABLISHED, CLOSED, LOST, REJECTED, UNREACHABLE), a main CQ
// and optionally a receive CQ, and the data path: Read, Write,
// WriteWithImm, AtomicWrite, Flush, Send, SendWithImm and Recv, each with
// an op context (the completion's WRID) and CompletionOnError or
// CompletionAlways. Completions are taken with CQ.GetWC (verbs work
// completions) or CQ.GetCompletion (librpma's struct rpma_completion).
//
// # Persistence
//
// A region registered on a file mapping (MapFile) is persistent memory in
// the sense that matters here: a FlushPersistent executed by a goverbs
// target completes only after the range was written back to the file on
// the target host (msync). Between goverbs peers flush and atomic write are
// native operations (verbs FLUSH and ATOMIC_WRITE, carried on iWARP as a
// goverbs extension when both sides negotiated it); towards other peers
// they fall back to librpma's methods. Conn.Flush documents exactly what
// each type guarantees in each case.
//
// # Transports
//
// Addresses are librpma's (host and port: iWARP over TCP, device iwarp0),
// or "unix:/path" / "unix:@name" with any port: goverbs' shared-memory
// device shm0, for peers on one host, where reads and writes to regions in
// verbs.AllocBuffer memory are done by the initiator alone and flush is
// always native (a region on a MapFile mapping is written by the target,
// which msyncs it for FlushPersistent). Over shm a remote access error
// fails both QPs as on InfiniBand but does not end the connection: no LOST
// event until it is closed.
//
// # Interoperability with librpma
//
// goverbs' counterparts of librpma's examples (examples/rpma) talk to
// librpma's own examples on Linux siw (interop/rpma.sh). Towards siw, turn
// goverbs' extensions off on the active side (ConnCfg.SetExtensions(false)):
// siw reads the offer's mark (see package iwarp); flush and atomic write then
// use librpma's fallbacks, and immediate data is unavailable (siw has none).
// An active goverbs connection sends a zero-length RDMA Write as soon as it is
// made (the form of RFC 6581's Write RTR), because an MPA responder may only
// transmit after the initiator's first message: so a goverbs or siw server may
// act first. A goverbs server whose client is librpma on siw cannot act
// first (as the servers of librpma's examples 03 and 06 do): librpma's
// client sends nothing until it acts itself, and RFC 5044 forbids the
// responder to transmit before that (siw does not hold itself to the rule).
//
// # Differences from librpma
//
// Op contexts are uint64 values (librpma's void*, which it stores in wr_id).
// Blocking calls take a context.Context. Errors are Go errors wrapping the
// RPMA_E_* sentinels (ErrInval, ErrNoCompletion, ...): test them with
// errors.Is, or get the C code with Code. Logging goes through log/slog
// with librpma's two thresholds (SetLogThreshold).
package rpma
