// Package engine is the software RDMA engine that goverbs' pure-Go
// providers share. It implements the provider interface of package
// verbs/driver completely: protection domains, the memory-region table with
// its key, access and bounds checks, completion queues and channels, queue
// pairs with their state machine, send and receive queues, shared receive
// queues, ordering, fencing, IRD/ORD accounting, flushing, asynchronous
// events, and the progress rules (polled and automatic mode). A provider
// adds only its wire.
//
// # What a transport implements
//
// A provider creates its device with NewDevice and implements, per
// connected QP, a Transport: Send carries a work request to the peer (or
// returns Pending and completes it later, or Stall to wait), RecvPosted
// says a receive buffer appeared, Modify may refuse an attribute change,
// Shutdown starts the teardown when the QP leaves the connected states.
// Optionally:
//
//   - Progressor: Progress does without blocking whatever the transport has
//     ready, called from the application's CQ.Poll; Polled(on) says whether
//     the application polls (polled mode: the transport's own goroutines
//     may step aside) or not (automatic mode: they must make progress).
//     When the application polls is the engine's decision, one rule for
//     every transport (see PollIdle).
//   - Blocker: a Progressor whose input arrives on a descriptor. A
//     goroutine that blocks for a completion (CQ.Wait, GetEvent) on a CQ
//     whose one transport endpoint it is lends the transport its
//     goroutine (Block): polled mode goes on, and the goroutine parks in
//     the netpoller on the descriptor (package fdpark: a duplicate, with
//     its own registration and deadline), so that the peer's write wakes
//     the waiter itself. Anything that completes meanwhile some other
//     way, the end of the wait's context, and Destroy call Interrupt;
//     the Waker's Busy and Idle calls tell the engine when the goroutine
//     may be parked, which is when it must be (see block.go). Several
//     endpoints on the CQ (or the channel), an SRQ's, a second waiter, a
//     channel with a descriptor: the ordinary sleep, and the transports'
//     own goroutines progress.
//   - DirectSender: SendDirect puts an idle QP's request out from PostSend
//     (the requests of a list one after the other, then DirectEnd);
//     OneSided carries out a WRITE or READ of one segment (a request
//     posted alone takes PostSend's shortest path, postOne).
//   - LaneSender (a DirectSender): lends PostSend its mapping of a peer's
//     region for the rest of a window, so that the WRITEs and READs of a
//     list are carried out by the engine in line (postRun), with no call
//     into the transport per request.
//
// # What the engine gives it
//
// The transport holds an Endpoint: Claim gives it for a QP that a
// connection manager connects (and Endpoint.Establish attaches the
// transport and moves the QP to RTS); Config.NewTransport receives it for
// QPs that Modify connects. Its Requester resolves outgoing data (Payload,
// Sink) and finishes requests (Complete, CompleteDeferred, Resume,
// Transmit). Its Responder places incoming messages with every check made
// (TakeRecv, RecvSegments, CompleteRecv, Deliver, Resolve, Atomic,
// AtomicWrite, Flush, Invalidate, Region). Fail and Fatal move the QP to
// ERR, flushing everything outstanding. CopyInto, CopyFrom, TotalLen,
// AtomicAt and AtomicStoreAt move bytes between segment lists.
//
// The loop provider (provider/loop) is the smallest transport: function
// calls into the peer QP's Responder.
package engine
