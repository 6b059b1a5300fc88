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
// Devices come from providers, which register themselves when imported:
// goverbs/provider/loop offers "loop0", an in-process device for tests.
// Providers implement the interfaces of package verbs/driver; applications
// never use them.
//
// Where the documentation of a call says nothing else, goverbs does what
// libibverbs does.
package verbs
