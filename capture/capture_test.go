package capture_test

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goverbs/goverbs/capture"
	"github.com/goverbs/goverbs/internal/conformance"
	"github.com/goverbs/goverbs/internal/testpair"
	"github.com/goverbs/goverbs/verbs"
)

// traffic runs one of each kind of operation from a to b: SENDs of one and
// of three packets, an RDMA WRITE of two, a READ of two, a fetch-and-add
// (unless the connection has no atomics: iWARP without goverbs'
// extensions); it reports whether the atomic ran.
func traffic(t *testing.T, a, b *testpair.End) bool {
	t.Helper()
	big := make([]byte, 3*4096)
	mr, err := a.QP.PD().RegMR(big, verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer mr.Dereg()
	bigB := make([]byte, 3*4096)
	mrB, err := b.QP.PD().RegMR(bigB, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic)
	if err != nil {
		t.Fatal(err)
	}
	defer mrB.Dereg()
	for i := range 2 {
		if err := b.QP.PostRecv([]verbs.RecvWR{{WRID: uint64(i), SGList: []verbs.SGE{mrB.SGE(0, 3*4096)}}}); err != nil {
			t.Fatal(err)
		}
	}
	wrs := []verbs.SendWR{
		{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: []verbs.SGE{mr.SGE(0, 100)}},
		{WRID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: []verbs.SGE{mr.SGE(0, 3*4096)}},
		{WRID: 3, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: []verbs.SGE{mr.SGE(0, 8000)}, RemoteAddr: mrB.Addr(), RKey: mrB.RKey()},
		{WRID: 4, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGList: []verbs.SGE{mr.SGE(0, 6000)}, RemoteAddr: mrB.Addr(), RKey: mrB.RKey()},
		{WRID: 5, Opcode: verbs.WRAtomicFetchAndAdd, Flags: verbs.SendSignaled, SGList: []verbs.SGE{mr.SGE(8192, 8)}, RemoteAddr: mrB.Addr() + 64, RKey: mrB.RKey(), CompareAdd: 1},
	}
	for _, wr := range wrs {
		if err := a.QP.PostSend([]verbs.SendWR{wr}); err != nil {
			if wr.Opcode == verbs.WRAtomicFetchAndAdd && errors.Is(err, verbs.ErrNotSupported) {
				conformance.PollN(t, b.RCQ, 2)
				return false
			}
			t.Fatal(err)
		}
		if wc := conformance.Poll1(t, a.SCQ); wc.Status != verbs.WCSuccess {
			t.Fatalf("%s", conformance.Describe(wc))
		}
	}
	conformance.PollN(t, b.RCQ, 2)
	return true
}

// A recording of each provider's traffic is a pcapng file that tshark
// reads, every packet decoded by its InfiniBand (RoCEv2) dissector with no
// malformed one, every operation present.
func TestTsharkDecodesEveryProvider(t *testing.T) {
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark is not installed (apt-get install tshark; .ci/run installs it)")
	}
	for _, tr := range testpair.Transports {
		t.Run(tr, func(t *testing.T) {
			a, b := testpair.Connect(t, tr, 7)
			file := filepath.Join(t.TempDir(), tr+".pcapng")
			var o capture.Options
			if tr == "roce" {
				o.Devices = []string{a.Ctx.Device().Name(), b.Ctx.Device().Name()}
			} else {
				o.QPs = []uint32{a.QP.Num()} // the requester's view: requests and what came back
			}
			rec, err := capture.Start(file, o)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { rec.Stop() })
			atomics := traffic(t, a, b)
			if err := rec.Stop(); err != nil {
				t.Fatal(err)
			}
			dec := func(args ...string) string {
				// RPC-over-RDMA's heuristic dissector claims small SEND
				// payloads (and calls them malformed): not ours to check.
				out, err := exec.Command(tshark, append([]string{"-r", file, "-d", "udp.port==4791,infiniband", "--disable-protocol", "rpcordma"}, args...)...).Output()
				if err != nil {
					t.Fatalf("tshark: %v", err)
				}
				return string(out)
			}
			all := dec()
			lines := strings.Count(all, "\n")
			if lines == 0 || uint64(lines) != rec.Packets() {
				t.Fatalf("tshark read %d packets, the recorder wrote %d:\n%s", lines, rec.Packets(), all)
			}
			if bad := dec("-Y", `_ws.malformed || _ws.expert.severity >= "warning" || !infiniband`); bad != "" {
				t.Fatalf("malformed or undecoded packets:\n%s\nof\n%s", bad, all)
			}
			ops := []string{"Send Only", "Send First", "Send Middle", "Send Last", "RDMA Write First", "RDMA Write Last",
				"RDMA Read Request", "RDMA Read Response First", "RDMA Read Response Last", "Acknowledge"}
			if atomics {
				ops = append(ops, "Fetch Add", "Atomic Acknowledge")
			}
			for _, op := range ops {
				if !strings.Contains(all, op) {
					t.Errorf("no %q decoded in:\n%s", op, all)
				}
			}
		})
	}
}
