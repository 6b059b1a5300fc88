package rsocket

import "fmt"

// DebugString is temporary.
func (c *Conn) DebugString() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprintf("sqe %d/%d sbuf %d sseq %d/%d tgt %v/%d rmsg %d-%d queued %d avail %d free %d rseq %d/%d ctrl %d active %d gone %v eof %v sent %v err %v remoteSGE %d repost %d",
		c.sqeAvail, c.sq, c.sbufAvail, c.sseqNo, c.sseqComp, c.target, c.targetSGE, c.rmsgHead, c.rmsgTail, c.rbufQueued, c.rbufAvail, c.rbufFreeOffset, c.rseqNo, c.rseqComp, c.ctrlUsed, c.active.Load(), c.peerGone, c.peerEOF, c.sentDisc, c.err, c.remoteSGE, c.repost)
}
