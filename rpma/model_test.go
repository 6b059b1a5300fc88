package rpma_test

import (
	"errors"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/goverbs/goverbs/rpma"
	"github.com/goverbs/goverbs/verbs"
)

// Every sentinel against what errors.Is must see in it: librpma's code
// and, where one has the same meaning, verbs' sentinel and the errno.
func TestSentinelsTable(t *testing.T) {
	for _, c := range []struct {
		err       *rpma.Error
		is, isNot []error
	}{
		{rpma.ErrInval, []error{verbs.ErrInvalid, syscall.EINVAL}, []error{syscall.ENOMEM, rpma.ErrProvider}},
		{rpma.ErrNoSupp, []error{verbs.ErrNotSupported, syscall.EOPNOTSUPP, errors.ErrUnsupported}, []error{verbs.ErrInvalid}},
		{rpma.ErrNoMem, []error{syscall.ENOMEM}, []error{syscall.EINVAL}},
		{rpma.ErrNoCompletion, []error{verbs.ErrNoCompletion}, []error{rpma.ErrNoEvent}},
		{rpma.ErrAgain, []error{syscall.EAGAIN}, []error{syscall.EINVAL}},
		{rpma.ErrProvider, nil, []error{verbs.ErrInvalid, rpma.ErrInval}},
		{rpma.ErrUnknown, nil, []error{rpma.ErrProvider}},
		{rpma.ErrNoEvent, nil, []error{rpma.ErrNoCompletion}},
		{rpma.ErrSharedChannel, nil, []error{rpma.ErrNotSharedChannel}},
		{rpma.ErrNotSharedChannel, nil, []error{rpma.ErrSharedChannel}},
	} {
		if !errors.Is(c.err, c.err) || rpma.Code(c.err) != c.err.Code() {
			t.Errorf("%s does not match itself", c.err.Name())
		}
		for _, target := range c.is {
			if !errors.Is(c.err, target) {
				t.Errorf("errors.Is(%s, %v) is false", c.err.Name(), target)
			}
		}
		for _, target := range c.isNot {
			if errors.Is(c.err, target) {
				t.Errorf("errors.Is(%s, %v) is true", c.err.Name(), target)
			}
		}
	}
}

// RegMR(nil) is an invalid argument in every model (rpma's, verbs',
// errno's); a provider's error keeps its cause and one prefix; releasing
// twice is nil.
func TestCallErrors(t *testing.T) {
	ctx, err := rpma.DeviceContext("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	peer, err := rpma.NewPeer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Delete()
	if _, err := peer.RegMR(nil, rpma.UsageReadSrc); !errors.Is(err, rpma.ErrInval) || !errors.Is(err, verbs.ErrInvalid) || !errors.Is(err, syscall.EINVAL) {
		t.Errorf("RegMR(nil): %v, want ErrInval, verbs.ErrInvalid, EINVAL", err)
	}
	mr, err := peer.RegMR(make([]byte, 64), rpma.UsageReadSrc)
	if err != nil {
		t.Fatal(err)
	}
	if err := mr.Dereg(); err != nil {
		t.Fatal(err)
	}
	if err := mr.Dereg(); err != nil {
		t.Errorf("second Dereg: %v, want nil", err)
	}
	m, err := rpma.MapFile(filepath.Join(t.TempDir(), "f"), 4096)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Errorf("second Mapping Close: %v, want nil", err)
	}
	// A deleted peer's PD refuses to register: a provider error whose
	// cause stays reachable, and whose message names rpma once and verbs
	// not at all.
	gone, err := rpma.NewPeer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := gone.Delete(); err != nil {
		t.Fatal(err)
	}
	if err := gone.Delete(); err != nil {
		t.Errorf("second Peer Delete: %v, want nil", err)
	}
	_, err = gone.RegMR(make([]byte, 64), rpma.UsageReadSrc)
	if !errors.Is(err, rpma.ErrProvider) || !errors.Is(err, verbs.ErrClosed) {
		t.Fatalf("RegMR of a deleted peer: %v, want ErrProvider wrapping verbs.ErrClosed", err)
	}
	if n := strings.Count(err.Error(), "rpma:"); n != 1 || strings.Contains(err.Error(), "verbs:") {
		t.Errorf("message %q: want one prefix, rpma's", err)
	}
}

// The zero configurations are the defaults of librpma's constructors, and
// an explicit 0 stays 0.
func TestZeroConfigs(t *testing.T) {
	var zero rpma.ConnCfg
	def := rpma.NewConnCfg()
	if zero.Timeout() != rpma.DefaultTimeout || zero.CQSize() != rpma.DefaultQueueSize || zero.SQSize() != rpma.DefaultQueueSize ||
		zero.RQSize() != rpma.DefaultQueueSize || zero.RCQSize() != 0 || !zero.Extensions() || zero.CompChannel() || zero.SRQ() != nil {
		t.Errorf("zero ConnCfg: timeout %v cq %d sq %d rq %d rcq %d ext %v", zero.Timeout(), zero.CQSize(), zero.SQSize(), zero.RQSize(), zero.RCQSize(), zero.Extensions())
	}
	if *def != zero {
		t.Errorf("NewConnCfg %+v differs from the zero value", *def)
	}
	if err := zero.SetTimeout(0); err != nil || zero.Timeout() != 0 {
		t.Errorf("SetTimeout(0): %v, Timeout %v", err, zero.Timeout())
	}
	if err := zero.SetSQSize(0); err != nil || zero.SQSize() != 0 {
		t.Errorf("SetSQSize(0): %v, SQSize %d", err, zero.SQSize())
	}
	zero.SetExtensions(false)
	if zero.Extensions() {
		t.Error("SetExtensions(false) did not hold")
	}
	var srq rpma.SRQCfg
	if srq.RQSize() != rpma.DefaultSRQSize || srq.RCQSize() != rpma.DefaultSRQSize {
		t.Errorf("zero SRQCfg: rq %d rcq %d", srq.RQSize(), srq.RCQSize())
	}
	if err := srq.SetRCQSize(0); err != nil || srq.RCQSize() != 0 {
		t.Errorf("SetRCQSize(0): %v, RCQSize %d", err, srq.RCQSize())
	}
	var peer rpma.PeerCfg
	if peer.DirectWriteToPmem() {
		t.Error("zero PeerCfg writes directly to persistent memory")
	}
}
