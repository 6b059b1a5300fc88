package rdmacm_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/leakcheck"
	"github.com/goverbs/goverbs/rdmacm"
	"github.com/goverbs/goverbs/verbs"
)

// GetRecvComp takes a completion whatever the CQ's WaitSpin: one that
// comes during the spin (an hour) and one that comes after it (none, or
// a microsecond), and GetSendComp likewise.
func TestGetCompAcrossSpin(t *testing.T) { both(t, testGetCompAcrossSpin) }

func testGetCompAcrossSpin(t *testing.T, tr transport) {
	leakcheck.Check(t)
	c, s := pair(t, tr, nil, nil)
	ctx := timeout(t)
	buf := make([]byte, 64)
	cmr, _ := c.RegMsgs(buf[:32])
	smr, _ := s.RegMsgs(buf[32:])
	defer cmr.Dereg()
	defer smr.Dereg()
	for i, spin := range []time.Duration{time.Hour, 0, time.Microsecond, verbs.DefaultWaitSpin} {
		s.RecvCQ().SetWaitSpin(spin)
		c.SendCQ().SetWaitSpin(spin)
		if err := s.PostRecv(uint64(i), buf[32:64], smr); err != nil {
			t.Fatal(err)
		}
		// The send comes after the receiver began to wait, whether it
		// spins or sleeps by then.
		sent := make(chan error, 1)
		time.AfterFunc(20*time.Millisecond, func() {
			if err := c.PostSend(uint64(i), buf[:8], cmr, verbs.SendSignaled); err != nil {
				sent <- err
				return
			}
			wc, err := c.GetSendComp(ctx)
			if err == nil {
				err = wc.Err()
			}
			sent <- err
		})
		wc, err := s.GetRecvComp(ctx)
		if err != nil || wc.Err() != nil || wc.WRID != uint64(i) || wc.ByteLen != 8 {
			t.Fatalf("spin %v: GetRecvComp: %v, %+v", spin, err, wc)
		}
		if err := <-sent; err != nil {
			t.Fatalf("spin %v: send: %v", spin, err)
		}
	}
}

// A wait that spins ends when its context does, or when the identifier
// is closed, not when the spin does: an hour's spin returns at once.
func TestSpinEndsWithContextAndClose(t *testing.T) { both(t, testSpinEnds) }

func testSpinEnds(t *testing.T, tr transport) {
	leakcheck.Check(t)
	c, s := pair(t, tr, nil, nil)
	s.RecvCQ().SetWaitSpin(time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	if _, err := s.GetRecvComp(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("GetRecvComp with its context canceled: %v", err)
	}
	c.SendCQ().SetWaitSpin(time.Hour)
	time.AfterFunc(20*time.Millisecond, func() { c.Close() })
	if _, err := c.GetSendComp(timeout(t)); !errors.Is(err, rdmacm.ErrClosed) {
		t.Fatalf("GetSendComp with its identifier closed: %v", err)
	}
}
