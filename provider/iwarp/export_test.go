package iwarp

import (
	"errors"
	"fmt"
	"net"

	"golang.org/x/sys/unix"

	"github.com/goverbs/goverbs/internal/engine"
	"github.com/goverbs/goverbs/verbs"
)

// DebugState describes a QP's connection state (for tests).
func DebugState(qp *verbs.QP) string {
	ep, _ := engine.Lookup(qp, dev)
	c, ok := ep.Transport().(*conn)
	if !ok {
		return "no connection"
	}
	c.orq.mu.Lock()
	norq := c.orq.n
	var got, size uint32
	if e := c.orq.front(); e != nil {
		got, size = e.got, e.size
	}
	c.orq.mu.Unlock()
	nirq := c.irq.len()
	return fmt.Sprintf("%s orq %d (got %d/%d) irq %d txMSN %v rxMSN %v", ep.Debug(), norq, got, size, nirq, c.tx.msn, c.rx.msn)
}

// TxPartial reports whether a message on qp's stream is partly written:
// the socket has not taken all of it yet.
func TxPartial(qp *verbs.QP) bool {
	ep, _ := engine.Lookup(qp, dev)
	c, ok := ep.Transport().(*conn)
	return ok && c.tx.restOut.Load()
}

// Puts returns how many writes of messages the stream of qp has begun
// without waiting (one per writev of the engine's transmitter).
func Puts(qp *verbs.QP) uint64 {
	ep, _ := engine.Lookup(qp, dev)
	c, ok := ep.Transport().(*conn)
	if !ok {
		return 0
	}
	c.tx.mu.Lock()
	defer c.tx.mu.Unlock()
	return c.tx.puts
}

// SetKeptHook makes f run whenever a message is kept back for the next
// one (nil: no more).
func SetKeptHook(f func()) {
	if f == nil {
		testHookKept.Store(nil)
		return
	}
	testHookKept.Store(&f)
}

// Polled reports whether the application's polls drive qp's receive side
// (polled mode) now.
func Polled(qp *verbs.QP) bool {
	ep, _ := engine.Lookup(qp, dev)
	c, ok := ep.Transport().(*conn)
	return ok && c.rx.polled.Load()
}

// Reads returns how many reads of qp's socket brought bytes and how many
// found it empty.
func Reads(qp *verbs.QP) (full, empty uint64) {
	ep, _ := engine.Lookup(qp, dev)
	c, ok := ep.Transport().(*conn)
	if !ok {
		return 0, 0
	}
	c.rx.mu.Lock()
	defer c.rx.mu.Unlock()
	return c.rx.prog, c.rx.empty
}

// FDAfterClose checks, once x's socket is closed, that a poll's progress
// and a write of a message leave its descriptor number alone, whatever
// that number names now: a pipe is put there (holding a byte, for the
// poll; empty, for the write), and neither may read it or write into it.
func FDAfterClose(x *Conn) error {
	c := x.c
	<-c.done
	fd := c.fd
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != unix.EBADF {
		return fmt.Errorf("descriptor %d in use again before the check (%v)", fd, err)
	}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_NONBLOCK|unix.O_CLOEXEC); err != nil {
		return err
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	// The poll: the pipe's read end, with a byte in it, at fd.
	unix.Write(p[1], []byte{7})
	if err := unix.Dup2(p[0], fd); err != nil {
		return err
	}
	c.Progress(engine.Handoff{})
	var b [8]byte
	n, _ := unix.Read(p[0], b[:])
	unix.Close(fd)
	if n != 1 {
		return errors.New("a poll after the close read the descriptor's new file")
	}
	// The write: the pipe's write end at fd.
	if err := unix.Dup2(p[1], fd); err != nil {
		return err
	}
	c.tx.mu.Lock()
	werr := c.put([][]byte{[]byte("not for this file")})
	c.tx.mu.Unlock()
	n, _ = unix.Read(p[0], b[:])
	unix.Close(fd)
	if n > 0 {
		return errors.New("a write after the close went to the descriptor's new file")
	}
	if werr == nil {
		return errors.New("a write after the close reported no error")
	}
	return nil
}

// HoldRx keeps qp's receive goroutine from reading until release is
// called (a test that needs bytes left in the socket).
func HoldRx(qp *verbs.QP) (release func()) {
	ep, _ := engine.Lookup(qp, dev)
	c := ep.Transport().(*conn)
	ch := make(chan struct{})
	c.rxHold.Store(&ch)
	return func() {
		c.rxHold.Store(nil)
		close(ch)
	}
}

// Reset closes qp's socket with a reset (SO_LINGER 0), as a peer's kernel
// does when its process closes the socket with bytes unread.
func Reset(qp *verbs.QP) {
	ep, _ := engine.Lookup(qp, dev)
	c := ep.Transport().(*conn)
	c.nc.(*net.TCPConn).SetLinger(0)
	c.nc.Close()
}
