package rsocket

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The wire of librdmacm's rsocket (stream sockets), as far as a peer sees it.
//
// Connection setup carries connData in the private data of the connect
// request and of the accept. Each side then owns a receive buffer (rbuf),
// which the peer fills with RDMA WRITEs, and a target SGL of sglSize
// entries, into which the peer writes the next free half of its rbuf.
// Every transfer is announced by a 32-bit message: the immediate value of
// an RDMA WRITE WITH IMMEDIATE, or, on iWARP (which has no immediate data
// between standard peers), the 4-byte payload of a SEND that follows the
// plain RDMA WRITE.

const (
	connDataVersion = 1
	connDataLen     = 40 // version, flags, credits, reserved[3], iomap size, 2 SGEs
	sgeLen          = 16 // struct rs_sge: be64 addr, be32 key, be32 length
	sglSize         = 2  // RS_SGL_SIZE: entries of the target SGL

	flagNet   = 1 << 0 // the sender's host order is big-endian
	flagIOMap = 1 << 1 // the sender has an iomap area after its target SGL

	// rsocket's message formats: the operation in bits 31:29, its data in
	// 28:0.
	opData    = 0
	opSGL     = 4 // data: the credits granted (a sequence number)
	opIOMapSG = 6 // direct-placement mappings (riomap); never sent by us
	opCtrl    = 7 // data: ctrlDisconnect, ctrlKeepalive, ctrlShutdown
	opWrite   = 2 // riowrite, not transmitted as a message

	ctrlDisconnect = 0
	ctrlKeepalive  = 1
	ctrlShutdown   = 2

	maxMsgData = 1<<29 - 1
	msgLen     = 4 // RS_MSG_SIZE: a message carried as a SEND's payload
)

func msgSet(op, data uint32) uint32 { return op<<29 | data&maxMsgData }
func msgOp(m uint32) uint32         { return m >> 29 }
func msgData(m uint32) uint32       { return m & maxMsgData }

// sge is struct rs_sge.
type sge struct {
	Addr   uint64
	Key    uint32
	Length uint32
}

// connData is struct rs_conn_data, all of it in network order on the wire.
type connData struct {
	Version    uint8
	Flags      uint8
	Credits    uint16 // receive queue size: messages the peer may send
	IOMapScale uint8  // target_iomap_size, in rsocket's 8-bit scale
	TargetSGL  sge    // where the peer writes our SGL updates; Length counts entries
	DataBuf    sge    // the first half of the receive buffer
}

var errConnData = errors.New("rsocket: malformed connection data")

func (d *connData) encode(b []byte) {
	b[0], b[1] = d.Version, d.Flags
	binary.BigEndian.PutUint16(b[2:], d.Credits)
	b[4], b[5], b[6] = 0, 0, 0
	b[7] = d.IOMapScale
	putSGE(b[8:], d.TargetSGL, binary.BigEndian)
	putSGE(b[24:], d.DataBuf, binary.BigEndian)
}

func (d *connData) decode(b []byte) error {
	if len(b) < connDataLen {
		return fmt.Errorf("%w: %d bytes, want %d", errConnData, len(b), connDataLen)
	}
	d.Version, d.Flags = b[0], b[1]
	if d.Version != connDataVersion {
		return fmt.Errorf("%w: version %d, want %d", errConnData, d.Version, connDataVersion)
	}
	d.Credits = binary.BigEndian.Uint16(b[2:])
	d.IOMapScale = b[7]
	d.TargetSGL = getSGE(b[8:], binary.BigEndian)
	d.DataBuf = getSGE(b[24:], binary.BigEndian)
	switch {
	case d.Credits == 0:
		return fmt.Errorf("%w: no credits", errConnData)
	case d.TargetSGL.Length == 0 || d.TargetSGL.Length > 64:
		return fmt.Errorf("%w: target SGL of %d entries", errConnData, d.TargetSGL.Length)
	case d.DataBuf.Length == 0 || d.DataBuf.Length > maxMsgData:
		return fmt.Errorf("%w: data buffer of %d bytes", errConnData, d.DataBuf.Length)
	}
	return nil
}

func putSGE(b []byte, s sge, o binary.ByteOrder) {
	o.PutUint64(b, s.Addr)
	o.PutUint32(b[8:], s.Key)
	o.PutUint32(b[12:], s.Length)
}

func getSGE(b []byte, o binary.ByteOrder) sge {
	return sge{Addr: o.Uint64(b), Key: o.Uint32(b[8:]), Length: o.Uint32(b[12:])}
}
