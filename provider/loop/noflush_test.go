package loop_test

import (
	"errors"
	"testing"

	"github.com/goverbs/goverbs/provider/loop"
	"github.com/goverbs/goverbs/verbs"
)

// A device configured without FLUSH and ATOMIC_WRITE says so in its
// capabilities and refuses the FLUSH access flags and both opcodes with
// ErrNotSupported, before anything is queued; loop0 has them. Each knob
// takes away only its own capability.
func TestNoFlushNoAtomicWrite(t *testing.T) {
	all := verbs.DeviceFlushGlobal | verbs.DeviceFlushPersistent | verbs.DeviceAtomicWrite
	for _, tc := range []struct {
		dev  string
		caps verbs.DeviceCapFlagsEx
	}{
		{loop.DeviceName, all},
		{loop.AddDeviceConfig("loop-noflush", loop.Config{NoFlush: true}), verbs.DeviceAtomicWrite},
		{loop.AddDeviceConfig("loop-noaw", loop.Config{NoAtomicWrite: true}), verbs.DeviceFlushGlobal | verbs.DeviceFlushPersistent},
	} {
		a, b := connected(t, tc.dev, 0)
		if got := a.ctx.QueryDevice().DeviceCapFlagsEx & all; got != tc.caps {
			t.Fatalf("%s: capabilities %#x, want %#x", tc.dev, uint64(got), uint64(tc.caps))
		}
		pd := a.qp.PD()
		for _, f := range []struct {
			acc verbs.AccessFlags
			cap verbs.DeviceCapFlagsEx
			typ verbs.FlushType
		}{{verbs.AccessFlushGlobal, verbs.DeviceFlushGlobal, verbs.FlushGlobal}, {verbs.AccessFlushPersistent, verbs.DeviceFlushPersistent, verbs.FlushPersistent}} {
			has := tc.caps&f.cap != 0
			mr, err := pd.RegMR(make([]byte, 64), verbs.AccessLocalWrite|verbs.AccessRemoteRead|f.acc)
			if has != (err == nil) || (!has && !errors.Is(err, verbs.ErrNotSupported)) {
				t.Fatalf("%s: RegMR with %v: %v", tc.dev, f.acc, err)
			}
			if mr != nil {
				mr.Dereg()
			}
			wr := []verbs.SendWR{{WRID: 1, Opcode: verbs.WRFlush, Flags: verbs.SendSignaled, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey(),
				FlushLen: 8, FlushType: f.typ}}
			err = a.qp.PostSend(wr)
			if !has {
				if !errors.Is(err, verbs.ErrNotSupported) {
					t.Fatalf("%s: FLUSH %v posted: %v", tc.dev, f.typ, err)
				}
				continue
			}
			// b's region has no flush rights: a remote access error, but
			// the device took the request.
			if err != nil {
				t.Fatalf("%s: FLUSH %v: %v", tc.dev, f.typ, err)
			}
			if wc := poll(t, a.cq, 1); wc[0].Status != verbs.WCRemAccessErr {
				t.Fatalf("%s: FLUSH %v into a region without the right: %v", tc.dev, f.typ, wc[0].Status)
			}
			a, b = connected(t, tc.dev, 0) // the error moved a's QP to ERR
		}
		copy(a.mr.Bytes(), []byte{1, 2, 3, 4, 5, 6, 7, 8})
		wr := []verbs.SendWR{{WRID: 2, Opcode: verbs.WRAtomicWrite, Flags: verbs.SendSignaled,
			SGList: []verbs.SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}}
		err := a.qp.PostSend(wr)
		if tc.caps&verbs.DeviceAtomicWrite == 0 {
			if !errors.Is(err, verbs.ErrNotSupported) {
				t.Fatalf("%s: ATOMIC_WRITE posted: %v", tc.dev, err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if wc := poll(t, a.cq, 1); wc[0].Status != verbs.WCSuccess || b.mr.Bytes()[7] != 8 {
			t.Fatalf("%s: ATOMIC_WRITE: %v, target % x", tc.dev, wc[0].Status, b.mr.Bytes()[:8])
		}
	}
}
