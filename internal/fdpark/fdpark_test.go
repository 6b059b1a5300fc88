package fdpark

import (
	"errors"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func pair(t *testing.T) (a, b *net.UnixConn, raw syscall.RawConn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	conns := [2]*net.UnixConn{}
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "socket")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c.(*net.UnixConn)
	}
	t.Cleanup(func() { conns[0].Close(); conns[1].Close() })
	raw, err = conns[0].SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	return conns[0], conns[1], raw
}

// A Wait parks until the socket is readable, and the byte is there for fn
// to read (the original's reader is not involved).
func TestWaitWakesOnInput(t *testing.T) {
	_, b, raw := pair(t)
	var p Parker
	defer p.Close()
	var got []byte
	buf := make([]byte, 8)
	time.AfterFunc(20*time.Millisecond, func() { b.Write([]byte{7}) })
	err := p.Wait(raw, func(fd uintptr) bool {
		n, _, err := unix.Recvfrom(int(fd), buf, unix.MSG_DONTWAIT)
		if err != nil {
			return false
		}
		got = buf[:n]
		return true
	})
	if err != nil || len(got) != 1 || got[0] != 7 {
		t.Fatalf("Wait: %v, read %v", err, got)
	}
}

// Interrupt ends a parked Wait, and one made before the Wait (even before
// the first) ends the next Wait's park at once; the Wait after that parks
// again.
func TestInterrupt(t *testing.T) {
	_, _, raw := pair(t)
	var p Parker
	defer p.Close()
	never := func(uintptr) bool { return false }
	p.Interrupt() // before there is a registration
	if err := p.Wait(raw, never); !errors.Is(err, ErrInterrupted) {
		t.Fatalf("first Wait after Interrupt: %v", err)
	}
	time.AfterFunc(20*time.Millisecond, p.Interrupt)
	if err := p.Wait(raw, never); !errors.Is(err, ErrInterrupted) {
		t.Fatalf("Wait after Interrupt: %v", err)
	}
	p.Interrupt()
	if err := p.Wait(raw, never); !errors.Is(err, ErrInterrupted) {
		t.Fatalf("Wait after an earlier Interrupt: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Wait(raw, never) }()
	select {
	case err := <-done:
		t.Fatalf("a Wait with no Interrupt returned %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	p.Interrupt()
	if err := <-done; !errors.Is(err, ErrInterrupted) {
		t.Fatalf("Wait: %v", err)
	}
}

// Close ends a Wait from another goroutine and from fn itself (which the
// os.File's Close would deadlock on), and later Waits fail.
func TestClose(t *testing.T) {
	_, b, raw := pair(t)
	var p Parker
	time.AfterFunc(20*time.Millisecond, p.Close)
	if err := p.Wait(raw, func(uintptr) bool { return false }); !errors.Is(err, ErrClosed) {
		t.Fatalf("Wait closed from elsewhere: %v", err)
	}
	if err := p.Wait(raw, func(uintptr) bool { return true }); !errors.Is(err, ErrClosed) {
		t.Fatalf("Wait after Close: %v", err)
	}
	var q Parker
	b.Write([]byte{1})
	if err := q.Wait(raw, func(uintptr) bool { q.Close(); return false }); !errors.Is(err, ErrClosed) {
		t.Fatalf("Wait closed from fn: %v", err)
	}
}

// The Parker's registration is ready on input and on the socket's end,
// never because the socket became writable: a Unix socket does at every
// message its peer reads, and a registration for output woke a thread
// of the netpoller for nothing each time.
func TestReadyOnInputOnly(t *testing.T) {
	a, b, raw := pair(t)
	var p Parker
	defer p.Close()
	if err := p.Wait(raw, func(uintptr) bool { return true }); err != nil {
		t.Fatal(err)
	}
	f := p.f.Load()
	ready := func() uint32 {
		var evs [4]unix.EpollEvent
		var got uint32
		rc, _ := f.SyscallConn()
		rc.Control(func(fd uintptr) {
			n, err := unix.EpollWait(int(fd), evs[:], 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, ev := range evs[:n] {
				got |= ev.Events
			}
		})
		return got
	}
	ready() // (whatever the registration found at first)
	buf := make([]byte, 8)
	for range 3 {
		if _, err := a.Write([]byte{1}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Read(buf); err != nil { // a is writable again
			t.Fatal(err)
		}
		if ev := ready(); ev != 0 {
			t.Fatalf("the peer's read made the registration ready: events %#x", ev)
		}
	}
	b.Write([]byte{2})
	if ev := ready(); ev&unix.EPOLLIN == 0 {
		t.Fatalf("input: events %#x, want EPOLLIN", ev)
	}
	b.Close()
	if ev := ready(); ev&(unix.EPOLLRDHUP|unix.EPOLLHUP) == 0 {
		t.Fatalf("the peer's close: events %#x, want its end", ev)
	}
}
