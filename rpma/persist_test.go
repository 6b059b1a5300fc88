package rpma_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/leakcheck"
	"github.com/goverbs/goverbs/rpma"
)

const persistChildEnv = "GOVERBS_RPMA_PERSIST_CHILD"

// persistChild is the target process of TestPersistentFlushSurvivesKill:
// it exposes a region on a file mapping, accepts one connection, and waits
// to be killed.
func persistChild(path string) {
	fail := func(err error) {
		fmt.Printf("RPMA-CHILD-ERROR %v\n", err)
		os.Exit(2)
	}
	m, err := rpma.MapFile(path, 64<<10)
	if err != nil {
		fail(err)
	}
	ictx, err := rpma.DeviceContext("127.0.0.1")
	if err != nil {
		fail(err)
	}
	peer, err := rpma.NewPeer(ictx)
	if err != nil {
		fail(err)
	}
	mr, err := peer.RegMR(m.Bytes(), rpma.UsageWriteDst|rpma.UsageReadSrc|rpma.UsageFlushTypePersistent|rpma.UsageFlushTypeVisibility)
	if err != nil {
		fail(err)
	}
	pcfg := rpma.NewPeerCfg()
	pcfg.SetDirectWriteToPmem(true)
	ep, err := peer.Listen("127.0.0.1", "0")
	if err != nil {
		fail(err)
	}
	fmt.Printf("RPMA-CHILD-PORT %s\n", ep.Port())
	ctx := context.Background()
	req, err := ep.NextConnReq(ctx, nil)
	if err != nil {
		fail(err)
	}
	if _, err := req.Connect(ctx, append(mr.Descriptor(), pcfg.Descriptor()...)); err != nil {
		fail(err)
	}
	select {} // until killed
}

// dirtyKB returns the dirty kilobytes of pid's mappings of path (from
// /proc/pid/smaps).
func dirtyKB(t *testing.T, pid int, path string) (int, bool) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		t.Fatal(err)
	}
	kb, in, found := 0, false, false
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if strings.Contains(f[0], "-") && len(f) >= 5 {
			in = len(f) >= 6 && f[len(f)-1] == path
			found = found || in
			continue
		}
		if in && (f[0] == "Shared_Dirty:" || f[0] == "Private_Dirty:") && len(f) >= 2 {
			n, _ := strconv.Atoi(f[1])
			kb += n
		}
	}
	return kb, found
}

// A PERSISTENT flush to a region backed by a file completes only after the
// data is durable in the file on the target host: the target's dirty pages
// of the range are written back (msync) before the completion, and after
// the target process is killed without any shutdown the file holds the data.
func TestPersistentFlushSurvivesKill(t *testing.T) {
	if p := os.Getenv(persistChildEnv); p != "" {
		persistChild(p)
		return
	}
	t.Run("native", func(t *testing.T) { testPersistentFlush(t, true) })
	t.Run("fallback", func(t *testing.T) { testPersistentFlush(t, false) })
}

// testPersistentFlush runs the test with goverbs' extensions (native FLUSH)
// or without them (librpma's read-after-write). Without them, as documented
// on Conn.Flush, PERSISTENT guarantees only that the data reached the
// target's memory: the test checks that the pages stay dirty (no msync
// happened), and that the data is still in the file after the kill, which
// on this host the page cache ensures (a host crash could lose it).
func testPersistentFlush(t *testing.T, native bool) {
	leakcheck.Check(t)
	path := filepath.Join(t.TempDir(), "pmem")
	cmd := exec.Command(os.Args[0], "-test.run=^TestPersistentFlushSurvivesKill$/^native$")
	cmd.Env = append(os.Environ(), persistChildEnv+"="+path)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	defer func() {
		if !killed {
			cmd.Process.Kill()
			cmd.Wait()
		}
	}()
	portc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if p, ok := strings.CutPrefix(sc.Text(), "RPMA-CHILD-PORT "); ok {
				portc <- p
			} else if strings.HasPrefix(sc.Text(), "RPMA-CHILD-ERROR") {
				t.Error(sc.Text())
			}
		}
		close(portc)
	}()
	var port string
	select {
	case p, ok := <-portc:
		if !ok {
			t.Fatal("the target process ended before listening")
		}
		port = p
	case <-time.After(waitTimeout):
		t.Fatal("the target process did not start listening")
	}

	cp := newPeer(t)
	ccfg := rpma.NewConnCfg()
	ccfg.SetExtensions(native)
	req, err := rpma.NewConnReq(cp, "127.0.0.1", port, ccfg)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := req.Connect(tctx(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Delete()
	expectEvent(t, conn, rpma.ConnEstablished)
	pd := conn.PrivateData()
	if len(pd) < rpma.MRDescriptorSize+rpma.PeerCfgDescriptorSize {
		t.Fatalf("private data of %d bytes", len(pd))
	}
	remote, err := rpma.RemoteMRFromDescriptor(pd[:rpma.MRDescriptorSize])
	if err != nil {
		t.Fatal(err)
	}
	pcfg, err := rpma.PeerCfgFromDescriptor(pd[rpma.MRDescriptorSize : rpma.MRDescriptorSize+1])
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.ApplyRemotePeerCfg(pcfg); err != nil {
		t.Fatal(err)
	}

	data := make([]byte, 32<<10)
	for i := range data {
		data[i] = byte(i*13 + 7)
	}
	src := regMR(t, cp, data, rpma.UsageWriteSrc)
	const off = 4096
	if err := conn.Write(remote, off, src, 0, len(data), rpma.CompletionOnError, 1); err != nil {
		t.Fatal(err)
	}
	// VISIBILITY: the data is in the target's memory, not yet written back.
	if err := conn.Flush(remote, off, len(data), rpma.FlushVisibility, rpma.CompletionAlways, 2); err != nil {
		t.Fatal(err)
	}
	if c := next(t, conn.CQ()); c.OpContext != 2 || c.Op != rpma.OpFlush || c.Status != 0 {
		t.Fatalf("visibility flush completion %+v", c)
	}
	if conn.NativeFlush() != native {
		t.Fatalf("native flush %v, want %v", conn.NativeFlush(), native)
	}
	pid := cmd.Process.Pid
	before, found := dirtyKB(t, pid, path)
	if !found {
		t.Fatalf("the target process has no mapping of %s", path)
	}
	if err := conn.Flush(remote, off, len(data), rpma.FlushPersistent, rpma.CompletionAlways, 3); err != nil {
		t.Fatal(err)
	}
	if c := next(t, conn.CQ()); c.OpContext != 3 || c.Op != rpma.OpFlush || c.Status != 0 {
		t.Fatalf("persistent flush completion %+v", c)
	}
	after, _ := dirtyKB(t, pid, path)
	t.Logf("target's dirty pages of the file: %d KiB after the visibility flush, %d KiB after the persistent flush", before, after)
	if before == 0 {
		t.Error("no dirty pages after the writes: the check below proves nothing")
	}
	if native && after != 0 {
		t.Errorf("%d KiB of the file still dirty after the persistent flush completed", after)
	}
	if !native && after == 0 {
		t.Errorf("the fallback flush wrote the pages back: the documented guarantee is wrong")
	}

	// Kill the target without any shutdown.
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	killed = true
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got[off:off+len(data)], data) {
		t.Fatal("the file does not hold the flushed data")
	}
	ev, err := conn.NextEvent(tctx(t))
	if err != nil || (ev != rpma.ConnClosed && ev != rpma.ConnLost) {
		t.Fatalf("event after the target died: %v, %v", ev, err)
	}
}
