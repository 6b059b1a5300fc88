// Package blocking measures a blocking ping-pong between two processes:
// goverbs' SEND/RECV with rdmacm's GetSendComp and GetRecvComp (shm,
// iWARP, RoCE) against the kernel's sockets (Unix stream, loopback TCP,
// loopback UDP), the server a second process (this test binary run
// again). ns/op is one round trip. bench/blocking.sh runs it in
// interleaved rounds.
package blocking

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime/trace"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/goverbs/goverbs/provider/iwarp"
	_ "github.com/goverbs/goverbs/provider/roce"
	_ "github.com/goverbs/goverbs/provider/shm"
	"github.com/goverbs/goverbs/rdmacm"
	"github.com/goverbs/goverbs/verbs"
)

const serveEnv = "GOVERBS_BLOCKING_SERVE" // transport,size,spin: run as the server

func TestMain(m *testing.M) {
	if s := os.Getenv(serveEnv); s != "" {
		if err := serve(s); err != nil {
			fmt.Fprintln(os.Stderr, "server:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// Transports: goverbs' and the kernel's, in the pairs the table compares,
// and the kernel's Unix and TCP sockets read and written with raw system
// calls (rawSock: "unixraw", "tcpraw"), the control rows for placement.
var transports = []string{"shm", "unix", "unixraw", "iwarp", "tcp", "tcpraw", "roce", "udp"}

// BenchmarkPingPong/<transport>/<size>/<spin>: spin "off" is every wait
// sleeping at once (SetWaitSpin(0), both sides), "adaptive" the default
// (DefaultWaitSpin, adapting). The kernel's rows have no spin ("-").
func BenchmarkPingPong(b *testing.B) {
	for _, tr := range transports {
		for _, size := range []int{8, 4096, 65536} {
			spinsFor := []string{"off", "adaptive"}
			if !goverbs(tr) {
				spinsFor = []string{"-"}
			}
			for _, spin := range spinsFor {
				b.Run(fmt.Sprintf("%s/%d/%s", tr, size, spin), func(b *testing.B) { pingPong(b, tr, size, spin) })
			}
		}
	}
}

func goverbs(tr string) bool { return tr == "shm" || tr == "iwarp" || tr == "roce" }

var seq atomic.Int64

// roceAddr is a loopback address of this run's: RoCE's UDP port is one
// process's per address, so the server and the client take two.
func roceAddr(n byte) netip.Addr {
	p := os.Getpid()
	return netip.AddrFrom4([4]byte{127, byte(100 + p%100), byte(p / 100 % 250), n})
}

// listenAddr is the server's address for tr.
func listenAddr(tr string) string {
	switch tr {
	case "shm":
		return fmt.Sprintf("unix:@goverbs-blocking-%d-%d", os.Getpid(), seq.Add(1))
	case "unix", "unixraw":
		return fmt.Sprintf("@goverbs-blocking-u-%d-%d", os.Getpid(), seq.Add(1))
	case "roce":
		return fmt.Sprintf("roce://%v:%d", roceAddr(2), 7400+seq.Add(1)%90)
	}
	return "127.0.0.1:0"
}

func pingPong(b *testing.B, tr string, size int, spin string) {
	if tr == "udp" && size > 65507 {
		size = 65507 // the largest UDP datagram
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	if pre := strings.Fields(os.Getenv("GOVERBS_BLOCKING_SERVER_PREFIX")); len(pre) > 0 {
		// The server started through a command, as "taskset -c 1".
		cmd = exec.Command(pre[0], append(pre[1:], os.Args[0], "-test.run=^$")...)
	}
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s,%d,%s,%s", serveEnv, tr, size, spin, listenAddr(tr)))
	cmd.Stderr = os.Stderr
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { in.Close(); cmd.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		b.Fatalf("server: %v", err)
	}
	addr := strings.TrimSpace(line)
	if goverbs(tr) {
		verbsPingPong(b, tr, addr, size, spin)
	} else {
		sockPingPong(b, tr, addr, size)
	}
}

func qpAttr() *verbs.QPInitAttr {
	return &verbs.QPInitAttr{Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}
}

func setSpin(id *rdmacm.ID, spin string) {
	if spin == "off" {
		id.SendCQ().SetWaitSpin(0)
		id.RecvCQ().SetWaitSpin(0)
	}
}

func verbsPingPong(b *testing.B, tr, addr string, size int, spin string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var id *rdmacm.ID
	var err error
	if tr == "roce" {
		id, err = rdmacm.DialFrom(ctx, roceAddr(3).String(), addr, qpAttr(), nil)
	} else {
		id, err = rdmacm.Dial(ctx, addr, qpAttr(), nil)
	}
	if err != nil {
		b.Fatal(err)
	}
	defer id.Close()
	setSpin(id, spin)
	buf := make([]byte, 2*size)
	mr, err := id.RegMsgs(buf)
	if err != nil {
		b.Fatal(err)
	}
	defer mr.Dereg()
	round := func() error {
		if err := id.PostRecv(1, buf[size:], mr); err != nil {
			return err
		}
		if err := id.PostSend(2, buf[:size], mr, verbs.SendSignaled); err != nil {
			return err
		}
		for _, send := range []bool{true, false} {
			get := id.GetRecvComp
			if send {
				get = id.GetSendComp
			}
			wc, err := get(ctx)
			if err == nil {
				err = wc.Err()
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
	for range 100 { // warm-up: mappings, the spin's adaptation
		if err := round(); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(2 * size))
	b.ResetTimer()
	for range b.N {
		if err := round(); err != nil {
			b.Fatal(err)
		}
	}
}

// kernelNet is the network of a kernel socket's row, and whether the row
// reads and writes it with raw system calls.
func kernelNet(tr string) (network string, raw bool) {
	if n, ok := strings.CutSuffix(tr, "raw"); ok {
		return n, true
	}
	return tr, false
}

// sockRW is c, or c read and written with raw system calls.
func sockRW(c net.Conn, raw bool) (io.ReadWriter, error) {
	if raw {
		return newRawSock(c)
	}
	return c, nil
}

func sockPingPong(b *testing.B, tr, addr string, size int) {
	network, raw := kernelNet(tr)
	nc, err := net.Dial(network, addr)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	c, err := sockRW(nc, raw)
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, size)
	round := func() error {
		if _, err := c.Write(buf); err != nil {
			return err
		}
		if tr == "udp" {
			_, err := c.Read(buf)
			return err
		}
		_, err := io.ReadFull(c, buf)
		return err
	}
	for range 100 {
		if err := round(); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(2 * size))
	b.ResetTimer()
	for range b.N {
		if err := round(); err != nil {
			b.Fatal(err)
		}
	}
}

// serve is the server process: it listens, prints its address, echoes
// one connection until it ends, and exits (also when its standard input
// closes: the benchmark ended or died).
func serve(spec string) error {
	f := strings.Split(spec, ",")
	if len(f) != 4 {
		return fmt.Errorf("bad %s %q", serveEnv, spec)
	}
	tr, spin, addr := f[0], f[2], f[3]
	size, err := strconv.Atoi(f[1])
	if err != nil {
		return err
	}
	exit := func() { os.Exit(0) }
	if f := os.Getenv("GOVERBS_BLOCKING_TRACE"); f != "" {
		// The server's execution trace, for a look at its wake-ups.
		tf, err := os.Create(f)
		if err != nil {
			return err
		}
		trace.Start(tf)
		exit = func() { trace.Stop(); tf.Close(); os.Exit(0) }
		defer func() { trace.Stop(); tf.Close() }()
	}
	go func() { io.Copy(io.Discard, os.Stdin); exit() }()
	if goverbs(tr) {
		return verbsServe(addr, size, spin)
	}
	if tr == "udp" {
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			return err
		}
		fmt.Println(pc.LocalAddr())
		buf := make([]byte, size)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return err
			}
			if _, err := pc.WriteTo(buf[:n], from); err != nil {
				return err
			}
		}
	}
	network, raw := kernelNet(tr)
	ln, err := net.Listen(network, addr)
	if err != nil {
		return err
	}
	fmt.Println(ln.Addr())
	nc, err := ln.Accept()
	if err != nil {
		return err
	}
	c, err := sockRW(nc, raw)
	if err != nil {
		return err
	}
	buf := make([]byte, size)
	for {
		if _, err := io.ReadFull(c, buf); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if _, err := c.Write(buf); err != nil {
			return err
		}
	}
}

func verbsServe(addr string, size int, spin string) error {
	ctx := context.Background()
	ln, err := rdmacm.Listen(addr)
	if err != nil {
		return err
	}
	fmt.Println(ln.LocalAddr())
	id, err := ln.GetRequest(ctx)
	if err != nil {
		return err
	}
	if err := id.CreateQP(nil, *qpAttr()); err != nil {
		return err
	}
	setSpin(id, spin)
	// Two receive buffers, both posted: the reply goes from the one a
	// request came in, which is posted again once the send completed;
	// the next request, which may come before that, finds the other.
	buf := make([]byte, 2*size)
	mr, err := id.RegMsgs(buf)
	if err != nil {
		return err
	}
	half := func(i uint64) []byte { return buf[int(i)*size : int(i+1)*size] }
	for i := range uint64(2) {
		if err := id.PostRecv(i, half(i), mr); err != nil {
			return err
		}
	}
	if err := id.Accept(ctx, nil); err != nil {
		return err
	}
	for {
		wc, err := id.GetRecvComp(ctx)
		if err == nil {
			err = wc.Err()
		}
		if err != nil {
			return nil // the client closed
		}
		if err := id.PostSend(2, half(wc.WRID)[:wc.ByteLen], mr, verbs.SendSignaled); err != nil {
			return nil
		}
		if swc, err := id.GetSendComp(ctx); err != nil || swc.Err() != nil {
			return nil
		}
		if err := id.PostRecv(wc.WRID, half(wc.WRID), mr); err != nil {
			return nil
		}
	}
}
