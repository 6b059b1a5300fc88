// Package atomicx has the one atomic operation sync/atomic lacks: a store
// with release ordering only.
//
// sync/atomic's Store is sequentially consistent; on amd64 it is an XCHG,
// a locked instruction that drains the store buffer and so waits for every
// earlier store to reach its cache line, which on a line another core was
// just reading costs a round trip between cores. A publication (a record's
// stamp, a completion slot's sequence number) needs only release order:
// whatever was written before it is visible to whoever observes it. On
// amd64 every plain store has release order (TSO), so Release64 is a MOV in
// assembly (a call the compiler cannot move memory accesses across).
// Elsewhere, and under the race detector (which must see the
// synchronisation), it is sync/atomic's Store.
//
// Release is not a fence: a load after it may be satisfied before the store
// is visible to other cores. Where a store must be seen before a following
// load of another word (a Dekker handshake: publish, then check whether the
// consumer sleeps), use sync/atomic.
package atomicx
