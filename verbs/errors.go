package verbs

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error a goverbs call returns wraps one of these (or a
// context error), so callers test with errors.Is. The errno a C program would
// see for the same condition is given for orientation.
var (
	// ErrInvalid reports an invalid argument (EINVAL).
	ErrInvalid = errors.New("verbs: invalid argument")
	// ErrNotSupported reports an operation the device or provider does not implement (EOPNOTSUPP).
	ErrNotSupported = errors.New("verbs: operation not supported")
	// ErrQueueFull reports a work queue, CQ or table with no room left (ENOMEM).
	ErrQueueFull = errors.New("verbs: queue full")
	// ErrNoMemory reports that a resource limit of the device was reached (ENOMEM).
	ErrNoMemory = errors.New("verbs: out of resources")
	// ErrInvalidState reports a call not allowed in the object's current state,
	// such as posting a send to a QP that is not in RTS or SQD (EINVAL).
	ErrInvalidState = errors.New("verbs: invalid state")
	// ErrBusy reports an object still in use: a PD with live MRs or QPs, a CQ
	// with unacknowledged events, a buffer still registered (EBUSY).
	ErrBusy = errors.New("verbs: resource busy")
	// ErrClosed reports use of an object that was destroyed or closed.
	ErrClosed = errors.New("verbs: object closed")
	// ErrNoCompletion is returned by calls that return a single completion and found none.
	ErrNoCompletion = errors.New("verbs: no completion available")
	// ErrNoDevice reports that no device matches (ENODEV).
	ErrNoDevice = errors.New("verbs: no such device")
	// ErrCQOverflow reports that a completion queue overflowed: completions
	// were produced while it was full. The CQ is in error; Poll returns the
	// completions it still holds and then this error.
	ErrCQOverflow = errors.New("verbs: completion queue overflow")
)

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
	return fmt.Sprintf("verbs: work request %d (wr_id %#x) not posted: %v", e.Index, e.WRID, e.Err)
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
