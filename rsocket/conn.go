package rsocket

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goverbs/goverbs/verbs"
)

// Sizes of a connection's resources. The receive buffer is offered to the
// peer in two halves (rsocket's scheme); the peer never writes more than
// it was offered, and a Write never sends one message larger than maxXfer.
const (
	defaultRQ      = 256 // receive credits offered to the peer (messages)
	defaultSQ      = 256 // data work requests outstanding
	ctrlSlots      = 4   // RS_QP_CTRL_SIZE: control messages outstanding
	recvSlack      = 2 * ctrlSlots
	defaultRBuf    = 512 << 10 // receive buffer (two halves)
	defaultSBuf    = 512 << 10 // send staging buffer
	maxXfer        = 128 << 10 // largest single data message (but over shm)
	maxInline      = 4096      // largest inline data asked of a device
	closeDrainTime = time.Second
	maxSpin        = 300 * time.Microsecond
	idleHandoff    = time.Millisecond
	wcBatch        = 32
)

// A send work request's WRID: bit 63 clear (receives have wrRecv), and,
// on a signaled request, what its completion gives back, its own and that
// of the unsignaled requests before it (RC completes them in order): data
// work requests in bits 59:48, control slots in 47:40, bytes of the
// staging buffer in 31:0.
const (
	wrRecv     = 1 << 63
	wrSQEShift = 48
	wrCtlShift = 40
	wrCountMax = 1<<8 - 1
)

// maxUnsignaled bounds a run of unsignaled send requests, so that what a
// completion gives back fits its WRID and is never far behind.
const maxUnsignaled = 64

// Conn is a stream connection over an RC queue pair, speaking librdmacm's
// rsocket protocol. It implements net.Conn; its methods may be called
// concurrently.
type Conn struct {
	qp      *verbs.QP
	cq      *verbs.CQ
	rmr     *verbs.MR // receive buffer, target SGL and message slots
	smr     *verbs.MR // send staging buffer
	rb, sb  *verbs.Buffer
	rbuf    []byte
	sbuf    []byte
	closeFn func() error // tears down the QP and its identifier

	msgSend   bool // messages travel as SENDs (iWARP), not immediates
	maxXfer   int  // largest data message
	inline    int
	rq        int // credits offered
	rqPosted  int // receives kept posted (rq plus room for control messages)
	sq        int
	rbufSize  int
	sbufSize  int
	sglOff    int // offset of our target SGL in rbuf's buffer
	msgOff    int // offset of the message slots (iWARP)
	laddr     net.Addr
	raddr     net.Addr
	peerOrder binary.ByteOrder // byte order of the SGL entries we write to the peer
	remoteSGL sge              // the peer's target SGL

	readMu  sync.Mutex // one Read at a time; owns rbufOffset and rmsg[rmsgHead]
	writeMu sync.Mutex // one Write at a time; owns shead

	mu sync.Mutex // protocol state below, and polling the CQ
	wc [wcBatch]verbs.WC

	// Receive side.
	rmsg           []uint32 // lengths of the data messages received, not yet read
	rmsgHead       int
	rmsgTail       int
	rbufOffset     int
	rbufQueued     int // bytes received and not yet read
	rbufAvail      int // bytes read and not yet offered again
	rbufFreeOffset int
	rseqNo         uint16
	rseqComp       uint16
	remoteSGE      int
	recvIdx        int
	repost         int

	// Send side.
	sqeAvail  int
	sbufAvail int
	shead     int
	sseqNo    uint16
	sseqComp  uint16
	target    [sglSize]sge
	targetSGE int
	ctrlUsed  int
	unsig     unsignaled // given back by the next signaled request

	sentDisc bool  // we sent RS_CTRL_DISCONNECT
	peerEOF  bool  // the peer shut down writing (or disconnected)
	peerGone bool  // the peer disconnected: nothing more may be posted
	wrShut   bool  // CloseWrite was called
	err      error // the connection failed

	active      atomic.Int32 // Reads and Writes in progress
	idleTimer   *time.Timer
	idlePending atomic.Bool  // idleTimer is set
	idleAt      atomic.Int64 // when the last call ended, since epoch
	epoch       time.Time
	idleMu      sync.Mutex
	idleCancel  context.CancelFunc // ends the waiter's idle CQ.Wait
	closed      atomic.Bool
	closedCh    chan struct{}
	ctx         context.Context // for CQ.Wait; cancelled by Close
	cancel      context.CancelFunc
	needWait    chan struct{}
	waitDone    chan struct{}
	rd, wr      direction

	// Scratch space of the hot paths, so that they do not allocate.
	swr   [2]verbs.SendWR
	ssge  [2][2]verbs.SGE
	rwr   [wcBatch]verbs.RecvWR
	rsge  [wcBatch][1]verbs.SGE
	ctrlB [sgeLen]byte
	msgB  [2][msgLen]byte
}

// unsignaled is what the send requests posted since the last signaled one
// hold: the next signaled request's completion gives it back.
type unsignaled struct {
	n, sqe, ctrl, held int
}

// direction is the deadline and the wait of one side (read or write).
type direction struct {
	deadline atomic.Int64 // UnixNano; 0: none
	wc       waitCtx      // what a blocked call's CQ.Wait waits on
	tmu      sync.Mutex
	timer    *time.Timer
	nudge    *time.Timer        // wakes a blocked call to nudge the peer (iWARP)
	spin     verbs.AdaptiveSpin // a blocked call's spin (see waitState.done)
}

func (d *direction) init(spin time.Duration) {
	d.timer = time.AfterFunc(time.Hour, d.wc.fire)
	d.timer.Stop()
	d.nudge = time.AfterFunc(time.Hour, d.wc.fire)
	d.nudge.Stop()
	d.spin.SetMax(spin)
}

// nudgeAfter is how long a call blocks before it nudges an iWARP peer.
// Linux siw can leave a work request its application posted unsent until
// the next frame arrives (libsiw skips the doorbell while it sees the
// previous request still valid, and the kernel may just be finishing it):
// seen with librdmacm's rstream in blocking mode, which then waited for
// our data while we waited for its. A keepalive control message, which
// rsocket peers ignore, is that next frame.
const nudgeAfter = 200 * time.Millisecond

func (d *direction) set(t time.Time) {
	d.tmu.Lock()
	if t.IsZero() {
		d.deadline.Store(0)
		d.timer.Stop()
	} else {
		d.deadline.Store(t.UnixNano())
		d.timer.Reset(time.Until(t))
	}
	d.tmu.Unlock()
	d.wc.fire() // a blocked call looks at the new deadline
}

// waitCtx is the context a blocked call hands CQ.Wait: armed before the
// call's last look at the state, fired by whatever may change it (a poll
// that took completions, a deadline, Close). One per direction, so that
// blocking allocates only the channel.
type waitCtx struct {
	mu    sync.Mutex
	ch    chan struct{}
	fired bool
	wake  func() // SetWake's
	// armed is set from arm until the call's wait ends (disarm): fire
	// does nothing while no call waits, so that a poll's fires between
	// calls neither take the lock nor close a channel the next wait would
	// then have to make anew. arm's store and a state change's fire are
	// ordered as in Waker.Idle: the call looks at the state after arm, so
	// either it sees the change or fire sees armed.
	armed atomic.Bool
}

// SetWake makes fire call f too (nil: no more): the engine's CQ.Wait,
// parked in a transport's socket, is interrupted by it without a
// goroutine of context.AfterFunc's per wait.
func (w *waitCtx) SetWake(f func()) {
	w.mu.Lock()
	w.wake = f
	w.mu.Unlock()
}

// arm readies the context for a wait; the channel of an earlier wait
// that nothing fired is still open and serves again (a blocking wait
// allocates only after a fire).
func (w *waitCtx) arm() {
	w.mu.Lock()
	if w.ch == nil || w.fired {
		w.ch, w.fired = make(chan struct{}), false
	}
	w.mu.Unlock()
	w.armed.Store(true)
}

// disarm ends a call's wait: fires are not needed until the next arm.
func (w *waitCtx) disarm() {
	w.armed.Store(false)
}

func (w *waitCtx) fire() {
	if !w.armed.Load() {
		return
	}
	w.mu.Lock()
	if w.ch != nil && !w.fired {
		close(w.ch)
		w.fired = true
		if w.wake != nil {
			w.wake()
		}
	}
	w.mu.Unlock()
}

func (w *waitCtx) Deadline() (time.Time, bool) { return time.Time{}, false }
func (w *waitCtx) Value(any) any               { return nil }

func (w *waitCtx) Done() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ch
}

func (w *waitCtx) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fired {
		return context.Canceled
	}
	return nil
}

// expired reports whether the deadline has passed.
func (d *direction) expired() bool {
	dl := d.deadline.Load()
	return dl != 0 && time.Now().UnixNano() >= dl
}

// connSetup is what newConn needs of the transport.
type connSetup struct {
	ctx    *verbs.Context
	pd     *verbs.PD
	cq     *verbs.CQ // created by newConn when nil
	laddr  net.Addr
	raddr  net.Addr
	rq, sq int
	rbuf   int
	sbuf   int
	spin   time.Duration // Options.Spin
}

// newConn allocates a connection's buffers and CQ; the QP comes after
// (qpAttr), then start.
func newConn(s connSetup) (c *Conn, err error) {
	c = &Conn{
		rq:       s.rq,
		sq:       s.sq,
		rbufSize: s.rbuf,
		sbufSize: s.sbuf,
		laddr:    s.laddr,
		raddr:    s.raddr,
		msgSend:  s.ctx.Device().TransportType() == verbs.TransportIWARP,
		maxXfer:  maxXfer,
		closedCh: make(chan struct{}),
		needWait: make(chan struct{}, 1),
		waitDone: make(chan struct{}),
	}
	if c.rq == 0 {
		c.rq = defaultRQ
	}
	if c.sq == 0 {
		c.sq = defaultSQ
	}
	if c.rbufSize == 0 {
		c.rbufSize = defaultRBuf
	}
	if c.sbufSize == 0 {
		c.sbufSize = defaultSBuf
	}
	c.rbufSize &^= 1
	attr := s.ctx.QueryDevice()
	c.rqPosted = c.rq + recvSlack
	if max := attr.MaxQPWR; max > 0 {
		c.rqPosted = min(c.rqPosted, max)
		c.rq = min(c.rq, c.rqPosted-recvSlack)
		c.sq = min(c.sq, max-2*ctrlSlots)
	}
	if c.rq < 16 || c.sq < 16 || c.rbufSize < 4096 || c.sbufSize < 4096 {
		return nil, fmt.Errorf("rsocket: resources too small (rq %d, sq %d, rbuf %d, sbuf %d)", c.rq, c.sq, c.rbufSize, c.sbufSize)
	}
	if s.ctx.Device().TransportType() == verbs.TransportUnspecified {
		// Shared memory (shm0): a message as large as the peer's target
		// (half its buffer). A WRITE larger than 64 KiB posted while the
		// peer has not consumed the previous message waits for it, and is
		// then carried out by this side's progress, woken for it when this
		// side sleeps: every message is a point where both sides may
		// sleep, and a 1 MiB stream of 128 KiB messages slept about
		// twice as often on each side as one of 256 KiB messages.
		c.maxXfer = maxMsgData
	}
	c.inline = min(attr.MaxInlineData, maxInline)
	if c.inline < sgeLen {
		return nil, fmt.Errorf("%w: rsocket needs %d bytes of inline data, %s has %d", verbs.ErrNotSupported, sgeLen, s.ctx.Device().Name(), c.inline)
	}
	defer func() {
		if err != nil {
			c.free()
		}
	}()
	c.cq = s.cq
	if c.cq == nil {
		if c.cq, err = s.ctx.CreateCQ(c.rqPosted+c.sq+2*ctrlSlots, nil); err != nil {
			return nil, err
		}
	}
	// block spins first, for as long as spinning has been paying off;
	// CQ.Wait's own spin after it would keep a CPU busy regardless.
	c.cq.SetWaitSpin(0)
	c.sglOff = c.rbufSize
	c.msgOff = c.sglOff + sglSize*sgeLen
	if c.rb, err = verbs.AllocBuffer(c.msgOff + c.rqPosted*msgLen); err != nil {
		return nil, err
	}
	// Remote read too: the shared-memory provider maps only regions that
	// grant both, and then the peer's writes are a plain memcpy.
	if c.rmr, err = s.pd.RegMR(c.rb.Bytes(), verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead); err != nil {
		return nil, err
	}
	if c.sb, err = verbs.AllocBuffer(c.sbufSize); err != nil {
		return nil, err
	}
	if c.smr, err = s.pd.RegMR(c.sb.Bytes(), verbs.AccessLocalWrite); err != nil {
		return nil, err
	}
	c.rbuf = c.rb.Bytes()
	c.sbuf = c.sb.Bytes()[:c.sbufSize]
	c.rmsg = make([]uint32, c.rq+1)
	c.rbufFreeOffset = c.rbufSize / 2
	c.rbufAvail = c.rbufSize / 2
	c.rseqComp = uint16(c.rq / 2)
	c.sqeAvail = c.sq
	c.sbufAvail = c.sbufSize
	c.ctx, c.cancel = context.WithCancel(context.Background())
	spin := s.spin // Options.Spin: 0 the default, negative none
	switch {
	case spin == 0:
		spin = maxSpin
	case spin < 0:
		spin = 0
	}
	c.rd.init(spin)
	c.wr.init(spin)
	c.epoch = time.Now()
	c.idleTimer = time.AfterFunc(time.Hour, c.idleFired)
	c.idleTimer.Stop()
	return c, nil
}

// qpAttr is the QP a connection needs.
func (c *Conn) qpAttr() verbs.QPInitAttr {
	return verbs.QPInitAttr{
		SendCQ: c.cq, RecvCQ: c.cq, QPType: verbs.QPTRC,
		Cap: verbs.QPCap{
			MaxSendWR: c.sq + 2*ctrlSlots, MaxRecvWR: c.rqPosted,
			MaxSendSGE: 2, MaxRecvSGE: 1, MaxInlineData: c.inline,
		},
	}
}

// postInitialRecvs fills the receive queue; it runs before the connection
// is offered, so that the peer's first message finds a receive.
func (c *Conn) postInitialRecvs(qp *verbs.QP) error {
	c.qp = qp
	c.repost = c.rqPosted
	return c.postRecvs()
}

// localData is the connection data we offer.
func (c *Conn) localData() []byte {
	d := connData{
		Version: connDataVersion,
		Flags:   flagIOMap, // little-endian host; an iomap of size 0
		Credits: uint16(c.rq),
		TargetSGL: sge{
			Addr: c.rmr.RemoteAddr(c.sglOff), Key: c.rmr.RKey(), Length: sglSize,
		},
		DataBuf: sge{Addr: c.rmr.RemoteAddr(0), Key: c.rmr.RKey(), Length: uint32(c.rbufSize / 2)},
	}
	b := make([]byte, connDataLen)
	d.encode(b)
	return b
}

// start takes the peer's connection data and starts the connection.
func (c *Conn) start(peer []byte) error {
	var d connData
	if err := d.decode(peer); err != nil {
		return err
	}
	c.remoteSGL = d.TargetSGL
	c.remoteSGE = 1 // entry 0 is the peer's DataBuf
	c.peerOrder = binary.LittleEndian
	if d.Flags&flagNet != 0 {
		c.peerOrder = binary.BigEndian
	}
	c.target[0] = d.DataBuf
	c.sseqComp = d.Credits
	// The second half of the buffer is offered by the first poll, as
	// rsocket does, not at once: a C rsocket still accepting takes an early
	// credit update badly (its first reply can stall).
	go c.waiter()
	return nil
}
