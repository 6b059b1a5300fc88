package shm

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goverbs/goverbs/internal/atomicx"
	"github.com/goverbs/goverbs/internal/engine"
	"github.com/goverbs/goverbs/internal/fdpark"
	"github.com/goverbs/goverbs/provider/shm/internal/ring"
	"github.com/goverbs/goverbs/verbs"
)

// conn is one connected QP: the engine's wire for it.
type conn struct {
	ep   engine.Endpoint
	req  engine.Requester
	resp engine.Responder
	// uc is the socket until start; then sfd, a duplicate read by the
	// socket goroutine through rxPark and by a Block through park, which
	// ask for input only. It is closed once nobody is inside (enter),
	// after the Parkers.
	uc  *net.UnixConn
	sfd int
	// warm is another duplicate, in the netpoller for input and output
	// and never read nor written, unless the peer shares our only CPU:
	// see warmUp.
	warm         *os.File
	laddr, raddr net.Addr
	rxPark       fdpark.Parker
	rxFn         func(fd uintptr) bool // rxRead, made once
	rx           rxMsg                 // rxRead's message
	mine         *segment              // we consume its rings
	peer         *segment              // we produce into its rings
	peerQPN      uint32
	pdata        []byte
	ird          int
	ord          int
	rnr          uint8 // rnr_retry
	// noDirect: peers never map our regions (Config.NoDirectAccess)
	noDirect bool

	// users counts goroutines inside the segments; the teardown sets
	// closing and waits for zero before unmapping.
	users   atomic.Int64
	closing atomic.Bool

	out     sender   // what Send writes into the peer's request ring (tx.go)
	in      consumer // our rings, which we consume (rx.go)
	wait    waiting  // our requests the peer has not finished (acks.go)
	remotes remotes  // the peer's regions we map (regions.go)
	exp     exports  // our regions the peer maps (exports.go)

	polled atomic.Bool // the application polls (engine.Progressor.Polled)
	// A waiter that blocks in the socket (Block) reads the peer's pokes
	// itself: aside keeps the socket goroutine off the socket meanwhile
	// (asideWake lets it back), park is the waiter's registration of the
	// socket, blockFn its callback (a method value made once), bw, other
	// and pokeBuf its state across the callback's calls.
	aside     atomic.Bool
	asideWake chan struct{}
	blocked   atomic.Bool // a Block is under way
	sockMu    sync.Mutex  // held to read and handle a message of the socket
	bbuf      [256]byte   // a Block's message buffer
	boob      [64]byte    // and its control data (unix.CmsgSpace(4*4) fits)
	park      fdpark.Parker
	blockFn   func(fd uintptr) bool
	bw        *engine.Waker
	other     bool // the socket ended or failed: the socket goroutine's
	// sockSeen is the peer's count of socket messages (offSockMsgs) when
	// a poll last looked.
	sockSeen atomic.Uint64
	nPokes   atomic.Uint64 // pokes sent (tests)

	once  sync.Once
	err   error
	dying chan struct{}
	done  chan struct{}
}

func newConn(ep engine.Endpoint, uc *net.UnixConn, mine, peer *segment, peerQPN uint32, pdata []byte, ird, ord int, rnr uint8, cfg *Config) *conn {
	c := &conn{ep: ep, noDirect: cfg.NoDirectAccess, req: ep.Requester(), resp: ep.Responder(), uc: uc, rnr: rnr, mine: mine, peer: peer, peerQPN: peerQPN, pdata: pdata, ird: ird, ord: ord,
		remotes: remotes{rdma: map[uint32]*remote{}, srcs: map[uint32]*remote{}, asking: map[uint32]bool{}, reoffers: map[uint32]int{}},
		exp:     exports{slots: make([]*export, mine.l.slots), offers: map[uint32]*export{}},
		dying:   make(chan struct{}), done: make(chan struct{}), asideWake: make(chan struct{}, 1)}
	c.blockFn = c.blockFD
	c.rxFn = c.rxRead
	c.sfd = -1
	sq := ep.Attr().Cap.MaxSendWR
	c.wait.acks = newAckRing(sq)
	c.out.sqCap = sq
	l := mine.l
	c.in.req.Init(&mine.Segment, ctlReq, l.reqOff(), l.reqSize, mine.key(ctlReq))
	c.in.resp.Init(&mine.Segment, ctlResp, l.respOff(), l.respSize, mine.key(ctlResp))
	c.out.ring.Init(&peer.Segment, ctlReq, l.reqOff(), l.reqSize, peer.key(ctlReq))
	c.in.respOut.Init(&peer.Segment, ctlResp, l.respOff(), l.respSize, peer.key(ctlResp))
	c.out.words = winWords{win: mine.U64(offDirect), ver: peer.U64(offVer)}
	// Until the application polls, ask to be poked.
	atomic.StoreUint32(c.in.req.C.Sleep, 1)
	atomic.StoreUint32(c.in.resp.C.Sleep, 1)
	atomic.StoreUint32(mine.U32(offIRD), uint32(ird))
	return c
}

// start makes c the QP's wire (RTS) and runs the socket goroutine.
func (c *conn) start() error {
	raw, err := c.uc.SyscallConn()
	if err != nil {
		c.abort()
		return err
	}
	if cerr := raw.Control(func(fd uintptr) { c.sfd, err = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0) }); cerr != nil {
		err = cerr
	}
	if err != nil {
		c.abort()
		return fmt.Errorf("shm: duplicating the connection's socket: %w", err)
	}
	c.laddr, c.raddr = c.uc.LocalAddr(), c.uc.RemoteAddr()
	c.uc.Close() // (its registration in the netpoller goes; the socket stays, sfd's)
	atomic.StoreUint32(c.mine.U32(offAccess), uint32(c.resp.Access()))
	p := engine.ConnParams{IRD: uint8(c.ird), ORD: uint8(c.ord), RNRRetry: c.rnr,
		Access: verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic}
	if err := c.ep.Establish(c, p); err != nil {
		c.abort()
		return err
	}
	atomic.StoreUint32(c.mine.U32(offAccess), uint32(c.resp.Access()))
	atomic.StoreUint32(c.mine.U32(offMinRNR), uint32(c.resp.MinRNRTimer()))
	c.mine.moved()
	c.warmUp()
	go c.rxLoop()
	return nil
}

// warmUp puts a duplicate of the socket in the netpoller that nobody reads
// or writes, so that the peer's read of each poke we sent (which makes the
// socket writable) wakes a thread of this process from the netpoller, as
// the reader of any kernel socket wakes its writer's. The wake finds
// nothing to do, but it comes early: the CPU that our waiter sleeps on
// wakes while the peer works on the message, and is awake, or nearly, when
// the reply's poke comes. On CPUs that take long to leave their idle state
// (a virtual machine's halted vCPU: tens of microseconds) that halves a
// round trip whose waits sleep, between processes on two CPUs
// (bench/results/blocking-pingpong). Not when the peer is confined to the
// one CPU we are confined to: that CPU runs the peer, and the wake would
// be a context switch for nothing (a quarter more on such a round trip).
func (c *conn) warmUp() {
	if sharesOnlyCPU(c.sfd) {
		return
	}
	d, err := unix.FcntlInt(uintptr(c.sfd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return // (out of descriptors: the connection works without it)
	}
	// Non-blocking (the socket's flags): NewFile registers it.
	c.warm = os.NewFile(uintptr(d), "shm-warm")
}

// sharesOnlyCPU reports whether this thread and the process at the other
// end of the socket fd are both confined to one CPU, the same.
func sharesOnlyCPU(fd int) bool {
	var mine, theirs unix.CPUSet
	if unix.SchedGetaffinity(0, &mine) != nil || mine.Count() != 1 {
		return false
	}
	cred, err := unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED)
	if err != nil || cred.Pid <= 0 {
		return false // (in another PID namespace: unknown)
	}
	return unix.SchedGetaffinity(int(cred.Pid), &theirs) == nil && theirs == mine
}

// abort undoes a connection that never started.
func (c *conn) abort() {
	c.uc.Close()
	if c.sfd >= 0 {
		unix.Close(c.sfd)
	}
	c.mine.Unmap()
	c.peer.Unmap()
	close(c.done)
}

// enter admits a goroutine into the segments and the peer's regions that
// we map; false once they are going away. The teardown waits for those
// inside before it unmaps the regions and retires the segments. Hot paths
// that touch only the segments (a poll that finds nothing to consume, the
// acknowledgement checks, SendDirect) check closing and do not enter:
// retired segments stay valid memory (segment.retire).
func (c *conn) enter() bool {
	c.users.Add(1)
	if c.closing.Load() {
		c.users.Add(-1)
		return false
	}
	return true
}

func (c *conn) leave() { c.users.Add(-1) }

// close ends the connection once: the socket closes (the peer sees EOF) and
// the socket goroutine then releases everything. It never calls the QP.
func (c *conn) close(err error) {
	c.once.Do(func() {
		c.err = err
		close(c.dying)
		unix.Shutdown(c.sfd, unix.SHUT_RDWR) // the peer sees the end; sfd is closed once nobody is inside
		c.rxPark.Close()                     // the socket goroutine's read ends
		c.park.Close()                       // a waiter blocked in the socket returns
	})
}

func (c *conn) isDying() bool {
	select {
	case <-c.dying:
		return true
	default:
		return false
	}
}

// fail closes the connection and flushes the QP.
func (c *conn) fail(err error) {
	c.close(err)
	c.ep.Fail()
}

// rxLoop reads the socket: pokes, region mappings, and the end of the
// connection, after which it releases the connection's resources.
func (c *conn) rxLoop() {
	defer close(c.done)
	buf, oob := make([]byte, 256), make([]byte, unix.CmsgSpace(4*4))
	for {
		if c.aside.Load() {
			// A Block that began while this goroutine held sockMu (in its
			// read, or handling a message) could not read the socket, and
			// may be parked on a readiness that this goroutine's read
			// took, with messages left in the socket: it looks again.
			c.park.Interrupt()
		}
		for c.aside.Load() && !c.isDying() {
			select { // a waiter reads the socket (Block)
			case <-c.asideWake:
			case <-c.dying:
			}
		}
		c.sockMu.Lock()
		msg, fds, err := c.readSock(buf, oob)
		if errors.Is(err, fdpark.ErrInterrupted) && !c.isDying() {
			// kickRx: a poll saw a message coming and had this goroutine
			// scheduled; it reads on. Or a Block made it step aside.
			if h := testHookRxDeadline.Load(); h != nil {
				(*h)()
			}
			c.sockMu.Unlock()
			continue
		}
		if err != nil {
			c.sockMu.Unlock()
			c.peerGone(err)
			break
		}
		c.dispatch(msg, fds)
		c.sockMu.Unlock()
		if msg[0] == msgPoke && c.blocked.Load() {
			// A waiter blocks in the socket (this goroutine was let
			// back meanwhile), and this poke was its: it may have held
			// the consumer's lock, which wake's progress then skipped.
			// It looks again.
			c.park.Interrupt()
		}
	}
	c.teardown()
}

// dispatch handles a message of the socket; sockMu is held (by the
// socket goroutine, or a Block's callback).
func (c *conn) dispatch(msg []byte, fds []int) {
	switch msg[0] {
	case msgPoke:
		closeFds(fds)
		c.wake()
	case msgMapReq:
		closeFds(fds)
		c.serveMap(msg)
	case msgMapRep:
		c.installMap(msg, fds)
	default:
		closeFds(fds)
		c.fail(errProto)
	}
}

// sentSockMsg tells a polling peer that a socket message for it is on its
// way (offSockMsgs); called after the write, from a goroutine inside the
// segments.
func (c *conn) sentSockMsg() { atomic.AddUint64(c.peer.U64(offSockMsgs), 1) }

// kickRx has the socket goroutine read now, when a poll (which holds this
// goroutine's processor) found that the peer sent a message that wants
// handling. The goroutine is parked in the runtime's network poller, which
// looks at the sockets only when a processor has nothing to run, or every
// 10 ms: when every processor busy-polls (both ends of a connection polled
// in one process, on a small machine), a mapping's request and answer
// waited for that twice, and the requests through the peer meanwhile.
// An expired deadline readies the goroutine at once, on this processor,
// and the yield runs it.
func (c *conn) kickRx() {
	if h := atomic.LoadUint64(c.mine.U64(offSockMsgs)); h != c.sockSeen.Load() {
		c.sockSeen.Store(h)
		c.releaseRx()
		c.rxPark.Interrupt()
		runtime.Gosched()
	}
}

// peerGone handles the end of the socket.
func (c *conn) peerGone(err error) {
	select {
	case <-c.dying: // we closed it
		return
	default:
	}
	if errors.Is(err, errPeerClosed) || errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
		err = ErrDisconnected // it closed, exited or died: the kernel closed its socket
	}
	c.fail(err)
}

// teardown releases the connection after the socket closed: no goroutine
// is left inside the segments when they are unmapped.
func (c *conn) teardown() {
	c.ep.Fail()
	c.exp.mu.Lock()
	for i, e := range c.exp.slots {
		if e != nil {
			e.cancel()
			c.exp.slots[i] = nil
		}
	}
	c.exp.dead = true
	c.exp.mu.Unlock()
	c.wait.mu.Lock()
	if c.wait.rnrTimer != nil {
		c.wait.rnrTimer.Stop()
	}
	c.wait.mu.Unlock()
	c.closing.Store(true)
	for c.users.Load() != 0 {
		time.Sleep(20 * time.Microsecond)
	}
	if c.warm != nil {
		c.warm.Close()
	}
	unix.Close(c.sfd) // the Parkers were closed (close) and let go of it
	c.remotes.mu.Lock()
	for _, m := range []map[uint32]*remote{c.remotes.rdma, c.remotes.srcs} {
		for _, r := range m {
			c.remotes.forget(m, r) // nobody is inside: unmapped now
		}
	}
	c.remotes.mu.Unlock()
	c.out.last = nil
	// The polls' idle checks, the acknowledgement checks and the direct
	// SEND path read and write the segments without entering: the
	// segments are retired, not unmapped, and the placeholders go with c.
	c.mine.Retire()
	c.peer.Retire()
	runtime.AddCleanup(c, ring.Retired, [2][]byte{c.mine.Mem, c.peer.Mem})
}

// poke asks the peer to look at the rings. It never blocks: a full socket
// already holds pokes.
func (c *conn) poke() {
	c.nPokes.Add(1)
	if c.enter() { // (sfd is open while anyone is inside)
		sendNB(c.sfd, pokeMsg[:])
		c.leave()
	}
}

var pokeMsg = [1]byte{msgPoke}

// sendSock sends a message on the socket, waiting for room while the
// peer's queue is full, until the connection ends.
func (c *conn) sendSock(b, oob []byte) error {
	if !c.enter() {
		return ErrLocalDisconnect
	}
	defer c.leave()
	for {
		_, err := unix.SendmsgN(c.sfd, b, oob, nil, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL)
		if err != unix.EAGAIN && err != unix.EINTR {
			return err
		}
		if c.isDying() {
			return ErrLocalDisconnect
		}
		// The socket is in no netpoller set for output (sfd): a rare wait,
		// in the kernel, looking at the connection's end now and then.
		unix.Poll([]unix.PollFd{{Fd: int32(c.sfd), Events: unix.POLLOUT}}, 20)
	}
}

// rxMsg is what rxRead read.
type rxMsg struct {
	buf, oob []byte
	n, oobn  int
	err      error
}

// rxRead is the socket goroutine's read: one message, false while there
// is none (the Parker waits for input).
func (c *conn) rxRead(fd uintptr) bool {
	r := &c.rx
	for {
		r.n, r.oobn, r.err = recvNB(int(fd), r.buf, r.oob)
		if r.err != unix.EINTR {
			return r.err != unix.EAGAIN
		}
	}
}

// readSock reads one message and the descriptors passed with it, as
// readMsg does; fdpark.ErrInterrupted after rxPark.Interrupt.
func (c *conn) readSock(buf, oob []byte) (msg []byte, fds []int, err error) {
	c.rx = rxMsg{buf: buf, oob: oob}
	if err := c.rxPark.WaitFD(c.sfd, c.rxFn); err != nil {
		return nil, nil, err
	}
	return received(buf, oob, c.rx.n, c.rx.oobn, c.rx.err)
}

// Progress implements engine.Progressor: the application polls a CQ of the
// QP, so the connection runs in its goroutine and nobody needs poking.
func (c *conn) Progress(ho engine.Handoff) int {
	c.progress(&ho)
	return ho.Len()
}

// Polled implements engine.Progressor. While the application polls, neither
// side needs poking; once it stops (it blocks, or the engine's idle rule
// ends polled mode), each side asks the other to poke it.
func (c *conn) Polled(on bool) {
	c.polled.Store(on)
	if !on {
		c.releaseRx()
		c.wake()
		return
	}
	if c.enter() {
		atomic.StoreUint32(c.in.req.C.Sleep, 0)
		atomic.StoreUint32(c.in.resp.C.Sleep, 0)
		c.leave()
	}
}

// releaseRx lets the socket goroutine back onto the socket.
func (c *conn) releaseRx() {
	if c.aside.Swap(false) {
		select {
		case c.asideWake <- struct{}{}:
		default:
		}
	}
}

// Block implements engine.Blocker: the waiting goroutine reads the
// peer's pokes itself, parked in the netpoller on the socket between them,
// and consumes the rings; the socket goroutine stays aside (it is made to
// leave its read once, when the first Block of a polled period begins).
// A message other than a poke ends the Block: the socket goroutine
// handles it.
func (c *conn) Block(w *engine.Waker) bool {
	if !blockInSocket || c.closing.Load() || c.isDying() {
		return false
	}
	if !c.aside.Swap(true) {
		c.rxPark.Interrupt() // out of its read (rxLoop)
	}
	c.bw, c.other = w, false
	c.blocked.Store(true)
	err := c.park.WaitFD(c.sfd, c.blockFn)
	c.blocked.Store(false)
	other := c.other
	c.bw, c.other = nil, false
	if other {
		c.releaseRx()
		return false
	}
	return err == nil || err == fdpark.ErrInterrupted
}

// blockFD is Block's callback: it takes the pokes the socket holds,
// makes progress and reports whether the wait is over.
func (c *conn) blockFD(fd uintptr) bool {
	w := c.bw
	w.Busy()
	// The socket's messages, in order, as the socket goroutine would
	// handle them (a mapping's reply before the acknowledgement that
	// follows it), unless that goroutine reads it (let back meanwhile).
	if c.sockMu.TryLock() {
		for {
			n, oobn, err := recvNB(int(fd), c.bbuf[:], c.boob[:])
			if err == unix.EINTR {
				continue
			}
			if err == unix.EAGAIN {
				break
			}
			if err != nil || n == 0 {
				c.other = true // the end of the socket: the socket goroutine's
				break
			}
			if n == 1 && oobn == 0 && c.bbuf[0] == msgPoke {
				continue // progress follows
			}
			var fds []int
			if oobn > 0 {
				fds = parseFds(c.boob[:oobn])
			}
			c.dispatch(c.bbuf[:n], fds)
			if c.isDying() {
				c.other = true
				break
			}
		}
		c.sockMu.Unlock()
	}
	// Ask to be poked, then look at the rings (wake's protocol): a
	// poke claims the request, so it is made again after each.
	if !c.askPoke() {
		c.other = true // closing: the socket goroutine ends it
		return true
	}
	// Twice: a progress that delivers leaves the acknowledgements to the
	// next one, and no poke may come for them.
	poke := c.progressPoke(nil)
	if c.progressPoke(nil) || poke {
		c.poke()
	}
	if c.other || !w.Idle() {
		return true
	}
	if c.takeAckPoke() {
		c.poke() // this side parks: a poke its consume left goes now
	}
	return false
}

// askPoke asks the peer to poke when it publishes what this side waits
// for; false once the connection is closing.
func (c *conn) askPoke() bool {
	if !c.enter() {
		return false
	}
	atomic.StoreUint32(c.in.req.C.Sleep, 1)
	atomic.StoreUint32(c.in.resp.C.Sleep, 1)
	if c.wait.nresp.Load() > 0 || c.ackWanted() || c.out.stalled.Load() {
		atomic.StoreUint32(c.out.ring.C.Wait, 1)
	}
	if c.in.held.Load() {
		atomic.StoreUint32(c.in.respOut.C.Wait, 1)
	}
	c.leave()
	return true
}

// blockInSocket turns Block on (a switch for measuring without it).
const blockInSocket = true

// Interrupt implements engine.Blocker.
func (c *conn) Interrupt() { c.park.Interrupt() }

// testHookRxDeadline, when a test sets it, runs in the socket goroutine
// when its read ended at a deadline, with sockMu held.
var testHookRxDeadline atomic.Pointer[func()]

// testHookConsumed, when a test sets it, runs after a poll consumed
// requests, before it lets go of the consumer's lock.
var testHookConsumed atomic.Pointer[func(*conn)]

// wake makes progress on behalf of an application that is not polling,
// then asks the peer to poke again, and looks once more (a poke could
// have been skipped between the two).
func (c *conn) wake() {
	c.progress(nil)
	if c.polled.Load() || !c.enter() {
		return
	}
	atomic.StoreUint32(c.in.req.C.Sleep, 1)
	atomic.StoreUint32(c.in.resp.C.Sleep, 1)
	if c.wait.nresp.Load() > 0 || c.ackWanted() || c.out.stalled.Load() {
		atomic.StoreUint32(c.out.ring.C.Wait, 1)
	}
	if c.in.held.Load() {
		atomic.StoreUint32(c.in.respOut.C.Wait, 1)
	}
	c.leave()
	c.progress(nil)
}

// progress does everything that can be done now without blocking: consume
// both inbound rings, complete what the peer finished, resume a stalled send
// queue.
func (c *conn) progress(ho *engine.Handoff) {
	owed := c.takeAckPoke() // this call is the next one (consumer.ackPoke)
	if c.progressPoke(ho) || owed {
		c.poke()
	}
}

// progressPoke is progress, reporting the poke the peer needs instead of
// sending it (for Block).
func (c *conn) progressPoke(ho *engine.Handoff) bool {
	if c.closing.Load() {
		return false
	}
	if ho != nil && atomic.LoadUint64(c.mine.U64(offSockMsgs)) != c.sockSeen.Load() {
		c.kickRx()
	}
	poke, got := false, 0
	// An idle poll only reads: the rings' positions, and the peer's state.
	// Consuming does not enter either: only a SEND by reference uses a
	// mapping of the peer's (serveRef enters).
	locked, busy := false, false // busy: another goroutine consumes, and may leave what this one came for
	if c.in.held.Load() || !c.in.req.Idle() || !c.in.resp.Idle() {
		locked = c.in.mu.TryLock()
		busy = !locked
	}
	if locked {
		poke, got = c.consume(ho)
		if got > 0 {
			if f := testHookConsumed.Load(); f != nil {
				(*f)(c)
			}
		}
		c.in.mu.Unlock()
		// An acknowledgement this poll deferred is published now if polled
		// mode ended meanwhile: the goroutine that ended it (the engine's
		// idle rule, or a Wait) found the consumer busy and could not. The unlock is a
		// full fence: either that goroutine's progress came after it, or
		// this load sees polled cleared.
		if got > 0 && !c.polled.Load() {
			if c.in.ackable.Load() > atomic.LoadUint64(c.in.req.C.Head) {
				c.publishAckable()
				poke = ring.Claim(c.in.req.C.Wait) || poke
			}
			// And a poke it left to the application's next call, which
			// the end of polled mode's progress may have looked for
			// before this poll set it.
			poke = c.takeAckPoke() || poke
		}
	}
	if busy && c.blocked.Load() {
		// The holder may be a Block's progress that already looked (a
		// receive posted now, by RecvPosted, for a held request; a record
		// a socket goroutine's wake came for): it looks again rather than
		// park on what nobody will poke it for.
		c.park.Interrupt()
	}
	// After a delivery the application has a completion to take: the acks
	// wait for the next poll. Once: a stream of deliveries, with no poll
	// between them that looks at the acks, must not starve them. The flag
	// is only a hint, written with plain stores.
	acks := got == 0
	if acks {
		if c.wait.skipped.Load() != 0 {
			atomicx.ReleaseU64(&c.wait.skipped, 0)
		}
	} else if c.outstanding() {
		if acks = c.wait.skipped.Load() != 0; acks {
			atomicx.ReleaseU64(&c.wait.skipped, 0)
		} else {
			atomicx.ReleaseU64(&c.wait.skipped, 1)
		}
	}
	if acks && c.outstanding() {
		if atomic.LoadUint64(c.out.ring.C.Head) != c.wait.ackHead.Load() || c.peerStopped() {
			c.checkAcksTo(ho)
		}
		if atomic.LoadUint64(c.peer.U64(offRNRPos)) != 0 {
			c.checkRNR()
		}
	}
	if c.out.stalled.Load() && (atomic.LoadUint64(c.out.ring.C.Head) != c.out.stallAt.Load() || c.peerFailed() || atomic.LoadUint64(c.peer.U64(offNakPos)) != 0) {
		c.out.stalled.Store(false)
		c.req.Resume()
	}
	return poke
}

// Modify implements engine.Transport: the access flags and the RNR timer
// that the peer reads from our segment are republished.
func (c *conn) Modify(attr *verbs.QPAttr, mask verbs.QPAttrMask, from, to verbs.QPState) error {
	if to == verbs.QPSSQD && from != verbs.QPSSQD {
		// The drained event waits for every acknowledgement, wanted or
		// not (see waiting.wantEnd): from now on all of them are. The
		// flag before the look: a head the peer publishes after the look
		// pokes.
		c.wait.wantEnd.Store(math.MaxUint64)
		if c.enter() {
			atomic.StoreUint32(c.out.ring.C.Wait, 1)
			c.leave()
		}
		c.progress(nil)
	}
	if mask&(verbs.QPAttrAccessFlags|verbs.QPAttrMinRNRTimer) != 0 && c.enter() {
		if mask&verbs.QPAttrAccessFlags != 0 {
			atomic.StoreUint32(c.mine.U32(offAccess), uint32(attr.QPAccessFlags))
			c.mine.moved() // the peer's direct window checks them again
		}
		if mask&verbs.QPAttrMinRNRTimer != 0 {
			atomic.StoreUint32(c.mine.U32(offMinRNR), uint32(attr.MinRNRTimer))
		}
		c.leave()
	}
	return nil
}

// RecvPosted implements engine.Transport: a SEND waiting for a receive can go on.
func (c *conn) RecvPosted() {
	if c.in.held.Load() {
		c.progress(nil)
	}
}

// Shutdown implements engine.Transport. A QP in ERR stops consuming and tells
// its peer, whose requests then fail; a QP reset or destroyed ends the
// connection. It runs with the QP locked: it only sets flags and pokes,
// and lets go of the region oneSidedDirect held (the QP's lock keeps it
// out of a direct window).
func (c *conn) Shutdown(destroyed bool) {
	c.in.stopped.Store(true)
	c.dropHeld() // no direct request comes after (they need RTS)
	if c.enter() {
		c.publishAckable() // what we consumed was executed: the peer must see it before our failure
		atomic.StoreUint32(c.mine.U32(offState), stateErr)
		c.mine.moved()
		c.leave()
		c.poke()
	}
	if destroyed || c.ep.State() == verbs.QPSReset {
		c.close(ErrLocalDisconnect)
	}
}
