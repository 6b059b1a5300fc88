package rsocket

import (
	"context"
	"errors"
	"io"
	"net"
	"time"
)

// Close closes the connection: data written before is delivered, the peer
// reads io.EOF, blocked Reads and Writes return net.ErrClosed. It waits at
// most a few seconds for the peer's transport to take what was written.
// A second Close returns nil (goverbs' rule; a *net.TCPConn's returns
// net.ErrClosed).
func (c *Conn) Close() error {
	if c.closed.Swap(true) {
		return nil
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

// LocalAddr returns the local address: that of the rdmacm identifier (a
// *net.TCPAddr over iWARP, an *rdmacm.Addr over RoCE and shared memory,
// whose String is the address with its scheme).
func (c *Conn) LocalAddr() net.Addr { return c.laddr }

// RemoteAddr returns the peer's address, of LocalAddr's types.
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
