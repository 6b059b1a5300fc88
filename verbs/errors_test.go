package verbs_test

import (
	"errors"
	"strings"
	"syscall"
	"testing"

	"github.com/goverbs/goverbs/provider/loop"
	"github.com/goverbs/goverbs/verbs"
)

// Every sentinel the package documents matches itself and the errno
// libibverbs gives for its condition, and not the others' errnos.
func TestSentinelsTable(t *testing.T) {
	all := []syscall.Errno{syscall.EINVAL, syscall.EOPNOTSUPP, syscall.ENOMEM, syscall.EBUSY, syscall.EAGAIN, syscall.ENODEV, syscall.EOVERFLOW}
	for _, c := range []struct {
		name  string
		err   error
		errno syscall.Errno // 0: none
		also  error
	}{
		{"ErrInvalid", verbs.ErrInvalid, syscall.EINVAL, nil},
		{"ErrNotSupported", verbs.ErrNotSupported, syscall.EOPNOTSUPP, errors.ErrUnsupported},
		{"ErrQueueFull", verbs.ErrQueueFull, syscall.ENOMEM, nil},
		{"ErrNoMemory", verbs.ErrNoMemory, syscall.ENOMEM, nil},
		{"ErrInvalidState", verbs.ErrInvalidState, syscall.EINVAL, nil},
		{"ErrBusy", verbs.ErrBusy, syscall.EBUSY, nil},
		{"ErrClosed", verbs.ErrClosed, 0, nil},
		{"ErrNoCompletion", verbs.ErrNoCompletion, syscall.EAGAIN, nil},
		{"ErrNoDevice", verbs.ErrNoDevice, syscall.ENODEV, nil},
		{"ErrCQOverflow", verbs.ErrCQOverflow, syscall.EOVERFLOW, nil},
	} {
		wrapped := &verbs.PostError{Index: 1, WRID: 7, Err: c.err}
		for _, err := range []error{c.err, wrapped} {
			if !errors.Is(err, c.err) {
				t.Errorf("%s: errors.Is(%v, itself) is false", c.name, err)
			}
			for _, e := range all {
				if got := errors.Is(err, e); got != (e == c.errno) {
					t.Errorf("%s: errors.Is(%v, %v) = %v", c.name, err, e, got)
				}
			}
			if c.also != nil && !errors.Is(err, c.also) {
				t.Errorf("%s: errors.Is(%v, %v) is false", c.name, err, c.also)
			}
		}
		if !strings.HasPrefix(c.err.Error(), "verbs: ") {
			t.Errorf("%s: message %q without its prefix", c.name, c.err)
		}
		if n := strings.Count(wrapped.Error(), "verbs:"); n != 1 {
			t.Errorf("%s in a PostError: %q has %d prefixes, want 1", c.name, wrapped, n)
		}
	}
}

// The errors of real calls carry their errno, and releasing anything twice
// is nil.
func TestCallErrorsAndSecondRelease(t *testing.T) {
	if _, err := verbs.OpenDevice("no-such-device"); !errors.Is(err, verbs.ErrNoDevice) || !errors.Is(err, syscall.ENODEV) {
		t.Errorf("OpenDevice of an unknown name: %v, want ErrNoDevice (ENODEV)", err)
	}
	ctx, err := verbs.OpenDevice(loop.DeviceName)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	pd, err := ctx.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pd.RegMR(nil, verbs.AccessLocalWrite); !errors.Is(err, verbs.ErrInvalid) || !errors.Is(err, syscall.EINVAL) {
		t.Errorf("RegMR(nil): %v, want ErrInvalid (EINVAL)", err)
	}
	ch, err := ctx.CreateCompChannel()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := ctx.CreateCQ(16, ch)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq})
	if err != nil {
		t.Fatal(err)
	}
	mr, err := pd.RegMR(make([]byte, 64), verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	// A RESET QP takes no send: ErrInvalidState, EINVAL as ibv_post_send.
	err = qp.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRSend, SGList: []verbs.SGE{mr.SGE(0, 8)}}})
	if !errors.Is(err, verbs.ErrInvalidState) || !errors.Is(err, syscall.EINVAL) || verbs.BadWR(err) != 0 {
		t.Errorf("PostSend on a RESET QP: %v, want ErrInvalidState (EINVAL) at index 0", err)
	}
	if err != nil && strings.Count(err.Error(), "verbs:") != 1 {
		t.Errorf("message %q: want one verbs prefix", err)
	}
	buf, err := verbs.AllocBuffer(4096)
	if err != nil {
		t.Fatal(err)
	}
	td, err := ctx.AllocTD()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what    string
		release func() error
	}{
		{"QP Destroy", qp.Destroy},
		{"MR Dereg", mr.Dereg},
		{"CQ Destroy", cq.Destroy},
		{"CompChannel Close", ch.Close},
		{"TD Dealloc", td.Dealloc},
		{"PD Dealloc", pd.Dealloc},
		{"Buffer Free", buf.Free},
		{"Context Close", ctx.Close},
	} {
		if err := c.release(); err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
		if err := c.release(); err != nil {
			t.Errorf("second %s: %v, want nil", c.what, err)
		}
	}
	if _, err := pd.RegMR(make([]byte, 64), verbs.AccessLocalWrite); !errors.Is(err, verbs.ErrClosed) {
		t.Errorf("RegMR on a deallocated PD: %v, want ErrClosed", err)
	}
	if _, err := ctx.AllocPD(); !errors.Is(err, verbs.ErrClosed) {
		t.Errorf("AllocPD on a closed context: %v, want ErrClosed", err)
	}
}

// Zero values: a QPInitAttr with nothing but its CQs is an RC QP that can
// post a one-SGE request at once.
func TestZeroQPInitAttr(t *testing.T) {
	ctx, err := verbs.OpenDevice(loop.DeviceName)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	pd, _ := ctx.AllocPD()
	cq, _ := ctx.CreateCQ(64, nil)
	a, err := pd.CreateQP(verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq})
	if err != nil {
		t.Fatalf("CreateQP of a zero QPInitAttr: %v", err)
	}
	b, err := pd.CreateQP(verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq})
	if err != nil {
		t.Fatal(err)
	}
	if a.Type() != verbs.QPTRC {
		t.Errorf("type %v, want RC", a.Type())
	}
	if err := loop.Connect(a, b); err != nil {
		t.Fatal(err)
	}
	mr, _ := pd.RegMR(make([]byte, 64), verbs.AccessLocalWrite)
	recv := make([]verbs.RecvWR, 16)
	for i := range recv {
		recv[i] = verbs.RecvWR{WRID: uint64(i), SGList: []verbs.SGE{mr.SGE(32, 32)}}
	}
	if err := b.PostRecv(recv); err != nil {
		t.Fatalf("16 receives on a zero-Cap QP: %v", err)
	}
	if err := a.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: []verbs.SGE{mr.SGE(0, 8)}}}); err != nil {
		t.Fatalf("a one-SGE send on a zero-Cap QP: %v", err)
	}
	wc := make([]verbs.WC, 2)
	if n, err := cq.Poll(wc); n != 2 || err != nil || wc[0].Status != verbs.WCSuccess || wc[1].Status != verbs.WCSuccess {
		t.Fatalf("Poll: %d %v %+v", n, err, wc[:n])
	}
}

// A zero SRQInitAttr is an SRQ of 16 receives of one SGE; a negative size
// is refused.
func TestZeroSRQInitAttr(t *testing.T) {
	ctx, err := verbs.OpenDevice(loop.DeviceName)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	pd, _ := ctx.AllocPD()
	srq, err := pd.CreateSRQ(verbs.SRQInitAttr{})
	if err != nil {
		t.Fatalf("CreateSRQ of a zero SRQInitAttr: %v", err)
	}
	defer srq.Destroy()
	a, err := srq.Query()
	if err != nil || a.MaxWR < 16 || a.MaxSGE < 1 {
		t.Errorf("zero SRQInitAttr: %+v, %v; want at least 16 WRs of 1 SGE", a, err)
	}
	if _, err := pd.CreateSRQ(verbs.SRQInitAttr{Attr: verbs.SRQAttr{MaxWR: -1}}); !errors.Is(err, verbs.ErrInvalid) {
		t.Errorf("a negative MaxWR: %v, want ErrInvalid", err)
	}
}
