// Package defaults holds the values a zero field of a public options struct
// stands for, where two packages must agree on them (verbs creates the QP,
// rdmacm sizes its CQs for it).
package defaults

// The capacities of a QP whose QPCap field is 0.
const (
	QPWR     = 16 // max_send_wr, max_recv_wr
	QPSGE    = 1  // max_send_sge, max_recv_sge
	QPInline = 0  // max_inline_data (verbs; rdmacm's is RDMAInline)

	// RDMAInline is rdmacm's max_inline_data for a zero field: small
	// messages go inline as librdmacm's examples ask for.
	RDMAInline = 64
)

// Int is v, or def when v is 0, or 0 when v is negative: a zero field
// means the default, a negative one asks for none.
func Int(v, def int) int {
	switch {
	case v == 0:
		return def
	case v < 0:
		return 0
	}
	return v
}
