package verbs_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/goverbs/goverbs/verbs"
)

// A CQ's waits spin DefaultWaitSpin unless told otherwise; a negative
// spin is none.
func TestWaitSpinSetting(t *testing.T) {
	ctx, _, cq, _, _ := pair()
	defer ctx.Close()
	if got := cq.WaitSpin(); got != verbs.DefaultWaitSpin {
		t.Errorf("a new CQ spins %v, want %v", got, verbs.DefaultWaitSpin)
	}
	for _, c := range []struct{ set, want time.Duration }{{time.Millisecond, time.Millisecond}, {0, 0}, {-time.Second, 0}} {
		cq.SetWaitSpin(c.set)
		if got := cq.WaitSpin(); got != c.want {
			t.Errorf("SetWaitSpin(%v): WaitSpin %v, want %v", c.set, got, c.want)
		}
	}
}

// CQ.Wait returns for a completion that comes during its spin or after
// it, and when its context ends during an hour's spin.
func TestWaitAcrossSpin(t *testing.T) {
	ctx, pd, cq, a, b := pair()
	defer ctx.Close()
	mr, err := pd.RegMR(make([]byte, 64), verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	for i, spin := range []time.Duration{time.Hour, 0, time.Microsecond} {
		cq.SetWaitSpin(spin)
		if err := b.PostRecv([]verbs.RecvWR{{WRID: uint64(i), SGList: []verbs.SGE{mr.SGE(32, 32)}}}); err != nil {
			t.Fatal(err)
		}
		time.AfterFunc(20*time.Millisecond, func() {
			a.PostSend([]verbs.SendWR{{WRID: 100, Opcode: verbs.WRSend, SGList: []verbs.SGE{mr.SGE(0, 8)}}})
		})
		c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := cq.Wait(c)
		cancel()
		wc := make([]verbs.WC, 1)
		if n, _ := cq.Poll(wc); err != nil || n != 1 || wc[0].WRID != uint64(i) {
			t.Fatalf("spin %v: Wait: %v, then %d completions %+v", spin, err, n, wc)
		}
	}
	cq.SetWaitSpin(time.Hour)
	c, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	if err := cq.Wait(c); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait with its context canceled during the spin: %v", err)
	}
}
