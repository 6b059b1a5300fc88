package rdmacm_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/leakcheck"
	"github.com/goverbs/goverbs/rdmacm"
	"github.com/goverbs/goverbs/verbs"
)

// A listener whose process runs out of descriptors refuses the waiting
// dialer at once (no timeout), tells the application (an AcceptError
// wrapping EMFILE from GetRequest), and serves again once descriptors are
// free. The server is a child process (this test binary again): a dialer
// in a process without descriptors could not dial at all.
func TestListenerSurvivesEMFILE(t *testing.T) {
	if os.Getenv("GOVERBS_EMFILE_CHILD") != "" {
		emfileChild(os.Getenv("GOVERBS_EMFILE_CHILD"))
		return
	}
	for _, tr := range transports[:2] { // tcp and unix: the transports with an accept(2)
		t.Run(tr.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestListenerSurvivesEMFILE$", "-test.v=false")
			cmd.Env = append(os.Environ(), "GOVERBS_EMFILE_CHILD="+tr.listen())
			stdin, _ := cmd.StdinPipe()
			stdout, _ := cmd.StdoutPipe()
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill()
			lines := bufio.NewScanner(stdout)
			expect := func(prefix string) string {
				t.Helper()
				for lines.Scan() {
					if l := lines.Text(); strings.HasPrefix(l, prefix) {
						return strings.TrimPrefix(l, prefix)
					}
				}
				t.Fatalf("child ended before %q", prefix)
				return ""
			}
			addr := expect("listening ")
			expect("exhausted")

			// The dialer fails, and not by its timeout.
			ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
			defer cancel()
			_, err := rdmacm.Dial(ctx, addr, nil, nil)
			if err == nil || errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("dial while the server has no descriptors: %v, want a prompt failure", err)
			}
			// (The first report may precede the refusal: accept(2) fails
			// without descriptors whether or not a connection waits.)
			if got := expect("accept error "); !strings.Contains(got, "too many open files") {
				t.Fatalf("the server's GetRequest said %q, want an AcceptError wrapping EMFILE", got)
			}

			// Descriptors free again: the same listener serves.
			fmt.Fprintln(stdin, "release")
			expect("released")
			c, err := rdmacm.Dial(ctx, addr, &verbs.QPInitAttr{Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}, nil)
			if err != nil {
				t.Fatalf("dial after the descriptors were freed: %v", err)
			}
			defer c.Close()
			buf := make([]byte, 64)
			mr, err := c.RegMsgs(buf)
			if err != nil {
				t.Fatal(err)
			}
			copy(buf, "hello again")
			if err := c.PostSend(1, buf[:11], mr, verbs.SendSignaled); err != nil {
				t.Fatal(err)
			}
			if _, err := c.GetSendComp(ctx); err != nil {
				t.Fatal(err)
			}
			if got := expect("got "); got != "hello again" {
				t.Fatalf("server got %q", got)
			}
			stdin.Close()
			if err := cmd.Wait(); err != nil {
				t.Fatalf("child: %v", err)
			}
		})
	}
}

// emfileChild listens at addr, runs out of descriptors, reports what
// GetRequest says, frees them when told, and serves one connection.
func emfileChild(addr string) {
	fail := func(err error) {
		fmt.Println("error", err)
		os.Exit(1)
	}
	ln, err := rdmacm.Listen(addr)
	if err != nil {
		fail(err)
	}
	fmt.Println("listening", ln.LocalAddr())
	// A low limit, then every descriptor below it taken.
	var lim syscall.Rlimit
	syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
	low := lim
	low.Cur = min(lim.Cur, 256)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		fail(err)
	}
	var fds []int
	for {
		fd, err := syscall.Open(os.DevNull, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != nil {
			break
		}
		fds = append(fds, fd)
	}
	fmt.Println("exhausted")
	ctx := context.Background()
	_, err = ln.GetRequest(ctx)
	var ae *rdmacm.AcceptError
	if !errors.As(err, &ae) || !errors.Is(err, syscall.EMFILE) {
		fail(fmt.Errorf("GetRequest: %v, want an AcceptError wrapping EMFILE", err))
	}
	fmt.Printf("accept error %v shed=%v\n", err, ae.Shed)
	bufio.NewReader(os.Stdin).ReadString('\n') // "release"
	for _, fd := range fds {
		syscall.Close(fd)
	}
	syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	fmt.Println("released")
	var req *rdmacm.ID
	for {
		req, err = ln.GetRequest(ctx)
		if errors.As(err, &ae) {
			continue // failures while the descriptors were short, reported late
		}
		if err != nil {
			fail(err)
		}
		break
	}
	if err := req.CreateQP(nil, verbs.QPInitAttr{Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		fail(err)
	}
	buf := make([]byte, 64)
	mr, err := req.RegMsgs(buf)
	if err != nil {
		fail(err)
	}
	if err := req.PostRecv(1, buf, mr); err != nil {
		fail(err)
	}
	if err := req.Accept(ctx, nil); err != nil {
		fail(err)
	}
	wc, err := req.GetRecvComp(ctx)
	if err != nil {
		fail(err)
	}
	fmt.Println("got", string(buf[:wc.ByteLen]))
	bufio.NewReader(os.Stdin).ReadString('\n') // the parent closes: done
	req.Close()
	ln.Close()
	os.Exit(0)
}

// A connection end costs one descriptor (its socket): the completion
// channels rdmacm makes for GetSendComp and GetRecvComp have no eventfd
// until someone asks for one. (10,000 connections between two processes
// need 10,000 descriptors in each.)
func TestDescriptorsPerConnection(t *testing.T) {
	leakcheck.Check(t)
	fds := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Skip("no /proc/self/fd")
		}
		return len(ents)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ln, err := rdmacm.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const n = 200
	accepted := make(chan *rdmacm.ID, n)
	go func() {
		for range n {
			req, err := ln.GetRequest(ctx)
			if err != nil {
				return
			}
			if err := req.CreateQP(nil, verbs.QPInitAttr{Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
				t.Error(err)
			}
			if err := req.Accept(ctx, nil); err != nil {
				t.Error(err)
			}
			accepted <- req
		}
	}()
	before := fds()
	var ids []*rdmacm.ID
	defer func() {
		for _, id := range ids {
			id.Close()
		}
	}()
	for range n {
		c, err := rdmacm.Dial(ctx, ln.LocalAddr().String(), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, c, <-accepted)
	}
	if per := float64(fds()-before) / (2 * n); per > 1.05 {
		t.Fatalf("%.2f descriptors per connection end, want 1", per)
	}
	// A channel's descriptor appears when asked for, readable if events wait.
	if fd := ids[0].SendCh().Fd(); fd < 0 {
		t.Fatalf("Fd() = %d", fd)
	}
}
