package verbs_test

import (
	"errors"
	"testing"

	"github.com/goverbs/goverbs/provider/loop"
	"github.com/goverbs/goverbs/verbs"
)

// TestSGEOf: a slice of a region's memory gives the element that names it;
// memory outside the region (after it, overlapping its end, elsewhere) is
// refused with ErrInvalid.
func TestSGEOf(t *testing.T) {
	ctx, err := verbs.OpenDevice(loop.DeviceName)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	pd, err := ctx.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	defer pd.Dealloc()
	mem := make([]byte, 8192)
	mr, err := pd.RegMR(mem[1024:5120], verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer mr.Dereg()
	b := mr.Bytes()
	if s, err := mr.SGEOf(b[100:164]); err != nil || s != mr.SGE(100, 64) {
		t.Errorf("SGEOf(b[100:164]) = %+v, %v, want %+v", s, err, mr.SGE(100, 64))
	}
	if s, err := mr.SGEOf(b); err != nil || s != mr.SGE(0, len(b)) {
		t.Errorf("SGEOf(whole region) = %+v, %v", s, err)
	}
	for name, buf := range map[string][]byte{"before": mem[1000:1100], "over the end": mem[5000:5200], "after": mem[6000:6100], "other": make([]byte, 8)} {
		if _, err := mr.SGEOf(buf); !errors.Is(err, verbs.ErrInvalid) {
			t.Errorf("%s: SGEOf = %v, want ErrInvalid", name, err)
		}
	}
}
