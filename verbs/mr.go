package verbs

import (
	"fmt"
	"sync/atomic"
)

// MR is a registered memory region (struct ibv_mr). Its local key names it in
// SGEs; its remote key lets a peer access it as the access flags allow.
// Addresses in the region start at Addr (the address of its first byte), as
// with libibverbs' non-zero-based regions.
type MR struct {
	pd         *PD
	d          mrDriver
	buf        []byte
	addr       uint64
	access     AccessFlags
	lkey, rkey uint32
	ab         *Buffer
	dereged    atomic.Bool
}

// PD returns the region's protection domain.
func (mr *MR) PD() *PD { return mr.pd }

// LKey returns the local key.
func (mr *MR) LKey() uint32 { return mr.lkey }

// RKey returns the remote key.
func (mr *MR) RKey() uint32 { return mr.rkey }

// Addr returns the address of the region's first byte, the base for SGE and remote addresses.
func (mr *MR) Addr() uint64 { return mr.addr }

// Len returns the region's length in bytes.
func (mr *MR) Len() int { return len(mr.buf) }

// Access returns the access flags the region was registered with.
func (mr *MR) Access() AccessFlags { return mr.access }

// Bytes returns the registered memory.
func (mr *MR) Bytes() []byte { return mr.buf }

// SGE returns the scatter/gather element for n bytes at offset off of the
// region. It does not check the range: an element outside the region makes
// the work request that uses it fail with LOC_PROT_ERR, as in verbs.
func (mr *MR) SGE(off, n int) SGE {
	return SGE{Addr: mr.addr + uint64(off), Length: uint32(n), LKey: mr.lkey}
}

// SGEOf returns the scatter/gather element for buf, which must lie inside
// the region (a slice of Bytes). It returns ErrInvalid otherwise; an empty
// buf gives an empty element at the region's start.
func (mr *MR) SGEOf(buf []byte) (SGE, error) {
	if len(buf) == 0 {
		return SGE{Addr: mr.addr, LKey: mr.lkey}, nil
	}
	a := addrOf(buf)
	if a < mr.addr || a-mr.addr > uint64(len(mr.buf)) || uint64(len(buf)) > uint64(len(mr.buf))-(a-mr.addr) {
		return SGE{}, fmt.Errorf("%w: buffer is not inside the memory region", ErrInvalid)
	}
	return SGE{Addr: a, Length: uint32(len(buf)), LKey: mr.lkey}, nil
}

// RemoteAddr returns the address a peer uses for offset off of the region.
func (mr *MR) RemoteAddr(off int) uint64 { return mr.addr + uint64(off) }

// Buffer returns the AllocBuffer the region lies in and the region's offset
// in it, or nil when the region is other memory (the Go heap, a mapped
// file). A provider that shares memory with another process or hands it to
// C uses it; the buffer cannot be freed while the region is registered.
func (mr *MR) Buffer() (buf *Buffer, off int) {
	if mr.ab == nil {
		return nil, 0
	}
	return mr.ab, int(mr.addr - addrOf(mr.ab.b))
}

// Dereg deregisters the region (ibv_dereg_mr): its keys stop working at once,
// for local work requests and remote peers alike. A second Dereg returns
// nil.
func (mr *MR) Dereg() error {
	if mr.dereged.Swap(true) {
		return nil // a second Dereg, as every second Destroy
	}
	if err := mr.d.Dereg(); err != nil {
		mr.dereged.Store(false)
		return err
	}
	if mr.ab != nil {
		mr.ab.regs.Add(-1)
	}
	return nil
}
