package rdmacm

import (
	"errors"
	"fmt"
	"net"

	"github.com/goverbs/goverbs/internal/cm"
	"github.com/goverbs/goverbs/verbs"
)

// Errors of connection setup. Dial and Connect return a *RejectedError
// (errors.Is(err, ErrRejected)) when the peer rejects, and an error wrapping
// ErrUnreachable when it does not answer.
var (
	ErrRejected    = cm.ErrRejected
	ErrUnreachable = cm.ErrUnreachable
	// ErrClosed is what the methods of a closed identifier return. It
	// matches verbs.ErrClosed and net.ErrClosed too (errors.Is), so code
	// that tests either keeps working.
	ErrClosed error = closedError{}

	// An EventDisconnected's Err wraps ErrDisconnected when the peer ended
	// the connection and ErrLocalDisconnect when this side did (Disconnect,
	// Close); any other error means the connection was lost.
	ErrDisconnected    = cm.ErrPeerDisconnect
	ErrLocalDisconnect = cm.ErrLocalDisconnect
)

type closedError struct{}

func (closedError) Error() string { return "rdmacm: identifier closed" }

// Is matches the closed errors of verbs and net.
func (closedError) Is(target error) bool {
	return target == verbs.ErrClosed || target == net.ErrClosed
}

// RejectedError is the error of a connection that was refused: by the peer
// (rdma_reject), or by the system before any peer could answer (nobody
// listens at the address; the listener's permissions exclude this
// process), which librdmacm reports as a rejection too.
// errors.Is(err, ErrRejected) holds for every rejection, and errors.Is(err,
// syscall.ECONNREFUSED) (or EACCES, or ENOENT for a unix: path with no
// socket) when Err is that errno. EventRejected carries the same error and
// private data.
type RejectedError struct {
	// PrivateData is what the peer sent with its rejection (rdma_reject);
	// nil when the system refused.
	PrivateData []byte
	// Reason says why, when the transport knows more than "rejected by
	// the peer" (e.g. "connection refused").
	Reason string
	// Err is the cause when the system refused the connection: it wraps
	// syscall.ECONNREFUSED when nobody listens at the address (and
	// syscall.ENOENT too for a unix: path where there is no socket),
	// syscall.EACCES when the listener does not admit this process. It is
	// nil when the peer rejected by its own choice.
	Err error
}

// Error describes the rejection.
func (e *RejectedError) Error() string {
	switch {
	case e.Reason != "":
		return "rdmacm: connection rejected: " + e.Reason
	case e.Err != nil:
		return "rdmacm: connection rejected: " + e.Err.Error()
	}
	return "rdmacm: connection rejected by the peer"
}

// Unwrap lets errors.Is(err, ErrRejected) hold, and errors.Is with the
// cause (syscall.ECONNREFUSED, syscall.EACCES) when there is one.
func (e *RejectedError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrRejected, e.Err}
	}
	return []error{ErrRejected}
}

// AcceptError is GetRequest's report that the listener failed to accept a
// connection (out of descriptors: errors.Is(err, syscall.EMFILE); out of
// memory or buffers; a connection aborted before it was accepted). The
// listener goes on listening, and GetRequest may be called again. Like a
// net.Error, it says Temporary.
type AcceptError struct {
	// Err is the cause.
	Err error
	// Shed says that, out of descriptors, the waiting connection was
	// accepted and closed at once (its dialer was refused), so that its
	// dialer fails now rather than at its timeout.
	Shed bool
}

func (e *AcceptError) Error() string {
	if e.Shed {
		return fmt.Sprintf("rdmacm: accept: %v (a connection request was refused; still listening)", e.Err)
	}
	return fmt.Sprintf("rdmacm: accept: %v (still listening)", e.Err)
}

// Unwrap returns the cause.
func (e *AcceptError) Unwrap() error { return e.Err }

// Temporary reports true: the listener goes on (as net.Error's).
func (e *AcceptError) Temporary() bool { return true }

// Timeout reports false.
func (e *AcceptError) Timeout() bool { return false }

// public gives an error of the transports the types of this package: a
// rejection is a *RejectedError, a failed accept an *AcceptError, and a
// closed transport object ErrClosed. Other errors pass as they are.
func public(err error) error {
	if err == nil {
		return nil
	}
	var rej *cm.RejectedError
	if errors.As(err, &rej) {
		return &RejectedError{PrivateData: rej.PrivateData, Reason: rej.Reason, Err: rej.Err}
	}
	var ae *cm.AcceptError
	if errors.As(err, &ae) {
		return &AcceptError{Err: ae.Err, Shed: ae.Shed}
	}
	if errors.Is(err, cm.ErrClosed) {
		return ErrClosed
	}
	return err
}

// rdmacm's own forms of verbs' sentinels: a message with rdmacm's prefix,
// and errors.Is matches the verbs sentinel and its errno.
var (
	errInvalid      error = &verbsError{"rdmacm: invalid argument", verbs.ErrInvalid}
	errInvalidState error = &verbsError{"rdmacm: invalid state", verbs.ErrInvalidState}
	errNotSupported error = &verbsError{"rdmacm: operation not supported", verbs.ErrNotSupported}
	errBusy         error = &verbsError{"rdmacm: resource busy", verbs.ErrBusy}
)

type verbsError struct {
	msg string
	of  error
}

func (e *verbsError) Error() string { return e.msg }

// Is matches the verbs sentinel e stands for, and what that one matches.
func (e *verbsError) Is(target error) bool { return target == e.of || errors.Is(e.of, target) }
