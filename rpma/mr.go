package rpma

import (
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/goverbs/goverbs/verbs"
)

// Usage says what a memory region is for (RPMA_MR_USAGE_*); it decides the
// region's access rights and travels in its descriptor.
type Usage uint8

// Usage bits, with librpma's values.
const (
	UsageReadSrc             Usage = 1 << 0 // the source of remote reads
	UsageReadDst             Usage = 1 << 1 // the destination of local reads
	UsageWriteSrc            Usage = 1 << 2 // the source of local writes
	UsageWriteDst            Usage = 1 << 3 // the destination of remote writes
	UsageFlushTypeVisibility Usage = 1 << 4 // remote flushes of type VISIBILITY
	UsageFlushTypePersistent Usage = 1 << 5 // remote flushes of type PERSISTENT
	UsageSend                Usage = 1 << 6 // the source of sends
	UsageRecv                Usage = 1 << 7 // the destination of receives
)

var usageNames = [...]string{"READ_SRC", "READ_DST", "WRITE_SRC", "WRITE_DST", "FLUSH_TYPE_VISIBILITY", "FLUSH_TYPE_PERSISTENT", "SEND", "RECV"}

// String joins the names of the set bits with "|".
func (u Usage) String() string {
	if u == 0 {
		return "0"
	}
	var s []string
	for i, n := range usageNames {
		if u&(1<<i) != 0 {
			s = append(s, n)
		}
	}
	return strings.Join(s, "|")
}

// access maps usage to verbs access rights, as librpma does: a flush
// target is remotely readable, for the read-after-write flush, and on a
// device with native FLUSH (nativeFlush) it also carries the flush rights
// of each type. (librpma with native FLUSH gives the flush rights alone;
// goverbs keeps the read too, so that a peer without native FLUSH can
// still flush the region.) On iWARP the sink of an RDMA Read needs remote
// write: the Read Response is a tagged write.
func (u Usage) access(iwarp, nativeFlush bool) verbs.AccessFlags {
	var a verbs.AccessFlags
	if u&(UsageReadSrc|UsageFlushTypeVisibility|UsageFlushTypePersistent) != 0 {
		a |= verbs.AccessRemoteRead
	}
	if nativeFlush && u&UsageFlushTypeVisibility != 0 {
		a |= verbs.AccessFlushGlobal
	}
	if nativeFlush && u&UsageFlushTypePersistent != 0 {
		a |= verbs.AccessFlushPersistent
	}
	if u&UsageReadDst != 0 {
		a |= verbs.AccessLocalWrite
		if iwarp {
			a |= verbs.AccessRemoteWrite
		}
	}
	if u&(UsageWriteSrc|UsageRecv) != 0 {
		a |= verbs.AccessLocalWrite
	}
	if u&UsageWriteDst != 0 {
		a |= verbs.AccessLocalWrite | verbs.AccessRemoteWrite
	}
	return a
}

// MRDescriptorSize is the size of a memory region descriptor.
const MRDescriptorSize = 21

// MR is a local registered memory region (struct rpma_mr_local).
type MR struct {
	peer  *Peer
	mr    *verbs.MR
	usage Usage
}

// RegMR registers buf for usage (rpma_mr_reg). buf must stay untouched by
// other registrations until Dereg; a file mapping (MapFile) makes a region
// whose persistent flushes reach the file. It returns ErrInval for a nil
// peer, an empty buffer or no usage, and ErrProvider when registration fails.
func (p *Peer) RegMR(buf []byte, usage Usage) (*MR, error) {
	switch {
	case p == nil:
		return nil, wrap(ErrInval, "no peer (NewPeer)")
	case len(buf) == 0:
		return nil, wrap(ErrInval, "an empty buffer")
	case usage == 0:
		return nil, wrap(ErrInval, "no usage (UsageReadSrc, UsageWriteDst, ...: what the region is for)")
	}
	iw := p.ctx.QueryDevice().TransportType == verbs.TransportIWARP
	mr, err := p.pd.RegMR(buf, usage.access(iw, p.nativeFlush))
	if err != nil {
		return nil, provider("ibv_reg_mr", err)
	}
	return &MR{peer: p, mr: mr, usage: usage}, nil
}

// Dereg deregisters the region (rpma_mr_dereg).
func (m *MR) Dereg() error {
	if m == nil {
		return wrap(ErrInval, "nil region")
	}
	if err := m.mr.Dereg(); err != nil {
		return provider("ibv_dereg_mr", err)
	}
	return nil
}

// Bytes returns the registered memory (rpma_mr_get_ptr).
func (m *MR) Bytes() []byte { return m.mr.Bytes() }

// Size returns the region's size in bytes (rpma_mr_get_size).
func (m *MR) Size() int { return m.mr.Len() }

// Usage returns the usage the region was registered with.
func (m *MR) Usage() Usage { return m.usage }

// Verbs returns the underlying verbs region.
func (m *MR) Verbs() *verbs.MR { return m.mr }

// Descriptor returns the region's 21-byte descriptor (rpma_mr_get_descriptor),
// laid out as librpma's: base address (8 bytes), size (8) and remote key
// (4), little-endian, then the usage byte.
func (m *MR) Descriptor() []byte {
	d := make([]byte, MRDescriptorSize)
	binary.LittleEndian.PutUint64(d[0:], m.mr.Addr())
	binary.LittleEndian.PutUint64(d[8:], uint64(m.mr.Len()))
	binary.LittleEndian.PutUint32(d[16:], m.mr.RKey())
	d[20] = byte(m.usage)
	return d
}

// RemoteMR is a region of the remote peer, known from its descriptor
// (struct rpma_mr_remote).
type RemoteMR struct {
	addr  uint64
	size  uint64
	rkey  uint32
	usage Usage
}

// RemoteMRFromDescriptor decodes a region descriptor
// (rpma_mr_remote_from_descriptor). It returns ErrInval unless desc holds
// exactly 21 bytes with a non-zero usage.
func RemoteMRFromDescriptor(desc []byte) (*RemoteMR, error) {
	if len(desc) != MRDescriptorSize {
		return nil, wrap(ErrInval, "region descriptor of %d bytes (want %d)", len(desc), MRDescriptorSize)
	}
	r := &RemoteMR{
		addr:  binary.LittleEndian.Uint64(desc[0:]),
		size:  binary.LittleEndian.Uint64(desc[8:]),
		rkey:  binary.LittleEndian.Uint32(desc[16:]),
		usage: Usage(desc[20]),
	}
	if r.usage == 0 {
		return nil, wrap(ErrInval, "region descriptor with no usage")
	}
	return r, nil
}

// Size returns the remote region's size (rpma_mr_remote_get_size).
func (r *RemoteMR) Size() uint64 { return r.size }

// Usage returns the remote region's usage.
func (r *RemoteMR) Usage() Usage { return r.usage }

// SupportsFlush reports whether the remote region supports flushes of type
// t: whether rpma_mr_remote_get_flush_type's mask has t's usage bit
// (UsageFlushTypePersistent for FlushPersistent, UsageFlushTypeVisibility
// for FlushVisibility). Usage gives the whole mask.
func (r *RemoteMR) SupportsFlush(t FlushType) bool {
	switch t {
	case FlushPersistent:
		return r.usage&UsageFlushTypePersistent != 0
	case FlushVisibility:
		return r.usage&UsageFlushTypeVisibility != 0
	}
	return false
}

// String describes the remote region.
func (r *RemoteMR) String() string {
	return fmt.Sprintf("remote region %#x+%d rkey %#x %v", r.addr, r.size, r.rkey, r.usage)
}

// checkRange checks off and n against a region of size bytes.
func checkRange(what string, off, n int, size uint64) error {
	if off < 0 || n < 0 || uint64(off) > size || uint64(n) > size-uint64(off) {
		return wrap(ErrInval, "%s: %d bytes at offset %d of a %d-byte region", what, n, off, size)
	}
	return nil
}
