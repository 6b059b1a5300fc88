package verbs

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

func allocBuffer(size int) (*Buffer, error) {
	page := os.Getpagesize()
	size = (size + page - 1) &^ (page - 1)
	fd, err := unix.MemfdCreate("goverbs-buffer", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("verbs: memfd_create: %w", err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("verbs: ftruncate memfd to %d bytes: %w", size, err)
	}
	// The size is sealed: a process the fd is passed to (provider shm) can
	// then map it without fearing SIGBUS from a later truncation. Where
	// sealing is not available the buffer works all the same; shm then does
	// not hand it to peers (they would refuse it) and goes through the target.
	unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL)
	b, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("verbs: mmap %d bytes: %w", size, err)
	}
	return &Buffer{b: b, fd: fd}, nil
}

func freeBuffer(b *Buffer) error {
	err := unix.Munmap(b.b)
	if cerr := unix.Close(b.fd); err == nil {
		err = cerr
	}
	b.b = nil
	return err
}
