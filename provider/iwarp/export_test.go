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
