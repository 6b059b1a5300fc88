//go:build !linux

package verbs

import (
	"fmt"
	"os"
)

// Without memfd the buffer is ordinary page-aligned Go memory carved from a
// larger allocation; it has no file descriptor.
func allocBuffer(size int) (*Buffer, error) {
	page := os.Getpagesize()
	size = (size + page - 1) &^ (page - 1)
	raw := make([]byte, size+page)
	off := int((uint64(page) - addrOf(raw)%uint64(page)) % uint64(page))
	if off+size > len(raw) {
		return nil, fmt.Errorf("%w: alignment", ErrNoMemory)
	}
	return &Buffer{b: raw[off : off+size : off+size], fd: -1}, nil
}

func freeBuffer(b *Buffer) error {
	b.b = nil
	return nil
}
