package loop_test

import (
	"testing"

	"github.com/goverbs/goverbs/internal/conformance"
	"github.com/goverbs/goverbs/provider/loop"
	"github.com/goverbs/goverbs/verbs"
)

// fixture runs the provider-independent verbs suite on loop: the two ends of
// every connection are two contexts opened on loop0.
type fixture struct{}

func (fixture) Caps() conformance.Caps {
	return conformance.Caps{UD: true, RNR: true, Atomics: true, Flush: true, Immediate: true, Invalidate: true, MemoryWindows: true, Rereg: true, ResizeCQ: true, Modify: true}
}

func (fixture) Open(t testing.TB) (a, b *verbs.Context) {
	t.Helper()
	var err error
	if a, err = verbs.OpenDevice(loop.DeviceName); err != nil {
		t.Fatal(err)
	}
	if b, err = verbs.OpenDevice(loop.DeviceName); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

func (fixture) Connect(t testing.TB, a, b *verbs.QP, attr verbs.QPAttr) error {
	return loop.ConnectAttr(a, b, attr)
}

func (fixture) ActivateUD(t testing.TB, q *verbs.QP, qkey uint32) error {
	return loop.ActivateUD(q, qkey)
}

func (fixture) AHTo(t testing.TB, ctx *verbs.Context) verbs.AHAttr {
	t.Helper()
	av, err := loop.AHTo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return av
}

func TestConformance(t *testing.T) { conformance.Run(t, fixture{}) }

// atSendFixture runs the suite on a loop device with CompleteAtSend, as
// the suite runs on iWARP: remote errors asynchronous, and no RNR.
type atSendFixture struct{ fixture }

func (atSendFixture) Caps() conformance.Caps {
	return conformance.Caps{UD: true, Atomics: true, Flush: true, Immediate: true, Invalidate: true, MemoryWindows: true, Rereg: true, ResizeCQ: true, Modify: true, AsyncErrors: true}
}

func (atSendFixture) Open(t testing.TB) (a, b *verbs.Context) {
	t.Helper()
	var err error
	if a, err = verbs.OpenDevice(atSendDev); err != nil {
		t.Fatal(err)
	}
	if b, err = verbs.OpenDevice(atSendDev); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

func TestConformanceCompleteAtSend(t *testing.T) { conformance.Run(t, atSendFixture{}) }
