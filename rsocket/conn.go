package rsocket

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
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
	maxXfer        = 128 << 10 // largest single data message
	maxInline      = 4096      // largest inline data asked of a device
	closeDrainTime = time.Second
	maxSpin        = 50 * time.Microsecond
	minSpin        = 5 * time.Microsecond
	idleHandoff    = time.Millisecond
	wcBatch        = 32
)

// Kinds of send work requests, in bits 62:60 of the WRID; bits 31:0 hold
// the bytes of the staging buffer the request holds.
const (
	wrRecv    = 1 << 63
	wrData    = 1 << 60 // a data RDMA WRITE (with immediate or not)
	wrDataMsg = 2 << 60 // the SEND announcing a data WRITE (iWARP)
	wrCtrl    = 3 << 60 // a control message or credit update
	wrKind    = 7 << 60
)

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

	sentDisc bool  // we sent RS_CTRL_DISCONNECT
	peerEOF  bool  // the peer shut down writing (or disconnected)
	peerGone bool  // the peer disconnected: nothing more may be posted
	wrShut   bool  // CloseWrite was called
	err      error // the connection failed

	active     atomic.Int32 // Reads and Writes in progress
	idleTimer  *time.Timer
	idleMu     sync.Mutex
	idleCancel context.CancelFunc // ends the waiter's idle CQ.Wait
	closed     atomic.Bool
	closedCh   chan struct{}
	ctx        context.Context // for CQ.Wait; cancelled by Close
	cancel     context.CancelFunc
	needWait   chan struct{}
	waitDone   chan struct{}
	rd, wr     direction

	// Scratch space of the hot paths, so that they do not allocate.
	swr   [2]verbs.SendWR
	ssge  [2][2]verbs.SGE
	rwr   [wcBatch]verbs.RecvWR
	rsge  [wcBatch][1]verbs.SGE
	ctrlB [sgeLen]byte
	msgB  [2][msgLen]byte
}

// direction is the deadline and the wait of one side (read or write).
type direction struct {
	deadline atomic.Int64 // UnixNano; 0: none
	wc       waitCtx      // what a blocked call's CQ.Wait waits on
	tmu      sync.Mutex
	timer    *time.Timer
	nudge    *time.Timer   // wakes a blocked call to nudge the peer (iWARP)
	spin     time.Duration // current spin budget (adaptive)
}

func (d *direction) init() {
	d.timer = time.AfterFunc(time.Hour, d.wc.fire)
	d.timer.Stop()
	d.nudge = time.AfterFunc(time.Hour, d.wc.fire)
	d.nudge.Stop()
	d.spin = maxSpin
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
}

// SetWake makes fire call f too (nil: no more): the engine's CQ.Wait,
// parked in a transport's socket, is interrupted by it without a
// goroutine of context.AfterFunc's per wait.
func (w *waitCtx) SetWake(f func()) {
	w.mu.Lock()
	w.wake = f
	w.mu.Unlock()
}

func (w *waitCtx) arm() {
	w.mu.Lock()
	w.ch, w.fired = make(chan struct{}), false
	w.mu.Unlock()
}

func (w *waitCtx) fire() {
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
	c.rd.init()
	c.wr.init()
	c.idleTimer = time.AfterFunc(time.Hour, func() {
		if c.active.Load() == 0 {
			notify(c.needWait)
		}
	})
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

// waiter polls while no Read or Write does: the protocol goes on (the
// peer's disconnect is answered) while the application is elsewhere.
func (c *Conn) waiter() {
	defer close(c.waitDone)
	for {
		// A Read or Write in progress polls by itself and waits in
		// CQ.Wait itself when it blocks; otherwise this goroutine keeps
		// the protocol going (the peer's disconnect is answered even
		// while the application is busy elsewhere).
		var ctx context.Context
		var cancel context.CancelFunc
		if c.active.Load() > 0 {
			select {
			case <-c.needWait: // the idle timer: no call for idleHandoff
			case <-c.closedCh:
				return
			}
			continue
		} else {
			// Idle: wait until a call starts (busy cancels this wait). Left
			// blocked in CQ.Wait while a call polls, this goroutine would
			// miss the completions of a QP that the call's polling put in
			// polled mode, once the call blocks in turn.
			ctx, cancel = context.WithCancel(c.ctx)
			c.idleMu.Lock()
			c.idleCancel = cancel
			c.idleMu.Unlock()
			if c.active.Load() > 0 || c.closed.Load() {
				cancel()
			}
		}
		err := c.cq.Wait(ctx)
		if cancel != nil {
			c.idleMu.Lock()
			c.idleCancel = nil
			c.idleMu.Unlock()
			cancel()
		}
		if err != nil {
			if c.ctx.Err() != nil {
				return
			}
			if ctx.Err() != nil {
				continue // a call started
			}
			c.mu.Lock()
			c.fail(fmt.Errorf("waiting for completions: %w", err))
			c.mu.Unlock()
			c.rd.wc.fire()
			c.wr.wc.fire()
			return
		}
		c.mu.Lock()
		c.pollLocked()
		c.mu.Unlock()
	}
}

// fail records the connection's first failure.
func (c *Conn) fail(err error) {
	if c.err == nil {
		c.err = err
	}
}

// pollLocked takes every completion and updates the protocol state.
func (c *Conn) pollLocked() int {
	total := 0
	for {
		n, err := c.cq.Poll(c.wc[:])
		for i := range n {
			c.handle(&c.wc[i])
		}
		total += n
		if err != nil {
			c.fail(fmt.Errorf("polling: %w", err))
			break
		}
		if n < len(c.wc) {
			break
		}
	}
	if total > 0 {
		if c.peerGone && !c.sentDisc && c.err == nil && c.ctrlAvail() {
			// Answer the peer's disconnect: a goverbs peer waits for it
			// before it closes its transport, so that nothing we send
			// meets a closed socket and takes our unread data with it.
			c.sentDisc = true
			c.postMsg(msgSet(opCtrl, ctrlDisconnect))
		}
		if c.repost > 0 && !c.peerGone && c.err == nil {
			if err := c.postRecvs(); err != nil {
				c.fail(err)
			}
		}
		c.rd.wc.fire() // a blocked call looks again
		c.wr.wc.fire()
	}
	c.updateCredits()
	return total
}

var errProtocol = errors.New("rsocket: protocol violation by the peer")

func (c *Conn) handle(wc *verbs.WC) {
	if wc.WRID&wrRecv != 0 {
		if wc.Status != verbs.WCSuccess {
			if !c.peerGone {
				c.fail(fmt.Errorf("%w: %v", syscall.ECONNRESET, wc.Err()))
			}
			return
		}
		var m uint32
		switch {
		case wc.Flags&verbs.WCFlagWithImm != 0:
			m = wc.ImmData
		case c.msgSend && wc.ByteLen == msgLen:
			i := int(wc.WRID &^ wrRecv)
			m = binary.LittleEndian.Uint32(c.rbuf[c.msgOff+i*msgLen:])
		default:
			c.fail(fmt.Errorf("%w: a message of %d bytes without immediate data", errProtocol, wc.ByteLen))
			return
		}
		c.repost++
		switch msgOp(m) {
		case opData:
			n := int(msgData(m))
			count := c.rmsgTail - c.rmsgHead
			if count < 0 {
				count += len(c.rmsg)
			}
			if n == 0 || c.rbufQueued+n > c.rbufSize || count >= c.rq {
				c.fail(fmt.Errorf("%w: %d bytes beyond the buffer or credits", errProtocol, n))
				return
			}
			c.rmsg[c.rmsgTail] = uint32(n)
			if c.rmsgTail++; c.rmsgTail == len(c.rmsg) {
				c.rmsgTail = 0
			}
			c.rbufQueued += n
		case opSGL:
			c.sseqComp = uint16(msgData(m))
			c.loadTargets()
		case opCtrl:
			switch msgData(m) {
			case ctrlDisconnect:
				c.peerEOF, c.peerGone = true, true
			case ctrlShutdown:
				c.peerEOF = true
				if c.wrShut {
					c.peerGone = true
				}
			}
		case opIOMapSG:
			// riomap's mappings: we offer none, so none are used.
		default:
			c.fail(fmt.Errorf("%w: message %#x", errProtocol, m))
		}
		return
	}
	switch wc.WRID & wrKind {
	case wrData:
		c.sqeAvail++
		c.sbufAvail += int(uint32(wc.WRID))
	case wrDataMsg:
		c.sqeAvail++
	case wrCtrl:
		c.ctrlUsed--
	}
	if wc.Status != verbs.WCSuccess && !c.peerGone {
		c.fail(fmt.Errorf("%w: %v", syscall.ECONNRESET, wc.Err()))
	}
}

// loadTargets takes the SGL entries the peer wrote into our target SGL:
// an entry is only ever rewritten once we used up the previous one, and we
// clear it when we take it, so a non-zero entry is always a new one. The
// peer may be writing an entry as we look (the SGL message announcing it
// may not even be sent yet), so loadSGE takes only whole entries, and a
// writer with no target looks again before it waits (sendRoom), as
// rsocket's rsend reads its target SGL when it sends.
func (c *Conn) loadTargets() {
	for i := range c.target {
		if c.target[i].Length != 0 {
			continue
		}
		b := c.rbuf[c.sglOff+i*sgeLen : c.sglOff+(i+1)*sgeLen]
		e, ok := loadSGE(b)
		if !ok {
			continue
		}
		if e.Length > maxMsgData {
			c.fail(fmt.Errorf("%w: a target of %d bytes", errProtocol, e.Length))
			return
		}
		c.target[i] = e
		clearSGE(b)
	}
}

// postRecvs posts the receives that completions used up.
func (c *Conn) postRecvs() error {
	for c.repost > 0 {
		n := min(c.repost, len(c.rwr))
		for i := range n {
			w := &c.rwr[i]
			if c.msgSend {
				*w = verbs.RecvWR{WRID: wrRecv | uint64(c.recvIdx)}
				c.rsge[i][0] = c.rmr.SGE(c.msgOff+c.recvIdx*msgLen, msgLen)
				w.SGList = c.rsge[i][:]
				if c.recvIdx++; c.recvIdx == c.rqPosted {
					c.recvIdx = 0
				}
			} else {
				*w = verbs.RecvWR{WRID: wrRecv}
			}
		}
		if err := c.qp.PostRecv(c.rwr[:n]); err != nil {
			return fmt.Errorf("posting receives: %w", err)
		}
		c.repost -= n
	}
	return nil
}

// ctrlAvail reports whether a control message fits (two work requests
// on iWARP: the WRITE and its SEND).
func (c *Conn) ctrlAvail() bool {
	if c.msgSend {
		return c.ctrlUsed+2 <= ctrlSlots
	}
	return c.ctrlUsed < ctrlSlots
}

// updateCredits gives the peer credits and buffer space when half of
// either was used (rs_give_credits).
func (c *Conn) updateCredits() {
	half := c.rbufSize / 2
	if !(c.rbufAvail >= half || int16(c.rseqNo-c.rseqComp) >= 0) || !c.ctrlAvail() || c.peerGone || c.sentDisc || c.err != nil || c.qp == nil {
		return
	}
	c.rseqComp = c.rseqNo + uint16(c.rq/2)
	m := msgSet(opSGL, uint32(c.rseqNo)+uint32(c.rq))
	var err error
	if c.rbufAvail >= half {
		e := sge{Addr: c.rmr.RemoteAddr(c.rbufFreeOffset), Key: c.rmr.RKey(), Length: uint32(half)}
		putSGE(c.ctrlB[:], e, c.peerOrder)
		err = c.postWriteMsg(wrCtrl, 0, nil, c.ctrlB[:], m,
			c.remoteSGL.Addr+uint64(c.remoteSGE)*sgeLen, c.remoteSGL.Key)
		c.rbufAvail -= half
		if c.rbufFreeOffset += half; c.rbufFreeOffset >= c.rbufSize {
			c.rbufFreeOffset = 0
		}
		if c.remoteSGE++; c.remoteSGE == int(c.remoteSGL.Length) {
			c.remoteSGE = 0
		}
	} else {
		err = c.postMsg(m)
	}
	if err != nil {
		c.fail(err)
	}
}

// postMsg sends a control message alone (rs_post_msg).
func (c *Conn) postMsg(m uint32) error {
	w := &c.swr[0]
	if c.msgSend {
		c.ctrlUsed++
		binary.LittleEndian.PutUint32(c.msgB[0][:], m)
		*w = verbs.SendWR{WRID: wrCtrl, Opcode: verbs.WRSend, Flags: verbs.SendSignaled | verbs.SendInline, Inline: c.msgB[0][:]}
	} else {
		c.ctrlUsed++
		// A zero-length write: its address and key are those of the peer's
		// target SGL, valid whatever a provider checks.
		*w = verbs.SendWR{WRID: wrCtrl, Opcode: verbs.WRRDMAWriteWithImm, Flags: verbs.SendSignaled,
			ImmData: m, RemoteAddr: c.remoteSGL.Addr, RKey: c.remoteSGL.Key}
	}
	if err := c.qp.PostSend(c.swr[:1]); err != nil {
		c.ctrlUsed--
		return fmt.Errorf("posting a control message: %w", err)
	}
	return nil
}

// postWriteMsg writes sgl (or inline) to the peer and announces it with m
// (rs_post_write_msg): one WRITE WITH IMMEDIATE, or on iWARP a WRITE and a
// SEND. kind is wrData or wrCtrl; held is the staging-buffer bytes the
// write holds until it completes.
func (c *Conn) postWriteMsg(kind uint64, held int, sgl []verbs.SGE, inline []byte, m uint32, raddr uint64, rkey uint32) error {
	w := &c.swr[0]
	*w = verbs.SendWR{WRID: kind | uint64(held), Opcode: verbs.WRRDMAWriteWithImm, Flags: verbs.SendSignaled,
		SGList: sgl, ImmData: m, RemoteAddr: raddr, RKey: rkey}
	if inline != nil {
		w.Flags |= verbs.SendInline
		w.Inline = inline
	}
	n := 1
	if kind == wrCtrl {
		c.ctrlUsed++
	}
	if c.msgSend {
		w.Opcode = verbs.WRRDMAWrite
		mk := wrDataMsg
		if kind == wrCtrl {
			mk = wrCtrl
			c.ctrlUsed++
		}
		b := c.msgB[0][:]
		if kind == wrData {
			b = c.msgB[1][:] // the data path may run beside a control message
		}
		binary.LittleEndian.PutUint32(b, m)
		c.swr[1] = verbs.SendWR{WRID: uint64(mk), Opcode: verbs.WRSend, Flags: verbs.SendSignaled | verbs.SendInline, Inline: b}
		n = 2
	}
	if err := c.qp.PostSend(c.swr[:n]); err != nil {
		return fmt.Errorf("posting a write: %w", err)
	}
	return nil
}

// Read reads data from the connection. After the peer's CloseWrite or
// Close, and once everything it sent was read, it returns io.EOF. Errors:
// os.ErrDeadlineExceeded after the read deadline, net.ErrClosed after
// Close, syscall.ECONNRESET when the peer's side failed (each wrapped in a
// *net.OpError).
func (c *Conn) Read(p []byte) (int, error) {
	c.readMu.Lock()
	defer c.readMu.Unlock()
	c.busy()
	defer c.idle()
	if c.closed.Load() {
		return 0, c.opErr("read", net.ErrClosed)
	}
	if c.rd.expired() {
		return 0, c.opErr("read", os.ErrDeadlineExceeded)
	}
	if len(p) == 0 {
		return 0, nil
	}
	var w waitState
	for {
		w.arm(&c.rd)
		c.mu.Lock()
		// Poll only when nothing is queued (rrecv's way): credits then go
		// back when the reader wants more, not after every read, and none
		// crosses a peer's close at the end of a stream (librdmacm's close
		// over iWARP resets the connection when one arrives late).
		count := c.rmsgTail - c.rmsgHead
		if count == 0 {
			c.pollLocked()
			count = c.rmsgTail - c.rmsgHead
		}
		if count != 0 {
			c.mu.Unlock()
			w.done(&c.rd)
			return c.copyOut(p), nil
		}
		eof, err := c.peerEOF, c.err
		c.mu.Unlock()
		if eof {
			w.done(&c.rd)
			return 0, io.EOF
		}
		if err != nil {
			return 0, c.opErr("read", err)
		}
		if err := c.block(&c.rd, &w); err != nil {
			return 0, c.opErr("read", err)
		}
	}
}

// busy starts a Read or Write; the first one takes polling back from the
// waiter.
func (c *Conn) busy() {
	if c.active.Add(1) == 1 {
		c.idleMu.Lock()
		if c.idleCancel != nil {
			c.idleCancel()
			c.idleCancel = nil
		}
		c.idleMu.Unlock()
	}
}

// idle ends a Read or Write; when none follows within idleHandoff, the
// waiter takes over polling (at once it would only compete with the next
// call's own polling, in a request/response loop).
func (c *Conn) idle() {
	if c.active.Add(-1) == 0 {
		c.idleTimer.Reset(idleHandoff)
	}
}

// copyOut copies received data into p (rrecv) and returns the credits
// and buffer space it frees.
func (c *Conn) copyOut(p []byte) int {
	c.mu.Lock()
	tail := c.rmsgTail
	c.mu.Unlock()
	n, msgs := 0, 0
	head := c.rmsgHead
	for n < len(p) && head != tail {
		size := int(c.rmsg[head])
		if left := len(p) - n; left < size {
			size = left
			c.rmsg[head] -= uint32(left)
		} else {
			msgs++
			if head++; head == len(c.rmsg) {
				head = 0
			}
		}
		for size > 0 {
			k := copy(p[n:n+size], c.rbuf[c.rbufOffset:c.rbufSize])
			n += k
			size -= k
			if c.rbufOffset += k; c.rbufOffset == c.rbufSize {
				c.rbufOffset = 0
			}
		}
	}
	c.mu.Lock()
	c.rmsgHead = head
	c.rbufQueued -= n
	c.rbufAvail += n
	c.rseqNo += uint16(msgs)
	c.mu.Unlock()
	return n
}

// waitState is one call's way through spinning and blocking.
type waitState struct {
	i        int
	start    time.Time
	blocking bool // the spin is over: arm before each look
	nudged   bool // the nudge timer ran out for this call
	timed    bool // the nudge timer is set
}

func (w *waitState) arm(d *direction) {
	if w.blocking {
		d.wc.arm()
	}
}

// done adapts the spin budget: a spin that found its event is worth
// its time again (doubled), one that had to block is halved, so that a
// call that always blocks (a server waiting for requests) stops burning
// a CPU that the other goroutines need; but never below minSpin, or a
// single preemption would ratchet the spin down for good and every
// round trip would then sleep (rsocket over shm: 26 us per 64-byte round
// trip instead of 2 at a load of 5).
func (w *waitState) done(d *direction) {
	if w.timed {
		d.nudge.Stop()
	}
	if w.i == 0 {
		return
	}
	if w.blocking {
		d.spin = max(d.spin/2, minSpin)
	} else {
		d.spin = min(2*d.spin+time.Microsecond, maxSpin)
	}
}

// block waits for the connection to change: a bounded spin first (a
// parked goroutine takes tens of microseconds to wake), then CQ.Wait on
// the direction's armed context, which a poll with news, a deadline or
// Close fires.
func (c *Conn) block(d *direction, w *waitState) error {
	if c.closed.Load() {
		return net.ErrClosed
	}
	if !w.blocking {
		w.i++
		if w.i == 1 {
			if d.expired() {
				return os.ErrDeadlineExceeded
			}
			w.start = time.Now()
		}
		if w.i&15 == 0 {
			if d.expired() {
				return os.ErrDeadlineExceeded
			}
			if time.Since(w.start) >= d.spin {
				w.blocking = true // arm, look once more, then wait
				return nil
			}
			runtime.Gosched()
		}
		return nil
	}
	if d.expired() {
		return os.ErrDeadlineExceeded
	}
	if c.msgSend && !w.timed {
		w.timed = true
		d.nudge.Reset(nudgeAfter)
	}
	err := c.cq.Wait(&d.wc)
	if c.closed.Load() {
		return net.ErrClosed
	}
	if w.timed && !w.nudged && time.Since(w.start) >= nudgeAfter {
		w.nudged = true
		c.mu.Lock()
		if c.err == nil && !c.peerGone && !c.sentDisc && c.ctrlAvail() {
			c.postMsg(msgSet(opCtrl, ctrlKeepalive))
		}
		c.mu.Unlock()
	}
	if d.expired() {
		return os.ErrDeadlineExceeded
	}
	if err != nil && err != context.Canceled {
		return err
	}
	return nil
}

// Write writes p to the connection; it returns when all of p is handed to
// the transport (buffered or in flight), or with the error that stopped it:
// os.ErrDeadlineExceeded, net.ErrClosed, syscall.EPIPE after CloseWrite or
// the peer's Close, syscall.ECONNRESET when the peer's side failed (wrapped
// in a *net.OpError).
func (c *Conn) Write(p []byte) (int, error) {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	c.busy()
	defer c.idle()
	if c.closed.Load() {
		return 0, c.opErr("write", net.ErrClosed)
	}
	if c.wr.expired() {
		return 0, c.opErr("write", os.ErrDeadlineExceeded)
	}
	n := 0
	var w waitState
	for n < len(p) {
		w.arm(&c.wr)
		c.mu.Lock()
		// Completions are reaped only when the write cannot go on
		// (rsend's way): fewer polls, and no credit update of ours that
		// nothing asked for.
		xfer, inline, ok := c.sendRoom(len(p) - n)
		if !ok {
			c.pollLocked()
			xfer, inline, ok = c.sendRoom(len(p) - n)
		}
		switch {
		case c.wrShut || c.peerGone:
			c.mu.Unlock()
			return n, c.opErr("write", syscall.EPIPE)
		case c.err != nil:
			err := c.err
			c.mu.Unlock()
			return n, c.opErr("write", err)
		}
		if !ok {
			c.mu.Unlock()
			if err := c.block(&c.wr, &w); err != nil {
				return n, c.opErr("write", err)
			}
			continue
		}
		need := 1
		if c.msgSend {
			need = 2
		}
		t := &c.target[c.targetSGE]
		w.done(&c.wr)
		w = waitState{}
		raddr, rkey := t.Addr, t.Key
		t.Addr += uint64(xfer)
		if t.Length -= uint32(xfer); t.Length == 0 {
			if c.targetSGE++; c.targetSGE == sglSize {
				c.targetSGE = 0
			}
		}
		c.sseqNo++
		c.sqeAvail -= need
		held := 0
		if !inline {
			held = xfer
			c.sbufAvail -= xfer
		}
		c.mu.Unlock()

		// The reservation is ours: fill the staging buffer and post
		// outside the lock, so that the reader is not held up by a copy.
		chunk := p[n : n+xfer]
		var err error
		if inline {
			err = c.postData(0, nil, chunk, raddr, rkey, xfer)
		} else {
			s0 := c.shead
			k := copy(c.sbuf[s0:], chunk)
			c.ssge[0][0] = c.smr.SGE(s0, k)
			sgl := c.ssge[0][:1]
			if k < xfer {
				copy(c.sbuf, chunk[k:])
				c.ssge[0][1] = c.smr.SGE(0, xfer-k)
				sgl = c.ssge[0][:2]
			}
			c.shead = (s0 + xfer) % c.sbufSize
			err = c.postData(held, sgl, nil, raddr, rkey, xfer)
		}
		if err != nil {
			c.mu.Lock()
			c.fail(err)
			c.mu.Unlock()
			return n, c.opErr("write", err)
		}
		n += xfer
	}
	return n, nil
}

// sendRoom says how much of left one data message may carry now.
func (c *Conn) sendRoom(left int) (xfer int, inline, ok bool) {
	need := 1
	if c.msgSend {
		need = 2
	}
	if c.target[c.targetSGE].Length == 0 {
		c.loadTargets()
	}
	xfer = min(left, int(c.target[c.targetSGE].Length), maxXfer)
	inline = xfer <= c.inline
	if !inline {
		xfer = min(xfer, c.sbufAvail)
	}
	return xfer, inline, c.sqeAvail >= need && c.sseqNo != c.sseqComp && xfer > 0
}

// postData posts one data message; the lock is taken only for the post
// itself, since control messages share the scratch work requests.
func (c *Conn) postData(held int, sgl []verbs.SGE, inline []byte, raddr uint64, rkey uint32, n int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.peerGone || c.err != nil {
		return c.errLocked()
	}
	return c.postWriteMsg(wrData, held, sgl, inline, msgSet(opData, uint32(n)), raddr, rkey)
}

func (c *Conn) errLocked() error {
	if c.err != nil {
		return c.err
	}
	return syscall.EPIPE
}

// CloseWrite shuts down the writing side (shutdown(SHUT_WR)): the peer
// reads io.EOF after the data written before; reading goes on.
func (c *Conn) CloseWrite() error {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	if c.closed.Load() {
		return c.opErr("close", net.ErrClosed)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.wrShut {
		return nil
	}
	c.wrShut = true
	if c.peerGone || c.err != nil {
		return nil
	}
	ctrl := uint32(ctrlShutdown)
	if c.peerEOF {
		ctrl = ctrlDisconnect
	}
	if err := c.sendCtrl(ctrl); err != nil {
		return c.opErr("close", err)
	}
	return nil
}

// sendCtrl posts a control message, waiting (boundedly) for a slot.
func (c *Conn) sendCtrl(ctrl uint32) error {
	deadline := time.Now().Add(closeDrainTime)
	for !c.ctrlAvail() {
		c.mu.Unlock()
		runtime.Gosched()
		c.mu.Lock()
		c.pollLocked()
		if c.peerGone || c.err != nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("rsocket: no room for a control message")
		}
	}
	return c.postMsg(msgSet(opCtrl, ctrl))
}

// Close closes the connection: data written before is delivered, the peer
// reads io.EOF, blocked Reads and Writes return net.ErrClosed. It waits at
// most a few seconds for the peer's transport to take what was written.
func (c *Conn) Close() error {
	if c.closed.Swap(true) {
		return c.opErr("close", net.ErrClosed)
	}
	close(c.closedCh)
	c.rd.wc.fire()
	c.wr.wc.fire()
	c.readMu.Lock()
	defer c.readMu.Unlock()
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	// Stop the waiter first: from here on this goroutine alone polls, and
	// a CQ.Wait of its own would miss the completions another poller took.
	c.cancel()
	<-c.waitDone

	c.mu.Lock()
	if !c.sentDisc && c.err == nil {
		c.sentDisc = true
		c.sendCtrl(ctrlDisconnect)
	}
	c.mu.Unlock()
	// Let the sends complete, so that the disconnect does not flush them,
	// and wait for the peer's answering disconnect (librdmacm's rsocket
	// sends none: then the wait ends at its bound).
	deadline := time.Now().Add(closeDrainTime)
	for {
		c.mu.Lock()
		c.pollLocked()
		done := (c.sqeAvail == c.sq && c.ctrlUsed == 0 && c.peerGone) || c.err != nil
		c.mu.Unlock()
		if done || time.Now().After(deadline) {
			break
		}
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		c.cq.Wait(ctx)
		cancel()
	}
	c.rd.set(time.Time{})
	c.wr.set(time.Time{})
	c.idleTimer.Stop()
	return c.free()
}

// free releases everything; the QP first, since it uses the rest.
func (c *Conn) free() error {
	var errs []error
	if c.closeFn != nil {
		errs = append(errs, c.closeFn())
	}
	if c.smr != nil {
		errs = append(errs, c.smr.Dereg())
	}
	if c.rmr != nil {
		errs = append(errs, c.rmr.Dereg())
	}
	if c.cq != nil {
		errs = append(errs, c.cq.Destroy())
	}
	if c.sb != nil {
		errs = append(errs, c.sb.Free())
	}
	if c.rb != nil {
		errs = append(errs, c.rb.Free())
	}
	if c.cancel != nil {
		c.cancel()
	}
	return errors.Join(errs...)
}

func (c *Conn) opErr(op string, err error) error {
	if err == io.EOF {
		return err
	}
	return &net.OpError{Op: op, Net: "rdma", Source: c.laddr, Addr: c.raddr, Err: err}
}

// LocalAddr returns the local address: that of the rdmacm identifier
// (a *net.TCPAddr over iWARP or RoCE, a *net.UnixAddr over shared memory).
func (c *Conn) LocalAddr() net.Addr { return c.laddr }

// RemoteAddr returns the peer's address.
func (c *Conn) RemoteAddr() net.Addr { return c.raddr }

// SetDeadline sets the read and write deadlines. A deadline moved while a
// call is blocked applies to that call.
func (c *Conn) SetDeadline(t time.Time) error {
	c.rd.set(t)
	c.wr.set(t)
	return nil
}

// SetReadDeadline sets the deadline of Read calls.
func (c *Conn) SetReadDeadline(t time.Time) error { c.rd.set(t); return nil }

// SetWriteDeadline sets the deadline of Write calls.
func (c *Conn) SetWriteDeadline(t time.Time) error { c.wr.set(t); return nil }

func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
