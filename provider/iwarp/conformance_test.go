package iwarp_test

import (
	"testing"

	"github.com/goverbs/goverbs/internal/cm"
	"github.com/goverbs/goverbs/internal/conformance"
	"github.com/goverbs/goverbs/provider/iwarp"
	"github.com/goverbs/goverbs/verbs"
)

// fixture runs the provider-independent verbs suite over iWARP: the two ends
// of each connection are QPs of iwarp0 connected through loopback TCP.
type fixture struct{}

func (fixture) Caps() conformance.Caps {
	return conformance.Caps{Atomics: true, Flush: true, Immediate: true, Invalidate: true, MemoryWindows: true, Rereg: true, ResizeCQ: true, AsyncErrors: true}
}

func (fixture) Open(t testing.TB) (a, b *verbs.Context) { return open(t), open(t) }

func (fixture) Connect(t testing.TB, a, b *verbs.QP, attr verbs.QPAttr) error {
	t.Helper()
	for _, q := range []*verbs.QP{a, b} {
		if err := conformance.ToInit(q, attr.QPAccessFlags); err != nil {
			return err
		}
	}
	// The case's values are exact: a 0 is none (cm.Explicit), not the default.
	p := iwarp.Params{IRD: cm.Explicit(int(attr.MaxDestRdAtomic)), ORD: cm.Explicit(int(attr.MaxRdAtomic)), Extensions: true}
	connect(t, a, b, p, p)
	return nil
}

func (fixture) ActivateUD(t testing.TB, q *verbs.QP, qkey uint32) error {
	t.Fatal("iwarp has no UD")
	return nil
}

func (fixture) AHTo(t testing.TB, ctx *verbs.Context) verbs.AHAttr {
	t.Fatal("iwarp has no UD")
	return verbs.AHAttr{}
}

func TestConformance(t *testing.T) {
	_ = iwarp.DeviceName
	conformance.Run(t, fixture{})
}
