package iwarp

import (
	"fmt"

	"github.com/goverbs/goverbs/internal/engine"
	"github.com/goverbs/goverbs/verbs"
	"github.com/goverbs/goverbs/verbs/driver"
)

// DebugState describes a QP's connection state (for tests).
func DebugState(qp *verbs.QP) string {
	q := driver.QPOf(qp).(*engine.QP)
	c, ok := q.Wire().(*conn)
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
	return fmt.Sprintf("state %v orq %d (got %d/%d) irq %d txMSN %v rxMSN %v stalled %v", q.State(), norq, got, size, nirq, c.txMSN, c.rx.msn, q.Stalled())
}
