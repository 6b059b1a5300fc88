//go:build !race

package rdmacm_test

import (
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/leakcheck"
	"github.com/goverbs/goverbs/rdmacm"
	"github.com/goverbs/goverbs/verbs"
)

// (Not under the race detector, whose sync.Pool drops what it is given
// back at random: CI runs it without.)

// The helpers of a message round allocate nothing: PostRecv, PostSend,
// and GetSendComp and GetRecvComp when their completion comes during the
// spin (here an hour long, so always).
func TestHelpersAllocateNothing(t *testing.T) {
	leakcheck.Check(t)
	c, s := pair(t, transports[1], nil, nil) // shm: its polled mode allocates nothing either
	ctx := timeout(t)
	buf := make([]byte, 64)
	cmr, _ := c.RegMsgs(buf[:32])
	smr, _ := s.RegMsgs(buf[32:])
	defer cmr.Dereg()
	defer smr.Dereg()
	for _, id := range []*rdmacm.ID{c, s} {
		id.SendCQ().SetWaitSpin(time.Hour)
		id.RecvCQ().SetWaitSpin(time.Hour)
	}
	var failed error
	round := func() {
		if err := s.PostRecv(1, buf[32:40], smr); err != nil && failed == nil {
			failed = err
		}
		if err := c.PostSend(2, buf[:8], cmr, verbs.SendSignaled); err != nil && failed == nil {
			failed = err
		}
		if _, err := c.GetSendComp(ctx); err != nil && failed == nil {
			failed = err
		}
		if _, err := s.GetRecvComp(ctx); err != nil && failed == nil {
			failed = err
		}
	}
	round() // the first round maps the rings' pages and fills the pool
	if n := testing.AllocsPerRun(200, round); n != 0 || failed != nil {
		t.Fatalf("%.1f allocations per round (%v)", n, failed)
	}
}
