package shm_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goverbs/goverbs/internal/conformance"
	"github.com/goverbs/goverbs/internal/leakcheck"
	"github.com/goverbs/goverbs/provider/shm"
	"github.com/goverbs/goverbs/verbs"
)

// The tests in this file run a second process: the test binary itself,
// started with GOVERBS_SHM_CHILD naming what it does.
func TestMain(m *testing.M) {
	if role := os.Getenv("GOVERBS_SHM_CHILD"); role != "" {
		if err := child(role, os.Getenv("GOVERBS_SHM_ADDR")); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

const regionSize = 4 << 20

// child is the other process. "target" and "target-heap" accept one
// connection, offer a region (memfd or Go memory) in the private data and
// echo every message they receive until the connection ends. "writer"
// dials, learns the parent's region the same way and writes into it
// forever (the parent kills it).
func child(role, addr string) error {
	if role == "dial" {
		return dialOnce(addr)
	}
	ctx, err := verbs.OpenDevice(shm.DeviceName)
	if err != nil {
		return err
	}
	pd, _ := ctx.AllocPD()
	cq, _ := ctx.CreateCQ(256, nil)
	qp, err := pd.CreateQP(verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTRC,
		Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return err
	}
	var mem []byte
	if role == "target-heap" {
		mem = make([]byte, regionSize)
	} else {
		b, err := verbs.AllocBuffer(regionSize)
		if err != nil {
			return err
		}
		mem = b.Bytes()
	}
	for i := range mem {
		mem[i] = byte(i%251 + 1)
	}
	acc := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	mr, err := pd.RegMR(mem, acc)
	if err != nil {
		return err
	}
	if err := conformance.ToInit(qp, acc); err != nil {
		return err
	}
	p := shm.Params{IRD: 16, ORD: 16, RNRRetry: 7, PrivateData: regionDesc(mr)}
	cctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if role == "writer" {
		c, err := shm.Dial(cctx, addr, qp, p, nil)
		if err != nil {
			return err
		}
		raddr, rkey, n := parseDesc(c.PrivateData())
		for i := 0; ; i++ {
			off := uint64(i%4) * (n / 4)
			err := qp.PostSend([]verbs.SendWR{{WRID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
				SGList: []verbs.SGE{mr.SGE(0, int(n/4))}, RemoteAddr: raddr + off, RKey: rkey}})
			if err != nil {
				return err
			}
			var wc [1]verbs.WC
			for {
				k, _ := cq.Poll(wc[:])
				if k == 1 {
					break
				}
			}
			if wc[0].Status != verbs.WCSuccess {
				return fmt.Errorf("write: %v", wc[0].Status)
			}
		}
	}
	ln, err := shm.Listen(addr, nil)
	if err != nil {
		return err
	}
	req, err := ln.Accept(cctx)
	if err != nil {
		return err
	}
	ln.Close()
	for i := range 8 {
		qp.PostRecv([]verbs.RecvWR{{WRID: uint64(i), SGList: []verbs.SGE{mr.SGE(regionSize-64<<10+i*4096, 4096)}}})
	}
	c, err := req.Accept(qp, p)
	if err != nil {
		return err
	}
	var wc [4]verbs.WC
	for {
		n, _ := cq.Poll(wc[:])
		for _, w := range wc[:n] {
			if w.Status != verbs.WCSuccess {
				return nil // the connection ended: our work flushed
			}
			if w.Opcode != verbs.WCRecv {
				continue
			}
			off := regionSize - 64<<10 + int(w.WRID)*4096
			qp.PostSend([]verbs.SendWR{{WRID: 100, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: []verbs.SGE{mr.SGE(off, int(w.ByteLen))}}})
			qp.PostRecv([]verbs.RecvWR{{WRID: w.WRID, SGList: []verbs.SGE{mr.SGE(off, 4096)}}})
		}
		if n == 0 {
			select {
			case <-c.Done():
				return nil
			default:
			}
			wctx, wcancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			cq.Wait(wctx)
			wcancel()
		}
	}
}

func regionDesc(mr *verbs.MR) []byte {
	b := make([]byte, 16)
	binary.LittleEndian.PutUint64(b, mr.RemoteAddr(0))
	binary.LittleEndian.PutUint32(b[8:], mr.RKey())
	binary.LittleEndian.PutUint32(b[12:], uint32(mr.Len()))
	return b
}

func parseDesc(b []byte) (addr uint64, rkey uint32, n uint64) {
	return binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint32(b[8:]), uint64(binary.LittleEndian.Uint32(b[12:]))
}

// startChild runs the test binary as the other process.
func startChild(t *testing.T, role, addr string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "GOVERBS_SHM_CHILD="+role, "GOVERBS_SHM_ADDR="+addr)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

// dialChild connects s's QP to a child listening at addr (retrying while
// it starts).
func dialChild(t *testing.T, s *conformance.Side, addr string) *shm.Conn {
	t.Helper()
	if err := conformance.ToInit(s.QP, conformance.DefaultRC.QPAccessFlags); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		c, err := shm.Dial(ctx, addr, s.QP, shm.Params{IRD: 16, ORD: 16, RNRRetry: 7}, nil)
		cancel()
		if err == nil {
			t.Cleanup(func() { c.Disconnect(); <-c.Done() })
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("Dial child: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Every operation against a second process: SEND/RECV both ways, RDMA
// WRITE, READ and both atomics, to memory the child registered from
// AllocBuffer (done by this process alone) and from its Go heap (done by
// the child on our behalf).
func TestTwoProcesses(t *testing.T) {
	for _, role := range []string{"target", "target-heap"} {
		t.Run(role, func(t *testing.T) {
			leakcheck.Check(t)
			addr := "@" + fmt.Sprintf("goverbs-shm-proc-%d-%s", os.Getpid(), role)
			startChild(t, role, addr)
			a := conformance.NewSide(t, open(t), verbs.QPTRC, conformance.PairOpts{BufSize: 3 << 20, Alloc: directFixture{}.Buffer})
			c := dialChild(t, a, addr)
			raddr, rkey, n := parseDesc(c.PrivateData())
			if n != regionSize {
				t.Fatalf("child region of %d bytes", n)
			}
			// SEND, and the child's echo.
			conformance.Fill(a.Buf[:100], 11)
			a.MustPostRecv(t, a.Recv(1, 4096, 4096))
			a.MustPostSend(t, a.Send(2, 0, 100))
			conformance.ExpectWC(t, conformance.Poll1(t, a.SendCQ), 2, verbs.WCSuccess, verbs.WCSend)
			wc := conformance.Poll1(t, a.RecvCQ)
			conformance.ExpectWC(t, wc, 1, verbs.WCSuccess, verbs.WCRecv)
			if wc.ByteLen != 100 || !bytes.Equal(a.Buf[4096:4196], a.Buf[:100]) {
				t.Fatalf("echo: %d bytes, equal %v", wc.ByteLen, bytes.Equal(a.Buf[4096:4196], a.Buf[:100]))
			}
			// WRITE 1 MiB, READ it back.
			const m = 1 << 20
			conformance.Fill(a.Buf[:m], 12)
			a.MustPostSend(t, wr(3, verbs.WRRDMAWrite, a.MR.SGE(0, m), raddr, rkey))
			a.MustPostSend(t, wr(4, verbs.WRRDMARead, a.MR.SGE(m, m), raddr, rkey))
			wcs := conformance.PollN(t, a.SendCQ, 2)
			conformance.ExpectWC(t, wcs[0], 3, verbs.WCSuccess, verbs.WCRDMAWrite)
			conformance.ExpectWC(t, wcs[1], 4, verbs.WCSuccess, verbs.WCRDMARead)
			if !bytes.Equal(a.Buf[:m], a.Buf[m:2*m]) {
				t.Fatal("READ after WRITE differs")
			}
			// Atomics on a word of the child's region.
			word := raddr + 2*m
			clear(a.Buf[2*m : 2*m+8])
			a.MustPostSend(t, wr(8, verbs.WRRDMAWrite, a.MR.SGE(2*m, 8), word, rkey))
			conformance.ExpectWC(t, conformance.Poll1(t, a.SendCQ), 8, verbs.WCSuccess, verbs.WCRDMAWrite)
			fa := wr(5, verbs.WRAtomicFetchAndAdd, a.MR.SGE(2*m, 8), word, rkey)
			fa.CompareAdd = 5
			cs := wr(6, verbs.WRAtomicCmpAndSwp, a.MR.SGE(2*m+8, 8), word, rkey)
			cs.CompareAdd, cs.Swap = 5, 99
			rd := wr(7, verbs.WRRDMARead, a.MR.SGE(2*m+16, 8), word, rkey)
			a.MustPostSend(t, fa, cs, rd)
			wcs = conformance.PollN(t, a.SendCQ, 3)
			for i, w := range wcs {
				conformance.ExpectWC(t, w, uint64(5+i), verbs.WCSuccess, []verbs.WCOpcode{verbs.WCFetchAdd, verbs.WCCompSwap, verbs.WCRDMARead}[i])
			}
			got := [3]uint64{binary.NativeEndian.Uint64(a.Buf[2*m:]), binary.NativeEndian.Uint64(a.Buf[2*m+8:]), binary.NativeEndian.Uint64(a.Buf[2*m+16:])}
			if got != [3]uint64{0, 5, 99} {
				t.Fatalf("atomics: fetch-add %d, compare-swap %d, final %d; want 0, 5, 99", got[0], got[1], got[2])
			}
			direct, _, _ := c.Stats()
			if want := role == "target"; (direct > 0) != want {
				t.Fatalf("%s: %d requests done directly", role, direct)
			}
		})
	}
}

// A target killed in the middle of a transfer: every outstanding request
// completes (WR_FLUSH_ERR for those not finished) within a bounded time, and
// the survivor's memory outside what it asked for is untouched.
func TestKillTargetMidTransfer(t *testing.T) {
	for _, role := range []string{"target", "target-heap"} {
		t.Run(role, func(t *testing.T) {
			leakcheck.Check(t)
			addr := "@" + fmt.Sprintf("goverbs-shm-kill-%d-%s", os.Getpid(), role)
			cmd := startChild(t, role, addr)
			a := conformance.NewSide(t, open(t), verbs.QPTRC, conformance.PairOpts{BufSize: 2 << 20, Alloc: directFixture{}.Buffer,
				Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}})
			c := dialChild(t, a, addr)
			raddr, rkey, _ := parseDesc(c.PrivateData())
			guard := a.Buf[1<<20:]
			conformance.Fill(guard, 0x5a)
			want := append([]byte(nil), guard...)
			// Keep requests in flight: writes and reads of 256 KiB, and
			// sends (the child echoes them; we post no receive for the
			// echoes, they wait in our ring).
			posted, completed := 0, 0
			var flushed int
			killed := false
			deadline := time.Now().Add(20 * time.Second)
			var wcs [16]verbs.WC
			for completed < posted || !killed {
				for !killed && posted-completed < 32 {
					switch posted % 3 {
					case 0, 1:
						op := []verbs.WROpcode{verbs.WRRDMAWrite, verbs.WRRDMARead}[posted%3]
						a.MustPostSend(t, wr(uint64(posted), op, a.MR.SGE(0, 256<<10), raddr+uint64(posted%8)*(256<<10), rkey))
					case 2:
						a.MustPostSend(t, a.Send(uint64(posted), 0, 64))
					}
					posted++
				}
				if !killed && posted > 200 {
					cmd.Process.Signal(syscall.SIGKILL)
					killed = true
				}
				n, err := a.SendCQ.Poll(wcs[:])
				if err != nil {
					t.Fatal(err)
				}
				for _, w := range wcs[:n] {
					switch w.Status {
					case verbs.WCSuccess:
					case verbs.WCWRFlushErr:
						flushed++
					default:
						t.Fatalf("completion %+v", w)
					}
				}
				completed += n
				if time.Now().After(deadline) {
					t.Fatalf("%d of %d requests completed in %v (target killed: %v); %s", completed, posted, 20*time.Second, killed, c.Debug())
				}
			}
			select {
			case <-c.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("the connection did not end")
			}
			if !errors.Is(c.Err(), shm.ErrDisconnected) {
				t.Fatalf("connection error %v, want %v", c.Err(), shm.ErrDisconnected)
			}
			if !bytes.Equal(guard, want) {
				t.Fatal("memory outside the sink changed")
			}
			t.Logf("%d requests, %d flushed", posted, flushed)
		})
	}
}

// An initiator killed while it writes into our memory directly: our QP
// flushes, our region can be deregistered and freed at once, and nothing
// keeps running.
func TestKillWriterMidTransfer(t *testing.T) {
	leakcheck.Check(t)
	addr := "@" + fmt.Sprintf("goverbs-shm-writer-%d", os.Getpid())
	b := conformance.NewSide(t, open(t), verbs.QPTRC, conformance.PairOpts{BufSize: regionSize, Alloc: directFixture{}.Buffer})
	if err := conformance.ToInit(b.QP, conformance.DefaultRC.QPAccessFlags); err != nil {
		t.Fatal(err)
	}
	ln, err := shm.Listen(addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cmd := startChild(t, "writer", addr)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := ln.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b.MustPostRecv(t, b.Recv(1, 0, 64))
	c, err := req.Accept(b.QP, shm.Params{IRD: 16, ORD: 16, RNRRetry: 7, PrivateData: regionDesc(b.MR)})
	if err != nil {
		t.Fatal(err)
	}
	// Wait until the writer's data shows up, then kill it.
	for deadline := time.Now().Add(20 * time.Second); b.Buf[0] == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the writer wrote nothing")
		}
		time.Sleep(time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	conformance.ExpectWC(t, conformance.Poll1(t, b.RecvCQ), 1, verbs.WCWRFlushErr, 0)
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the connection did not end")
	}
	start := time.Now()
	if err := b.MR.Dereg(); err != nil {
		t.Fatal(err)
	}
	b.MR = nil
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Dereg took %v", d)
	}
}

// A connection has its warm-up registration (warmUp) unless the process
// at the other end is confined to the one CPU this one is confined to:
// with the peer on another CPU, or on any, the peer's reads of our pokes
// wake this process's netpoller; on a shared CPU they would only switch
// to it and back.
func TestWarmUpUnlessSameCPU(t *testing.T) {
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		t.Fatal(err)
	}
	var cpus []int
	for i := 0; i < 1024 && len(cpus) < 2; i++ {
		if all.IsSet(i) {
			cpus = append(cpus, i)
		}
	}
	type place struct {
		name         string
		mine, theirs int // -1: not confined
		warm         bool
	}
	places := []place{{"same", cpus[0], cpus[0], false}}
	if len(cpus) > 1 {
		places = append(places, place{"split", cpus[0], cpus[1], true}, place{"free", -1, -1, true})
	} else {
		t.Log("this process may run on one CPU only: the other placements cannot be made")
	}
	for _, pl := range places {
		t.Run(pl.name, func(t *testing.T) {
			addr := "@" + fmt.Sprintf("goverbs-shm-warm-%d-%s", os.Getpid(), pl.name)
			if pl.mine >= 0 {
				// The child gets the affinity of the thread that starts it;
				// Dial runs start (and warmUp) on this one.
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				defer unix.SchedSetaffinity(0, &all)
				setCPU(t, pl.theirs)
				startChild(t, "target", addr)
				setCPU(t, pl.mine)
			} else {
				startChild(t, "target", addr)
			}
			a := conformance.NewSide(t, open(t), verbs.QPTRC, conformance.PairOpts{})
			c := dialChild(t, a, addr)
			if c.Warm() != pl.warm {
				t.Fatalf("warm-up %v, want %v", c.Warm(), pl.warm)
			}
			// And the connection works: the child echoes a SEND.
			a.MustPostRecv(t, a.Recv(1, 4096, 4096))
			a.MustPostSend(t, a.Send(2, 0, 64))
			conformance.ExpectWC(t, conformance.Poll1(t, a.SendCQ), 2, verbs.WCSuccess, verbs.WCSend)
			conformance.ExpectWC(t, conformance.Poll1(t, a.RecvCQ), 1, verbs.WCSuccess, verbs.WCRecv)
		})
	}
}

// setCPU confines the calling thread to cpu.
func setCPU(t *testing.T, cpu int) {
	var one unix.CPUSet
	one.Set(cpu)
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		t.Fatal(err)
	}
}
