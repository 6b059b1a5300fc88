package wire

// Check validates what can be validated from an FPDU header alone and
// returns the Terminate cause to send, or nil. h starts at the ULPDU_Length
// field and must hold at least the DDP header (16 or 20 bytes); a fixed-size
// message's body is not examined. allowExt admits the RFC 7306 opcodes (only
// on a connection whose peer offered them; siw does not).
//
// The checks, in siw's order (docs/iwarp-wire.md section 5):
//   - DDP version 1, else DDP/tagged/0x04 or DDP/untagged/0x06 by the T bit;
//   - RDMAP version 1, else RDMAP/remote operation/0x05;
//   - a known opcode whose buffer model matches the T bit, else
//     RDMAP/remote operation/0x06 (siw: any opcode above 7);
//   - ULPDU_Length and the slice long enough for the DDP header, else
//     DDP/catastrophic/0x00 (this choice is ours; siw's handling of such
//     FPDUs is not documented);
//   - untagged: the QN the opcode calls for (0 Send and Immediate Data,
//     1 Read Request and Atomic Request, 2 Terminate, 3 Atomic Response),
//     else DDP/untagged/0x01;
//   - single-segment messages (Read Request, Terminate, Immediate Data,
//     Atomic Request/Response): MO 0, else DDP/untagged/0x04; L set and
//     ULPDU_Length exact (46, 26, 70, 30; at least 22 for a Terminate), else
//     RDMAP/remote operation/0xFF (siw refuses a Read Request with payload
//     but names no code).
//
// Stateful checks (MSN, MO continuity, STag and TO continuity, buffer
// lengths, IRD) belong to the provider.
func Check(h Header, allowExt bool) *TermError {
	if len(h) < 4 {
		t := TermDDPCatastrophic()
		return &t
	}
	if t := checkCtrl(h[2], h[3], allowExt); t != nil {
		return t
	}
	op := h.Opcode()
	base := UntaggedHeaderLen
	if op.Tagged() {
		base = TaggedHeaderLen
	}
	if MPALenLen+h.ULPDULen() < base || len(h) < base {
		t := TermDDPCatastrophic()
		return &t
	}
	if op.Tagged() {
		return nil
	}
	if qn, _ := op.QN(); h.QN() != qn {
		t := TermDDPUntagged(DDPUntagInvalidQN)
		return &t
	}
	n, exact := op.fixedLen()
	if !exact && op != OpTerminate {
		return nil // Sends: MSN, MO and length are stateful
	}
	if h.MO() != 0 {
		t := TermDDPUntagged(DDPUntagInvalidMO)
		return &t
	}
	size := MPALenLen + h.ULPDULen()
	if !h.Last() || size < n || exact && size != n {
		t := TermRDMAP(RDMAPRemoteOperation, RDMAPUnspecified)
		return &t
	}
	return nil
}
