package cm

import (
	"context"
	"errors"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// connectErr is the error net's Dial returns for a connect(2) that failed
// with errno.
func connectErr(errno syscall.Errno) error {
	return &net.OpError{Op: "dial", Net: "unixpacket", Err: os.NewSyscallError("connect", errno)}
}

// A failed connect is a rejection when nobody listens (ECONNREFUSED; no
// socket at a path, ENOENT, counts as that and stays ENOENT too) or the listener's permissions
// refuse us (EACCES: a path socket this user may not open, which a test
// run as root cannot provoke), and errors.Is sees the errno.
func TestRefusedConnect(t *testing.T) {
	for _, c := range []struct {
		errno, want syscall.Errno
	}{{syscall.ECONNREFUSED, syscall.ECONNREFUSED}, {syscall.EACCES, syscall.EACCES}, {syscall.ENOENT, syscall.ECONNREFUSED}} {
		rej := RefusedConnect(connectErr(c.errno))
		var err error = rej
		if rej == nil || !errors.Is(err, ErrRejected) || !errors.Is(err, c.want) || !errors.Is(rej.Err, c.want) || !errors.Is(err, c.errno) || rej.PrivateData != nil {
			t.Errorf("%v: %#v, want a rejection wrapping %v", c.errno, rej, c.want)
		}
	}
	for _, errno := range []syscall.Errno{syscall.ENETUNREACH, syscall.ETIMEDOUT, syscall.EMFILE} {
		if rej := RefusedConnect(connectErr(errno)); rej != nil {
			t.Errorf("%v is a rejection: %v", errno, rej)
		}
	}
}

// A rejection by the peer wraps ErrRejected only.
func TestRejectedByThePeer(t *testing.T) {
	var err error = &RejectedError{PrivateData: []byte("no")}
	if !errors.Is(err, ErrRejected) || errors.Is(err, syscall.ECONNREFUSED) || err.Error() != "connection rejected by the peer" {
		t.Errorf("%v", err)
	}
}

// A setup that the caller's context ended wraps the context's error, and
// ErrUnreachable at a deadline; the transport's own limit wraps ETIMEDOUT.
func TestEndedAndTimedOut(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-ctx.Done()
	if err := Ended(ctx, "no answer"); !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrUnreachable) {
		t.Errorf("deadline: %v", err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	if err := Ended(ctx, "no answer"); !errors.Is(err, context.Canceled) || errors.Is(err, ErrUnreachable) {
		t.Errorf("canceled: %v", err)
	}
	if err := TimedOut("no answer", DefaultTimeout); !errors.Is(err, syscall.ETIMEDOUT) || !errors.Is(err, ErrUnreachable) || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("limit: %v", err)
	}
}
