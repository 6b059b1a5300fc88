//go:build linux

package conformance

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/goverbs/goverbs/verbs"
)

func init() {
	register(Case{Name: "CompChannelFdIsReadable", Run: testCompChannelFdIsReadable})
}

// fdReadable polls fd for POLLIN, waiting at most timeoutMs milliseconds.
func fdReadable(t testing.TB, fd int, timeoutMs int) bool {
	t.Helper()
	for {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, timeoutMs)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			t.Fatalf("poll(2) on the channel's fd: %v", err)
		}
		if fds[0].Revents&(unix.POLLERR|unix.POLLNVAL) != 0 {
			t.Fatalf("poll(2) on the channel's fd: revents %#x", fds[0].Revents)
		}
		return n > 0 && fds[0].Revents&unix.POLLIN != 0
	}
}

// ibv_create_comp_channel(3), ibv_get_cq_event(3): the channel's fd can be
// watched with poll/epoll: it is readable exactly while events are pending
// and stops being readable when GetEvent has taken the last one.
func testCompChannelFdIsReadable(t *testing.T, f Fixture) {
	ca, cb := f.Open(t)
	ra, rb := newCQRig(t, ca, 64<<10), newCQRig(t, cb, 64<<10)
	ch := ra.channel()
	scq := ra.cq(64, ch)
	qa := ra.qp(scq, ra.cq(64, nil), verbs.QPCap{}, false)
	qb := rb.qp(rb.cq(64, nil), rb.cq(64, nil), verbs.QPCap{}, false)
	cqConnect(t, f, qa, qb)
	sa, sb := ra.side(qa), rb.side(qb)
	fd := ch.Fd()
	if fd < 0 {
		t.Fatalf("Fd() = %d", fd)
	}
	waitMs := int(WaitTimeout.Milliseconds())

	if fdReadable(t, fd, 0) {
		t.Fatal("channel fd readable before any event")
	}
	if err := scq.ReqNotify(false); err != nil {
		t.Fatalf("ReqNotify: %v", err)
	}
	sa.MustPostSend(t, cqWrite(sa, 1, sb, 0, 8))
	if !fdReadable(t, fd, waitMs) {
		t.Fatal("channel fd not readable with an event pending")
	}
	getEvent(t, ch, scq)
	ch.AckEvents(scq, 1)
	if fdReadable(t, fd, 0) {
		t.Fatal("channel fd still readable after GetEvent took the only event")
	}
	ExpectWC(t, Poll1(t, scq), 1, verbs.WCSuccess, verbs.WCRDMAWrite)

	// Two pending events: readable until both are taken.
	for i := range 2 {
		if err := scq.ReqNotify(false); err != nil {
			t.Fatalf("ReqNotify: %v", err)
		}
		sa.MustPostSend(t, cqWrite(sa, uint64(2+i), sb, 0, 8))
		ExpectWC(t, Poll1(t, scq), uint64(2+i), verbs.WCSuccess, verbs.WCRDMAWrite)
	}
	if !fdReadable(t, fd, waitMs) {
		t.Fatal("channel fd not readable with two events pending")
	}
	getEvent(t, ch, scq)
	// A poller may see a completion before its event reaches the channel
	// (as with a NIC, whose CQE is written before the interrupt), so the
	// second event may still be on its way: wait for it.
	if !fdReadable(t, fd, waitMs) {
		t.Fatal("channel fd not readable with one of two events still pending")
	}
	getEvent(t, ch, scq)
	ch.AckEvents(scq, 2)
	if fdReadable(t, fd, 0) {
		t.Fatal("channel fd still readable after GetEvent took every event")
	}
}
