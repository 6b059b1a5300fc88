package rsocket

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"

	"github.com/goverbs/goverbs/verbs"
)

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
	// A signaled request (or any request flushed by an error) gives back
	// what it and the unsignaled ones before it held.
	c.sqeAvail += int(wc.WRID >> wrSQEShift & 0xfff)
	c.ctrlUsed -= int(wc.WRID >> wrCtlShift & wrCountMax)
	c.sbufAvail += int(uint32(wc.WRID))
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
		err = c.postWriteMsg(true, 0, nil, c.ctrlB[:], m,
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

// signal decides whether the send request being posted, which holds sqe
// data work requests, ctrl control slots and held bytes of the staging
// buffer, is signaled, and returns its flags and WRID. Most are not: a
// completion wakes a blocked call (the peer's consumption of each data
// message woke the writer, as many times as it sent messages, when only
// the peer's credits could let it go on), and over shared memory a
// signaled request is acknowledged at once. A request is signaled when it
// ends a call's use of the connection (force: a disconnect or shutdown,
// which Close waits for), when the run of unsignaled ones is long, and
// when a resource it takes is below half after it: then a call that finds
// one exhausted always has a signaled request outstanding that gives it
// back (the last one to take it). The caller has taken the resources
// already (or takes ctrl here).
func (c *Conn) signal(sqe, ctrl, held int, force bool) (verbs.SendFlags, uint64) {
	c.ctrlUsed += ctrl
	u := &c.unsig
	u.n++
	u.sqe += sqe
	u.ctrl += ctrl
	u.held += held
	if !force && u.n < maxUnsignaled && u.ctrl < wrCountMax &&
		(sqe == 0 || c.sqeAvail >= c.sq/2) &&
		(held == 0 || c.sbufAvail >= c.sbufSize/2) &&
		(ctrl == 0 || c.ctrlUsed < ctrlSlots/2) {
		return 0, 0
	}
	id := uint64(u.sqe)<<wrSQEShift | uint64(u.ctrl)<<wrCtlShift | uint64(uint32(u.held))
	*u = unsignaled{}
	return verbs.SendSignaled, id
}

// unpost undoes what signal recorded for a request that could not be
// posted (the connection fails: only Close's accounting still looks).
func (c *Conn) unpost(saved unsignaled, ctrl int) {
	c.unsig = saved
	c.ctrlUsed -= ctrl
}

// postMsg sends a control message alone (rs_post_msg). A disconnect or
// shutdown is signaled (Close waits for every request to complete).
func (c *Conn) postMsg(m uint32) error {
	w := &c.swr[0]
	saved := c.unsig
	force := msgOp(m) == opCtrl
	flags, id := c.signal(0, 1, 0, force)
	if c.msgSend {
		binary.LittleEndian.PutUint32(c.msgB[0][:], m)
		*w = verbs.SendWR{WRID: id, Opcode: verbs.WRSend, Flags: flags | verbs.SendInline, Inline: c.msgB[0][:]}
	} else {
		// A zero-length write: its address and key are those of the peer's
		// target SGL, valid whatever a provider checks.
		*w = verbs.SendWR{WRID: id, Opcode: verbs.WRRDMAWriteWithImm, Flags: flags,
			ImmData: m, RemoteAddr: c.remoteSGL.Addr, RKey: c.remoteSGL.Key}
	}
	if err := c.qp.PostSend(c.swr[:1]); err != nil {
		c.unpost(saved, 1)
		return fmt.Errorf("posting a control message: %w", err)
	}
	return nil
}

// postWriteMsg writes sgl (or inline) to the peer and announces it with m
// (rs_post_write_msg): one WRITE WITH IMMEDIATE, or on iWARP a WRITE and a
// SEND (the WRITE unsignaled: the SEND's completion covers it). ctrl says
// whether it is a control message (a credit update) rather than data;
// held is the staging-buffer bytes the write holds until it completes.
func (c *Conn) postWriteMsg(ctrl bool, held int, sgl []verbs.SGE, inline []byte, m uint32, raddr uint64, rkey uint32) error {
	sqe, nctrl := 1, 0
	if ctrl {
		sqe, nctrl = 0, 1
	}
	if c.msgSend {
		sqe, nctrl = 2*sqe, 2*nctrl
	}
	saved := c.unsig
	flags, id := c.signal(sqe, nctrl, held, false)
	w := &c.swr[0]
	*w = verbs.SendWR{WRID: id, Opcode: verbs.WRRDMAWriteWithImm, Flags: flags,
		SGList: sgl, ImmData: m, RemoteAddr: raddr, RKey: rkey}
	if inline != nil {
		w.Flags |= verbs.SendInline
		w.Inline = inline
	}
	n := 1
	if c.msgSend {
		w.Opcode = verbs.WRRDMAWrite
		w.Flags &^= verbs.SendSignaled
		w.WRID = 0
		b := c.msgB[0][:]
		if !ctrl {
			b = c.msgB[1][:] // the data path may run beside a control message
		}
		binary.LittleEndian.PutUint32(b, m)
		c.swr[1] = verbs.SendWR{WRID: id, Opcode: verbs.WRSend, Flags: flags | verbs.SendInline, Inline: b}
		n = 2
	}
	if err := c.qp.PostSend(c.swr[:n]); err != nil {
		c.unpost(saved, nctrl)
		return fmt.Errorf("posting a write: %w", err)
	}
	return nil
}
