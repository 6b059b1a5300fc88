package samecpu

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Pin confines the calling goroutine's thread to the first CPU it may run
// on until the test ends, and returns that CPU. Processes it starts
// meanwhile inherit the confinement (a child gets the affinity of the
// thread that forks it, and the goroutine stays on this thread).
func Pin(t testing.TB) int {
	var cur unix.CPUSet
	if err := unix.SchedGetaffinity(0, &cur); err != nil {
		t.Fatal(err)
	}
	cpu := 0
	for !cur.IsSet(cpu) {
		cpu++
	}
	runtime.LockOSThread()
	var one unix.CPUSet
	one.Set(cpu)
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		unix.SchedSetaffinity(0, &cur)
		runtime.UnlockOSThread()
	})
	return cpu
}

// pair runs the test binary's test named test twice, on the CPU Pin gave
// (call Pin first): a server with env set to "server," and addr, whose
// first line of output is its address, then a client with env set to
// "client," and that address. It returns what the client printed and the
// server's second line.
func pair(t testing.TB, test, env, addr string) (client, server string) {
	run := "-test.run=^" + test + "$"
	srv := exec.Command(os.Args[0], run)
	srv.Env = append(os.Environ(), env+"=server,"+addr)
	srv.Stderr = os.Stderr
	sout, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Wait()
	sr := bufio.NewReader(sout)
	line, err := sr.ReadString('\n')
	if err != nil {
		t.Fatalf("%s: server: %v", addr, err)
	}
	cl := exec.Command(os.Args[0], run)
	cl.Env = append(os.Environ(), env+"=client,"+strings.TrimSpace(line))
	cl.Stderr = os.Stderr
	cout, err := cl.Output()
	if err != nil {
		srv.Process.Kill()
		t.Fatalf("%s: client: %v", addr, err)
	}
	server, _ = sr.ReadString('\n')
	return string(cout), server
}

// Child runs end as this process's end of a pair (see pair) when env names one
// ("server,ADDR" or "client,ADDR"; an error is printed for the parent to
// read) and reports whether it did: the test returns then.
func Child(env string, end func(role, addr string) error) bool {
	v := os.Getenv(env)
	if v == "" {
		return false
	}
	role, addr, _ := strings.Cut(v, ",")
	if err := end(role, addr); err != nil {
		fmt.Println("error:", err)
	}
	return true
}

// End is what one end of a pair said: its samples that found the spin
// off, of how many.
type End struct {
	Who     string // "client" or "server"
	Off, Of int
}

// Ends runs pair and reads both ends' "spin off N of M" lines, the
// client's first; a line it cannot read fails the test.
func Ends(t testing.TB, test, env, addr string) [2]End {
	t.Helper()
	cout, sline := pair(t, test, env, addr)
	var ends [2]End
	for i, r := range [2]struct{ who, out string }{{"client", cout}, {"server", sline}} {
		off, of, err := spinOff(r.out)
		if err != nil {
			t.Fatalf("%s: %s %v", addr, r.who, err)
		}
		ends[i] = End{Who: r.who, Off: off, Of: of}
	}
	return ends
}

// spinOff reads an end's "spin off N of M" line: how many of its samples
// found the spin off, and how many it took.
func spinOff(out string) (off, of int, err error) {
	if _, err := fmt.Sscanf(strings.TrimSpace(out), "spin off %d of %d", &off, &of); err != nil {
		return 0, 0, fmt.Errorf("said %q", out)
	}
	return off, of, nil
}
