package verbs

import (
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
)

// Buffer is page-aligned memory outside the Go heap, from AllocBuffer. On
// Linux it is a shared mapping of a memfd, so a provider can hand the file
// descriptor to another process (shared-memory RDMA) and cgo can pass its
// address to C. Go's garbage collector neither moves nor scans it.
type Buffer struct {
	b     []byte
	fd    int
	regs  atomic.Int64 // live memory regions over the buffer
	freed atomic.Bool
}

// Bytes returns the buffer's memory. It must not be used after Free.
func (b *Buffer) Bytes() []byte { return b.b }

// Len returns the buffer's size in bytes.
func (b *Buffer) Len() int { return len(b.b) }

// Fd returns the memfd behind the buffer, or -1 where there is none.
func (b *Buffer) Fd() int { return b.fd }

// Free unmaps the buffer and closes its memfd. It returns ErrBusy while a
// memory region registered over any part of it is not deregistered, so that
// a region can never point at unmapped memory. A second Free returns nil.
func (b *Buffer) Free() error {
	if n := b.regs.Load(); n > 0 {
		return fmt.Errorf("%w: %d memory regions still registered on the buffer", ErrBusy, n)
	}
	if b.freed.Swap(true) {
		return nil // a second Free, as every second Destroy
	}
	buffers.remove(b)
	return freeBuffer(b)
}

// AllocBuffer allocates size bytes of zeroed, page-aligned memory outside the
// Go heap (rounded up to whole pages). Free it with Free.
func AllocBuffer(size int) (*Buffer, error) {
	if size <= 0 {
		return nil, fmt.Errorf("%w: buffer size %d", ErrInvalid, size)
	}
	b, err := allocBuffer(size)
	if err != nil {
		return nil, err
	}
	buffers.add(b)
	return b, nil
}

// BufferOf returns the Buffer that holds all of p, or nil when p is not
// memory from AllocBuffer.
func BufferOf(p []byte) *Buffer { return bufferOf(p) }

func bufferOf(p []byte) *Buffer {
	if len(p) == 0 {
		return nil
	}
	return buffers.find(addrOf(p), uint64(len(p)))
}

// buffers indexes live Buffers by address so that RegMR can tell when a slice
// lies in one.
var buffers bufferIndex

type bufferIndex struct {
	mu   sync.Mutex
	list []*Buffer // sorted by address
}

func (x *bufferIndex) add(b *Buffer) {
	x.mu.Lock()
	defer x.mu.Unlock()
	a := addrOf(b.b)
	i := sort.Search(len(x.list), func(i int) bool { return addrOf(x.list[i].b) >= a })
	x.list = append(x.list, nil)
	copy(x.list[i+1:], x.list[i:])
	x.list[i] = b
}

func (x *bufferIndex) remove(b *Buffer) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for i, c := range x.list {
		if c == b {
			x.list = append(x.list[:i], x.list[i+1:]...)
			return
		}
	}
}

func (x *bufferIndex) find(addr, n uint64) *Buffer {
	x.mu.Lock()
	defer x.mu.Unlock()
	i := sort.Search(len(x.list), func(i int) bool { return addrOf(x.list[i].b) > addr })
	if i == 0 {
		return nil
	}
	b := x.list[i-1]
	base := addrOf(b.b)
	if addr >= base && addr+n <= base+uint64(len(b.b)) {
		return b
	}
	return nil
}
