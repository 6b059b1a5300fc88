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
	c.orqMu.Lock()
	norq := len(c.orq)
	var got, size uint32
	if norq > 0 {
		got, size = c.orq[0].got, c.orq[0].size
	}
	c.orqMu.Unlock()
	c.irqMu.Lock()
	nirq := len(c.irq)
	c.irqMu.Unlock()
	return fmt.Sprintf("%s orq %d (got %d/%d) irq %d txMSN %v rxMSN %v", ep.Debug(), norq, got, size, nirq, c.txMSN, c.rx.msn)
}
