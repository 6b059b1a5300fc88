package verbs

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
)

// Sentinel errors. Every error a goverbs call returns wraps one of these (or a
// context error), so callers test with errors.Is. Each also matches the
// errno libibverbs returns for the same condition, so that code written
// against rdma-core's errnos keeps working: errors.Is(err, syscall.EINVAL)
// holds wherever errors.Is(err, ErrInvalid) does. ErrNotSupported matches
// errors.ErrUnsupported too.
var (
	// ErrInvalid reports an invalid argument (EINVAL).
	ErrInvalid error = &sentinel{"verbs: invalid argument", syscall.EINVAL, nil}
	// ErrNotSupported reports an operation the device or provider does not
	// implement (EOPNOTSUPP; errors.ErrUnsupported).
	ErrNotSupported error = &sentinel{"verbs: operation not supported", syscall.EOPNOTSUPP, errors.ErrUnsupported}
	// ErrQueueFull reports a work queue, CQ or table with no room left (ENOMEM).
	ErrQueueFull error = &sentinel{"verbs: queue full", syscall.ENOMEM, nil}
	// ErrNoMemory reports that a resource limit of the device was reached (ENOMEM).
	ErrNoMemory error = &sentinel{"verbs: out of resources", syscall.ENOMEM, nil}
	// ErrInvalidState reports a call not allowed in the object's current state,
	// such as posting a send to a QP that is not in RTS or SQD (EINVAL).
	ErrInvalidState error = &sentinel{"verbs: invalid state", syscall.EINVAL, nil}
	// ErrBusy reports an object still in use: a PD with live MRs or QPs, a CQ
	// with unacknowledged events, a buffer still registered (EBUSY).
	ErrBusy error = &sentinel{"verbs: resource busy", syscall.EBUSY, nil}
	// ErrClosed reports use of an object that was destroyed or closed
	// (libibverbs has no errno for it: the C call would use freed memory).
	// A second Destroy, Dealloc, Dereg, Free or Close is not a use: it
	// returns nil.
	ErrClosed error = &sentinel{"verbs: object closed", 0, nil}
	// ErrNoCompletion is returned by calls that return a single completion
	// and found none (EAGAIN).
	ErrNoCompletion error = &sentinel{"verbs: no completion available", syscall.EAGAIN, nil}
	// ErrNoDevice reports that no device matches (ENODEV).
	ErrNoDevice error = &sentinel{"verbs: no such device", syscall.ENODEV, nil}
	// ErrCQOverflow reports that a completion queue overflowed: completions
	// were produced while it was full. The CQ is in error; Poll returns the
	// completions it still holds and then this error (EOVERFLOW).
	ErrCQOverflow error = &sentinel{"verbs: completion queue overflow", syscall.EOVERFLOW, nil}
)

// sentinel is the type of the sentinel errors: the error itself, and, for
// errors.Is, the errno C would give and a Go sentinel of the same meaning.
type sentinel struct {
	msg   string
	errno syscall.Errno
	also  error
}

func (e *sentinel) Error() string { return e.msg }

// Is reports whether target is the errno or the Go sentinel e stands for.
func (e *sentinel) Is(target error) bool {
	return target != nil && ((e.errno != 0 && target == error(e.errno)) || target == e.also)
}

// innerMsg is err's message without a leading "verbs: ", for an error that
// wraps it in one that has the prefix already.
func innerMsg(err error) string {
	return strings.TrimPrefix(err.Error(), "verbs: ")
}

// PostError is returned by PostSend and PostRecv when a work request cannot be
// posted. Index is the position of the failing request in the list (the
// bad_wr of the C API): the requests before it were posted, it and the ones
// after it were not.
type PostError struct {
	Index int    // position of the first failing work request
	WRID  uint64 // its wr_id
	Err   error  // why: wraps ErrInvalid, ErrQueueFull, ErrInvalidState, ErrNotSupported, ...
}

func (e *PostError) Error() string {
	return fmt.Sprintf("verbs: work request %d (wr_id %#x) not posted: %s", e.Index, e.WRID, innerMsg(e.Err))
}

// Unwrap returns the cause.
func (e *PostError) Unwrap() error { return e.Err }

// BadWR returns the index of the first work request that was not posted when
// err is a *PostError, or -1.
func BadWR(err error) int {
	var pe *PostError
	if errors.As(err, &pe) {
		return pe.Index
	}
	return -1
}

// WCError is the error form of an unsuccessful work completion, for helpers
// that turn completions into Go errors.
type WCError struct {
	WRID   uint64
	Status WCStatus
	Opcode WCOpcode
}

func (e *WCError) Error() string {
	return fmt.Sprintf("verbs: work request %#x (%v) completed with %v", e.WRID, e.Opcode, e.Status)
}

// Err returns nil for a successful completion and a *WCError otherwise.
func (wc *WC) Err() error {
	if wc.Status == WCSuccess {
		return nil
	}
	return &WCError{WRID: wc.WRID, Status: wc.Status, Opcode: wc.Opcode}
}

// again makes a second Destroy, Dealloc or Close succeed: the object is
// gone either way, and Go code releases resources in deferred calls that
// may run after an explicit one (see the package doc, Errors).
func again(err error) error {
	if errors.Is(err, ErrClosed) {
		return nil
	}
	return err
}
