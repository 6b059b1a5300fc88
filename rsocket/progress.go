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
