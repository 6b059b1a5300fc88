package iwarp

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/goverbs/goverbs/internal/cm"
	"github.com/goverbs/goverbs/internal/engine"
	"github.com/goverbs/goverbs/internal/wire"
	"github.com/goverbs/goverbs/verbs"
)

var (
	errCMOnly = fmt.Errorf("%w: iWARP QPs are connected by the connection manager (rdmacm), not by Modify", verbs.ErrInvalid)
	// ErrDisconnected reports that the peer closed the connection.
	ErrDisconnected = fmt.Errorf("iwarp: %w", cm.ErrPeerDisconnect)
	// ErrLocalDisconnect reports that this side disconnected or destroyed the QP.
	ErrLocalDisconnect = fmt.Errorf("iwarp: %w", cm.ErrLocalDisconnect)
	// ErrRemoteTerminate reports a Terminate received from the peer.
	ErrRemoteTerminate = errors.New("iwarp: terminated by the peer")
)

// TerminateError is the error of a connection torn down by a Terminate, sent or received.
type TerminateError struct {
	Sent  bool
	Cause wire.TermError
	Info  string
}

// Error describes the Terminate and its direction.
func (e *TerminateError) Error() string {
	dir := "received"
	if e.Sent {
		dir = "sent"
	}
	if e.Info != "" {
		return fmt.Sprintf("iwarp: Terminate %s: %v (%s)", dir, e.Cause, e.Info)
	}
	return fmt.Sprintf("iwarp: Terminate %s: %v", dir, e.Cause)
}

// Unwrap makes a received Terminate match ErrRemoteTerminate.
func (e *TerminateError) Unwrap() error {
	if e.Sent {
		return nil
	}
	return ErrRemoteTerminate
}

// goverbs flags in the second word of an RFC 7306 immediate.
const (
	immSendFollows = 1
	immAfterWrite  = 2
)

// conn is a connected QP's wire: its TCP connection and the DDP/RDMAP state.
type conn struct {
	ep   engine.Endpoint
	req  engine.Requester
	resp engine.Responder
	nc   net.Conn
	raw  syscall.RawConn
	// fd is raw's descriptor, which the polled paths (Progress, put,
	// progressTx) use without RawControl's reference count (some two
	// hundred instructions a call, two calls a message). It stays open
	// while they may use it: txLoop marks it gone under each of their
	// locks (tx.fdGone, rx.fdGone) before it closes the socket.
	fd      int
	crc     bool
	ext     bool
	passive bool
	ird     int
	ord     int
	pdata   []byte

	tx     txSide  // the stream's transmit side (tx.go)
	orq    orq     // Reads and atomics we issued (orq.go)
	irq    irq     // the peer's Reads and atomics we answer (irq.go)
	rx     rxSide  // the receive side (rx.go)
	su     startup // the MPA start-up rule and the nudge of a silent siw (startup.go)
	txWake chan struct{}
	// needProgress: the transmit goroutine should call Requester.Transmit
	needProgress atomic.Bool
	// stall bounds an incomplete frame (stall.go); nil: no bound
	stall        *time.Timer
	frameTimeout time.Duration

	// lifetime
	once  sync.Once
	err   error
	term  []byte // Terminate to send before closing
	dying chan struct{}
	// dead is set as dying is closed: the per-message checks (Send)
	// load it, where a select on the channel cost some sixty instructions.
	dead   atomic.Bool
	done   chan struct{}
	rxDone chan struct{}
	// estab is closed once the QP is established: the receive side starts
	// only then, so that a message arriving at once (the peer may send as
	// soon as it has the MPA Reply) never meets a QP still in INIT.
	estab     chan struct{}
	estabDone atomic.Bool

	// sendGone is set when a write found the peer gone (readFirst):
	// the receive side ends the connection, after what the peer sent
	// before it left; goneTimer ends it anyway after goneWait.
	sendGone  atomic.Bool
	goneMu    sync.Mutex
	goneTimer *time.Timer
	// rxHold, when a test sets it, is waited on by the receive goroutine
	// before each read.
	rxHold atomic.Pointer[chan struct{}]
}

func newConn(ep engine.Endpoint, nc net.Conn, n wire.Negotiated, ext, passive bool, pdata []byte, cfg Config) *conn {
	c := &conn{
		ep: ep, req: ep.Requester(), resp: ep.Responder(), nc: nc, crc: n.CRC, ext: ext, passive: passive, ird: n.IRD, ord: n.ORD, pdata: pdata,
		txWake: make(chan struct{}, 1), dying: make(chan struct{}), done: make(chan struct{}), rxDone: make(chan struct{}),
		estab: make(chan struct{}),
	}
	for i := range c.tx.msn {
		c.tx.msn[i] = 1
	}
	c.tx.maxFPDU = cfg.MaxFPDU
	if c.tx.maxFPDU <= 0 {
		c.tx.maxFPDU = mss(nc)
	}
	c.tx.maxFPDU = min(c.tx.maxFPDU, wire.MaxULPDULen+wire.MPALenLen+wire.CRCLen)
	setDeadPeer(nc, cfg.DeadPeerTimeout)
	if !passive {
		c.su.rxSeen.Store(true) // the initiator speaks first
	}
	c.rx.blockFn = c.blockFD
	c.tx.waitFn = c.writeRest
	c.rx.wake = make(chan struct{}, 1)
	for i := range c.rx.msn {
		c.rx.msn[i] = 1
	}
	if cfg.FrameTimeout > 0 {
		c.frameTimeout = cfg.FrameTimeout
		c.stall = time.AfterFunc(time.Hour, c.checkStall)
		c.stall.Stop() // armed by the receive side (armStall)
	} else {
		c.rx.stallArmed = true // no bound: never armed
	}
	return c
}

// start runs the connection's goroutines.
func (c *conn) start() error {
	sc, ok := c.nc.(syscall.Conn)
	if !ok {
		return fmt.Errorf("iwarp: %T has no file descriptor", c.nc)
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	c.raw = raw
	raw.Control(func(fd uintptr) { c.fd = int(fd) })
	if !c.su.rxSeen.Load() {
		// MPA's start-up rule makes the responder wait for the initiator's
		// first FPDU; siw needs it only until it has read the MPA Reply (it
		// fails if FPDUs follow the Reply in the same read). Some
		// applications have the responder speak first on a connection set up
		// long before (perftest's write_lat server writes first): after
		// nudgeDelay the responder may transmit anyway, as siw itself does.
		c.su.hold = time.AfterFunc(nudgeDelay, func() {
			if !c.su.rxSeen.Swap(true) {
				c.progressLater()
			}
		})
	}
	go c.rxLoop()
	go c.txLoop()
	return nil
}

// payloadMax is the payload of one FPDU with a header of hdrLen bytes.
func (c *conn) payloadMax(hdrLen int) int {
	return wire.MaxPayload(c.tx.maxFPDU, hdrLen)
}

// Modify implements engine.Transport: nothing to change on the wire.
func (c *conn) Modify(*verbs.QPAttr, verbs.QPAttrMask, verbs.QPState, verbs.QPState) error {
	return nil
}

// RecvPosted implements engine.Transport: iWARP has no RNR, nothing waits.
func (c *conn) RecvPosted() {}

// Shutdown implements engine.Transport: the QP left RTS (error, reset,
// destroy). It runs with the QP locked, so it only starts the teardown.
func (c *conn) Shutdown(destroyed bool) {
	c.close(ErrLocalDisconnect, nil)
}

// close tears the connection down once: the transmit goroutine sends term
// (if any), then closes the socket; the receive goroutine then ends. It
// never calls the QP.
func (c *conn) close(err error, term []byte) {
	c.once.Do(func() {
		c.err = err
		c.term = term
		// End the transmit goroutine's wait for room on the socket: at
		// once, or after a while to let the Terminate out.
		if term == nil {
			c.nc.SetWriteDeadline(time.Unix(1, 0))
		} else {
			c.nc.SetWriteDeadline(time.Now().Add(2 * time.Second))
		}
		c.dead.Store(true)
		close(c.dying)
		c.rx.park.Close() // a waiter blocked in the socket returns
		c.goneMu.Lock()
		if c.goneTimer != nil {
			c.goneTimer.Stop()
		}
		c.goneMu.Unlock()
	})
}

// goneWait bounds how long a connection whose peer is gone (readFirst)
// waits for its receive side to end it.
const goneWait = 2 * time.Second

// readFirst handles a write that found the peer gone, reset or closed
// (ECONNRESET, EPIPE): the connection does not end at once, which would
// flush the receives while the socket still holds what the peer sent
// before it left (TCP delivers that ahead of the reset's error), but when
// the receive side, reading on, meets the error (rxFailed). Linux siw
// processes each arrival as it comes and so never loses those; a peer
// resets the connection when it closes with bytes of ours unread (a
// librdmacm rsocket server that exits right after its last send). The
// requests meanwhile wait (Pending, Stall) and are flushed with the rest.
// A receive side that does not get there within goneWait (nobody reads:
// polled mode with no polls) has the connection end anyway. It reports
// false for any other error, and once the connection is dying.
func (c *conn) readFirst(err error) bool {
	if (!errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE)) || c.isDying() {
		return false
	}
	if c.sendGone.CompareAndSwap(false, true) {
		c.goneMu.Lock()
		if !c.isDying() {
			c.goneTimer = time.AfterFunc(goneWait, func() { c.fail(sendError(err), nil, nil) })
		}
		c.goneMu.Unlock()
	}
	return true
}

// linger lets the Terminate reach a peer that is still sending: closing a
// socket with unread bytes makes Linux send a reset, and the peer's kernel
// then drops what it had not delivered yet, the Terminate included. So the
// write side is shut (the Terminate goes out followed by a FIN) and what
// the peer still sends is read and discarded until it closes too or 2 s
// pass, so a hostile peer holds the socket no longer than a slow reader
// would. It reports whether the receive goroutine has ended.
func (c *conn) linger() bool {
	cw, ok := c.nc.(interface{ CloseWrite() error })
	if !ok || cw.CloseWrite() != nil {
		return false
	}
	c.nc.SetReadDeadline(time.Now().Add(2 * time.Second)) // also ends a receive goroutine that waits for bytes
	<-c.rxDone
	var buf [4096]byte
	for {
		if _, err := c.nc.Read(buf[:]); err != nil {
			return true
		}
	}
}

// fail closes the connection for err and moves the QP to ERR (flushing it),
// raising ev when ev is non-nil.
func (c *conn) fail(err error, term []byte, ev *verbs.EventType) {
	c.close(err, term)
	if ev != nil {
		c.ep.Fatal(*ev)
	} else {
		c.ep.Fail()
	}
}

// terminate builds the Terminate for cause on the offending header and fails the connection.
func (c *conn) terminate(cause wire.TermError, off wire.Header, ev *verbs.EventType, info string) {
	t := wire.TerminateFor(1, cause, off)
	b, _ := wire.AppendTerminate(make([]byte, 0, 128), &t)
	b = wire.FinishFPDU(b, 0, c.crc)
	c.fail(&TerminateError{Sent: true, Cause: cause, Info: info}, b, ev)
}

func evp(e verbs.EventType) *verbs.EventType { return &e }

// txLoop is the transmit goroutine. It writes what the socket did not take
// of a message at once (waiting for room: it is the one goroutine that
// may), sends responses (RDMA Read and atomic), the start-up nudge and, at
// the end, the Terminate; then it closes the socket.
func (c *conn) txLoop() {
	defer close(c.done)
	for {
		select {
		case <-c.txWake:
			if err := c.txWork(); err != nil && !c.readFirst(err) {
				c.fail(sendError(err), nil, nil)
			}
		case <-c.dying:
			c.tx.mu.Lock()
			// The Terminate follows whole FPDUs only: the rest of a message
			// goes first, if the socket takes it before the deadline that
			// close set.
			lingered := false
			if c.term != nil && (len(c.tx.rest) == 0 || c.wait() == nil) {
				if writeFrame(c.nc, c.ep.Num(), c.term) == nil {
					lingered = c.linger()
				}
			}
			captureOut(c.nc, c.ep.Num(), nil)
			c.tx.rest, c.tx.restW = nil, c.tx.restW[:0]
			if c.su.nudge != nil {
				c.su.nudge.Stop()
			}
			c.tx.fdGone = true
			c.tx.mu.Unlock()
			c.rx.mu.Lock()
			c.rx.fdGone = true
			c.rx.mu.Unlock()
			if c.su.hold != nil {
				c.su.hold.Stop()
			}
			if c.stall != nil {
				c.stall.Stop()
			}
			c.nc.Close()
			if !lingered {
				<-c.rxDone
			}
			return
		}
	}
}

// txWork is one round of the transmit goroutine.
func (c *conn) txWork() error {
	err := c.lockTx() // the rest of a message
	if err == nil {
		err = c.sendNudge()
	}
	c.releaseTx()
	if err != nil {
		return err
	}
	if c.needProgress.Swap(false) {
		c.req.Resume() // a send queue stalled on the MPA start-up rule or on a busy stream
		c.req.Transmit()
	}
	return c.sendResponses()
}

// Send implements engine.Transport: it puts w's message(s) on the stream.
// It never waits, neither for the socket nor for the stream's lock (see
// txSide): a message the socket takes only in part is Pending until the
// transmit goroutine has written the rest, and a busy stream is a Stall.
func (c *conn) Send(w *engine.WQE) engine.Result {
	if c.tx.batching {
		// The stream is ours since the Send that kept messages back.
		if c.dropKeptIfDying() {
			return engine.Fail(verbs.WCWRFlushErr)
		}
	} else {
		if c.dead.Load() {
			return engine.Fail(verbs.WCWRFlushErr)
		}
		if c.sendGone.Load() {
			return engine.ResultStall // flushed when the receive side ends the connection (readFirst)
		}
		if !c.su.rxSeen.Load() {
			return engine.ResultStall // MPA: the responder waits for the initiator's first FPDU
		}
		if !c.tryLockTx() {
			return engine.ResultStall // whoever frees the stream resumes the engine
		}
	}
	res := c.transmit(w)
	if !c.tx.batching {
		c.endSend()
	}
	return res
}

func (c *conn) wakeTx() {
	select {
	case c.txWake <- struct{}{}:
	default:
	}
}

// isDying reports whether the connection is being torn down.
func (c *conn) isDying() bool { return c.dead.Load() }
