package rsocket

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// samecpuEnv makes the test binary one end of TestSpinOffWithPeerOnSameCPU:
// "server,ADDR" or "client,ADDR".
const samecpuEnv = "GOVERBS_RSOCKET_SAMECPU_END"

// samecpuRounds is each run's round trips; the spin is sampled in the
// second half.
const samecpuRounds = 1000

// Two processes on one CPU, a ping-pong of 8-byte messages over rsocket
// with the default spin, read and written by goroutines of their own: a Read's spin cannot be answered there unless
// it loses its CPU to the peer (verbs.SpinWatch), so each end's read spin
// must turn itself off. After each message of the second half, the end
// samples its read direction's spin; at least 9 in 10 samples must find
// it off (probes, which spin in full, are one wait
// in 16 at most). Before rsocket's spin used the watch, a spin that the
// peer had answered while it was preempted counted as answered and the
// longer spin stayed on.
func TestSpinOffWithPeerOnSameCPU(t *testing.T) {
	if end := os.Getenv(samecpuEnv); end != "" {
		role, addr, _ := strings.Cut(end, ",")
		if err := samecpuEnd(role, addr); err != nil {
			fmt.Println("error:", err)
		}
		return
	}
	var cur unix.CPUSet
	if err := unix.SchedGetaffinity(0, &cur); err != nil {
		t.Fatal(err)
	}
	cpu := 0
	for !cur.IsSet(cpu) {
		cpu++
	}
	// The children inherit the affinity of the thread that forks them.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var one unix.CPUSet
	one.Set(cpu)
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		t.Fatal(err)
	}
	defer unix.SchedSetaffinity(0, &cur)
	addr := fmt.Sprintf("unix:@goverbs-rsocket-samecpu-%d", os.Getpid())
	server := exec.Command(os.Args[0], "-test.run=^TestSpinOffWithPeerOnSameCPU$")
	server.Env = append(os.Environ(), samecpuEnv+"=server,"+addr)
	server.Stderr = os.Stderr
	sout, _ := server.StdoutPipe()
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	sr := bufio.NewReader(sout)
	if _, err := sr.ReadString('\n'); err != nil { // listening
		t.Fatalf("server: %v", err)
	}
	client := exec.Command(os.Args[0], "-test.run=^TestSpinOffWithPeerOnSameCPU$")
	client.Env = append(os.Environ(), samecpuEnv+"=client,"+addr)
	client.Stderr = os.Stderr
	cout, err := client.Output()
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	sline, _ := sr.ReadString('\n')
	server.Wait()
	for _, r := range []struct{ who, out string }{{"client", string(cout)}, {"server", sline}} {
		var off, of int
		if _, err := fmt.Sscanf(strings.TrimSpace(r.out), "spin off %d of %d", &off, &of); err != nil {
			t.Fatalf("%s said %q", r.who, r.out)
		}
		t.Logf("%s: spin off after %d of %d messages", r.who, off, of)
		if of != samecpuRounds/2 || off*10 < of*9 {
			t.Errorf("%s: the spin was off after %d of %d messages, with the peer on its CPU; want 9 in 10", r.who, off, of)
		}
	}
}

// samecpuEnd is one end of the ping-pong; the server prints a line once
// it listens, and both print how many of their samples found the spin
// off, and how many they took.
func samecpuEnd(role, addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var c *Conn
	if role == "server" {
		ln, err := Listen(addr)
		if err != nil {
			return err
		}
		defer ln.Close()
		fmt.Println("listening")
		nc, err := ln.Accept()
		if err != nil {
			return err
		}
		c = nc.(*Conn)
	} else {
		nc, err := Dial(ctx, addr)
		if err != nil {
			return err
		}
		c = nc.(*Conn)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Minute))
	// As gRPC's transport does: one goroutine reads and hands each
	// message over, another writes what it is handed, and the caller
	// (or handler) in between. The writer, run while the reader's spin
	// yields (runtime.Gosched), wakes the peer, which takes the CPU in
	// the middle of the spin.
	got, reqs, errs := make(chan struct{}), make(chan struct{}), make(chan error, 2)
	go func() {
		msg := make([]byte, 8)
		for range samecpuRounds {
			if _, err := io.ReadFull(c, msg); err != nil {
				errs <- err
				return
			}
			got <- struct{}{}
		}
	}()
	wdone := make(chan struct{})
	go func() {
		defer close(wdone)
		msg := make([]byte, 8)
		for range reqs {
			if _, err := c.Write(msg); err != nil {
				errs <- err
				return
			}
		}
	}()
	off, of := 0, 0
	for i := range samecpuRounds {
		if role == "client" {
			reqs <- struct{}{}
		}
		select {
		case <-got:
		case err := <-errs:
			return err
		}
		if i >= samecpuRounds/2 {
			of++
			if spinOff(&c.rd) {
				off++
			}
		}
		if role == "server" {
			reqs <- struct{}{}
		}
	}
	close(reqs)
	<-wdone // the last message is written before Close
	fmt.Printf("spin off %d of %d\n", off, of)
	return nil
}
