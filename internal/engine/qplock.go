package engine

import (
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/goverbs/goverbs/internal/atomicx"
)

// qpLock is a QP's mutex. On a QP of a thread domain (verbs.TD: one
// goroutine at a time posts) it is also the handshake that lets the
// poster go without it: between enter and leave the poster excludes
// every holder of the lock as the lock would, at the cost of one locked
// instruction instead of the mutex's two (the mutex was a tenth of an
// 8-byte RDMA WRITE posted alone).
//
// The handshake is Dekker's: the poster publishes that it is inside, then
// checks that the lock is not held; a holder publishes that it holds the
// lock, then waits until no poster is inside. Both publications are
// sequentially consistent (an XCHG on amd64), so one of the two sees the
// other: the poster backs off and takes the lock, or the holder waits for
// the poster's short section (no more than a PostSend's copy) to end. The
// section never takes the lock: with its poster inside, that would wait
// for ever. Other QPs pay one test of td per Lock and Unlock, and a
// call: with it, Lock and Unlock are too big to be inlined (some twelve
// instructions a lock's hold; a send_lat round trip takes a few holds).
type qpLock struct {
	mu sync.Mutex
	td bool // a thread domain's QP: set at creation
	// poster and held are the handshake's words (uint64s for
	// atomicx.Release64).
	poster uint64
	held   uint64
	// gate is the opcodes (as 1<<op) that postOne may take without
	// looking again at the QP's state, queue and send region (openGate):
	// every change of those is made under the lock, and Lock clears it.
	// It is read and written only by holders of the lock and the
	// poster's section.
	gate uint32
}

// Lock locks the QP; on a thread domain's QP it also waits for the
// poster's section to end.
func (l *qpLock) Lock() {
	l.mu.Lock()
	if l.td {
		atomic.StoreUint64(&l.held, 1)
		for atomic.LoadUint64(&l.poster) != 0 {
			runtime.Gosched()
		}
	}
	l.gate = 0
}

// Unlock unlocks the QP. The release store lets a poster in; what was
// written under the lock is visible to it first.
func (l *qpLock) Unlock() {
	if l.td {
		atomicx.Release64(&l.held, 0)
	}
	l.mu.Unlock()
}

// enter begins the poster's section on a thread domain's QP: it reports
// whether the poster is inside, excluding the lock's holders; false when
// the lock is held (the poster then leaves and takes it). Small enough
// to be inlined.
func (l *qpLock) enter() bool {
	atomic.StoreUint64(&l.poster, 1)
	return atomic.LoadUint64(&l.held) == 0
}

// leave ends the poster's section: what it wrote is visible to the next
// holder of the lock first.
func (l *qpLock) leave() { atomicx.Release64(&l.poster, 0) }
