package shm_test

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/cm"
	"github.com/goverbs/goverbs/internal/conformance"
	"github.com/goverbs/goverbs/internal/leakcheck"
	"github.com/goverbs/goverbs/provider/shm"
	"github.com/goverbs/goverbs/verbs"
)

// dialOnce is the child role "dial": it connects a QP to addr and
// disconnects. It fails when the connection is refused.
func dialOnce(addr string) error {
	ctx, err := verbs.OpenDevice(shm.DeviceName)
	if err != nil {
		return err
	}
	pd, _ := ctx.AllocPD()
	cq, _ := ctx.CreateCQ(16, nil)
	qp, err := pd.CreateQP(verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTRC,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return err
	}
	dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := shm.Dial(dctx, addr, qp, shm.Params{IRD: 1, ORD: 1}, nil)
	if err != nil {
		return err
	}
	return c.Disconnect()
}

// acceptOne waits for one request on ln (up to d) and accepts it on a new
// QP; it returns the request, or the error of the wait.
func acceptOne(t *testing.T, ln *shm.Listener, d time.Duration) (*shm.Request, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	r, err := ln.Accept(ctx)
	if err != nil {
		return nil, err
	}
	s := conformance.NewSide(t, open(t), verbs.QPTRC, conformance.PairOpts{})
	c, err := r.Accept(s.QP, shm.Params{IRD: 1, ORD: 1})
	if err != nil {
		t.Fatalf("accept: %v", err)
	}
	t.Cleanup(func() { c.Disconnect(); <-c.Done() })
	return r, nil
}

// TestListenerRefusesOtherUsers: by default only processes of the
// listener's own user may connect; AllowPeer widens that. The other user
// is uid 65534 (nobody), which needs the test to run as root.
func TestListenerRefusesOtherUsers(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("runs the peer as uid 65534, which needs root: not run")
	}
	leakcheck.Check(t)
	// The test binary, where uid 65534 may run it.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "goverbs-shm-uid-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	bin := filepath.Join(dir, "shm.test")
	if err := copyFile(self, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	dialAs := func(addr string) error {
		cmd := exec.Command(bin, "-test.run=^$")
		cmd.Env = append(os.Environ(), "GOVERBS_SHM_CHILD=dial", "GOVERBS_SHM_ADDR="+addr)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		if err != nil {
			return errors.New(strings.TrimSpace(string(out)))
		}
		return nil
	}

	name := addr()
	ln, err := shm.Listen(name, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	err = dialAs(name)
	if err == nil || !strings.Contains(err.Error(), "does not allow this process") {
		t.Fatalf("a process of uid 65534 connected to root's listener (child: %v)", err)
	}
	if r, err := acceptOne(t, ln, 200*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the refused peer reached Accept: %v, %v", r, err)
	}

	// Widened: anyone, and the request tells who connected.
	name2 := addr()
	ln2, err := shm.Listen(name2, &shm.Config{AllowPeer: func(shm.PeerCred) bool { return true }})
	if err != nil {
		t.Fatal(err)
	}
	defer ln2.Close()
	done := make(chan error, 1)
	go func() { done <- dialAs(name2) }()
	r, err := acceptOne(t, ln2, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if cred := r.PeerCred(); cred.UID != 65534 || cred.GID != 65534 || cred.PID <= 0 {
		t.Errorf("PeerCred = %+v, want uid and gid 65534", cred)
	}
	if err := <-done; err != nil {
		t.Errorf("child: %v", err)
	}
}

func copyFile(from, to string, mode os.FileMode) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// TestListenerPeerCred: a request carries the dialer's credentials, and an
// AllowPeer that refuses them rejects the dialer with a clear error before
// the application sees a request.
func TestListenerPeerCred(t *testing.T) {
	leakcheck.Check(t)
	name := addr()
	ln, err := shm.Listen(name, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan error, 1)
	go func() { done <- dialOnce(name) }()
	r, err := acceptOne(t, ln, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	want := shm.PeerCred{PID: int32(os.Getpid()), UID: uint32(os.Getuid()), GID: uint32(os.Getgid())}
	if got := r.PeerCred(); got != want {
		t.Errorf("PeerCred = %+v, want %+v", got, want)
	}

	name2 := addr()
	refuse, err := shm.Listen(name2, &shm.Config{AllowPeer: func(shm.PeerCred) bool { return false }})
	if err != nil {
		t.Fatal(err)
	}
	defer refuse.Close()
	err = dialOnce(name2)
	var rej *cm.RejectedError
	if !errors.As(err, &rej) || !strings.Contains(err.Error(), "does not allow this process") {
		t.Fatalf("dial to a listener that refuses us: %v", err)
	}
	if r, err := acceptOne(t, refuse, 200*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the refused dialer reached Accept: %v, %v", r, err)
	}
}

// TestListenerPath: a path socket is created 0600 (or SocketMode); a
// socket file left by a server that died is replaced, one a live server
// listens on is not, nor a file that is no socket; Close removes it.
func TestListenerPath(t *testing.T) {
	leakcheck.Check(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "s.sock")

	// A server that died: its socket file stays, nothing answers on it.
	dead, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	dead.SetUnlinkOnClose(false)
	dead.Close()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the dead server's socket file: %v", err)
	}

	ln, err := shm.Listen(path, nil)
	if err != nil {
		t.Fatalf("listen over a stale socket file: %v", err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket file %v, %v: want a socket with mode 0600", fi.Mode(), err)
	}
	if got := ln.Addr().String(); got != path {
		t.Errorf("Addr = %q, want %q", got, path)
	}
	done := make(chan error, 1)
	go func() { done <- dialOnce(path) }()
	if _, err := acceptOne(t, ln, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// A live server keeps its address.
	if _, err := shm.Listen(path, nil); !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("second listener on a live path: %v, want EADDRINUSE", err)
	}
	ln.Close()
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Errorf("socket file after Close: %v", err)
	}

	// A file that is no socket is never replaced.
	plain := filepath.Join(dir, "plain")
	os.WriteFile(plain, []byte("data"), 0o644)
	if _, err := shm.Listen(plain, nil); !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("listen over a regular file: %v", err)
	}
	if b, _ := os.ReadFile(plain); string(b) != "data" {
		t.Fatal("the regular file was touched")
	}

	// Another mode on request.
	p2 := filepath.Join(dir, "g.sock")
	ln2, err := shm.Listen(p2, &shm.Config{SocketMode: 0o660})
	if err != nil {
		t.Fatal(err)
	}
	defer ln2.Close()
	if fi, err := os.Stat(p2); err != nil || fi.Mode().Perm() != 0o660 {
		t.Fatalf("socket file %v, %v: want mode 0660", fi.Mode(), err)
	}
}
