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

// Interrupt ends a parked Wait, and one made before the Wait ends the next
// Wait's park at once; the Wait after that parks again.
func TestInterrupt(t *testing.T) {
	_, _, raw := pair(t)
	var p Parker
	defer p.Close()
	never := func(uintptr) bool { return false }
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
