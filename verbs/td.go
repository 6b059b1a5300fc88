package verbs

import (
	"fmt"
	"sync/atomic"
)

// TD is a thread domain (struct ibv_td): the application's promise that
// each queue pair created in it is posted to by one goroutine at a time.
// QPs enter a thread domain by being created through a parent domain
// that names it (AllocParentDomain).
//
// A provider may then leave out what serialises posters. The pure-Go
// providers post an RDMA WRITE or READ of one segment, on an idle send
// queue, without taking the QP's lock: a lighter handshake keeps the
// poster apart from what other goroutines still do with the QP
// (completions, Modify, Destroy, a connection's teardown), so polling
// its CQs, modifying or destroying it from other goroutines stays safe.
// Posting to such a QP from two goroutines at once breaks the promise: a
// data race, as in rdma-core. The handshake makes the lock's other uses
// (other posts, completions) a little dearer: a thread domain is for QPs
// that mostly post RDMA WRITEs and READs one at a time. A provider may
// also ignore the thread domain (rdmacore does: it is a hint, never a
// change of meaning).
type TD struct {
	ctx  *Context
	refs users // parent domains that name it
}

// users counts the users of an object that refuses to be freed while it
// has any, or is -1 once it is freed: one word, so that a new user and
// the freeing cannot both succeed when they race.
type users struct{ n atomic.Int32 }

// take adds a user, unless the object is freed.
func (u *users) take() bool {
	for {
		v := u.n.Load()
		if v < 0 {
			return false
		}
		if u.n.CompareAndSwap(v, v+1) {
			return true
		}
	}
}

// drop removes a user.
func (u *users) drop() { u.n.Add(-1) }

// free marks the object freed if it has no user: nil when it was freed
// already (a second Dealloc), ErrBusy (saying busy) while it has users.
func (u *users) free(busy string) error {
	for {
		switch v := u.n.Load(); {
		case v < 0:
			return nil
		case v > 0:
			return fmt.Errorf("%w: %s", ErrBusy, busy)
		case u.n.CompareAndSwap(0, -1):
			return nil
		}
	}
}

// AllocTD allocates a thread domain (ibv_alloc_td). It returns ErrClosed
// on a closed context.
func (c *Context) AllocTD() (*TD, error) {
	if c.closed.Load() {
		return nil, ErrClosed
	}
	return &TD{ctx: c}, nil
}

// Dealloc frees the thread domain (ibv_dealloc_td). It returns ErrBusy
// while a parent domain names it; a second Dealloc returns nil.
func (td *TD) Dealloc() error { return td.refs.free("a parent domain uses the thread domain") }

// ParentDomainAttr is what a parent domain is made of (struct
// ibv_parent_domain_init_attr): a protection domain, and the thread
// domain of the QPs created through it (nil: none).
type ParentDomainAttr struct {
	PD *PD
	TD *TD
}

// AllocParentDomain allocates a parent domain (ibv_alloc_parent_domain):
// a PD that stands for attr.PD wherever a PD is used (regions, SRQs and
// address handles of either work with the QPs of both: it is the same
// protection domain), and whose QPs are created in attr.TD. Dealloc it
// before attr.PD and attr.TD. It returns ErrInvalid when attr.PD is
// missing, of another context or a parent domain itself, or attr.TD is
// of another context or freed.
func (c *Context) AllocParentDomain(attr ParentDomainAttr) (*PD, error) {
	if c.closed.Load() {
		return nil, ErrClosed
	}
	switch {
	case attr.PD == nil || attr.PD.ctx != c:
		return nil, fmt.Errorf("%w: a parent domain needs a PD of its context", ErrInvalid)
	case attr.PD.base != nil:
		return nil, fmt.Errorf("%w: the PD of a parent domain is a parent domain", ErrInvalid)
	case attr.TD != nil && (attr.TD.ctx != c || !attr.TD.refs.take()):
		return nil, fmt.Errorf("%w: thread domain of another context, or freed", ErrInvalid)
	}
	return &PD{ctx: c, d: attr.PD.d, base: attr.PD, td: attr.TD}, nil
}

// TD returns the thread domain of a parent domain's QPs: nil for a PD
// from AllocPD, or a parent domain without one.
func (pd *PD) TD() *TD { return pd.td }

// deallocParent is Dealloc for a parent domain: the protection domain
// stays (it is attr.PD's).
func (pd *PD) deallocParent() error {
	if err := pd.qps.free("QPs created through the parent domain remain"); err != nil {
		return err
	}
	if pd.td != nil {
		pd.td.refs.drop()
	}
	return nil
}
