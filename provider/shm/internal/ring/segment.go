package ring

import (
	"errors"
	"fmt"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Segment is shared memory mapped from a memfd whose size is sealed.
type Segment struct {
	Mem []byte
}

// Create makes a segment of size bytes in a fresh memfd, its size sealed;
// the caller passes the fd to the peer and closes it.
func Create(size int) (*Segment, int, error) {
	fd, err := unix.MemfdCreate("goverbs-shm", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, -1, fmt.Errorf("shm: memfd_create: %w", err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return nil, -1, fmt.Errorf("shm: ftruncate: %w", err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, sizeSeals|unix.F_SEAL_SEAL); err != nil {
		unix.Close(fd)
		return nil, -1, fmt.Errorf("shm: seal segment: %w", err)
	}
	s, err := Map(fd, size)
	if err != nil {
		unix.Close(fd)
		return nil, -1, err
	}
	return s, fd, nil
}

// Map maps a segment the peer sent, after checking that its size is
// sealed and is size.
func Map(fd int, size int) (*Segment, error) {
	if got, err := SealedSize(fd); err != nil {
		return nil, fmt.Errorf("shm: segment: %w", err)
	} else if got != int64(size) {
		return nil, fmt.Errorf("shm: segment of %d bytes, want %d", got, size)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("shm: mmap segment: %w", err)
	}
	return &Segment{Mem: mem}, nil
}

const sizeSeals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW

// SealedSize returns the size of a memfd a peer passed, after checking that
// it cannot shrink: memory mapped from a file that shrinks faults (SIGBUS)
// when touched, and a peer must not be able to crash us that way.
func SealedSize(fd int) (int64, error) {
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil {
		return 0, fmt.Errorf("not a sealable memfd: %w", err)
	}
	if seals&unix.F_SEAL_SHRINK == 0 {
		return 0, errors.New("memfd size is not sealed")
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, err
	}
	return st.Size, nil
}

// Unmap unmaps the segment.
func (s *Segment) Unmap() {
	if s != nil && s.Mem != nil {
		unix.Munmap(s.Mem)
		s.Mem = nil
	}
}

// Retire detaches a segment that goroutines may still be reading or
// writing: its pages are replaced, at the same addresses, by private
// anonymous memory, so that the shared memory is released (and a late
// write reaches nobody) while every access stays valid. The placeholder
// must be unmapped (Retired) once nothing can touch it.
func (s *Segment) Retire() {
	if s == nil || s.Mem == nil {
		return
	}
	// On failure (out of memory for page tables) the shared mapping stays,
	// and Retired unmaps it just the same.
	replaceAnon(s.Mem)
}

// Retired unmaps the placeholders of retired segments; it runs as a
// cleanup once nothing can be inside them.
func Retired(mems [2][]byte) {
	for _, m := range mems {
		if m != nil {
			unix.Munmap(m)
		}
	}
	NRetired.Add(1)
}

// NRetired counts the calls of Retired (tests).
var NRetired atomic.Int64
