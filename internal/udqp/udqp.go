// Package udqp holds the verbs sequence that readies a UD queue pair, which
// rdmacm (RDMA_PS_UDP), provider/loop's helper and the conformance fixtures
// share.
package udqp

import (
	"fmt"

	"github.com/goverbs/goverbs/verbs"
)

// Activate moves a UD QP from RESET to RTS with Q_Key qkey on port 1 (as
// librdmacm does for a QP of the UDP port space).
func Activate(q *verbs.QP, qkey uint32) error {
	steps := []struct {
		a verbs.QPAttr
		m verbs.QPAttrMask
	}{
		{verbs.QPAttr{QPState: verbs.QPSInit, PortNum: 1, QKey: qkey}, verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrQKey},
		{verbs.QPAttr{QPState: verbs.QPSRTR}, verbs.QPAttrState},
		{verbs.QPAttr{QPState: verbs.QPSRTS}, verbs.QPAttrState | verbs.QPAttrSQPSN},
	}
	for _, s := range steps {
		if err := q.Modify(&s.a, s.m); err != nil {
			return fmt.Errorf("UD QP %#x to %v: %w", q.Num(), s.a.QPState, err)
		}
	}
	return nil
}
