package iwarp

import (
	"fmt"

	"github.com/goverbs/goverbs/internal/engine"
	"github.com/goverbs/goverbs/verbs"
)

// DebugState describes a QP's connection state (for tests).
func DebugState(qp *verbs.QP) string {
	ep, _ := engine.Lookup(qp, dev)
	c, ok := ep.Transport().(*conn)
	if !ok {
		return "no connection"
	}
	c.orq.mu.Lock()
	norq := c.orq.n
	var got, size uint32
	if e := c.orq.front(); e != nil {
		got, size = e.got, e.size
	}
	c.orq.mu.Unlock()
	nirq := c.irq.len()
	return fmt.Sprintf("%s orq %d (got %d/%d) irq %d txMSN %v rxMSN %v", ep.Debug(), norq, got, size, nirq, c.tx.msn, c.rx.msn)
}

// TxPartial reports whether a message on qp's stream is partly written:
// the socket has not taken all of it yet.
func TxPartial(qp *verbs.QP) bool {
	ep, _ := engine.Lookup(qp, dev)
	c, ok := ep.Transport().(*conn)
	return ok && c.tx.restOut.Load()
}

// Puts returns how many writes of messages the stream of qp has begun
// without waiting (one per writev of the engine's transmitter).
func Puts(qp *verbs.QP) uint64 {
	ep, _ := engine.Lookup(qp, dev)
	c, ok := ep.Transport().(*conn)
	if !ok {
		return 0
	}
	c.tx.mu.Lock()
	defer c.tx.mu.Unlock()
	return c.tx.puts
}

// SetKeptHook makes f run whenever a message is kept back for the next
// one (nil: no more).
func SetKeptHook(f func()) {
	if f == nil {
		testHookKept.Store(nil)
		return
	}
	testHookKept.Store(&f)
}

// Polled reports whether the application's polls drive qp's receive side
// (polled mode) now.
func Polled(qp *verbs.QP) bool {
	ep, _ := engine.Lookup(qp, dev)
	c, ok := ep.Transport().(*conn)
	return ok && c.rx.polled.Load()
}

// Reads returns how many reads of qp's socket brought bytes and how many
// found it empty.
func Reads(qp *verbs.QP) (full, empty uint64) {
	ep, _ := engine.Lookup(qp, dev)
	c, ok := ep.Transport().(*conn)
	if !ok {
		return 0, 0
	}
	c.rx.mu.Lock()
	defer c.rx.mu.Unlock()
	return c.rx.prog, c.rx.empty
}
