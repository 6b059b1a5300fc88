package faults_test

import (
	"errors"
	"testing"

	"github.com/goverbs/goverbs/faults"
)

// ErrActive is what a second Inject returns while a plan is active; Stop
// returns nil, the second time too, and then a plan may be injected again.
func TestErrActiveAndSecondStop(t *testing.T) {
	in, err := faults.Inject(faults.Plan{})
	if err != nil {
		t.Fatalf("Inject of a zero Plan: %v", err)
	}
	if in2, err := faults.Inject(faults.Plan{}); !errors.Is(err, faults.ErrActive) {
		if in2 != nil {
			in2.Stop()
		}
		t.Errorf("a second Inject: %v, want ErrActive", err)
	}
	if err := in.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := in.Stop(); err != nil {
		t.Errorf("second Stop: %v, want nil", err)
	}
	in, err = faults.Inject(faults.Plan{})
	if err != nil {
		t.Fatalf("Inject after Stop: %v", err)
	}
	in.Stop()
}
