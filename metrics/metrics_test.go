package metrics_test

import (
	"encoding/json"
	"expvar"
	"io"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/leakcheck"
	"github.com/goverbs/goverbs/metrics"
	"github.com/goverbs/goverbs/provider/loop"
	"github.com/goverbs/goverbs/verbs"
)

// pair is two connected RC QPs of loop0 and a registered buffer.
type pair struct {
	a, b *verbs.QP
	cq   *verbs.CQ
	mr   *verbs.MR
}

func newPair(t *testing.T) *pair {
	t.Helper()
	ctx, err := verbs.OpenDevice(loop.DeviceName)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctx.Close() })
	pd, err := ctx.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pd.Dealloc() })
	cq, err := ctx.CreateCQ(256, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cq.Destroy() })
	attr := verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTRC,
		Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}}
	p := &pair{cq: cq}
	for _, q := range []**verbs.QP{&p.a, &p.b} {
		if *q, err = pd.CreateQP(attr); err != nil {
			t.Fatal(err)
		}
		qp := *q
		t.Cleanup(func() { qp.Destroy() })
	}
	if err := loop.Connect(p.a, p.b); err != nil {
		t.Fatal(err)
	}
	if p.mr, err = pd.RegMR(make([]byte, 4096), verbs.AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.mr.Dereg() })
	return p
}

// poll waits for n completions and returns them.
func (p *pair) poll(t *testing.T, n int) []verbs.WC {
	t.Helper()
	var out []verbs.WC
	wc := make([]verbs.WC, 16)
	for deadline := time.Now().Add(10 * time.Second); len(out) < n; {
		k, err := p.cq.Poll(wc)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, wc[:k]...)
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d completions", len(out), n)
		}
	}
	return out
}

// sends makes n SENDs of size bytes from a to b.
func (p *pair) sends(t *testing.T, n, size int) {
	t.Helper()
	for i := range n {
		if err := p.b.PostRecv([]verbs.RecvWR{{WRID: uint64(i), SGList: []verbs.SGE{p.mr.SGE(2048, size)}}}); err != nil {
			t.Fatal(err)
		}
		if err := p.a.PostSend([]verbs.SendWR{{WRID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGList: []verbs.SGE{p.mr.SGE(0, size)}}}); err != nil {
			t.Fatal(err)
		}
		for _, wc := range p.poll(t, 2) {
			if wc.Status != verbs.WCSuccess {
				t.Fatalf("%+v", wc)
			}
		}
	}
}

// device is one device's counters as expvar serves them.
type device struct {
	QPs  uint64 `json:"qps"`
	Sent map[string]struct {
		Msgs, Bytes uint64
	} `json:"sent"`
	Received struct {
		Msgs, Bytes uint64
	} `json:"received"`
	RecvErrors map[string]uint64 `json:"recv_errors"`
	SendErrors map[string]uint64 `json:"send_errors"`
}

// scrape fetches /debug/vars from srv and returns the goverbs variable's
// devices.
func scrape(t *testing.T, srv *httptest.Server) map[string]device {
	t.Helper()
	resp, err := srv.Client().Get(srv.URL + "/debug/vars")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var vars struct {
		Goverbs map[string]device `json:"goverbs"`
	}
	if err := json.Unmarshal(b, &vars); err != nil {
		t.Fatalf("%v:\n%s", err, b)
	}
	if vars.Goverbs == nil {
		t.Fatalf("no goverbs variable in:\n%s", b)
	}
	return vars.Goverbs
}

// The counters published with expvar are those of the device, read at
// each scrape: the SENDs, receives and flushed receives done between two
// scrapes show as exactly that much more.
func TestPublishServesCounters(t *testing.T) {
	leakcheck.Check(t)
	metrics.Publish()
	metrics.Publish() // again: nothing, no panic
	if expvar.Get(metrics.VarName) == nil {
		t.Fatal("not published")
	}
	srv := httptest.NewServer(expvar.Handler())
	defer srv.Close()
	before := scrape(t, srv)[loop.DeviceName]
	p := newPair(t)
	const n, size = 25, 100
	p.sends(t, n, size)
	// A receive flushed when its QP fails.
	if err := p.b.PostRecv([]verbs.RecvWR{{WRID: 99, SGList: []verbs.SGE{p.mr.SGE(2048, 64)}}}); err != nil {
		t.Fatal(err)
	}
	if err := p.b.Modify(&verbs.QPAttr{QPState: verbs.QPSErr}, verbs.QPAttrState); err != nil {
		t.Fatal(err)
	}
	if wc := p.poll(t, 1); wc[0].Status != verbs.WCWRFlushErr {
		t.Fatalf("%+v", wc[0])
	}
	after := scrape(t, srv)[loop.DeviceName]
	flush := verbs.WCWRFlushErr.Name()
	if d := after.Sent["SEND"].Msgs - before.Sent["SEND"].Msgs; d != n {
		t.Errorf("SENDs: %d more, want %d (%+v, then %+v)", d, n, before, after)
	}
	if d := after.Sent["SEND"].Bytes - before.Sent["SEND"].Bytes; d != n*size {
		t.Errorf("SEND bytes: %d more, want %d", d, n*size)
	}
	if d := after.Received.Msgs - before.Received.Msgs; d != n {
		t.Errorf("receives: %d more, want %d", d, n)
	}
	if d := after.RecvErrors[flush] - before.RecvErrors[flush]; d != 1 {
		t.Errorf("flushed receives: %d more, want 1 (%v)", d, after.RecvErrors)
	}
	if after.QPs < before.QPs+2 {
		t.Errorf("QPs created: %d, then %d", before.QPs, after.QPs)
	}
}

// Read gives the same counters as Context.Counters, and a RoCE device's
// datagram counters.
func TestReadIsContextCounters(t *testing.T) {
	p := newPair(t)
	p.sends(t, 3, 10)
	ctx, err := verbs.OpenDevice(loop.DeviceName)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	want, err := ctx.Counters()
	if err != nil {
		t.Fatal(err)
	}
	var found, roce bool
	for _, d := range metrics.Read() {
		if d.Name == loop.DeviceName {
			found = true
			if d.Counters != want || d.Wire != nil {
				t.Errorf("Read: %+v, Context.Counters: %+v", d, want)
			}
			if got := d.Opcodes()["SEND"]; got.Msgs != want.Sent[verbs.WRSend].Msgs || got.Msgs < 3 {
				t.Errorf("Opcodes: %v", d.Opcodes())
			}
		}
		if d.Wire != nil {
			roce = true
		}
	}
	if !found || !roce {
		t.Fatalf("loop0 read: %v, a RoCE device with wire counters: %v", found, roce)
	}
}

// BenchmarkRead measures a scrape's reading of every device's counters
// (each device opened and closed).
func BenchmarkRead(b *testing.B) {
	for b.Loop() {
		metrics.Read()
	}
}
