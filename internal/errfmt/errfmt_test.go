package errfmt

import (
	"errors"
	"fmt"
	"testing"
)

func TestWrap(t *testing.T) {
	base := errors.New("verbs: invalid state")
	inner := fmt.Errorf("%w: QP in RESET", base)
	err := Wrap(inner, "loop: QP %#x to RTS", 5)
	if got, want := err.Error(), "loop: QP 0x5 to RTS: invalid state: QP in RESET"; got != want {
		t.Errorf("message %q, want %q", got, want)
	}
	if !errors.Is(err, base) {
		t.Error("errors.Is does not see the wrapped error")
	}
	if got := Wrap(errors.New("no prefix"), "x").Error(); got != "x: no prefix" {
		t.Errorf("message %q", got)
	}
}
