//go:build rdmacore && linux && cgo

package rdmacore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goverbs/goverbs/verbs"
)

// fdWaiter waits for a libibverbs or librdmacm descriptor (a completion
// channel, the async-event descriptor, a CM event channel) through Go's
// netpoller, so that a waiting goroutine parks instead of holding an OS
// thread in read(2). The descriptor is made non-blocking, and a duplicate
// of it is what the netpoller watches: the original stays owned by the C
// library, which closes it when the channel is destroyed, and the
// duplicate is closed here first.
type fdWaiter struct {
	f      *os.File
	sem    chan struct{} // one waiter at a time, so read deadlines are not shared
	closed atomic.Bool
}

func newFdWaiter(fd int, name string) (*fdWaiter, error) {
	if err := unix.SetNonblock(fd, true); err != nil {
		return nil, fmt.Errorf("rdmacore: %s: set non-blocking: %w", name, err)
	}
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("rdmacore: %s: dup: %w", name, err)
	}
	// A non-blocking descriptor is registered with the netpoller by NewFile.
	return &fdWaiter{f: os.NewFile(uintptr(dup), name), sem: make(chan struct{}, 1)}, nil
}

// aLongTimeAgo is a deadline in the past: it wakes a parked reader.
var aLongTimeAgo = time.Unix(1, 0)

// wait calls try until it reports done or an error, parking on the
// descriptor's readability in between. It returns ctx's error when ctx is
// done first and verbs.ErrClosed after close.
func (w *fdWaiter) wait(ctx context.Context, try func() (done bool, err error)) error {
	select {
	case w.sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-w.sem }()
	if err := ctx.Err(); err != nil {
		return err
	}
	if w.closed.Load() {
		return errChanClosed
	}
	rc, err := w.f.SyscallConn()
	if err != nil {
		return fmt.Errorf("%w: %v", verbs.ErrClosed, err)
	}
	stop := context.AfterFunc(ctx, func() { w.f.SetReadDeadline(aLongTimeAgo) })
	defer func() {
		if !stop() {
			w.f.SetReadDeadline(time.Time{})
		}
	}()
	for {
		var res error
		err := rc.Read(func(uintptr) bool {
			done, err := try()
			if err != nil {
				res = err
				return true
			}
			return done
		})
		switch {
		case w.closed.Load():
			return errChanClosed
		case err == nil:
			return res
		case errors.Is(err, os.ErrDeadlineExceeded):
			if cerr := ctx.Err(); cerr != nil {
				return cerr
			}
			// A deadline left by an earlier waiter's context: clear it.
			w.f.SetReadDeadline(time.Time{})
		case errors.Is(err, os.ErrClosed):
			return fmt.Errorf("%w: channel closed", verbs.ErrClosed)
		default:
			return err
		}
	}
}

var errChanClosed = fmt.Errorf("%w: channel closed", verbs.ErrClosed)

func (w *fdWaiter) close() error {
	w.closed.Store(true)
	return w.f.Close()
}
