package verbs_test

import (
	"errors"
	"testing"

	"github.com/goverbs/goverbs/provider/loop"
	"github.com/goverbs/goverbs/verbs"
)

// TestParentDomain: a parent domain stands for its PD (a region of the PD
// works with its QPs), is busy while its QPs live, holds its thread
// domain until freed, and refuses what ibv_alloc_parent_domain refuses.
func TestParentDomain(t *testing.T) {
	ctx, err := verbs.OpenDevice(loop.DeviceName)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	other, err := verbs.OpenDevice(loop.DeviceName)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	pd, _ := ctx.AllocPD()
	td, err := ctx.AllocTD()
	if err != nil {
		t.Fatal(err)
	}
	otherTD, _ := other.AllocTD()
	otherPD, _ := other.AllocPD()
	for name, attr := range map[string]verbs.ParentDomainAttr{
		"no PD":         {TD: td},
		"PD of another": {PD: otherPD, TD: td},
		"TD of another": {PD: pd, TD: otherTD},
		"freed TD":      {PD: pd, TD: func() *verbs.TD { d, _ := ctx.AllocTD(); d.Dealloc(); return d }()},
	} {
		if _, err := ctx.AllocParentDomain(attr); !errors.Is(err, verbs.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	parent, err := ctx.AllocParentDomain(verbs.ParentDomainAttr{PD: pd, TD: td})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ctx.AllocParentDomain(verbs.ParentDomainAttr{PD: parent}); !errors.Is(err, verbs.ErrInvalid) {
		t.Errorf("a parent domain's parent domain: %v, want ErrInvalid", err)
	}
	if parent.TD() != td || pd.TD() != nil {
		t.Error("TD() does not name the thread domain")
	}
	if err := td.Dealloc(); !errors.Is(err, verbs.ErrBusy) {
		t.Errorf("Dealloc of a TD a parent domain names: %v, want ErrBusy", err)
	}
	cq, _ := ctx.CreateCQ(16, nil)
	defer cq.Destroy()
	attr := verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTRC,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}
	a, err := parent.CreateQP(attr)
	if err != nil {
		t.Fatal(err)
	}
	if a.PD() != parent {
		t.Error("the QP's PD is not the parent domain")
	}
	b, _ := pd.CreateQP(attr)
	if err := loop.Connect(a, b); err != nil {
		t.Fatal(err)
	}
	// A region of the PD, and one of the parent domain, with its QP.
	src, _ := pd.RegMR([]byte("12345678"), verbs.AccessLocalWrite)
	dst, _ := parent.RegMR(make([]byte, 8), verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	if err := a.PostSend([]verbs.SendWR{{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: []verbs.SGE{src.SGE(0, 8)},
		RemoteAddr: dst.RemoteAddr(0), RKey: dst.RKey()}}); err != nil {
		t.Fatal(err)
	}
	var wc [1]verbs.WC
	for n, _ := cq.Poll(wc[:]); n == 0; n, _ = cq.Poll(wc[:]) {
	}
	if wc[0].Status != verbs.WCSuccess || string(dst.Bytes()) != "12345678" {
		t.Fatalf("WRITE: %v, %q", wc[0].Status, dst.Bytes())
	}
	if err := parent.Dealloc(); !errors.Is(err, verbs.ErrBusy) {
		t.Errorf("Dealloc of a parent domain with a QP: %v, want ErrBusy", err)
	}
	if err := a.Destroy(); err != nil {
		t.Fatal(err)
	}
	b.Destroy()
	src.Dereg()
	dst.Dereg()
	if err := parent.Dealloc(); err != nil {
		t.Fatalf("Dealloc of the parent domain: %v", err)
	}
	if _, err := parent.CreateQP(attr); !errors.Is(err, verbs.ErrClosed) {
		t.Errorf("CreateQP on a freed parent domain: %v, want ErrClosed", err)
	}
	if err := parent.Dealloc(); err != nil {
		t.Errorf("second Dealloc: %v, want nil", err)
	}
	if err := td.Dealloc(); err != nil {
		t.Errorf("Dealloc of the TD: %v", err)
	}
	if err := pd.Dealloc(); err != nil {
		t.Errorf("Dealloc of the PD: %v", err)
	}
}
