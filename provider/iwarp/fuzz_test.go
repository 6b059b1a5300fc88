package iwarp_test

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/conformance"
	"github.com/goverbs/goverbs/internal/leakcheck"
	"github.com/goverbs/goverbs/internal/wire"
	"github.com/goverbs/goverbs/provider/iwarp"
	"github.com/goverbs/goverbs/verbs"
)

// Placeholders the fuzz input may carry in place of values only known at run
// time, so that the fuzzer can reach the placement code: fuzzSTag is
// replaced by the MR's rkey, and an 8-byte big-endian value whose high word
// is fuzzTOHigh by the MR's address plus the low word (kept in the region
// by a modulo).
const (
	fuzzSTag   = 0x5354A600 // "ST" 0xA6 0x00
	fuzzTOHigh = 0x544F0000 // "TO" 0 0
	fuzzRecvs  = 8
	fuzzRecvSz = 1024
)

// fuzzPatch returns data with the placeholders replaced. With CRC, the
// stream is walked FPDU by FPDU and an FPDU whose CRC was right is given the
// right CRC again after patching.
func fuzzPatch(data []byte, mr *verbs.MR, crc bool) []byte {
	b := bytes.Clone(data)
	for i := 0; i < len(b); {
		n := len(b) - i
		fixCRC := false
		if crc && n >= wire.MPALenLen {
			if l := wire.FPDULen(int(binary.BigEndian.Uint16(b[i:]))); l <= n {
				n, fixCRC = l, wire.CheckFPDU(b[i:i+l])
			}
		}
		patchPlaceholders(b[i:i+n], mr)
		if fixCRC {
			ulen := int(binary.BigEndian.Uint16(b[i:]))
			wire.FinishFPDU(b[:i+wire.MPALenLen+ulen], i, true)
		}
		i += n
	}
	return b
}

func patchPlaceholders(b []byte, mr *verbs.MR) {
	for i := 0; i+4 <= len(b); i++ {
		switch binary.BigEndian.Uint32(b[i:]) {
		case fuzzSTag:
			binary.BigEndian.PutUint32(b[i:], mr.RKey())
			i += 3
		case fuzzTOHigh:
			if i+8 <= len(b) {
				lo := binary.BigEndian.Uint32(b[i+4:])
				binary.BigEndian.PutUint64(b[i:], mr.RemoteAddr(int(lo%uint32(mr.Len()))))
				i += 7
			}
		}
	}
}

func fuzzTO(off uint32) uint64 { return uint64(fuzzTOHigh)<<32 | uint64(off) }

// fuzzSeeds are valid FPDU streams and truncated or garbled variants.
func fuzzSeeds() (seeds []struct {
	crc  bool
	data []byte
}) {
	add := func(crc bool, b ...[]byte) {
		seeds = append(seeds, struct {
			crc  bool
			data []byte
		}{crc, bytes.Join(b, nil)})
	}
	for _, crc := range []bool{false, true} {
		send := fin(untaggedMsg(wire.OpSend, true, wire.QNSend, 1, 0, payload(100)), crc)
		send2a := fin(untaggedMsg(wire.OpSend, false, wire.QNSend, 2, 0, payload(64)), crc)
		send2b := fin(untaggedMsg(wire.OpSendSE, true, wire.QNSend, 2, 64, payload(36)), crc)
		write := fin(taggedMsg(wire.OpWrite, true, fuzzSTag, fuzzTO(512), payload(200)), crc)
		read := fin(readReqMsg(1, wire.ReadRequestFields{SinkSTag: 0x1234, SinkTO: 0x99, Size: 300, SrcSTag: fuzzSTag, SrcTO: fuzzTO(64)}), crc)
		term := wire.TerminateFor(1, wire.TermDDPCatastrophic(), nil)
		tb, _ := wire.AppendTerminate(nil, &term)
		termf := fin(tb, crc)

		add(crc, send)
		add(crc, write)
		add(crc, read)
		add(crc, write, send, read, send2a, send2b)
		add(crc, termf)
		if crc {
			continue
		}
		add(crc)                                     // nothing at all
		add(crc, write[:9])                          // truncated header
		add(crc, read[:30])                          // truncated Read Request body
		add(crc, write[:40])                         // truncated Write payload
		add(crc, send, write[:len(write)-2])         // truncated trailer
		add(crc, withOpcode(bytes.Clone(send), 0xD)) // garbled opcode
		add(crc, withVersions(bytes.Clone(write), 3, 1))
		zero := bytes.Clone(send)
		zero[0], zero[1] = 0, 0 // ULPDU_Length 0
		add(crc, zero)
		huge := bytes.Clone(write)
		huge[0], huge[1] = 0xff, 0xff // ULPDU_Length 65535, stream ends early
		add(crc, huge)
		var reads [][]byte // more than IRD
		for msn := range uint32(6) {
			reads = append(reads, fin(readReqMsg(msn+1, wire.ReadRequestFields{SinkSTag: 0x1234, Size: 8, SrcSTag: fuzzSTag, SrcTO: fuzzTO(0)}), crc))
		}
		add(crc, reads...)
	}
	// A Send cut off in its payload, and a Send whose CRC is wrong: both
	// take a receive that the message never finishes (the engine used to
	// lose it; see TestTerminateSent "CRC mismatch").
	s := fin(untaggedMsg(wire.OpSend, true, wire.QNSend, 1, 0, payload(100)), false)
	add(false, s[:60])
	bad := fin(untaggedMsg(wire.OpSend, true, wire.QNSend, 1, 0, payload(100)), true)
	bad[len(bad)-2] ^= 1
	add(true, bad)
	return seeds
}

// FuzzReceive writes arbitrary bytes to a goverbs responder after a valid
// MPA exchange, then half-closes. Whatever the bytes, goverbs must not
// panic, must close the connection, must leave its QP in ERR, and must
// complete every receive that was posted, exactly once.
func FuzzReceive(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s.crc, s.data)
	}
	f.Fuzz(func(t *testing.T, crc bool, data []byte) {
		leakcheck.Check(t)
		r := startResponder(t, respOpts{crc: crc, ird: 4, ord: 4, accept: iwarp.Params{IRD: 4, ORD: 4}})
		s := r.side
		for i := range fuzzRecvs {
			s.MustPostRecv(t, s.Recv(uint64(i), i*fuzzRecvSz, fuzzRecvSz))
		}
		// Read (and drop) whatever goverbs sends, concurrently, so that
		// responses never block it.
		drained := make(chan error, 1)
		go func() {
			r.raw.nc.SetReadDeadline(time.Now().Add(guard))
			buf := make([]byte, 64<<10)
			for {
				if _, err := r.raw.nc.Read(buf); err != nil {
					drained <- err
					return
				}
			}
		}()
		r.raw.nc.SetWriteDeadline(time.Now().Add(guard))
		r.raw.nc.Write(fuzzPatch(data, s.MR, r.raw.crc)) // goverbs may stop reading and reset the connection
		r.raw.nc.CloseWrite()
		if err := <-drained; !isClosed(err) {
			t.Fatalf("goverbs did not close the connection: %v (conn error %v)", err, r.conn.Err())
		}
		r.raw.nc.Close() // goverbs lingers after a Terminate until the peer closes
		waitDone(t, r.conn)
		conformance.WaitState(t, s.QP, verbs.QPSErr)

		// Every receive completes once: successfully, or with an error.
		wcs := pollUpTo(t, s.RecvCQ, fuzzRecvs, flushGrace)
		got := map[uint64]int{}
		for _, wc := range wcs {
			got[wc.WRID]++
		}
		conformance.ExpectEmpty(t, s.RecvCQ)
		missing := 0
		for i := range uint64(fuzzRecvs) {
			switch got[i] {
			case 1:
			case 0:
				missing++
			default:
				t.Errorf("receive %d completed %d times", i, got[i])
			}
		}
		if missing > 0 {
			t.Errorf("%d of %d posted receives never completed (connection error: %v)", missing, fuzzRecvs, r.conn.Err())
		}
	})
}
