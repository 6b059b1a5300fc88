package driver_test

import (
	"context"
	"errors"
	"testing"

	"github.com/goverbs/goverbs/verbs"
	"github.com/goverbs/goverbs/verbs/driver"
)

// fake is a provider with one device whose objects record the calls that
// reach them: if package verbs' copy of an interface differed from this
// package's, verbs would not recognise the provider (or one of its objects)
// and the calls would not arrive.
type fake struct{ posted int }

var errFake = errors.New("fake")

type fdev struct{ f *fake }
type fctx struct{ f *fake }
type fpd struct{ f *fake }
type fmr struct{}
type fch struct{}
type fcq struct{}
type fqp struct{ f *fake }
type fsrq struct{}
type fah struct{}

func (f *fake) Devices() []driver.Device { return []driver.Device{fdev{f}} }

func (fdev) Name() string                       { return "fake0" }
func (fdev) GUID() uint64                       { return 7 }
func (fdev) NodeType() verbs.NodeType           { return verbs.NodeCA }
func (fdev) TransportType() verbs.TransportType { return verbs.TransportIB }
func (d fdev) Open() (driver.Context, error)    { return fctx(d), nil }

func (fctx) QueryDevice() verbs.DeviceAttr { return verbs.DeviceAttr{MaxQP: 1} }
func (fctx) QueryPort(uint8) (verbs.PortAttr, error) {
	return verbs.PortAttr{}, nil
}
func (fctx) QueryGID(uint8, int) (verbs.GID, error) { return verbs.GID{}, nil }
func (c fctx) AllocPD(*verbs.PD) (driver.PD, error) { return fpd(c), nil }
func (fctx) CreateCompChannel(*verbs.CompChannel) (driver.CompChannel, error) {
	return fch{}, nil
}
func (fctx) CreateCQ(*verbs.CQ, int, driver.CompChannel) (driver.CQ, error) { return fcq{}, nil }
func (fctx) AsyncEvent(context.Context) (verbs.AsyncEvent, error) {
	return verbs.AsyncEvent{}, errFake
}
func (fctx) Close() error { return nil }

func (fpd) RegMR(*verbs.MR, []byte, uint64, verbs.AccessFlags) (driver.MR, error) {
	return fmr{}, nil
}
func (p fpd) CreateQP(*verbs.QP, *verbs.QPInitAttr) (driver.QP, error) { return fqp(p), nil }
func (fpd) CreateSRQ(*verbs.SRQ, *verbs.SRQInitAttr) (driver.SRQ, error) {
	return fsrq{}, nil
}
func (fpd) CreateAH(*verbs.AH, *verbs.AHAttr) (driver.AH, error) { return fah{}, nil }
func (fpd) Dealloc() error                                       { return nil }

func (fmr) LKey() uint32 { return 1 }
func (fmr) RKey() uint32 { return 2 }
func (fmr) Dereg() error { return nil }

func (fch) GetEvent(context.Context) (*verbs.CQ, error) { return nil, errFake }
func (fch) Fd() int                                     { return -1 }
func (fch) Close() error                                { return nil }

func (fcq) Poll([]verbs.WC) (int, error)    { return 0, nil }
func (fcq) ReqNotify(bool) error            { return nil }
func (fcq) Wait(context.Context) error      { return nil }
func (fcq) CQE() int                        { return 1 }
func (fcq) Destroy() error                  { return nil }
func (fqp) Num() uint32                     { return 9 }
func (q fqp) PostSend([]verbs.SendWR) error { q.f.posted++; return nil }
func (fqp) PostRecv([]verbs.RecvWR) error   { return nil }
func (fqp) Modify(*verbs.QPAttr, verbs.QPAttrMask) error {
	return nil
}
func (fqp) Query() (verbs.QPAttr, verbs.QPInitAttr, error) {
	return verbs.QPAttr{}, verbs.QPInitAttr{}, nil
}
func (fqp) Destroy() error                                  { return nil }
func (fsrq) PostRecv([]verbs.RecvWR) error                  { return nil }
func (fsrq) Modify(*verbs.SRQAttr, verbs.SRQAttrMask) error { return nil }
func (fsrq) Query() (verbs.SRQAttr, error)                  { return verbs.SRQAttr{}, nil }
func (fsrq) Destroy() error                                 { return nil }
func (fah) Destroy() error                                  { return nil }

// TestRegisteredProviderServesVerbs registers a provider through this
// package and drives it through package verbs.
func TestRegisteredProviderServesVerbs(t *testing.T) {
	f := &fake{}
	driver.Register("fake", f)
	ctx, err := verbs.OpenDevice("fake0")
	if err != nil {
		t.Fatal(err)
	}
	pd, err := ctx.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	ch, err := ctx.CreateCompChannel()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := ctx.CreateCQ(1, ch)
	if err != nil {
		t.Fatal(err)
	}
	srq, err := pd.CreateSRQ(verbs.SRQInitAttr{Attr: verbs.SRQAttr{MaxWR: 1, MaxSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTRC})
	if err != nil {
		t.Fatal(err)
	}
	mr, err := pd.RegMR(make([]byte, 8), verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	ah, err := pd.CreateAH(verbs.AHAttr{PortNum: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := qp.PostSend([]verbs.SendWR{{}}); err != nil || f.posted != 1 || qp.Num() != 9 || mr.RKey() != 2 {
		t.Fatalf("post: %v, posted %d, QP %d, rkey %d", err, f.posted, qp.Num(), mr.RKey())
	}
	if _, ok := driver.QPOf(qp).(fqp); !ok {
		t.Errorf("QPOf: %T", driver.QPOf(qp))
	}
	if _, ok := driver.CQOf(cq).(fcq); !ok {
		t.Errorf("CQOf: %T", driver.CQOf(cq))
	}
	if _, ok := driver.SRQOf(srq).(fsrq); !ok {
		t.Errorf("SRQOf: %T", driver.SRQOf(srq))
	}
	if _, ok := driver.AHOf(ah).(fah); !ok {
		t.Errorf("AHOf: %T", driver.AHOf(ah))
	}
	if _, ok := driver.MROf(mr).(fmr); !ok {
		t.Errorf("MROf: %T", driver.MROf(mr))
	}
	if driver.QPOf(nil) != nil || driver.CQOf(nil) != nil {
		t.Error("the provider object of nil is not nil")
	}
}
