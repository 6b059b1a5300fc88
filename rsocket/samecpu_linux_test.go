package rsocket

import (
	"context"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/samecpu"
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
	if samecpu.Child(samecpuEnv, samecpuEnd) {
		return
	}
	samecpu.Pin(t)
	addr := fmt.Sprintf("unix:@goverbs-rsocket-samecpu-%d", os.Getpid())
	for _, e := range samecpu.Ends(t, "TestSpinOffWithPeerOnSameCPU", samecpuEnv, addr) {
		t.Logf("%s: spin off after %d of %d messages", e.Who, e.Off, e.Of)
		if e.Of != samecpuRounds/2 || e.Off*10 < e.Of*9 {
			t.Errorf("%s: the spin was off after %d of %d messages, with the peer on its CPU; want 9 in 10", e.Who, e.Off, e.Of)
		}
	}
}

// samecpuEnd is one end of the ping-pong; the server prints its address
// once it listens, and both print how many of their samples found the spin
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
		fmt.Println(addr) // the address, once it listens
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
