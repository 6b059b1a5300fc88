package shm_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/cm"
	"github.com/goverbs/goverbs/internal/conformance"
	"github.com/goverbs/goverbs/provider/shm"
	"github.com/goverbs/goverbs/verbs"
)

var addrSeq atomic.Uint64

// addr returns a fresh abstract socket name.
func addr() string {
	return fmt.Sprintf("@goverbs-shm-test-%d-%d", time.Now().UnixNano(), addrSeq.Add(1))
}

// connect connects two RC QPs: a dials, b accepts.
func connect(t testing.TB, a, b *verbs.QP, pa, pb shm.Params) (ca, cb *shm.Conn) {
	t.Helper()
	return connectThen(t, a, b, pa, pb, nil)
}

// connectThen is connect, running dialed (if not nil) once a's Dial has
// returned, before it waits for b's Accept to return.
func connectThen(t testing.TB, a, b *verbs.QP, pa, pb shm.Params, dialed func()) (ca, cb *shm.Conn) {
	t.Helper()
	ln, err := shm.Listen(addr(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type res struct {
		c   *shm.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		r, err := ln.Accept(ctx)
		if err != nil {
			ch <- res{nil, err}
			return
		}
		c, err := r.Accept(b, pb)
		ch <- res{c, err}
	}()
	ca, err = shm.Dial(ctx, ln.Addr().String(), a, pa, nil)
	if dialed != nil && err == nil {
		dialed()
	}
	r := <-ch
	if err != nil {
		t.Fatal(err)
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() {
		ca.Disconnect()
		r.c.Disconnect()
		<-ca.Done()
		<-r.c.Done()
	})
	return ca, r.c
}

func open(t testing.TB) *verbs.Context {
	ctx, err := verbs.OpenDevice(shm.DeviceName)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctx.Close() })
	return ctx
}

// fixture runs the provider-independent verbs suite over shm. With direct,
// the sides' buffers come from verbs.AllocBuffer, so RDMA operations map
// the peer's memory; without, they are Go memory and go through the peer.
type fixture struct{}

func (fixture) Caps() conformance.Caps {
	return conformance.Caps{RNR: true, Atomics: true, Immediate: true, Invalidate: true, MemoryWindows: true, Rereg: true, ResizeCQ: true, Flush: true}
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
	p := shm.Params{IRD: cm.Explicit(int(attr.MaxDestRdAtomic)), ORD: cm.Explicit(int(attr.MaxRdAtomic)), RNRRetry: cm.Explicit(int(attr.RNRRetry))}
	connect(t, a, b, p, p)
	return nil
}

func (fixture) ActivateUD(t testing.TB, q *verbs.QP, qkey uint32) error {
	t.Fatal("shm has no UD")
	return nil
}

func (fixture) AHTo(t testing.TB, ctx *verbs.Context) verbs.AHAttr {
	t.Fatal("shm has no UD")
	return verbs.AHAttr{}
}

type directFixture struct{ fixture }

func (directFixture) Buffer(t testing.TB, n int) []byte {
	b, err := verbs.AllocBuffer(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Free(); err != nil {
			t.Errorf("Free: %v", err)
		}
	})
	return b.Bytes()[:n]
}

func TestConformance(t *testing.T) {
	t.Run("heap", func(t *testing.T) { conformance.Run(t, fixture{}) })
	t.Run("memfd", func(t *testing.T) { conformance.Run(t, directFixture{}) })
}
