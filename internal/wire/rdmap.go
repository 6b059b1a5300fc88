package wire

import "encoding/binary"

// RDMAP (RFC 5040) message bodies that follow the untagged DDP header.

// ReadRequestBodyLen is the size of the Read Request body.
const ReadRequestBodyLen = 28

// ReadRequest is a view of an RDMA Read Request body (RFC 5040 section
// 4.4), the 28 bytes after the untagged header:
//
//	Data Sink STag (4) | Data Sink TO (8) | RDMA Read Message Size (4) |
//	Data Source STag (4) | Data Source TO (8)
//
// The accessors read zero from a slice too short to hold the field.
type ReadRequest []byte

// SinkSTag returns the requester's data sink STag (the Read Response's STag).
func (r ReadRequest) SinkSTag() uint32 { return u32At(r, 0) }

// SinkTO returns the requester's data sink tagged offset.
func (r ReadRequest) SinkTO() uint64 { return u64At(r, 4) }

// Size returns the RDMA Read Message Size in bytes.
func (r ReadRequest) Size() uint32 { return u32At(r, 12) }

// SrcSTag returns the responder's data source STag (the rkey).
func (r ReadRequest) SrcSTag() uint32 { return u32At(r, 16) }

// SrcTO returns the responder's data source tagged offset (remote_addr).
func (r ReadRequest) SrcTO() uint64 { return u64At(r, 20) }

// Fields decodes the body.
func (r ReadRequest) Fields() ReadRequestFields {
	return ReadRequestFields{
		SinkSTag: r.SinkSTag(), SinkTO: r.SinkTO(), Size: r.Size(),
		SrcSTag: r.SrcSTag(), SrcTO: r.SrcTO(),
	}
}

// ReadRequestFields are the fields of a Read Request body.
type ReadRequestFields struct {
	SinkSTag uint32
	SinkTO   uint64
	Size     uint32
	SrcSTag  uint32
	SrcTO    uint64
}

// Encode writes the 28-byte body to b; it panics if b is shorter.
func (f *ReadRequestFields) Encode(b []byte) {
	_ = b[ReadRequestBodyLen-1]
	binary.BigEndian.PutUint32(b[0:4], f.SinkSTag)
	binary.BigEndian.PutUint64(b[4:12], f.SinkTO)
	binary.BigEndian.PutUint32(b[12:16], f.Size)
	binary.BigEndian.PutUint32(b[16:20], f.SrcSTag)
	binary.BigEndian.PutUint64(b[20:28], f.SrcTO)
}

// PutReadRequest writes a complete 48-byte Read Request FPDU header to b:
// ULPDU_Length 46, untagged, L=1, QN 1, the given MSN, MO 0, then the body.
// Append the trailer with AppendTrailer / PutTrailer (pad 0). It panics if b
// is shorter than ReadRequestLen.
func PutReadRequest(b []byte, msn uint32, f *ReadRequestFields) {
	_ = b[ReadRequestLen-1]
	PutUntagged(b, OpReadRequest, true, 0, QNReadRequest, msn, 0, ReadRequestULPDULen)
	f.Encode(b[UntaggedHeaderLen:])
}
