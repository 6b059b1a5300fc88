// Package verbs is the libibverbs object model in Go: the API an RDMA
// programmer knows, with its names and its rules.
//
// A Device, from Devices or OpenDevice, is opened into a Context. A Context
// allocates protection domains (PD), completion queues (CQ) and completion
// channels (CompChannel). A PD registers memory regions (MR) and creates
// queue pairs (QP), shared receive queues (SRQ) and address handles (AH).
//
// Memory is addressed as in verbs: an SGE names Length bytes at Addr inside
// the region whose local key is LKey, and a remote peer names memory with an
// address and a remote key. Addr values come from MR.Addr, MR.SGE and
// MR.RemoteAddr; providers resolve every address through their region table
// and check keys, access rights and bounds, so a wrong address fails a work
// request with a status instead of touching memory.
//
// Work requests are posted in lists (QP.PostSend, QP.PostRecv,
// SRQ.PostRecv); the first request that cannot be posted stops the list and
// is named by a *PostError (the bad_wr of the C API). Errors found while a
// request executes come back as work completions (WC) with the statuses of
// libibverbs (WCLocProtErr, WCRemAccessErr, WCWRFlushErr, ...). A QP that
// fails moves to ERR and every outstanding request completes with
// WCWRFlushErr: nothing is lost silently.
//
// Completions are polled with CQ.Poll, which never blocks or allocates, or
// waited for with CQ.ReqNotify and CompChannel.GetEvent (or epoll on
// CompChannel.Fd), or with CQ.Wait(ctx).
//
// # Blocking waits
//
// CQ.Wait (and package rdmacm's GetRecvComp and GetSendComp) first poll
// the CQ for its adaptive spin (SetWaitSpin: the spin is spent while
// recent waits were answered within it and fades to nothing while they
// were not, and, in a process confined to one CPU, while its spins lose
// the CPU to the peer they wait for), then sleep; CompChannel.GetEvent
// after ReqNotify, the C way, sleeps at once. On a CQ fed by one
// connected QP of a provider whose peer
// signals it through a socket (iwarp: the connection's TCP socket; roce:
// the device's UDP socket, which one waiter of the device at a time reads
// for all its QPs; shm: the connection's poke socket, which the peer
// writes to only while this side sleeps), the sleeping goroutine itself
// makes the connection's progress and parks in Go's netpoller on that
// socket, as a socket's
// reader does: the peer's write wakes it, with no goroutine of the
// provider's in between. Whatever else completes meanwhile (a flush, a
// request the provider's goroutine finished, Close) wakes it too. The
// same holds for GetEvent on a channel whose CQs (up to four) are all fed
// by one such QP, as rdmacm's are, unless CompChannel.Fd was asked for
// (epoll waits on it: the provider's goroutines make progress then).
// Otherwise (several QPs on the CQ, an SRQ's, several goroutines waiting:
// one of them parks in the socket, the others on the CQ; loop) the
// provider's goroutines make progress and wake the waiters. On a CQ whose
// GetEvent parks in such a socket, the first Poll after ReqNotify(false)
// (the idiom's guard against a completion that came before the arming)
// looks at the CQ alone and leaves the socket to the GetEvent, which reads
// it before it parks: a completion made before the arming is found, and
// what the socket held becomes a completion after it, with its event.
//
// Code with blocking waits of its own (package rsocket's Read and Write)
// spins by the same rules with an AdaptiveSpin, and a SpinWatch tells it,
// in a process confined to one CPU, a spin whose completion came only
// because the spin was preempted and the peer ran.
//
// # Completion semantics
//
// When a request completes, and where an error the target finds shows,
// depend on the transport, as they do on hardware (InfiniBand and RoCE
// against iWARP). Per provider, for a SEND or RDMA WRITE (with immediate or
// invalidate too):
//
//	provider  completes when                  an error the target finds (bad rkey, out of
//	                                          bounds, longer than the receive buffer)
//	loop      in PostSend, done at the target in its own completion (REM_ACCESS_ERR, ...)
//	loop (*)  in PostSend, once sent          after it: QP to ERR with EventQPFatal
//	shm       the target consumed it          in its own completion
//	iwarp     TCP took the bytes              after it: the peer's Terminate, QP to ERR
//	roce      the target acknowledged it      in its own completion (the target's NAK)
//
//	(*) a device added with loop.Config.CompleteAtSend, which behaves as iwarp
//
// In every case the QP then moves to ERR and the requests behind the
// failing one complete with WR_FLUSH_ERR; the target's QP moves to ERR
// too. "After it" means the failing request itself completed with
// success: code that must run over iWARP (siw, RNICs) learns of a remote
// error from the flush of what follows (or the connection's end), never
// from the failing request. RDMA READ and the atomics complete, on every
// provider, when their data is in the local memory, and a target's error
// is in their own completion (over iWARP when the peer's Terminate names
// the Read, otherwise as WR_FLUSH_ERR). A SEND that finds no receive
// posted waits and is retried as rnr_retry says (7: for ever; then
// RNR_RETRY_EXC_ERR) on loop, shm and roce; iWARP has no RNR, and it is a
// remote error as above.
//
// An unsignaled request (no SendSignaled, on a QP that does not signal
// all) that succeeds produces no completion at all: CQ.Wait, a completion
// channel and rdmacm's GetSendComp do not wait for it, they return with
// the next completion there is. One that fails, or is flushed, always
// completes. To know an unsignaled request is done (and its buffer free),
// post a signaled one after it: an RC QP's completions come in posting
// order.
//
// # Errors
//
// Every error wraps one of the sentinels (ErrInvalid, ErrNotSupported,
// ErrBusy, ...; a context's error in calls that take one), tested with
// errors.Is. Each sentinel also matches the errno libibverbs returns for
// the same condition (errors.Is(err, syscall.EINVAL) where errors.Is(err,
// ErrInvalid)), so code ported from C can keep testing errnos. Where there
// is more to say, the error is typed: *PostError names the work request
// that was not posted, *WCError a failed completion. A message carries the
// prefix "verbs: " once.
//
// Releasing twice is not an error: a second Destroy, Dealloc (of a PD, TD
// or MW), Dereg, Free or Close returns nil and does nothing, so that deferred cleanup may run
// after an explicit one (unlike os.File's Close). Any other call on a
// released object returns ErrClosed. Packages rdmacm, rpma and rsocket
// follow the same rule.
//
// # Memory windows, re-registration, resizing
//
// A memory window (PD.AllocMW, ibv_alloc_mw) grants a peer a range of a
// region registered with AccessMWBind, under a key of its own, without a
// registration: a type 1 window is bound with QP.BindMW (ibv_bind_mw), a
// type 2 window by a work request (SendWR.BindMW with WRBindMW) to the QP
// that posts it, and invalidated by WRLocalInv or a peer's
// WRSendWithInv. MR.Rereg (ibv_rereg_mr) changes a region's memory, PD or
// access under new keys, and CQ.Resize (ibv_resize_cq) a CQ's size, its
// completions kept. The pure-Go providers (loop, shm, iwarp, roce) have
// all three; provider rdmacore returns ErrNotSupported for them.
//
// Devices come from providers, which register themselves when imported:
// goverbs/provider/loop offers "loop0", an in-process device for tests.
// Providers implement the interfaces of package verbs/driver; applications
// never use them.
//
// Where the documentation of a call says nothing else, goverbs does what
// libibverbs does.
package verbs
