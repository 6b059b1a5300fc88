package rsocket

import (
	"fmt"
	"net"
	"os"
	"runtime"
	"syscall"
	"time"

	"github.com/goverbs/goverbs/verbs"
)

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
	xfer = min(left, int(c.target[c.targetSGE].Length), c.maxXfer)
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
	return c.postWriteMsg(false, held, sgl, inline, msgSet(opData, uint32(n)), raddr, rkey)
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
