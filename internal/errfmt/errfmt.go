// Package errfmt wraps an error with context so that the message carries
// one package prefix, the outer one: "loop: QP 0x5 to RTS: invalid state:
// ...", not "loop: QP 0x5 to RTS: verbs: invalid state: ...". errors.Is
// and errors.As see the wrapped error as with fmt.Errorf's %w.
package errfmt

import (
	"fmt"
	"strings"
)

// prefixes are the package prefixes goverbs' messages start with.
var prefixes = []string{"verbs: ", "rdmacm: ", "iwarp: ", "shm: ", "roce: ", "loop: ", "rpma: ", "rsocket: ", "rdmacore: "}

// Trim returns msg without a leading package prefix.
func Trim(msg string) string {
	for _, p := range prefixes {
		if strings.HasPrefix(msg, p) {
			return msg[len(p):]
		}
	}
	return msg
}

// Wrap returns an error whose message is the formatted context, ": ", and
// err's message without its prefix, and which unwraps to err.
func Wrap(err error, format string, args ...any) error {
	return &wrapped{msg: fmt.Sprintf(format, args...) + ": " + Trim(err.Error()), err: err}
}

type wrapped struct {
	msg string
	err error
}

func (w *wrapped) Error() string { return w.msg }
func (w *wrapped) Unwrap() error { return w.err }
