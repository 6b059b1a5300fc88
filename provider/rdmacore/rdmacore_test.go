//go:build rdmacore && linux && cgo

package rdmacore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/conformance"
	"github.com/goverbs/goverbs/provider/rdmacore"
	"github.com/goverbs/goverbs/verbs"
)

// Poll hands the caller's []verbs.WC to ibv_poll_cq: the two layouts must
// be one. (No device needed: this runs in CI.)
func TestWCLayoutIsIbvWC(t *testing.T) {
	if c, g := rdmacore.WCLayout(), rdmacore.GoWCLayout(); c != g {
		t.Fatalf("struct ibv_wc offsets/size %v, verbs.WC %v", c, g)
	}
}

func TestAvailable(t *testing.T) {
	if !rdmacore.Available {
		t.Fatal("Available is false in a build with the rdmacore tag")
	}
	// With or without devices, listing them works and lists each once.
	seen := map[string]bool{}
	for _, n := range rdmacore.DeviceNames() {
		if seen[n] {
			t.Fatalf("device %s listed twice", n)
		}
		seen[n] = true
	}
	for _, d := range verbs.Devices() {
		delete(seen, d.Name())
	}
	if len(seen) != 0 {
		t.Fatalf("rdma-core devices missing from verbs.Devices: %v", seen)
	}
}

// Opening a device that does not exist is ErrNoDevice, not a crash.
func TestOpenMissingDevice(t *testing.T) {
	if _, err := verbs.OpenDevice("rdmacore-no-such-device"); !errors.Is(err, verbs.ErrNoDevice) {
		t.Fatalf("OpenDevice: %v, want ErrNoDevice", err)
	}
}

// The provider has no FLUSH and ATOMIC_WRITE (no ibv_wr_*): its devices
// report neither in DeviceCapFlagsEx, whose other bits are the device's
// (the legacy flags are their low 32), and refuse the FLUSH access flags.
func TestNoFlushCapability(t *testing.T) {
	for _, dev := range testDevices(t) {
		t.Run(dev, func(t *testing.T) {
			ctx := openDev(t, dev)
			a := ctx.QueryDevice()
			if got := a.DeviceCapFlagsEx & (verbs.DeviceFlushGlobal | verbs.DeviceFlushPersistent | verbs.DeviceAtomicWrite); got != 0 {
				t.Fatalf("DeviceCapFlagsEx %#x has FLUSH or ATOMIC_WRITE bits %#x", uint64(a.DeviceCapFlagsEx), uint64(got))
			}
			if uint32(a.DeviceCapFlagsEx) != a.DeviceCapFlags {
				t.Fatalf("DeviceCapFlagsEx %#x, DeviceCapFlags %#x: the low bits differ", uint64(a.DeviceCapFlagsEx), a.DeviceCapFlags)
			}
			pd, err := ctx.AllocPD()
			if err != nil {
				t.Fatal(err)
			}
			defer pd.Dealloc()
			for _, f := range []verbs.AccessFlags{verbs.AccessFlushGlobal, verbs.AccessFlushPersistent} {
				mr, err := pd.RegMR(make([]byte, 64), verbs.AccessLocalWrite|verbs.AccessRemoteRead|f)
				if !errors.Is(err, verbs.ErrNotSupported) {
					if mr != nil {
						mr.Dereg()
					}
					t.Fatalf("RegMR with %v: %v, want ErrNotSupported", f, err)
				}
			}
		})
	}
}

// pair returns a connected pair on dev, the way the conformance suite makes them.
func pair(t *testing.T, dev string, o conformance.PairOpts) (*conformance.Side, *conformance.Side) {
	return conformance.NewPair(t, newFixture(t, dev), o)
}

// RegMR over AllocBuffer memory and over Go memory, both carrying an RDMA
// WRITE and a READ on the device.
func TestRegMRBufferAndGoMemory(t *testing.T) {
	for _, dev := range testDevices(t) {
		t.Run(dev, func(t *testing.T) {
			buf, err := verbs.AllocBuffer(1 << 16)
			if err != nil {
				t.Fatal(err)
			}
			defer buf.Free()
			a, b := pair(t, dev, conformance.PairOpts{Alloc: func(t testing.TB, n int) []byte { return buf.Bytes()[:n] }})
			_ = a
			// a's region lies in the Buffer; b's is Go memory (Alloc is
			// per pair: give b its own by registering a Go slice too).
			gomem := make([]byte, 4096)
			gmr, err := b.PD.RegMR(gomem, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
			if err != nil {
				t.Fatal(err)
			}
			defer gmr.Dereg()
			if mb, _ := a.MR.Buffer(); mb != buf {
				t.Fatal("a's region is not in the AllocBuffer")
			}
			conformance.Fill(a.Buf[:256], 3)
			a.MustPostSend(t, verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
				SGList: []verbs.SGE{a.MR.SGE(0, 256)}, RemoteAddr: gmr.RemoteAddr(100), RKey: gmr.RKey()})
			conformance.ExpectWC(t, conformance.Poll1(t, a.SendCQ), 1, verbs.WCSuccess, verbs.WCRDMAWrite)
			if string(gomem[100:356]) != string(a.Buf[:256]) {
				t.Fatal("RDMA WRITE into Go memory: data differs")
			}
			a.MustPostSend(t, verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
				SGList: []verbs.SGE{a.MR.SGE(1024, 256)}, RemoteAddr: gmr.RemoteAddr(100), RKey: gmr.RKey()})
			conformance.ExpectWC(t, conformance.Poll1(t, a.SendCQ), 2, verbs.WCSuccess, verbs.WCRDMARead)
			if string(a.Buf[1024:1280]) != string(a.Buf[:256]) {
				t.Fatal("RDMA READ from Go memory: data differs")
			}
		})
	}
}

// A CQ's channel descriptor is waited on in the netpoller: GetEvent and
// Wait park until a completion, and a cancelled context ends them.
func TestChannelAndWait(t *testing.T) {
	for _, dev := range testDevices(t) {
		t.Run(dev, func(t *testing.T) {
			a, b := pair(t, dev, conformance.PairOpts{})
			ch, err := b.Ctx.CreateCompChannel()
			if err != nil {
				t.Fatal(err)
			}
			defer ch.Close()
			cq, err := b.Ctx.CreateCQ(16, ch)
			if err != nil {
				t.Fatal(err)
			}
			defer cq.Destroy()
			if err := cq.ReqNotify(false); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			if _, err := ch.GetEvent(ctx); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("GetEvent on an idle channel: %v, want DeadlineExceeded", err)
			}
			cancel()
			ctx, cancel = context.WithTimeout(context.Background(), 20*time.Millisecond)
			if err := b.RecvCQ.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Wait on an empty CQ: %v, want DeadlineExceeded", err)
			}
			cancel()
			done := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), conformance.WaitTimeout)
				defer cancel()
				done <- b.RecvCQ.Wait(ctx)
			}()
			b.MustPostRecv(t, b.Recv(7, 0, 64))
			a.MustPostSend(t, a.Send(8, 0, 64))
			if err := <-done; err != nil {
				t.Fatalf("Wait: %v", err)
			}
			conformance.ExpectWC(t, conformance.Poll1(t, b.RecvCQ), 7, verbs.WCSuccess, verbs.WCRecv)
			conformance.ExpectWC(t, conformance.Poll1(t, a.SendCQ), 8, verbs.WCSuccess, verbs.WCSend)
		})
	}
}

// Posting and polling do not allocate.
func TestPostPollDoNotAllocate(t *testing.T) {
	for _, dev := range testDevices(t) {
		t.Run(dev, func(t *testing.T) {
			a, b := pair(t, dev, conformance.PairOpts{})
			wr := []verbs.SendWR{{WRID: 1, Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{a.MR.SGE(0, 8)},
				RemoteAddr: b.MR.RemoteAddr(0), RKey: b.MR.RKey(), Flags: verbs.SendSignaled}}
			wc := make([]verbs.WC, 4)
			allocs := testing.AllocsPerRun(200, func() {
				if err := a.QP.PostSend(wr); err != nil {
					t.Fatal(err)
				}
				for {
					n, err := a.SendCQ.Poll(wc)
					if err != nil || (n == 1 && wc[0].Status != verbs.WCSuccess) {
						t.Fatalf("Poll: %d %v %+v", n, err, wc[0])
					}
					if n == 1 {
						break
					}
				}
			})
			if allocs != 0 {
				t.Fatalf("%v allocations per post+poll", allocs)
			}
		})
	}
}
