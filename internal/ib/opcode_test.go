package ib

import "testing"

// The opcode chosen for a packet's place in its message has that place
// and those extensions in IBA's table (Info), for every combination.
func TestOpcodeForPosition(t *testing.T) {
	check := func(op Opcode, kind uint32, first, last, imm, inv bool) {
		t.Helper()
		m := op.Info().Mask
		if m&kind == 0 || (m&IsFirst != 0) != first || (m&IsLast != 0) != last ||
			(m&HasImm != 0) != (imm && last) || (m&HasIETH != 0) != (inv && last) {
			t.Errorf("%v for first=%v last=%v imm=%v inv=%v", op, first, last, imm, inv)
		}
	}
	for _, first := range []bool{false, true} {
		for _, last := range []bool{false, true} {
			for _, imm := range []bool{false, true} {
				check(WriteOpcode(first, last, imm), IsWrite, first, last, imm, false)
				check(SendOpcode(first, last, imm, false), IsSend, first, last, imm, false)
				check(SendOpcode(first, last, false, imm), IsSend, first, last, false, imm)
			}
		}
	}
	for n := 1; n <= 3; n++ {
		for i := range n {
			check(ReadResponseOpcode(i, n), IsRead, i == 0, i == n-1, false, false)
		}
	}
}
