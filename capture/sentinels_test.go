package capture_test

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/goverbs/goverbs/capture"
)

// ErrActive is what a second Start returns while a recording runs; a
// second Stop is nil; the zero Options record everything.
func TestErrActiveAndSecondStop(t *testing.T) {
	dir := t.TempDir()
	r, err := capture.Start(filepath.Join(dir, "a.pcapng"), capture.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r2, err := capture.Start(filepath.Join(dir, "b.pcapng"), capture.Options{}); !errors.Is(err, capture.ErrActive) {
		if r2 != nil {
			r2.Stop()
		}
		t.Errorf("a second Start: %v, want ErrActive", err)
	}
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := r.Stop(); err != nil {
		t.Errorf("second Stop: %v, want nil", err)
	}
}
