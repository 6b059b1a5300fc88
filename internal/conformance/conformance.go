// Package conformance is goverbs' provider-independent verbs test suite: every
// rule of the seed man pages and every work-completion status a software
// provider can produce, each a named test, run against any provider through
// a Fixture. A provider's own test file calls Run.
package conformance

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/leakcheck"
	"github.com/goverbs/goverbs/internal/udqp"
	"github.com/goverbs/goverbs/verbs"
)

// Caps says which behaviours a provider has, so that a case that cannot
// apply (UD on an iWARP provider, RNR retry where there is no RNR) is not run
// against it. The list of cases a provider does not run is printed by Run.
type Caps struct {
	UD         bool // UD queue pairs
	RNR        bool // InfiniBand RNR NAK and retry (iWARP has none)
	Atomics    bool // compare-and-swap and fetch-and-add
	Immediate  bool // SEND_WITH_IMM and RDMA_WRITE_WITH_IMM
	Invalidate bool // SEND_WITH_INV
	Modify     bool // RC QPs are connected by Modify (INIT->RTR with DEST_QPN), not by a CM
	Flush      bool // FLUSH and ATOMIC_WRITE (IBTA 1.5; between goverbs peers on iWARP)
	// MemoryWindows: type 1 and 2 windows (ibv_alloc_mw, ibv_bind_mw,
	// BIND_MW and LOCAL_INV work requests); without it AllocMW must
	// return ErrNotSupported.
	MemoryWindows bool
	Rereg         bool // ibv_rereg_mr (else MR.Rereg returns ErrNotSupported)
	ResizeCQ      bool // ibv_resize_cq (else CQ.Resize returns ErrNotSupported)
	// AsyncErrors: remote errors are reported as on iWARP, asynchronously
	// (a Terminate message) after the failing request may have completed
	// locally, and an error on either end takes both QPs to ERR. Without it
	// a provider follows InfiniBand RC: the failing request completes with
	// the responder's NAK (REM_ACCESS_ERR, REM_INV_REQ_ERR, REM_OP_ERR), the
	// requests behind it flush, and a local error does not reach the peer.
	AsyncErrors bool
	// Deviations names cases whose rule the provider's device departs
	// from, each with what the device does instead and where that was
	// found (a real device behind provider rdmacore keeps its kernel
	// driver's behaviour). They are not run; Run lists them with the
	// reasons, so a deviation is never silent.
	Deviations map[string]string
}

// Fixture adapts a provider to the suite.
type Fixture interface {
	Caps() Caps
	// Open opens the two contexts the two ends of a connection live on (they
	// may be the same device). The fixture closes them when t ends.
	Open(t testing.TB) (a, b *verbs.Context)
	// Connect brings RC QPs a and b from RESET to RTS, connected to each
	// other, with the RC attributes in attr (QPAccessFlags, MaxRdAtomic,
	// MaxDestRdAtomic, MinRNRTimer, RNRRetry, RetryCnt, Timeout).
	Connect(t testing.TB, a, b *verbs.QP, attr verbs.QPAttr) error
	// ActivateUD brings a UD QP from RESET to RTS with the Q_Key.
	ActivateUD(t testing.TB, q *verbs.QP, qkey uint32) error
	// AHTo returns the address vector of ctx's port 1.
	AHTo(t testing.TB, ctx *verbs.Context) verbs.AHAttr
}

// Allocator is implemented by a fixture whose provider treats some memory
// specially (shm maps memory from verbs.AllocBuffer into the peer): the
// buffers of the suite's sides come from Buffer instead of the Go heap.
type Allocator interface {
	Buffer(t testing.TB, n int) []byte
}

// alloc is the running fixture's Allocator, if it has one.
var alloc Allocator

// Case is one named test of the suite.
type Case struct {
	Name string
	Need func(Caps) bool // nil: every provider
	Run  func(t *testing.T, f Fixture)
}

var cases []Case

func register(cs ...Case) { cases = append(cases, cs...) }

// Cases returns the suite's cases.
func Cases() []Case { return cases }

// Run runs every case that applies to the fixture's provider, each as a
// subtest with a goroutine-leak check.
func Run(t *testing.T, f Fixture) {
	caps := f.Caps()
	alloc, _ = f.(Allocator)
	defer func() { alloc = nil }()
	var skipped []string
	for _, c := range cases {
		if c.Need != nil && !c.Need(caps) {
			skipped = append(skipped, c.Name)
			continue
		}
		if why, ok := caps.Deviations[c.Name]; ok {
			t.Logf("not run, the device deviates: %s: %s", c.Name, why)
			continue
		}
		t.Run(c.Name, func(t *testing.T) {
			leakcheck.Check(t)
			c.Run(t, f)
		})
	}
	if len(skipped) > 0 {
		t.Logf("not applicable to this provider: %v", skipped)
	}
}

// DefaultRC is the RC configuration most cases connect with.
var DefaultRC = verbs.QPAttr{
	QPAccessFlags:   verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic,
	PathMTU:         verbs.MTU4096,
	MaxRdAtomic:     16,
	MaxDestRdAtomic: 16,
	MinRNRTimer:     1,
	Timeout:         14,
	RetryCnt:        7,
	RNRRetry:        7,
}

// Side is one end of a test connection: its context, PD, CQs, QP and a
// registered buffer.
type Side struct {
	Ctx    *verbs.Context
	PD     *verbs.PD
	SendCQ *verbs.CQ
	RecvCQ *verbs.CQ
	QP     *verbs.QP
	Buf    []byte
	MR     *verbs.MR
	SRQ    *verbs.SRQ // with PairOpts.SRQ
	// With PairOpts.TD: the parent domain the QP was created through,
	// and its thread domain.
	Parent *verbs.PD
	TD     *verbs.TD
}

// PairOpts shapes a pair made by NewPair.
type PairOpts struct {
	Cap       verbs.QPCap       // zero: 16 WRs, 4 SGEs each way, 64 bytes inline
	Access    verbs.AccessFlags // buffer access; zero: local write, remote read/write/atomic
	BufSize   int               // zero: 64 KiB
	SharedCQ  bool              // one CQ for sends and receives
	CQE       int               // zero: 256
	RC        *verbs.QPAttr     // nil: DefaultRC
	NoConnect bool              // leave both QPs in RESET
	SRQ       bool              // give each side an SRQ (Side.QP.SRQ())
	// Alloc provides the sides' buffers; nil: the fixture's Allocator, or the Go heap.
	Alloc func(t testing.TB, n int) []byte
	// TD creates each side's QP in a thread domain of its own, through
	// a parent domain (Side.Parent, Side.TD).
	TD bool
}

// ActivateUD moves a UD QP from RESET to RTS with Q_Key qkey on port 1:
// the verbs sequence for any device with UD, for fixtures' ActivateUD.
func ActivateUD(q *verbs.QP, qkey uint32) error { return udqp.Activate(q, qkey) }

// NewSide creates a side on ctx without a QP connection.
func NewSide(t testing.TB, ctx *verbs.Context, typ verbs.QPType, o PairOpts) *Side {
	t.Helper()
	s := &Side{Ctx: ctx}
	var err error
	if s.PD, err = ctx.AllocPD(); err != nil {
		t.Fatalf("AllocPD: %v", err)
	}
	cqe := o.CQE
	if cqe == 0 {
		cqe = 256
	}
	if s.SendCQ, err = ctx.CreateCQ(cqe, nil); err != nil {
		t.Fatalf("CreateCQ: %v", err)
	}
	s.RecvCQ = s.SendCQ
	if !o.SharedCQ {
		if s.RecvCQ, err = ctx.CreateCQ(cqe, nil); err != nil {
			t.Fatalf("CreateCQ: %v", err)
		}
	}
	c := o.Cap
	if c == (verbs.QPCap{}) {
		c = verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: 64}
	}
	ia := verbs.QPInitAttr{SendCQ: s.SendCQ, RecvCQ: s.RecvCQ, QPType: typ, Cap: c}
	if o.SRQ {
		srq, err := s.PD.CreateSRQ(verbs.SRQInitAttr{Attr: verbs.SRQAttr{MaxWR: 16, MaxSGE: 4}})
		if err != nil {
			t.Fatalf("CreateSRQ: %v", err)
		}
		ia.SRQ = srq
		s.SRQ = srq
	}
	qpd := s.PD
	if o.TD {
		if s.TD, err = ctx.AllocTD(); err != nil {
			t.Fatalf("AllocTD: %v", err)
		}
		if s.Parent, err = ctx.AllocParentDomain(verbs.ParentDomainAttr{PD: s.PD, TD: s.TD}); err != nil {
			t.Fatalf("AllocParentDomain: %v", err)
		}
		qpd = s.Parent
	}
	if s.QP, err = qpd.CreateQP(ia); err != nil {
		t.Fatalf("CreateQP: %v", err)
	}
	size := o.BufSize
	if size == 0 {
		size = 64 << 10
	}
	acc := o.Access
	if acc == 0 {
		acc = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	}
	switch {
	case o.Alloc != nil:
		s.Buf = o.Alloc(t, size)
	case alloc != nil:
		s.Buf = alloc.Buffer(t, size)
	default:
		s.Buf = make([]byte, size)
	}
	if s.MR, err = s.PD.RegMR(s.Buf, acc); err != nil {
		t.Fatalf("RegMR: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// Close destroys the side's objects (in the order verbs requires).
func (s *Side) Close() {
	if s.QP != nil {
		s.QP.Destroy()
	}
	if s.Parent != nil {
		s.Parent.Dealloc()
		s.TD.Dealloc()
	}
	if s.SRQ != nil {
		s.SRQ.Destroy()
	}
	if s.MR != nil {
		s.MR.Dereg()
	}
	s.SendCQ.Destroy()
	if s.RecvCQ != s.SendCQ {
		s.RecvCQ.Destroy()
	}
	s.PD.Dealloc()
}

// NewPair opens the fixture's contexts and returns two RC sides, connected
// unless o.NoConnect.
func NewPair(t testing.TB, f Fixture, o PairOpts) (a, b *Side) {
	t.Helper()
	ca, cb := f.Open(t)
	a = NewSide(t, ca, verbs.QPTRC, o)
	b = NewSide(t, cb, verbs.QPTRC, o)
	if !o.NoConnect {
		rc := DefaultRC
		if o.RC != nil {
			rc = *o.RC
		}
		if err := f.Connect(t, a.QP, b.QP, rc); err != nil {
			t.Fatalf("Connect: %v", err)
		}
	}
	return a, b
}

// ToInit moves an RC QP from RESET to INIT with the given access flags,
// as a connection manager's QP is before it connects.
func ToInit(q *verbs.QP, access verbs.AccessFlags) error {
	init := verbs.QPAttr{QPState: verbs.QPSInit, PortNum: 1, QPAccessFlags: access}
	return q.Modify(&init, verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags)
}

// WaitTimeout bounds every wait of the suite, so that a broken provider
// fails a test instead of hanging it. It is not a performance assertion.
const WaitTimeout = 10 * time.Second

// PollN polls cq until it returned n completions.
func PollN(t testing.TB, cq *verbs.CQ, n int) []verbs.WC {
	t.Helper()
	out := make([]verbs.WC, 0, n)
	buf := make([]verbs.WC, n)
	deadline := time.Now().Add(WaitTimeout)
	for len(out) < n {
		k, err := cq.Poll(buf[:n-len(out)])
		if err != nil {
			t.Fatalf("Poll: %v", err)
		}
		out = append(out, buf[:k]...)
		if k == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("PollN: %d of %d completions after %v: %+v", len(out), n, WaitTimeout, out)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			cq.Wait(ctx)
			cancel()
		}
	}
	return out
}

// Poll1 polls one completion.
func Poll1(t testing.TB, cq *verbs.CQ) verbs.WC {
	t.Helper()
	return PollN(t, cq, 1)[0]
}

// ExpectEmpty checks that cq holds no completion.
func ExpectEmpty(t testing.TB, cq *verbs.CQ) {
	t.Helper()
	var wc [4]verbs.WC
	// Polled for a while, not once: on a transport whose packets arrive
	// asynchronously (RoCE), what is on its way is taken in meanwhile.
	for start := time.Now(); time.Since(start) < settle; runtime.Gosched() {
		n, err := cq.Poll(wc[:])
		if err != nil {
			t.Fatalf("Poll: %v", err)
		}
		if n != 0 {
			t.Fatalf("expected no completion, got %+v", wc[:n])
		}
	}
}

// settle is how long ExpectEmpty waits for a completion that must not come.
const settle = 10 * time.Millisecond

// ExpectWC checks a completion's wr_id and status (and, for a success, opcode).
func ExpectWC(t testing.TB, wc verbs.WC, wrid uint64, st verbs.WCStatus, op verbs.WCOpcode) {
	t.Helper()
	if wc.WRID != wrid || wc.Status != st || (st == verbs.WCSuccess && wc.Opcode != op) {
		t.Fatalf("completion %+v (status %v, opcode %v), want wr_id %#x status %v opcode %v", wc, wc.Status, wc.Opcode, wrid, st, op)
	}
}

// WaitState waits until q reaches state st.
func WaitState(t testing.TB, q *verbs.QP, st verbs.QPState) {
	t.Helper()
	deadline := time.Now().Add(WaitTimeout)
	for q.State() != st {
		if time.Now().After(deadline) {
			t.Fatalf("QP %#x in %v, want %v", q.Num(), q.State(), st)
		}
		time.Sleep(time.Millisecond)
	}
}

// NextEvent returns the next asynchronous event of ctx.
func NextEvent(t testing.TB, ctx *verbs.Context) verbs.AsyncEvent {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), WaitTimeout)
	defer cancel()
	ev, err := ctx.GetAsyncEvent(c)
	if err != nil {
		t.Fatalf("GetAsyncEvent: %v", err)
	}
	return ev
}

// ExpectPostErr checks that err is a *verbs.PostError naming index bad and wrapping want.
func ExpectPostErr(t testing.TB, err error, bad int, want error) {
	t.Helper()
	var pe *verbs.PostError
	if !errors.As(err, &pe) {
		t.Fatalf("error %v, want a *verbs.PostError", err)
	}
	if pe.Index != bad || !errors.Is(err, want) {
		t.Fatalf("error %v (bad_wr %d), want bad_wr %d wrapping %v", err, pe.Index, bad, want)
	}
}

// Send is a signaled SEND of the n bytes at off of s's buffer.
func (s *Side) Send(wrid uint64, off, n int) verbs.SendWR {
	return verbs.SendWR{WRID: wrid, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: []verbs.SGE{s.MR.SGE(off, n)}}
}

// Recv is a receive of up to n bytes at off of s's buffer.
func (s *Side) Recv(wrid uint64, off, n int) verbs.RecvWR {
	return verbs.RecvWR{WRID: wrid, SGList: []verbs.SGE{s.MR.SGE(off, n)}}
}

// MustPostSend posts and fails the test on error.
func (s *Side) MustPostSend(t testing.TB, wr ...verbs.SendWR) {
	t.Helper()
	if err := s.QP.PostSend(wr); err != nil {
		t.Fatalf("PostSend: %v", err)
	}
}

// MustPostRecv posts and fails the test on error.
func (s *Side) MustPostRecv(t testing.TB, wr ...verbs.RecvWR) {
	t.Helper()
	if err := s.QP.PostRecv(wr); err != nil {
		t.Fatalf("PostRecv: %v", err)
	}
}

// Fill writes a recognisable pattern (seeded by seed) into b.
func Fill(b []byte, seed byte) {
	for i := range b {
		b[i] = seed + byte(i*7)
	}
}

// Describe returns a short description of a completion for messages.
func Describe(wc verbs.WC) string {
	return fmt.Sprintf("wr_id %#x %v %v len %d", wc.WRID, wc.Opcode, wc.Status, wc.ByteLen)
}
