//go:build rdmacore && linux && cgo

package rdmacore

import (
	"errors"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/goverbs/goverbs/verbs"
)

// errnoErr turns the errno of a libibverbs call into an error that wraps
// the goverbs sentinel for it and names the call and the errno.
func errnoErr(call string, e syscall.Errno) error {
	return fmt.Errorf("%w: %s: %v (%s)", sentinel(e), call, e, unix.ErrnoName(e))
}

func sentinel(e syscall.Errno) error {
	switch e {
	case unix.EINVAL:
		return verbs.ErrInvalid
	case unix.EOPNOTSUPP, unix.ENOSYS, unix.EPROTONOSUPPORT:
		return verbs.ErrNotSupported
	case unix.ENOMEM, unix.ENOSPC:
		return verbs.ErrNoMemory
	case unix.EBUSY:
		return verbs.ErrBusy
	case unix.ENODEV, unix.ENXIO:
		return verbs.ErrNoDevice
	case unix.EPERM, unix.EACCES:
		return verbs.ErrInvalid
	}
	return verbs.ErrInvalid
}

// errnoOf extracts the errno a cgo call returned as its second value, or
// EIO when the call failed without setting one.
func errnoOf(err error) syscall.Errno {
	var e syscall.Errno
	if errors.As(err, &e) && e != 0 {
		return e
	}
	return unix.EIO
}

// memlockErr explains an ENOMEM from ibv_reg_mr: registration pins pages,
// and the usual cause is RLIMIT_MEMLOCK, which a bare ENOMEM does not say.
func memlockErr(n int, e syscall.Errno) error {
	var rl unix.Rlimit
	if e == unix.ENOMEM || e == unix.EAGAIN {
		if unix.Getrlimit(unix.RLIMIT_MEMLOCK, &rl) == nil && rl.Cur != unix.RLIM_INFINITY {
			return fmt.Errorf("%w: ibv_reg_mr of %d bytes: %v: the locked-memory limit (RLIMIT_MEMLOCK, ulimit -l) is %d KiB; "+
				"raise it (ulimit -l unlimited, LimitMEMLOCK=infinity for a systemd service, "+
				"--ulimit memlock=-1 for a container) or register less memory", verbs.ErrNoMemory, n, e, rl.Cur/1024)
		}
	}
	return errnoErr(fmt.Sprintf("ibv_reg_mr of %d bytes", n), e)
}

type syscallErrno = syscall.Errno
