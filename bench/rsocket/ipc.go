package rsocketbench

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goverbs/goverbs/rsocket"
)

// PrefixEnv names a command that a two-process benchmark's server
// process is started under, split at spaces (such as "taskset -c 1", to
// place it on a CPU of its own; the client is placed by running the
// benchmark under taskset).
const PrefixEnv = "GOVERBS_IPC_SERVER_PREFIX"

// usage is a process's CPU time and context switches so far.
type usage struct {
	cpu time.Duration
	csw int64 // voluntary and involuntary
}

func selfUsage() usage {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return usage{
		cpu: time.Duration(ru.Utime.Nano() + ru.Stime.Nano()),
		csw: ru.Nvcsw + ru.Nivcsw,
	}
}

// ListenIPC listens at a server process's address: "kernel:" and a Unix
// socket's name for the kernel's socket, else rsocket's address.
func ListenIPC(addr string) (net.Listener, error) {
	if name, ok := strings.CutPrefix(addr, "kernel:"); ok {
		return net.Listen("unix", name)
	}
	return rsocket.Listen(addr)
}

// ServeIPC is the server process's side: it calls serve(addr), says
// "ready", and answers each "usage" line of its standard input with its
// CPU time and context switches so far, until the input ends (the
// benchmark ends, or dies); then it calls the stop function serve
// returned. It returns the process's exit code.
func ServeIPC(addr string, serve func(addr string) (stop func(), err error)) int {
	stop, err := serve(addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer stop()
	fmt.Println("ready")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		if in.Text() == "usage" {
			u := selfUsage()
			fmt.Printf("%d %d\n", u.cpu, u.csw)
		}
	}
	return 0
}

// IPC is the server process of a two-process benchmark: the test binary
// itself, run again with env set to the address to serve (its TestMain
// calls ServeIPC then).
type IPC struct {
	stdin  io.WriteCloser
	out    *bufio.Reader
	self   usage
	server usage
}

// StartIPC starts the server process and waits until it serves; it ends
// with the benchmark.
func StartIPC(b *testing.B, env, addr string) *IPC {
	args := []string{os.Args[0], "-test.run=^$"}
	if p := strings.Fields(os.Getenv(PrefixEnv)); len(p) > 0 {
		args = append(p, args...)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), env+"="+addr)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		stdin.Close()
		cmd.Wait()
	})
	p := &IPC{stdin: stdin, out: bufio.NewReader(stdout)}
	if line, err := p.out.ReadString('\n'); err != nil || line != "ready\n" {
		b.Fatalf("server process: %q, %v", line, err)
	}
	return p
}

func (p *IPC) serverUsage(b *testing.B) usage {
	if _, err := io.WriteString(p.stdin, "usage\n"); err != nil {
		b.Fatal(err)
	}
	line, err := p.out.ReadString('\n')
	var u usage
	if err == nil {
		_, err = fmt.Sscan(line, &u.cpu, &u.csw)
	}
	if err != nil {
		b.Fatalf("server process's usage: %q, %v", line, err)
	}
	return u
}

// Begin marks the start of the measured calls (the timer stopped).
func (p *IPC) Begin(b *testing.B) {
	p.server = p.serverUsage(b)
	p.self = selfUsage()
}

// End reports, per operation since Begin, the CPU time of both processes
// (cpu-us/op) and their context switches (csw/op): measures that do not
// depend on where the scheduler put the two processes, unlike the time
// of a round trip on a machine where a wake-up across CPUs costs tens of
// microseconds. Call it with the timer stopped.
func (p *IPC) End(b *testing.B) {
	self := selfUsage()
	server := p.serverUsage(b)
	n := float64(b.N)
	cpu := (self.cpu - p.self.cpu) + (server.cpu - p.server.cpu)
	b.ReportMetric(float64(cpu.Microseconds())/n, "cpu-us/op")
	b.ReportMetric(float64(self.csw-p.self.csw+server.csw-p.server.csw)/n, "csw/op")
}
