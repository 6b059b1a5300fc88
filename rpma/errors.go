package rpma

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/goverbs/goverbs/internal/errfmt"
	"github.com/goverbs/goverbs/verbs"
)

// Error is one of librpma's error codes (RPMA_E_*). The package's sentinel
// errors are *Error values; errors returned by its functions wrap one of
// them with details, so test them with errors.Is (or get the code with Code).
type Error struct {
	code int
	name string
	text string
}

// Error returns the text rpma_err_2str gives the code.
func (e *Error) Error() string { return e.text }

// Code returns the librpma error code (a negative number, e.g. -100004 for
// RPMA_E_INVAL).
func (e *Error) Code() int { return e.code }

// Name returns the C constant name, e.g. "RPMA_E_INVAL".
func (e *Error) Name() string { return e.name }

// Is lets errors.Is match an rpma error with the verbs sentinel and the
// errno of the same meaning, as verbs' own errors do: ErrInval is
// verbs.ErrInvalid and syscall.EINVAL, ErrNoSupp verbs.ErrNotSupported,
// syscall.EOPNOTSUPP and errors.ErrUnsupported, ErrNoMem syscall.ENOMEM,
// ErrNoCompletion verbs.ErrNoCompletion, ErrAgain syscall.EAGAIN.
func (e *Error) Is(target error) bool {
	for _, m := range e.matches() {
		if target == m {
			return true
		}
	}
	return false
}

func (e *Error) matches() []error {
	switch e {
	case ErrInval:
		return []error{verbs.ErrInvalid, syscall.EINVAL}
	case ErrNoSupp:
		return []error{verbs.ErrNotSupported, syscall.EOPNOTSUPP, errors.ErrUnsupported}
	case ErrNoMem:
		return []error{syscall.ENOMEM}
	case ErrNoCompletion:
		return []error{verbs.ErrNoCompletion}
	case ErrAgain:
		return []error{syscall.EAGAIN}
	}
	return nil
}

// The errors of librpma, with its codes.
var (
	ErrUnknown          = &Error{-100000, "RPMA_E_UNKNOWN", "Unknown error"}
	ErrNoSupp           = &Error{-100001, "RPMA_E_NOSUPP", "Not supported"}
	ErrProvider         = &Error{-100002, "RPMA_E_PROVIDER", "Provider error occurred"}
	ErrNoMem            = &Error{-100003, "RPMA_E_NOMEM", "Out of memory"}
	ErrInval            = &Error{-100004, "RPMA_E_INVAL", "Invalid argument"}
	ErrNoCompletion     = &Error{-100005, "RPMA_E_NO_COMPLETION", "No next completion available"}
	ErrNoEvent          = &Error{-100006, "RPMA_E_NO_EVENT", "No next event available"}
	ErrAgain            = &Error{-100007, "RPMA_E_AGAIN", "Temporary error, try again"}
	ErrSharedChannel    = &Error{-100008, "RPMA_E_SHARED_CHANNEL", "Completion channel is shared"}
	ErrNotSharedChannel = &Error{-100009, "RPMA_E_NOT_SHARED_CHNL", "Completion channel is not shared"}
)

var allErrors = []*Error{ErrUnknown, ErrNoSupp, ErrProvider, ErrNoMem, ErrInval, ErrNoCompletion,
	ErrNoEvent, ErrAgain, ErrSharedChannel, ErrNotSharedChannel}

// Code returns the librpma error code of err: 0 for nil, the code of the
// *Error it wraps, or RPMA_E_UNKNOWN's for any other error.
func Code(err error) int {
	if err == nil {
		return 0
	}
	var e *Error
	if errors.As(err, &e) {
		return e.code
	}
	return ErrUnknown.code
}

// ErrString returns the text of a librpma error code (rpma_err_2str).
func ErrString(code int) string {
	for _, e := range allErrors {
		if e.code == code {
			return e.text
		}
	}
	return ErrUnknown.text
}

// wrap returns an error that errors.Is matches with sentinel and that
// describes what happened.
func wrap(sentinel *Error, format string, args ...any) error {
	return fmt.Errorf("rpma: %w: %s", sentinel, fmt.Sprintf(format, args...))
}

// provider wraps an error of the verbs or connection layer as
// RPMA_E_PROVIDER, keeping it reachable with errors.Is / errors.As.
func provider(what string, err error) error {
	logAt(LogError, what, "err", err)
	return &providerError{what, err}
}

// providerError is RPMA_E_PROVIDER with its cause, whose message loses the
// prefix of the layer below: one prefix per message, rpma's.
type providerError struct {
	what string
	err  error
}

func (e *providerError) Error() string {
	return "rpma: " + ErrProvider.text + ": " + e.what + ": " + errfmt.Trim(e.err.Error())
}

func (e *providerError) Unwrap() []error { return []error{ErrProvider, e.err} }
