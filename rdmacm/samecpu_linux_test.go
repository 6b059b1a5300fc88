package rdmacm_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goverbs/goverbs/rdmacm"
	"github.com/goverbs/goverbs/verbs"
)

// samecpuEnv makes the test binary one end of TestSpinOffWithPeerOnSameCPU:
// "server,ADDR" or "client,ADDR".
const samecpuEnv = "GOVERBS_SAMECPU_END"

// samecpuRounds is each run's round trips; the spin is sampled in the
// second half.
const samecpuRounds = 1000

// Two processes on one CPU, a blocking ping-pong with the default
// adaptive spin: a wait's spin cannot be answered there (the peer runs
// only once the spinner stops), so the spin must turn itself off, on both
// sides, for shm and iWARP. Before the spin learnt to tell a completion
// it found from one that came while it had lost the CPU, it stayed on
// (a round trip took 4x the spin-off time). Each end samples its receive
// CQ's SpinFor after each round of the second half; at least 3 in 4
// samples must be 0 (probes, which spin in full, are one wait in 16 at
// most).
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
	for _, addr := range []string{fmt.Sprintf("unix:@goverbs-samecpu-%d", os.Getpid()), "127.0.0.1:0"} {
		server := exec.Command(os.Args[0], "-test.run=^TestSpinOffWithPeerOnSameCPU$")
		server.Env = append(os.Environ(), samecpuEnv+"=server,"+addr)
		server.Stderr = os.Stderr
		sout, _ := server.StdoutPipe()
		if err := server.Start(); err != nil {
			t.Fatal(err)
		}
		sr := bufio.NewReader(sout)
		line, err := sr.ReadString('\n')
		if err != nil {
			t.Fatalf("%s: server: %v", addr, err)
		}
		client := exec.Command(os.Args[0], "-test.run=^TestSpinOffWithPeerOnSameCPU$")
		client.Env = append(os.Environ(), samecpuEnv+"=client,"+strings.TrimSpace(line))
		client.Stderr = os.Stderr
		cout, err := client.Output()
		if err != nil {
			t.Fatalf("%s: client: %v", addr, err)
		}
		sline, _ := sr.ReadString('\n')
		server.Wait()
		for _, r := range []struct{ who, out string }{{"client", string(cout)}, {"server", sline}} {
			var zero, of int
			if _, err := fmt.Sscanf(strings.TrimSpace(r.out), "spin off %d of %d", &zero, &of); err != nil {
				t.Fatalf("%s: %s said %q", addr, r.who, r.out)
			}
			t.Logf("%s: %s: spin off after %d of %d round trips", addr, r.who, zero, of)
			if zero*4 < of*3 {
				t.Errorf("%s: %s: the spin was off after %d of %d round trips with the peer on its CPU, want 3 in 4", addr, r.who, zero, of)
			}
		}
	}
}

// samecpuEnd is one end of the ping-pong; it prints how many of its
// samples of SpinFor were 0.
func samecpuEnd(role, addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	attr := verbs.QPInitAttr{Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}
	var id *rdmacm.ID
	if role == "server" {
		ln, err := rdmacm.Listen(addr)
		if err != nil {
			return err
		}
		defer ln.Close()
		fmt.Println(ln.LocalAddr())
		if id, err = ln.GetRequest(ctx); err != nil {
			return err
		}
		if err := id.CreateQP(nil, attr); err != nil {
			return err
		}
	} else {
		var err error
		if id, err = rdmacm.Dial(ctx, addr, &attr, nil); err != nil {
			return err
		}
	}
	defer id.Close()
	buf := make([]byte, 16)
	mr, err := id.RegMsgs(buf)
	if err != nil {
		return err
	}
	defer mr.Dereg()
	if err := id.PostRecv(1, buf[8:], mr); err != nil {
		return err
	}
	if role == "server" {
		if err := id.Accept(ctx, nil); err != nil {
			return err
		}
	}
	zero, of := 0, 0
	for i := range samecpuRounds {
		if role == "client" {
			if err := id.PostSend(2, buf[:8], mr, verbs.SendSignaled); err != nil {
				return err
			}
		}
		wc, err := id.GetRecvComp(ctx)
		if err == nil {
			err = wc.Err()
		}
		if err != nil {
			return err
		}
		if err := id.PostRecv(1, buf[8:], mr); err != nil {
			return err
		}
		if role == "server" {
			if err := id.PostSend(2, buf[:8], mr, verbs.SendSignaled); err != nil {
				return err
			}
		}
		if wc, err := id.GetSendComp(ctx); err != nil || wc.Err() != nil {
			return fmt.Errorf("send completion: %v %v", err, wc.Err())
		}
		if i >= samecpuRounds/2 {
			of++
			if id.RecvCQ().SpinFor() == 0 {
				zero++
			}
		}
	}
	fmt.Printf("spin off %d of %d\n", zero, of)
	return nil
}
