package engine

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goverbs/goverbs/verbs"
)

// MR is a registered region. Its key is a scrambled table index<<8 | a
// random byte: the index finds it in the device's table, the byte makes
// stale keys of a deregistered region unlikely to name its successor, and
// the scrambling (a permutation keyed per device) makes the keys of other
// regions impossible to infer from one a peer was given: a peer that
// guesses needs about 2^32 / (regions) tries, as against a NIC's key
// byte.
type MR struct {
	v      *verbs.MR
	pd     *PD
	buf    []byte
	addr   uint64
	access verbs.AccessFlags
	key    uint32
	valid  atomic.Bool // the keys work: registered and not invalidated
	gone   atomic.Bool // deregistered
	dev    *Device

	// A memory window's entry (mw.go): the window, the QP a type 2
	// window is bound to, and the region its range lies in (nil when
	// unbound). windows counts, on a region, the windows bound in it.
	win     *MW
	wqp     *QP
	target  *MR
	windows atomic.Int32

	// revokers are told when the keys stop working: a provider that gave
	// another process direct access to the region (shm) withdraws it.
	rmu      sync.Mutex
	revokers map[uint64]Revoker
	nextRev  uint64
}

// A Revoker withdraws a direct access to a region when its keys stop
// working (MR.OnRevoke): it stops new accesses at once and returns a
// function that waits, until at most deadline, for those in progress.
type Revoker func() (wait func(deadline time.Time))

// RevokeWait bounds how long deregistration (or a Send with Invalidate)
// waits, in total, for the direct accesses in progress to end: every
// revoker is told first, then all are waited for together.
const RevokeWait = time.Second

// Bytes returns the region's memory.
func (mr *MR) Bytes() []byte { return mr.buf }

// Addr returns the region's address (its first byte's remote address).
func (mr *MR) Addr() uint64 { return mr.addr }

// Buffer returns the AllocBuffer the region (or window) lies in and its
// offset in it, or nil (verbs.MR.Buffer).
func (mr *MR) Buffer() (*verbs.Buffer, int) {
	b := verbs.BufferOf(mr.buf)
	if b == nil {
		return nil, 0
	}
	return b, int(addrOf(mr.buf) - addrOf(b.Bytes()))
}

// Access returns the region's access flags.
func (mr *MR) Access() verbs.AccessFlags { return mr.access }

// OnRevoke registers f to run when the region's keys stop working
// (deregistration or a Send with Invalidate), and returns a function that
// unregisters it. f runs once, on the goroutine that revokes, after the
// keys already fail; Dereg returns only after every revoker's wait
// returned, all of them waited for together within RevokeWait. If the keys
// have already stopped working, f and its wait run at once.
func (mr *MR) OnRevoke(f Revoker) (cancel func()) {
	mr.rmu.Lock()
	if !mr.valid.Load() {
		mr.rmu.Unlock()
		if wait := f(); wait != nil {
			wait(time.Now().Add(RevokeWait))
		}
		return func() {}
	}
	if mr.revokers == nil {
		mr.revokers = map[uint64]Revoker{}
	}
	id := mr.nextRev
	mr.nextRev++
	mr.revokers[id] = f
	mr.rmu.Unlock()
	return func() {
		mr.rmu.Lock()
		delete(mr.revokers, id)
		mr.rmu.Unlock()
	}
}

// revoke makes the keys fail and runs the revokers: first all of them,
// then their waits, with one deadline for all.
func (mr *MR) revoke() {
	mr.rmu.Lock()
	mr.valid.Store(false)
	fs := mr.revokers
	mr.revokers = nil
	mr.rmu.Unlock()
	var waits []func(time.Time)
	for _, f := range fs {
		if w := f(); w != nil {
			waits = append(waits, w)
		}
	}
	deadline := time.Now().Add(RevokeWait)
	for _, w := range waits {
		w(deadline)
	}
}

// LKey implements driver.MR.
func (mr *MR) LKey() uint32 { return mr.key }

// RKey implements driver.MR.
func (mr *MR) RKey() uint32 { return mr.key }

// Dereg implements driver.MR.
func (mr *MR) Dereg() error {
	// A region whose key a Send with Invalidate made invalid is still
	// registered: it must still be deregistered (and release its PD).
	if mr.gone.Swap(true) {
		return verbs.ErrClosed
	}
	// A bind counts itself in windows before it checks gone: one of the
	// two sees the other.
	if n := mr.windows.Load(); n > 0 {
		mr.gone.Store(false)
		return fmt.Errorf("%w: %d memory windows are bound to the region", verbs.ErrBusy, n)
	}
	mr.revoke()
	mr.dev.mrs.remove(mr)
	mr.pd.refs.Add(-1)
	return nil
}

// invalidate is Send-with-Invalidate's effect on the target region.
func (mr *MR) invalidate() { mr.revoke() }

// Fault says why an access to registered memory was refused.
type Fault uint8

// Faults, in the order the checks run (the order siw and the IB spec use).
const (
	FaultNone     Fault = iota
	FaultKey            // no valid region has this key
	FaultPD             // the region belongs to another protection domain
	FaultAccess         // the region (or the QP) does not grant the access
	FaultBounds         // the range is not inside the region
	FaultAlign          // an atomic's address is not 8-byte aligned
	FaultLength         // the data does not fit the buffers
	FaultNoBuffer       // no receive buffer is posted
	FaultPersist        // a persistent flush could not write the range back to its file
)

var faultNames = [...]string{"none", "invalid key", "protection domain mismatch", "access denied", "out of bounds", "misaligned atomic", "length error", "no receive buffer", "write-back failed"}

// String names the fault.
func (f Fault) String() string {
	if int(f) < len(faultNames) {
		return faultNames[f]
	}
	return fmt.Sprintf("Fault(%d)", f)
}

// mrTable maps key indexes to regions: a two-level table of atomic pointers,
// so that lookups on the data path take no lock.
type mrTable struct {
	mu    sync.Mutex
	dir   [1 << 12]atomic.Pointer[mrChunk]
	next  uint32
	count int
	rk    [4]uint32 // the round keys of the index scrambling
}

type mrChunk [1 << 12]atomic.Pointer[MR]

func (t *mrTable) init() {
	t.next = randUint32() & 0xFFFFFF
	for i := range t.rk {
		t.rk[i] = randUint32()
	}
}

// scramble maps a table index to the index bits of a key: a four-round
// Feistel network on the two 12-bit halves, a bijection of 24-bit values.
// Table slots stay dense (the table's chunks are filled in order) while
// keys are spread over the whole space.
func (t *mrTable) scramble(i uint32) uint32 {
	l, r := i>>12, i&0xFFF
	for _, k := range t.rk {
		l, r = r, l^feistel(r, k)
	}
	return l<<12 | r
}

// unscramble is scramble's inverse.
func (t *mrTable) unscramble(x uint32) uint32 {
	l, r := x>>12, x&0xFFF
	for j := len(t.rk) - 1; j >= 0; j-- {
		l, r = r^feistel(l, t.rk[j]), l
	}
	return l<<12 | r
}

func feistel(x, k uint32) uint32 {
	h := (x ^ k) * 0x9E3779B1
	return (h>>16 ^ h) & 0xFFF
}

func (t *mrTable) add(mr *MR, limit int) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.count >= limit {
		return fmt.Errorf("%w: device limit of %d memory regions", verbs.ErrNoMemory, limit)
	}
	for {
		t.next = (t.next + 1) & 0xFFFFFF
		if t.next == 0 || t.scramble(t.next) == 0 {
			continue // no key 0x000000xx
		}
		c := t.dir[t.next>>12].Load()
		if c == nil {
			c = new(mrChunk)
			t.dir[t.next>>12].Store(c)
		}
		slot := &c[t.next&0xFFF]
		if slot.Load() != nil {
			continue
		}
		mr.key = t.scramble(t.next)<<8 | randUint32()&0xFF
		mr.dev = mr.pd.ctx.dev
		mr.valid.Store(mr.win == nil) // a new window is not bound
		slot.Store(mr)
		t.count++
		return nil
	}
}

func (t *mrTable) remove(mr *MR) {
	t.mu.Lock()
	defer t.mu.Unlock()
	idx := t.unscramble(mr.key >> 8)
	if c := t.dir[idx>>12].Load(); c != nil && c[idx&0xFFF].CompareAndSwap(mr, nil) {
		t.count--
	}
}

// replace puts n in old's slot (a window's new binding: n has old's key
// index).
func (t *mrTable) replace(old, n *MR) {
	t.mu.Lock()
	defer t.mu.Unlock()
	idx := t.unscramble(old.key >> 8)
	if c := t.dir[idx>>12].Load(); c != nil {
		c[idx&0xFFF].CompareAndSwap(old, n)
	}
}

// rekey puts n in old's slot with a new key of the same index (Rereg),
// and reports false when old is no longer in the table.
func (t *mrTable) rekey(old, n *MR) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	idx := t.unscramble(old.key >> 8)
	c := t.dir[idx>>12].Load()
	if c == nil {
		return false
	}
	b := randUint32() & 0xFF
	if b == old.key&0xFF {
		b ^= 1 + randUint32()%0xFF // any other byte
	}
	n.key = old.key&^0xFF | b
	n.valid.Store(true)
	return c[idx&0xFFF].CompareAndSwap(old, n)
}

func (t *mrTable) lookup(key uint32) *MR {
	idx := t.unscramble(key >> 8)
	c := t.dir[idx>>12].Load()
	if c == nil {
		return nil
	}
	mr := c[idx&0xFFF].Load()
	if mr == nil || mr.key != key || !mr.valid.Load() {
		return nil
	}
	return mr
}

// resolve checks an access of n bytes at addr through the remote key key
// for QP q and returns the memory. A type 2 window answers only the QP it
// is bound to.
func (d *Device) resolve(key uint32, q *QP, addr uint64, n uint32, need verbs.AccessFlags) ([]byte, *MR, Fault) {
	mr := d.mrs.lookup(key)
	if mr == nil || mr.wqp != nil && mr.wqp != q {
		return nil, nil, FaultKey
	}
	return check(mr, q.pd, addr, n, need)
}

// resolveCached is resolve through a one-entry cache of the region last
// found, owned by the caller's lock (nil: no cache): a message path that
// uses the same buffers again and again skips the table's two dependent
// loads (on pages of their own). A region deregistered or invalidated
// meanwhile is not valid: the table is asked again.
func (d *Device) resolveCached(cache **MR, key uint32, pd *PD, addr uint64, n uint32, need verbs.AccessFlags) ([]byte, *MR, Fault) {
	if cache != nil {
		if mr := *cache; mr != nil && mr.key == key && mr.valid.Load() {
			return check(mr, pd, addr, n, need)
		}
	}
	return d.resolveMiss(cache, key, pd, addr, n, need)
}

// resolveMiss is resolveCached when the cache does not hold the region
// (kept apart so that the hit inlines).
func (d *Device) resolveMiss(cache **MR, key uint32, pd *PD, addr uint64, n uint32, need verbs.AccessFlags) ([]byte, *MR, Fault) {
	mr := d.mrs.lookup(key)
	if mr == nil || mr.win != nil { // a window's key is not a local key
		return nil, nil, FaultKey
	}
	if cache != nil {
		*cache = mr
	}
	return check(mr, pd, addr, n, need)
}

// check is resolve's checks of a region found by its key.
func check(mr *MR, pd *PD, addr uint64, n uint32, need verbs.AccessFlags) ([]byte, *MR, Fault) {
	if mr.pd != pd {
		return nil, mr, FaultPD
	}
	if mr.access&need != need {
		return nil, mr, FaultAccess
	}
	if addr < mr.addr || addr-mr.addr > uint64(len(mr.buf)) || uint64(n) > uint64(len(mr.buf))-(addr-mr.addr) {
		return nil, mr, FaultBounds
	}
	off := addr - mr.addr
	return mr.buf[off : off+uint64(n) : off+uint64(n)], mr, FaultNone
}
