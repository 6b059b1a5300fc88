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
// # Which flush a connection gets
//
// As in librpma, each side decides alone, from its own device: NewPeer
// reads the device's capabilities (verbs.DeviceAttr.DeviceCapFlagsEx,
// librpma's ibv_query_device_ex), and Peer.NativeFlush and
// Peer.NativeAtomicWrite say what it found. A region's descriptor carries
// its usage, so the flush types it accepts (RemoteMR.FlushType), never the
// method: the initiator picks that.
//
//   - A peer with native FLUSH (the pure-Go devices iwarp0, shm0, roce,
//     loop) registers a flush target with the FLUSH rights of its types and
//     remote read. Its connections send the native FLUSH when the
//     connection carries it (goverbs to goverbs: always over shm, over
//     iWARP and RoCE with the extensions on), and otherwise read after the
//     writes. FlushPersistent executed natively msyncs a MapFile region at
//     the target.
//   - A peer without native FLUSH (provider rdmacore's devices, on any
//     rdma-core; a loop device with loop.Config.NoFlush) does what librpma
//     does without it: it registers a flush target for remote read only,
//     and its connections flush by an 8-byte RDMA Read after the writes
//     and write atomically by a fenced RDMA Write, from the start.
//
// So goverbs towards librpma (Linux siw or rxe in either role, whether
// goverbs runs on the pure-Go providers or on rdmacore), and goverbs on
// rdmacore towards anyone, flush by read-after-write: visibility at the
// target, persistence only where the target's memory is persistent once
// written (see Conn.Flush). A librpma target on a device with native FLUSH
// (rdma-core 45 or later) registers its flush targets without remote read
// (unless their usage has UsageReadSrc too), so that only an initiator with
// native FLUSH can flush them, librpma's as goverbs'; goverbs targets keep
// remote read on every device, so every initiator can flush them.
// (goverbs' rdmacore and Debian's rdma-core 44 against librpma on siw0 and
// rxe0, both roles, are in interop/rdmacore-interop.sh.)
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
