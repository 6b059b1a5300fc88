package iwarp_test

// Conformance of the receive side with docs/iwarp-wire.md: a raw TCP peer,
// written here on top of internal/wire alone, plays the MPA initiator against
// a goverbs responder (Listen + AcceptConn), sends crafted FPDUs and checks
// the Terminate goverbs answers with (section 7.3), the teardown that follows
// (TCP closed, QP in ERR, receives flushed), the handling of a Terminate sent
// to goverbs (section 7.4) and the responder's MPA rules (section 2.4).

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/goverbs/goverbs/internal/conformance"
	"github.com/goverbs/goverbs/internal/leakcheck"
	"github.com/goverbs/goverbs/internal/wire"
	"github.com/goverbs/goverbs/provider/iwarp"
	"github.com/goverbs/goverbs/verbs"
)

// guard bounds every wait on the socket so that a broken provider fails a
// test instead of hanging it; it is not a performance assertion.
const guard = 10 * time.Second

// flushGrace bounds the wait for completions once the connection has ended
// and the QP is in ERR: the flush has already run by then (a completion
// pushed by a concurrent CQ.Poll pump may lag a little), so a receive still
// missing after it will never complete. It is a hang guard too.
const flushGrace = 2 * time.Second

// rawPeer is the test's own iWARP endpoint: a plain TCP connection.
type rawPeer struct {
	nc  *net.TCPConn
	crc bool // negotiated
}

func dialRaw(t testing.TB, addr string) *rawPeer {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, guard)
	if err != nil {
		t.Fatal(err)
	}
	p := &rawPeer{nc: nc.(*net.TCPConn)}
	t.Cleanup(func() { p.nc.Close() })
	return p
}

// write sends b in one write (so that goverbs sees it as one stream chunk).
func (p *rawPeer) write(t testing.TB, b ...[]byte) {
	t.Helper()
	p.nc.SetWriteDeadline(time.Now().Add(guard))
	if _, err := p.nc.Write(bytes.Join(b, nil)); err != nil {
		t.Fatalf("raw peer write: %v", err)
	}
}

func (p *rawPeer) readFull(b []byte) error {
	p.nc.SetReadDeadline(time.Now().Add(guard))
	_, err := io.ReadFull(p.nc, b)
	return err
}

// readMPA reads one MPA frame.
func (p *rawPeer) readMPA() (wire.MPAFrame, error) {
	h := make([]byte, wire.MPAHeaderLen)
	if err := p.readFull(h); err != nil {
		return wire.MPAFrame{}, err
	}
	_, _, _, pdLen, err := wire.ParseMPAHeader(h)
	if err != nil {
		return wire.MPAFrame{}, err
	}
	h = append(h, make([]byte, pdLen)...)
	if err := p.readFull(h[wire.MPAHeaderLen:]); err != nil {
		return wire.MPAFrame{}, err
	}
	return wire.ParseMPA(h)
}

// readFPDU reads one complete FPDU: length field, ULPDU, pad and CRC.
func (p *rawPeer) readFPDU() ([]byte, error) {
	b := make([]byte, wire.MPALenLen)
	if err := p.readFull(b); err != nil {
		return nil, err
	}
	ulen := int(binary.BigEndian.Uint16(b))
	b = append(b, make([]byte, ulen+wire.TrailerLen(ulen))...)
	if err := p.readFull(b[wire.MPALenLen:]); err != nil {
		return nil, err
	}
	return b, nil
}

// isClosed reports whether a read error means the peer closed the
// connection: a FIN (EOF), or an RST (goverbs closes a socket that still
// holds bytes it did not read, which Linux turns into a reset).
func isClosed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)
}

// expectClosed checks that goverbs closes the connection without sending
// anything more, then closes the raw end.
func (p *rawPeer) expectClosed(t testing.TB) {
	t.Helper()
	p.nc.SetReadDeadline(time.Now().Add(guard))
	var b [512]byte
	n, err := p.nc.Read(b[:])
	if n > 0 {
		t.Fatalf("goverbs sent %d more bytes (% x) instead of closing the connection", n, b[:min(n, 64)])
	}
	if !isClosed(err) {
		t.Fatalf("goverbs did not close the connection: read error %v", err)
	}
	p.nc.Close() // as a real peer does; goverbs lingers until then
}

// readTerminate reads the next FPDU and checks that it is a well-formed
// Terminate (QN 2, MSN 1, MO 0, CRC when negotiated).
func (p *rawPeer) readTerminate(t testing.TB) wire.TerminateInfo {
	t.Helper()
	f, err := p.readFPDU()
	if err != nil {
		t.Fatalf("reading the Terminate: %v", err)
	}
	ulen := int(binary.BigEndian.Uint16(f))
	h := wire.Header(f[:wire.MPALenLen+ulen])
	if h.Opcode() != wire.OpTerminate {
		t.Fatalf("got an FPDU with opcode %v (% x), want a Terminate", h.Opcode(), f[:min(len(f), 64)])
	}
	if te := wire.Check(h, false); te != nil {
		t.Fatalf("the Terminate fails the header checks: %v (% x)", te, f)
	}
	if p.crc && !wire.CheckFPDU(f) {
		t.Fatalf("the Terminate's CRC is wrong (% x)", f)
	}
	info, err := wire.ParseTerminate(h)
	if err != nil {
		t.Fatal(err)
	}
	if info.QN != wire.QNTerminate || info.MSN != 1 || info.MO != 0 {
		t.Fatalf("Terminate QN %d MSN %d MO %d, want 2, 1, 0", info.QN, info.MSN, info.MO)
	}
	return info
}

// respOpts shapes a goverbs responder for a raw initiator.
type respOpts struct {
	crc      bool         // the raw peer asks for CRC
	ird, ord int          // the raw peer's MPA v2 IRD and ORD
	accept   iwarp.Params // goverbs' AcceptConn parameters
	pairOpts conformance.PairOpts
	cfg      *iwarp.Config // goverbs' listener configuration
}

// responder is a goverbs QP accepted through iwarp.Listen by a raw initiator.
type responder struct {
	side  *conformance.Side
	conn  *iwarp.Conn
	raw   *rawPeer
	reply wire.MPAFrame
}

// startResponder makes the MPA exchange as the raw initiator and returns the
// goverbs side, established, and the raw peer, ready for its first FPDU.
func startResponder(t testing.TB, o respOpts) *responder {
	t.Helper()
	s := conformance.NewSide(t, open(t), verbs.QPTRC, o.pairOpts)
	ln, err := iwarp.Listen("127.0.0.1:0", o.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type res struct {
		c   *iwarp.Conn
		err error
	}
	ch := make(chan res, 1)
	actx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	go func() {
		r, err := ln.Accept(actx)
		if err != nil {
			ch <- res{nil, err}
			return
		}
		c, err := r.Accept(s.QP, o.accept)
		ch <- res{c, err}
	}()
	raw := dialRaw(t, ln.Addr().String())
	req, err := wire.NewRequest(wire.Local{IRD: o.ird, ORD: o.ord, Max: wire.MPAMaxIRDORD, CRC: o.crc})
	if err != nil {
		t.Fatal(err)
	}
	frame, err := wire.AppendMPA(nil, &req)
	if err != nil {
		t.Fatal(err)
	}
	raw.write(t, frame)
	reply, err := raw.readMPA()
	if err != nil {
		t.Fatalf("reading the MPA Reply: %v", err)
	}
	if !reply.Reply || reply.Reject || reply.Markers || reply.Rev != wire.MPARev2 || !reply.Enhanced || !reply.V2 || reply.CRC != o.crc {
		t.Fatalf("MPA Reply %+v to a valid Request (CRC %v)", reply, o.crc)
	}
	raw.crc = reply.CRC
	r := <-ch
	if r.err != nil {
		t.Fatalf("AcceptConn: %v", r.err)
	}
	t.Cleanup(func() { r.c.Disconnect() })
	if st := s.QP.State(); st != verbs.QPSRTS {
		t.Fatalf("accepted QP in %v", st)
	}
	return &responder{side: s, conn: r.c, raw: raw, reply: reply}
}

// waitDone waits for the goverbs connection to end.
func waitDone(t testing.TB, c *iwarp.Conn) {
	t.Helper()
	select {
	case <-c.Done():
	case <-time.After(guard):
		t.Fatalf("the goverbs connection did not end (err %v)", c.Err())
	}
}

// FPDU builders: they return the FPDU without its trailer, so that a case
// can still alter it; fin appends pad and CRC.

func untaggedMsg(op wire.Opcode, last bool, qn, msn, mo uint32, payload []byte) []byte {
	b := make([]byte, wire.UntaggedHeaderLen, wire.UntaggedHeaderLen+len(payload)+wire.MaxTrailerLen)
	wire.PutUntagged(b, op, last, 0, qn, msn, mo, wire.UntaggedDDPLen+len(payload))
	return append(b, payload...)
}

func taggedMsg(op wire.Opcode, last bool, stag uint32, to uint64, payload []byte) []byte {
	b := make([]byte, wire.TaggedHeaderLen, wire.TaggedHeaderLen+len(payload)+wire.MaxTrailerLen)
	wire.PutTagged(b, op, last, stag, to, wire.TaggedDDPLen+len(payload))
	return append(b, payload...)
}

func readReqMsg(msn uint32, f wire.ReadRequestFields) []byte {
	b := make([]byte, wire.ReadRequestLen, wire.ReadRequestLen+wire.MaxTrailerLen)
	wire.PutReadRequest(b, msn, &f)
	return b
}

// withVersions sets the DDP and RDMAP versions of an FPDU.
func withVersions(b []byte, dv, rv uint8) []byte {
	b[2] = b[2]&^wire.CtrlDVMask | dv
	b[3] = b[3]&^(3<<wire.CtrlRVShift) | rv<<wire.CtrlRVShift
	return b
}

// withOpcode sets the RDMAP opcode of an FPDU.
func withOpcode(b []byte, op uint8) []byte {
	b[3] = b[3]&^wire.CtrlOpMask | op
	return b
}

func fin(b []byte, crc bool) []byte { return wire.FinishFPDU(b, 0, crc) }

func payload(n int) []byte {
	b := make([]byte, n)
	conformance.Fill(b, 3)
	return b
}

// termEnv is what a case builds its FPDUs from.
type termEnv struct {
	s       *conformance.Side
	roMR    *verbs.MR // registered without REMOTE_WRITE
	otherMR *verbs.MR // registered in another PD of the same context
	crc     bool
}

func (e *termEnv) fin(b []byte) []byte { return fin(b, e.crc) }

// Attachments a Terminate carries (docs/iwarp-wire.md section 7.1).
const (
	attachNone  = iota // LLP and catastrophic causes
	attachDDP          // M, D, segment length and the DDP header
	attachRDMAP        // and R with the Read Request body
)

// TestTerminateSent is table 7.3 of docs/iwarp-wire.md from the receiving
// side: each case makes a goverbs responder send the Terminate siw would,
// then checks that it closes the TCP connection, moves the QP to ERR and
// completes every posted receive.
func TestTerminateSent(t *testing.T) {
	cases := []struct {
		name  string
		crc   bool
		ord   int                       // the raw peer's ORD: goverbs' IRD (default 4; -1 for 0)
		recvs []int                     // receives to post (their sizes)
		msgs  func(e *termEnv) [][]byte // the last FPDU is the offending one
		want  wire.TermError
		att   int
		// status of each receive (default WR_FLUSH_ERR)
		recvSt []verbs.WCStatus
		// the QP access error event goverbs raises
		accessEvent bool
	}{
		{
			name: "Write/unknown STag index", recvs: []int{64},
			msgs: func(e *termEnv) [][]byte {
				return [][]byte{e.fin(taggedMsg(wire.OpWrite, true, 0x000000ab, e.s.MR.RemoteAddr(0), payload(32)))}
			},
			want: wire.TermDDPTagged(wire.DDPTagInvalidSTag), att: attachDDP, accessEvent: true,
		},
		{
			name: "Write/STag key mismatch", recvs: []int{64},
			msgs: func(e *termEnv) [][]byte {
				return [][]byte{e.fin(taggedMsg(wire.OpWrite, true, e.s.MR.RKey()^0x01, e.s.MR.RemoteAddr(0), payload(32)))}
			},
			want: wire.TermDDPTagged(wire.DDPTagInvalidSTag), att: attachDDP, accessEvent: true,
		},
		{
			name: "Write/no REMOTE_WRITE", recvs: []int{64},
			msgs: func(e *termEnv) [][]byte {
				return [][]byte{e.fin(taggedMsg(wire.OpWrite, true, e.roMR.RKey(), e.roMR.RemoteAddr(0), payload(32)))}
			},
			want: wire.TermDDPTagged(wire.DDPTagInvalidSTag), att: attachDDP, accessEvent: true,
		},
		{
			name: "Write/outside the region", recvs: []int{64},
			msgs: func(e *termEnv) [][]byte {
				return [][]byte{e.fin(taggedMsg(wire.OpWrite, true, e.s.MR.RKey(), e.s.MR.RemoteAddr(e.s.MR.Len()-16), payload(32)))}
			},
			want: wire.TermDDPTagged(wire.DDPTagBaseBounds), att: attachDDP, accessEvent: true,
		},
		{
			name: "Write/before the region", recvs: []int{64},
			msgs: func(e *termEnv) [][]byte {
				return [][]byte{e.fin(taggedMsg(wire.OpWrite, true, e.s.MR.RKey(), e.s.MR.RemoteAddr(0)-8, payload(32)))}
			},
			want: wire.TermDDPTagged(wire.DDPTagBaseBounds), att: attachDDP, accessEvent: true,
		},
		{
			name: "Write/MR of another PD", recvs: []int{64},
			msgs: func(e *termEnv) [][]byte {
				return [][]byte{e.fin(taggedMsg(wire.OpWrite, true, e.otherMR.RKey(), e.otherMR.RemoteAddr(0), payload(32)))}
			},
			want: wire.TermDDPTagged(wire.DDPTagSTagNotAssociated), att: attachDDP, accessEvent: true,
		},
		{
			name: "Write/TO not contiguous", recvs: []int{64},
			msgs: func(e *termEnv) [][]byte {
				return [][]byte{
					e.fin(taggedMsg(wire.OpWrite, false, e.s.MR.RKey(), e.s.MR.RemoteAddr(0), payload(32))),
					e.fin(taggedMsg(wire.OpWrite, true, e.s.MR.RKey(), e.s.MR.RemoteAddr(64), payload(32))),
				}
			},
			want: wire.TermDDPTagged(wire.DDPTagBaseBounds), att: attachDDP,
		},
		{
			name: "Write/STag changed within a message", recvs: []int{64},
			msgs: func(e *termEnv) [][]byte {
				return [][]byte{
					e.fin(taggedMsg(wire.OpWrite, false, e.s.MR.RKey(), e.s.MR.RemoteAddr(0), payload(32))),
					e.fin(taggedMsg(wire.OpWrite, true, e.otherMR.RKey(), e.s.MR.RemoteAddr(32), payload(32))),
				}
			},
			want: wire.TermDDPTagged(wire.DDPTagInvalidSTag), att: attachDDP,
		},
		{
			name: "Read Response/no Read outstanding", recvs: []int{64},
			msgs: func(e *termEnv) [][]byte {
				return [][]byte{e.fin(taggedMsg(wire.OpReadResponse, true, e.s.MR.RKey(), e.s.MR.RemoteAddr(0), payload(32)))}
			},
			want: wire.TermDDPTagged(wire.DDPTagInvalidSTag), att: attachDDP,
		},
		{
			name: "Read Request/bad source STag", recvs: []int{64},
			msgs: func(e *termEnv) [][]byte {
				return [][]byte{e.fin(readReqMsg(1, wire.ReadRequestFields{SinkSTag: 0x1234, SinkTO: 0x1000, Size: 64,
					SrcSTag: e.s.MR.RKey() ^ 0x01, SrcTO: e.s.MR.RemoteAddr(0)}))}
			},
			want: wire.TermRDMAP(wire.RDMAPRemoteProtection, wire.RDMAPInvalidSTag), att: attachRDMAP, accessEvent: true,
		},
		{
			name: "Read Request/out of bounds", recvs: []int{64},
			msgs: func(e *termEnv) [][]byte {
				return [][]byte{e.fin(readReqMsg(1, wire.ReadRequestFields{SinkSTag: 0x1234, SinkTO: 0x1000, Size: 64,
					SrcSTag: e.s.MR.RKey(), SrcTO: e.s.MR.RemoteAddr(e.s.MR.Len() - 10)}))}
			},
			want: wire.TermRDMAP(wire.RDMAPRemoteProtection, wire.RDMAPBaseBounds), att: attachRDMAP, accessEvent: true,
		},
		{
			name: "Read Request/MR of another PD", recvs: []int{64},
			msgs: func(e *termEnv) [][]byte {
				return [][]byte{e.fin(readReqMsg(1, wire.ReadRequestFields{SinkSTag: 0x1234, SinkTO: 0x1000, Size: 64,
					SrcSTag: e.otherMR.RKey(), SrcTO: e.otherMR.RemoteAddr(0)}))}
			},
			want: wire.TermRDMAP(wire.RDMAPRemoteProtection, wire.RDMAPSTagNotAssociated), att: attachRDMAP, accessEvent: true,
		},
		{
			name: "Read Request/more than IRD", ord: -1, recvs: []int{64},
			msgs: func(e *termEnv) [][]byte {
				return [][]byte{e.fin(readReqMsg(1, wire.ReadRequestFields{SinkSTag: 0x1234, SinkTO: 0x1000, Size: 64,
					SrcSTag: e.s.MR.RKey(), SrcTO: e.s.MR.RemoteAddr(0)}))}
			},
			want: wire.TermRDMAP(wire.RDMAPRemoteOperation, wire.RDMAPCatastrophicStream), att: attachRDMAP,
		},
		{
			name: "Read Request/wrong MSN", recvs: []int{64},
			msgs: func(e *termEnv) [][]byte {
				return [][]byte{e.fin(readReqMsg(2, wire.ReadRequestFields{SinkSTag: 0x1234, SinkTO: 0x1000, Size: 64,
					SrcSTag: e.s.MR.RKey(), SrcTO: e.s.MR.RemoteAddr(0)}))}
			},
			want: wire.TermDDPUntagged(wire.DDPUntagMSNRange), att: attachDDP,
		},
		{
			name: "Send/no receive posted",
			msgs: func(e *termEnv) [][]byte {
				return [][]byte{e.fin(untaggedMsg(wire.OpSend, true, wire.QNSend, 1, 0, payload(32)))}
			},
			want: wire.TermDDPUntagged(wire.DDPUntagNoBuffer), att: attachDDP,
		},
		{
			name: "Send/longer than the receive", recvs: []int{16, 256},
			msgs: func(e *termEnv) [][]byte {
				return [][]byte{e.fin(untaggedMsg(wire.OpSend, true, wire.QNSend, 1, 0, payload(64)))}
			},
			want: wire.TermDDPUntagged(wire.DDPUntagNoBuffer), att: attachDDP,
			recvSt: []verbs.WCStatus{verbs.WCLocLenErr, verbs.WCWRFlushErr},
		},
		{
			name: "Send/wrong MSN", recvs: []int{64, 64},
			msgs: func(e *termEnv) [][]byte {
				return [][]byte{e.fin(untaggedMsg(wire.OpSend, true, wire.QNSend, 2, 0, payload(32)))}
			},
			want: wire.TermDDPUntagged(wire.DDPUntagMSNRange), att: attachDDP,
		},
		{
			name: "Send/wrong MSN after a good one", recvs: []int{64, 64},
			msgs: func(e *termEnv) [][]byte {
				return [][]byte{
					e.fin(untaggedMsg(wire.OpSend, true, wire.QNSend, 1, 0, payload(32))),
					e.fin(untaggedMsg(wire.OpSend, true, wire.QNSend, 1, 0, payload(32))),
				}
			},
			want: wire.TermDDPUntagged(wire.DDPUntagMSNRange), att: attachDDP,
			recvSt: []verbs.WCStatus{verbs.WCSuccess, verbs.WCWRFlushErr},
		},
		{
			name: "Send/MO not 0 on the first segment", recvs: []int{64},
			msgs: func(e *termEnv) [][]byte {
				return [][]byte{e.fin(untaggedMsg(wire.OpSend, true, wire.QNSend, 1, 8, payload(32)))}
			},
			want: wire.TermDDPUntagged(wire.DDPUntagInvalidMO), att: attachDDP,
		},
		{
			// The receive was taken by the first segment: it must still complete.
			name: "Send/MO gap on the second segment", recvs: []int{256, 64},
			msgs: func(e *termEnv) [][]byte {
				return [][]byte{
					e.fin(untaggedMsg(wire.OpSend, false, wire.QNSend, 1, 0, payload(32))),
					e.fin(untaggedMsg(wire.OpSend, true, wire.QNSend, 1, 64, payload(32))),
				}
			},
			want: wire.TermDDPUntagged(wire.DDPUntagInvalidMO), att: attachDDP,
		},
		{
			name: "Send/on QN 1", recvs: []int{64},
			msgs: func(e *termEnv) [][]byte {
				return [][]byte{e.fin(untaggedMsg(wire.OpSend, true, wire.QNReadRequest, 1, 0, payload(32)))}
			},
			want: wire.TermDDPUntagged(wire.DDPUntagInvalidQN), att: attachDDP,
		},
		{
			name: "Send/bad DDP version", recvs: []int{64},
			msgs: func(e *termEnv) [][]byte {
				return [][]byte{e.fin(withVersions(untaggedMsg(wire.OpSend, true, wire.QNSend, 1, 0, payload(32)), 2, 1))}
			},
			want: wire.TermDDPUntagged(wire.DDPUntagBadVersion), att: attachDDP,
		},
		{
			name: "Write/bad DDP version", recvs: []int{64},
			msgs: func(e *termEnv) [][]byte {
				return [][]byte{e.fin(withVersions(taggedMsg(wire.OpWrite, true, e.s.MR.RKey(), e.s.MR.RemoteAddr(0), payload(32)), 0, 1))}
			},
			want: wire.TermDDPTagged(wire.DDPTagBadVersion), att: attachDDP,
		},
		{
			name: "Send/bad RDMAP version", recvs: []int{64},
			msgs: func(e *termEnv) [][]byte {
				return [][]byte{e.fin(withVersions(untaggedMsg(wire.OpSend, true, wire.QNSend, 1, 0, payload(32)), 1, 2))}
			},
			want: wire.TermRDMAP(wire.RDMAPRemoteOperation, wire.RDMAPBadVersion), att: attachDDP,
		},
		{
			name: "unknown opcode 0xC", recvs: []int{64},
			msgs: func(e *termEnv) [][]byte {
				return [][]byte{e.fin(withOpcode(untaggedMsg(wire.OpSend, true, wire.QNSend, 1, 0, payload(32)), 0xC))}
			},
			want: wire.TermRDMAP(wire.RDMAPRemoteOperation, wire.RDMAPUnexpectedOpcode), att: attachDDP,
		},
		{
			name: "CRC mismatch", crc: true, recvs: []int{64, 64},
			msgs: func(e *termEnv) [][]byte {
				f := e.fin(untaggedMsg(wire.OpSend, true, wire.QNSend, 1, 0, payload(32)))
				f[len(f)-1] ^= 0x80
				return [][]byte{f}
			},
			want: wire.TermMPA(wire.MPACRCError), att: attachNone,
		},
		{
			name: "CRC mismatch after a good FPDU", crc: true, recvs: []int{64, 64},
			msgs: func(e *termEnv) [][]byte {
				f := e.fin(untaggedMsg(wire.OpSend, true, wire.QNSend, 2, 0, payload(32)))
				f[len(f)-1] ^= 0x80
				return [][]byte{e.fin(untaggedMsg(wire.OpSend, true, wire.QNSend, 1, 0, payload(32))), f}
			},
			want: wire.TermMPA(wire.MPACRCError), att: attachNone,
			recvSt: []verbs.WCStatus{verbs.WCSuccess, verbs.WCWRFlushErr},
		},
		{
			name: "Atomic Request without extensions", recvs: []int{64},
			msgs: func(e *termEnv) [][]byte {
				b := make([]byte, wire.AtomicRequestLen, wire.AtomicRequestLen+wire.MaxTrailerLen)
				wire.PutAtomicRequest(b, 1, &wire.AtomicRequestFields{Op: wire.AtomicFetchAdd, ReqID: 1,
					STag: e.s.MR.RKey(), TO: e.s.MR.RemoteAddr(0), AddSwap: 1, AddSwapMask: ^uint64(0)})
				return [][]byte{e.fin(b)}
			},
			want: wire.TermRDMAP(wire.RDMAPRemoteOperation, wire.RDMAPUnexpectedOpcode), att: attachDDP,
		},
		{
			name: "Immediate Data without extensions", recvs: []int{64},
			msgs: func(e *termEnv) [][]byte {
				b := make([]byte, wire.ImmediateLen, wire.ImmediateLen+wire.MaxTrailerLen)
				wire.PutImmediate(b, false, 1, wire.Imm32Value(7))
				return [][]byte{e.fin(b)}
			},
			want: wire.TermRDMAP(wire.RDMAPRemoteOperation, wire.RDMAPUnexpectedOpcode), att: attachDDP,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			leakcheck.Check(t)
			ord := 4
			switch {
			case tc.ord < 0:
				ord = 0
			case tc.ord > 0:
				ord = tc.ord
			}
			ird := ord
			if ird == 0 {
				ird = -1 // none: a zero Params field is the most
			}
			r := startResponder(t, respOpts{crc: tc.crc, ird: 4, ord: ord, accept: iwarp.Params{IRD: ird, ORD: 4}})
			s := r.side
			if got := r.conn.IRD(); got != ord {
				t.Fatalf("goverbs IRD %d, want %d", got, ord)
			}
			pd2, err := s.Ctx.AllocPD()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { pd2.Dealloc() })
			other, err := pd2.RegMR(make([]byte, 4096), verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { other.Dereg() })
			ro, err := s.PD.RegMR(make([]byte, 4096), verbs.AccessLocalWrite|verbs.AccessRemoteRead)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ro.Dereg() })

			off := 0
			for i, n := range tc.recvs {
				s.MustPostRecv(t, s.Recv(uint64(100+i), off, n))
				off += n
			}
			msgs := tc.msgs(&termEnv{s: s, roMR: ro, otherMR: other, crc: r.raw.crc})
			r.raw.write(t, msgs...)

			info := r.raw.readTerminate(t)
			if info.RFC.Cause != tc.want {
				t.Errorf("Terminate cause %v (siw order: %v), want %v", info.RFC.Cause, info.Swapped.Cause, tc.want)
			}
			off0 := wire.Header(msgs[len(msgs)-1])
			ddpLen := wire.UntaggedDDPLen
			if off0.Tagged() {
				ddpLen = wire.TaggedDDPLen
			}
			wantM, wantD, wantR := tc.att >= attachDDP, tc.att >= attachDDP, tc.att == attachRDMAP
			if info.RFC.M != wantM || info.RFC.D != wantD || info.RFC.R != wantR {
				t.Errorf("Terminate M/D/R %v/%v/%v, want %v/%v/%v", info.RFC.M, info.RFC.D, info.RFC.R, wantM, wantD, wantR)
			}
			switch tc.att {
			case attachNone:
				if info.DDPHdr != nil || len(info.RDMAPHdr) != 0 {
					t.Errorf("Terminate carries headers (DDP % x, RDMAP % x), want none", info.DDPHdr, info.RDMAPHdr)
				}
			default:
				if !bytes.Equal(info.DDPHdr, off0[wire.MPALenLen:wire.MPALenLen+ddpLen]) {
					t.Errorf("attached DDP header % x, want the offending one % x", info.DDPHdr, off0[wire.MPALenLen:wire.MPALenLen+ddpLen])
				}
				if int(info.SegLen) != off0.ULPDULen() {
					t.Errorf("attached DDP segment length %d, want %d", info.SegLen, off0.ULPDULen())
				}
				var wantRDMAP []byte
				if tc.att == attachRDMAP {
					wantRDMAP = off0[wire.UntaggedHeaderLen:wire.ReadRequestLen]
				}
				if !bytes.Equal(info.RDMAPHdr, wantRDMAP) {
					t.Errorf("attached RDMAP header % x, want % x", info.RDMAPHdr, wantRDMAP)
				}
			}

			r.raw.expectClosed(t)
			conformance.WaitState(t, s.QP, verbs.QPSErr)
			waitDone(t, r.conn)
			var te *iwarp.TerminateError
			if err := r.conn.Err(); !errors.As(err, &te) || !te.Sent || te.Cause != tc.want {
				t.Errorf("conn.Err() = %v, want a sent Terminate %v", err, tc.want)
			}
			if tc.accessEvent {
				if ev := conformance.NextEvent(t, s.Ctx); ev.Type != verbs.EventQPAccessErr || ev.QP != s.QP {
					t.Errorf("async event %v, want QP access error", ev.Type)
				}
			}
			checkRecvs(t, s, 100, tc.recvs, tc.recvSt)
		})
	}
}

// checkRecvs polls the completions of the receives posted with wr_ids
// base, base+1, ... and checks their statuses (default WR_FLUSH_ERR).
func checkRecvs(t testing.TB, s *conformance.Side, base uint64, sizes []int, want []verbs.WCStatus) {
	t.Helper()
	// Called once the connection has ended: the flush has happened, so
	// the guard only has to cover a straggling completion.
	wcs := pollUpTo(t, s.RecvCQ, len(sizes), flushGrace)
	got := map[uint64]bool{}
	for i, wc := range wcs {
		got[wc.WRID] = true
		st := verbs.WCWRFlushErr
		if i < len(want) {
			st = want[i]
		}
		if wc.WRID != base+uint64(i) || wc.Status != st {
			t.Errorf("receive completion %d: %s, want wr_id %#x %v", i, conformance.Describe(wc), base+uint64(i), st)
		}
	}
	for i := range sizes {
		if id := base + uint64(i); !got[id] {
			t.Errorf("receive wr_id %#x never completed (QP %v)", id, s.QP.State())
		}
	}
	conformance.ExpectEmpty(t, s.RecvCQ)
}

// pollUpTo polls cq until it returned n completions or wait expired, and
// returns what it got.
func pollUpTo(t testing.TB, cq *verbs.CQ, n int, wait time.Duration) []verbs.WC {
	t.Helper()
	var out []verbs.WC
	buf := make([]verbs.WC, max(n, 1))
	deadline := time.Now().Add(wait)
	for len(out) < n && time.Now().Before(deadline) {
		k, err := cq.Poll(buf[:n-len(out)])
		if err != nil {
			t.Fatalf("Poll: %v", err)
		}
		out = append(out, buf[:k]...)
		if k == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	return out
}

// pollGuarded polls n completions and fails the test if they do not come.
func pollGuarded(t testing.TB, cq *verbs.CQ, n int) []verbs.WC {
	t.Helper()
	out := pollUpTo(t, cq, n, guard)
	if len(out) < n {
		t.Fatalf("%d of %d completions after %v: %+v", len(out), n, guard, out)
	}
	return out
}

// swapTermBits rewrites an RFC-order Terminate control word the way siw's C
// bitfield lays it out on little-endian hosts (docs/iwarp-wire.md 7.1
// caveat): Layer and EType nibbles swapped, M/D/R at 0x01/0x02/0x04.
func swapTermBits(f []byte) {
	b := f[wire.UntaggedHeaderLen:]
	b[0] = b[0]>>4 | b[0]<<4
	var mdr byte
	if b[2]&wire.TermFlagM != 0 {
		mdr |= 0x01
	}
	if b[2]&wire.TermFlagD != 0 {
		mdr |= 0x02
	}
	if b[2]&wire.TermFlagR != 0 {
		mdr |= 0x04
	}
	b[2] = mdr
}

// TestTerminateReceived: a Terminate from the peer moves the goverbs QP to
// ERR and flushes its outstanding work; one that reports an error on one of
// goverbs' outstanding RDMA Reads (with the Read Request attached) completes
// that Read with the error it names.
func TestTerminateReceived(t *testing.T) {
	cases := []struct {
		name     string
		cause    wire.TermError
		nameRead bool // attach goverbs' Read Request
		siwOrder bool // control word in siw's bit order
		readSt   verbs.WCStatus
	}{
		{name: "catastrophic", cause: wire.TermDDPCatastrophic(), readSt: verbs.WCWRFlushErr},
		{name: "LLP stream lost", cause: wire.TermMPA(wire.MPAStreamLost), readSt: verbs.WCWRFlushErr},
		{name: "protection error naming the Read", cause: wire.TermRDMAP(wire.RDMAPRemoteProtection, wire.RDMAPInvalidSTag), nameRead: true, readSt: verbs.WCRemAccessErr},
		{name: "bounds error naming the Read", cause: wire.TermRDMAP(wire.RDMAPRemoteProtection, wire.RDMAPBaseBounds), nameRead: true, readSt: verbs.WCRemAccessErr},
		{name: "protection error naming the Read, siw bit order", cause: wire.TermRDMAP(wire.RDMAPRemoteProtection, wire.RDMAPInvalidSTag), nameRead: true, siwOrder: true, readSt: verbs.WCRemAccessErr},
		{name: "remote operation error naming the Read", cause: wire.TermRDMAP(wire.RDMAPRemoteOperation, wire.RDMAPCatastrophicStream), nameRead: true, readSt: verbs.WCRemOpErr},
		{name: "protection error naming no outstanding Read", cause: wire.TermRDMAP(wire.RDMAPRemoteProtection, wire.RDMAPInvalidSTag), readSt: verbs.WCWRFlushErr},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			leakcheck.Check(t)
			r := startResponder(t, respOpts{ird: 4, ord: 4, accept: iwarp.Params{IRD: 4, ORD: 4}})
			s := r.side
			s.MustPostRecv(t, s.Recv(100, 0, 64), s.Recv(101, 64, 64))
			// MPA: the responder transmits only after the initiator's first
			// FPDU; send a zero-length Write (a Write RTR).
			r.raw.write(t, fin(taggedMsg(wire.OpWrite, true, 1, 0, nil), false))
			// A Read the raw peer never answers; a fenced Send and another
			// Read queued behind it.
			s.MustPostSend(t,
				verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGList: []verbs.SGE{s.MR.SGE(4096, 512)},
					RemoteAddr: 0x10000, RKey: 0x4200},
				verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled | verbs.SendFence, SGList: []verbs.SGE{s.MR.SGE(0, 16)}},
				verbs.SendWR{WRID: 3, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGList: []verbs.SGE{s.MR.SGE(8192, 512)},
					RemoteAddr: 0x20000, RKey: 0x4200},
			)
			f, err := r.raw.readFPDU()
			if err != nil {
				t.Fatalf("reading goverbs' Read Request: %v", err)
			}
			rr := wire.Header(f[:wire.ReadRequestLen])
			if rr.Opcode() != wire.OpReadRequest || wire.Check(rr, false) != nil || rr.ReadRequest().SrcTO() != 0x10000 || rr.ReadRequest().Size() != 512 {
				t.Fatalf("expected goverbs' Read Request, got % x", f)
			}
			var off wire.Header
			if tc.nameRead {
				off = rr
			}
			term := wire.TerminateFor(1, tc.cause, off)
			b, err := wire.AppendTerminate(nil, &term)
			if err != nil {
				t.Fatal(err)
			}
			if tc.siwOrder {
				swapTermBits(b)
			}
			r.raw.write(t, fin(b, false))

			conformance.WaitState(t, s.QP, verbs.QPSErr)
			wcs := pollGuarded(t, s.SendCQ, 3)
			for i, want := range []verbs.WCStatus{tc.readSt, verbs.WCWRFlushErr, verbs.WCWRFlushErr} {
				if wcs[i].WRID != uint64(i+1) || wcs[i].Status != want {
					t.Errorf("send completion %d: %s, want wr_id %d %v", i, conformance.Describe(wcs[i]), i+1, want)
				}
			}
			conformance.ExpectEmpty(t, s.SendCQ)
			checkRecvs(t, s, 100, []int{64, 64}, nil)
			r.raw.expectClosed(t)
			waitDone(t, r.conn)
			err = r.conn.Err()
			var te *iwarp.TerminateError
			if !errors.Is(err, iwarp.ErrRemoteTerminate) || !errors.As(err, &te) || te.Sent {
				t.Fatalf("conn.Err() = %v, want a received Terminate", err)
			}
			if !tc.siwOrder && te.Cause != tc.cause {
				t.Errorf("conn.Err() cause %v, want %v", te.Cause, tc.cause)
			}
		})
	}
}

// TestMPARequestRefused: the responder's handling of bad MPA Requests
// (docs/iwarp-wire.md 2.4): markers and a short enhanced block get a Reply
// with R set, anything it cannot parse gets the connection dropped without
// a Reply; none of them reaches Accept.
func TestMPARequestRefused(t *testing.T) {
	key := []byte(wire.MPAKeyRequest)
	hdr := func(key []byte, flags, rev byte, pdLen int, pd []byte) []byte {
		b := append([]byte(nil), key...)
		b = append(b, flags, rev, byte(pdLen>>8), byte(pdLen))
		return append(b, pd...)
	}
	valid := func(mod func(f *wire.MPAFrame)) []byte {
		f, err := wire.NewRequest(wire.Local{IRD: 1, ORD: 1})
		if err != nil {
			t.Fatal(err)
		}
		mod(&f)
		b, err := wire.AppendMPA(nil, &f)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	cases := []struct {
		name   string
		frame  []byte
		reject bool // a Reply with R=1 comes back before the close
	}{
		{name: "markers", frame: valid(func(f *wire.MPAFrame) { f.Markers = true }), reject: true},
		{name: "markers and CRC", frame: valid(func(f *wire.MPAFrame) { f.Markers, f.CRC = true, true }), reject: true},
		{name: "enhanced with PD_Length 0", frame: hdr(key, wire.MPAFlagEnhanced, 2, 0, nil), reject: true},
		{name: "enhanced with PD_Length 3", frame: hdr(key, wire.MPAFlagEnhanced, 2, 3, []byte("abc")), reject: true},
		{name: "Reply key", frame: hdr([]byte(wire.MPAKeyReply), wire.MPAFlagEnhanced, 2, 4, []byte{0, 1, 0, 1})},
		{name: "garbage key", frame: hdr([]byte("GET / HTTP/1.1\r\n"), 0, 1, 0, nil)},
		{name: "revision 3", frame: hdr(key, 0, 3, 0, nil)},
		{name: "private data 257", frame: hdr(key, 0, 1, 257, make([]byte, 257))},
		{name: "private data 300, enhanced", frame: hdr(key, wire.MPAFlagEnhanced, 2, 300, make([]byte, 300))},
		{name: "private data 600", frame: hdr(key, 0, 1, 600, make([]byte, 600))},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			leakcheck.Check(t)
			ln, err := iwarp.Listen("127.0.0.1:0", nil)
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			raw := dialRaw(t, ln.Addr().String())
			raw.nc.SetWriteDeadline(time.Now().Add(guard))
			raw.nc.Write(tc.frame) // goverbs may reset the connection before it took everything
			if tc.reject {
				rep, err := raw.readMPA()
				if err != nil {
					t.Fatalf("reading the rejecting Reply: %v", err)
				}
				if !rep.Reply || !rep.Reject || rep.Markers {
					t.Fatalf("Reply %+v, want R=1, M=0", rep)
				}
				if req, _ := wire.ParseMPA(tc.frame); rep.Rev != req.Rev || rep.Enhanced != req.Enhanced {
					t.Errorf("Reply rev %d enhanced %v, want the Request's (%d, %v) echoed", rep.Rev, rep.Enhanced, req.Rev, req.Enhanced)
				}
			}
			raw.expectClosed(t)
			// The handshake goroutine decided before closing: nothing may be queued.
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			if r, err := ln.Accept(ctx); err == nil {
				r.Reject(nil)
				t.Fatalf("a refused request reached Accept")
			}
		})
	}
}

// TestMPASilentInitiator: a TCP connection that sends no MPA Request is
// dropped after AcceptTimeout.
func TestMPASilentInitiator(t *testing.T) {
	leakcheck.Check(t)
	ln, err := iwarp.Listen("127.0.0.1:0", &iwarp.Config{AcceptTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	raw := dialRaw(t, ln.Addr().String())
	raw.expectClosed(t) // guard: 10 s, far above the 200 ms timeout
	// A half-sent Request is dropped too.
	raw2 := dialRaw(t, ln.Addr().String())
	raw2.write(t, []byte(wire.MPAKeyRequest)[:10])
	raw2.expectClosed(t)
}
