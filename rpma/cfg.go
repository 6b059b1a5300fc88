package rpma

import "time"

// DefaultTimeout is librpma's default connection set-up timeout (RPMA_DEFAULT_TIMEOUT_MS).
const DefaultTimeout = time.Second

// Default queue sizes of a connection configuration (librpma's).
const (
	DefaultQueueSize = 10
)

// ConnCfg is a connection configuration (struct rpma_conn_cfg). Its zero
// value is the defaults, as NewConnCfg's (librpma's constructor) and a nil
// *ConnCfg are.
type ConnCfg struct {
	// Each value is stored so that 0 is the default: an explicit 0 is
	// kept as -1 (see get and set).
	timeout      time.Duration
	cqSize       int
	rcqSize      int
	sqSize       int
	rqSize       int
	shared       bool
	srq          *SRQ
	noExtensions bool
}

// set stores n so that an explicit 0 is told from the zero value's default.
func set[T int | time.Duration](n T) T {
	if n == 0 {
		return -1
	}
	return n
}

// get is a stored value, or def for the zero value's.
func get[T int | time.Duration](v, def T) T {
	switch {
	case v == 0:
		return def
	case v < 0:
		return 0
	}
	return v
}

// NewConnCfg returns the default configuration (rpma_conn_cfg_new): a 1 s
// timeout, CQ, send queue and receive queue of 10 entries, no receive CQ,
// one completion channel per CQ, no SRQ, and goverbs extensions offered.
func NewConnCfg() *ConnCfg {
	return &ConnCfg{}
}

func (c *ConnCfg) orDefault() *ConnCfg {
	if c == nil {
		return NewConnCfg()
	}
	return c
}

// SetTimeout sets the connection set-up timeout (rpma_conn_cfg_set_timeout):
// how long an active ConnReq.Connect whose context has no deadline waits for
// the server's answer (0: only the transport's own limit).
// It returns ErrInval for a negative timeout.
func (c *ConnCfg) SetTimeout(d time.Duration) error {
	if d < 0 {
		return wrap(ErrInval, "negative timeout %v", d)
	}
	c.timeout = set(d)
	return nil
}

// Timeout returns the connection set-up timeout.
func (c *ConnCfg) Timeout() time.Duration { return get(c.timeout, DefaultTimeout) }

func checkSize(what string, n int) error {
	if n < 0 || n > 1<<16 {
		return wrap(ErrInval, "%s of %d", what, n)
	}
	return nil
}

// SetCQSize sets the size of the main CQ (rpma_conn_cfg_set_cq_size).
func (c *ConnCfg) SetCQSize(n int) error {
	if err := checkSize("CQ size", n); err != nil {
		return err
	}
	c.cqSize = set(n)
	return nil
}

// CQSize returns the size of the main CQ.
func (c *ConnCfg) CQSize() int { return get(c.cqSize, DefaultQueueSize) }

// SetRCQSize sets the size of the receive CQ (rpma_conn_cfg_set_rcq_size);
// 0, the default, means no receive CQ: receives complete on the main CQ.
func (c *ConnCfg) SetRCQSize(n int) error {
	if err := checkSize("receive CQ size", n); err != nil {
		return err
	}
	c.rcqSize = n
	return nil
}

// RCQSize returns the size of the receive CQ (0: none).
func (c *ConnCfg) RCQSize() int { return c.rcqSize }

// SetSQSize sets the send queue size (rpma_conn_cfg_set_sq_size).
func (c *ConnCfg) SetSQSize(n int) error {
	if err := checkSize("send queue size", n); err != nil {
		return err
	}
	c.sqSize = set(n)
	return nil
}

// SQSize returns the send queue size.
func (c *ConnCfg) SQSize() int { return get(c.sqSize, DefaultQueueSize) }

// SetRQSize sets the receive queue size (rpma_conn_cfg_set_rq_size).
func (c *ConnCfg) SetRQSize(n int) error {
	if err := checkSize("receive queue size", n); err != nil {
		return err
	}
	c.rqSize = set(n)
	return nil
}

// RQSize returns the receive queue size.
func (c *ConnCfg) RQSize() int { return get(c.rqSize, DefaultQueueSize) }

// SetCompChannel chooses one completion channel shared by the CQ and the
// receive CQ (true; wait with Conn.Wait) or one per CQ (false, the
// default; wait with CQ.Wait) (rpma_conn_cfg_set_compl_channel).
func (c *ConnCfg) SetCompChannel(shared bool) { c.shared = shared }

// CompChannel reports whether the completion channel is shared.
func (c *ConnCfg) CompChannel() bool { return c.shared }

// SetSRQ makes connections take their receive buffers from srq
// (rpma_conn_cfg_set_srq); nil means none.
func (c *ConnCfg) SetSRQ(srq *SRQ) { c.srq = srq }

// SRQ returns the configured SRQ, or nil.
func (c *ConnCfg) SRQ() *SRQ { return c.srq }

// SetExtensions chooses whether an active connection offers goverbs'
// extensions (default true). Between goverbs peers they give native
// FLUSH, atomic write and immediate data; a peer that is not goverbs
// ignores the offer, and then flush and atomic write fall back to what
// librpma does without native support. Turn it off towards a librpma
// server on Linux siw: siw reads the offer's mark in the MPA Request (see
// package iwarp). Over RoCE nothing negotiates them: on, FLUSH and atomic
// write are the native IBA 1.5 operations, which a peer without them
// (Linux rxe before 6.2, most NICs) answers by ending the connection; off,
// the fallbacks from the start.
func (c *ConnCfg) SetExtensions(on bool) { c.noExtensions = !on }

// Extensions reports whether active connections offer goverbs' extensions.
func (c *ConnCfg) Extensions() bool { return !c.noExtensions }

// SRQCfg is a shared receive queue configuration (struct rpma_srq_cfg).
// Its zero value is the defaults, as NewSRQCfg's are.
type SRQCfg struct {
	rqSize  int
	rcqSize int
}

// Default SRQ sizes (librpma's RPMA_DEFAULT_SRQ_SIZE and its receive CQ).
const DefaultSRQSize = 100

// NewSRQCfg returns the default SRQ configuration (rpma_srq_cfg_new): 100
// receive entries and a receive CQ of 100.
func NewSRQCfg() *SRQCfg { return &SRQCfg{} }

// SetRQSize sets the SRQ's size (rpma_srq_cfg_set_rq_size).
func (c *SRQCfg) SetRQSize(n int) error {
	if err := checkSize("SRQ size", n); err != nil {
		return err
	}
	c.rqSize = set(n)
	return nil
}

// RQSize returns the SRQ's size.
func (c *SRQCfg) RQSize() int { return get(c.rqSize, DefaultSRQSize) }

// SetRCQSize sets the size of the SRQ's receive CQ (rpma_srq_cfg_set_rcq_size);
// 0 means none: receives complete on each connection's own CQ.
func (c *SRQCfg) SetRCQSize(n int) error {
	if err := checkSize("SRQ receive CQ size", n); err != nil {
		return err
	}
	c.rcqSize = set(n)
	return nil
}

// RCQSize returns the size of the SRQ's receive CQ.
func (c *SRQCfg) RCQSize() int { return get(c.rcqSize, DefaultSRQSize) }
