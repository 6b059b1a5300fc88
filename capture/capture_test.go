package capture_test

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goverbs/goverbs/capture"
	"github.com/goverbs/goverbs/internal/conformance"
	"github.com/goverbs/goverbs/internal/rdmacmtest"
	"github.com/goverbs/goverbs/provider/iwarp"
	"github.com/goverbs/goverbs/verbs"
)

// traffic runs one of each kind of operation from a to b: SENDs of one and
// of three packets, an RDMA WRITE of two, a READ of two, a fetch-and-add
// (unless the connection has no atomics: iWARP without goverbs'
// extensions); it reports whether the atomic ran.
func traffic(t *testing.T, a, b *rdmacmtest.End) bool {
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

func tsharkPath(t *testing.T) string {
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark is not installed (apt-get install tshark; .ci/run installs it)")
	}
	return tshark
}

// A recording of loop, shm and roce traffic is a pcapng file that tshark
// reads, every packet decoded by its InfiniBand (RoCEv2) dissector with no
// malformed one, every operation present.
func TestTsharkDecodesEveryProvider(t *testing.T) {
	tshark := tsharkPath(t)
	for _, tr := range rdmacmtest.Transports {
		if tr == "iwarp" {
			continue // its TCP stream: TestTsharkDecodesIWARPStream
		}
		t.Run(tr, func(t *testing.T) {
			a, b := rdmacmtest.Connect(t, tr, 7)
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

// An iWARP recording is the connection's TCP stream: tshark decodes the MPA
// Request and Reply and every FPDU (MPA with its CRC, DDP, RDMAP), finds
// no malformed frame, no TCP anomaly and no CRC error, and shows every
// operation once, although both ends are in this process.
func TestTsharkDecodesIWARPStream(t *testing.T) {
	tshark := tsharkPath(t)
	for _, crc := range []bool{false, true} {
		t.Run(map[bool]string{false: "no CRC", true: "CRC"}[crc], func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "iwarp.pcapng")
			rec, err := capture.Start(file, capture.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { rec.Stop() })
			a, b, ca, cb := iwarpPair(t, crc)
			traffic(t, a, b)
			ca.Disconnect()
			cb.Disconnect()
			if err := rec.Stop(); err != nil {
				t.Fatal(err)
			}
			dec := func(args ...string) string {
				cmd := exec.Command(tshark, append([]string{"-r", file}, args...)...)
				var stderr strings.Builder
				cmd.Stderr = &stderr
				out, err := cmd.Output()
				if err != nil {
					t.Fatalf("tshark: %v\n%s", err, stderr.String())
				}
				return string(out)
			}
			all := dec()
			if lines := strings.Count(all, "\n"); lines == 0 || uint64(lines) != rec.Packets() {
				t.Fatalf("tshark read %d packets, the recorder wrote %d:\n%s", lines, rec.Packets(), all)
			}
			if bad := dec("-Y", `_ws.malformed || _ws.expert.severity >= "warning" || (tcp.len > 0 && !iwarp_mpa)`); bad != "" {
				t.Fatalf("malformed, undecoded or suspicious frames:\n%s\nof\n%s", bad, all)
			}
			// tshark checks each FPDU's CRC but raises no expert
			// information for a bad one: its verbose output says.
			if v := dec("-V"); strings.Contains(v, "Bad CRC32") || crc != strings.Contains(v, "Good CRC32") {
				t.Errorf("CRC checks in tshark -V (CRC negotiated: %v):\n%s", crc, v)
			}
			count := func(filter string) int {
				return strings.Count(dec("-Y", filter), "\n")
			}
			for _, c := range []struct {
				filter string
				want   int
			}{
				{"iwarp_mpa.key.req", 1},
				{"iwarp_mpa.key.rep", 1},
				// SEND of 100 bytes, SEND of 12 KiB, READ Request.
				{"iwarp_rdma.opcode == 3 && iwarp_ddp.last_flag == 1", 2},
				{"iwarp_rdma.opcode == 0 && iwarp_ddp.last_flag == 1", 1}, // WRITE
				{"iwarp_rdma.opcode == 1", 1},                             // READ Request
				{"iwarp_rdma.opcode == 2 && iwarp_ddp.last_flag == 1", 1}, // READ Response
				{"tcp.flags.syn == 1 && tcp.flags.ack == 0", 1},
				{"tcp.flags.fin == 1", 2},
			} {
				if got := count(c.filter); got != c.want {
					t.Errorf("%d frames match %q, want %d, in:\n%s", got, c.filter, c.want, all)
				}
			}
		})
	}
}

// iwarpPair connects two RC QPs of iwarp0 through iwarp.Listen and Dial,
// asking for MPA CRC or not.
func iwarpPair(t *testing.T, crc bool) (a, b *rdmacmtest.End, ca, cb *iwarp.Conn) {
	t.Helper()
	var ends [2]*rdmacmtest.End
	for i := range ends {
		ctx, err := verbs.OpenDevice(iwarp.DeviceName)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ctx.Close() })
		pd, err := ctx.AllocPD()
		if err != nil {
			t.Fatal(err)
		}
		e := &rdmacmtest.End{Ctx: ctx}
		e.SCQ, _ = ctx.CreateCQ(32, nil)
		e.RCQ, _ = ctx.CreateCQ(32, nil)
		if e.QP, err = pd.CreateQP(verbs.QPInitAttr{QPType: verbs.QPTRC, SendCQ: e.SCQ, RecvCQ: e.RCQ, Cap: rdmacmtest.Cap}); err != nil {
			t.Fatal(err)
		}
		ends[i] = e
	}
	cfg := &iwarp.Config{CRC: crc}
	ln, err := iwarp.Listen("127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	accepted := make(chan *iwarp.Conn, 1)
	go func() {
		defer close(accepted)
		r, err := ln.Accept(ctx)
		if err != nil {
			t.Error(err)
			return
		}
		c, err := r.Accept(ends[1].QP, iwarp.Params{IRD: 4, ORD: 4})
		if err != nil {
			t.Error(err)
			return
		}
		accepted <- c
	}()
	ca, err = iwarp.Dial(ctx, ln.Addr().String(), ends[0].QP, iwarp.Params{IRD: 4, ORD: 4}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if cb = <-accepted; cb == nil {
		t.FailNow()
	}
	if ca.CRC() != crc || cb.CRC() != crc {
		t.Fatalf("CRC %v/%v, asked %v", ca.CRC(), cb.CRC(), crc)
	}
	t.Cleanup(func() { ca.Disconnect(); cb.Disconnect() })
	return ends[0], ends[1], ca, cb
}
