package engine

import "testing"

// TestKeyScramble: the scrambling of table indexes into keys is a
// bijection (unscramble inverts it), and consecutive indexes give keys
// that are not close to each other.
func TestKeyScramble(t *testing.T) {
	var tab mrTable
	tab.init()
	seen := make(map[uint32]bool, 1<<16)
	near := 0
	for i := uint32(0); i < 1<<16; i++ {
		x := tab.scramble(i)
		if x > 0xFFFFFF || tab.unscramble(x) != i {
			t.Fatalf("index %#x scrambles to %#x, which unscrambles to %#x", i, x, tab.unscramble(x))
		}
		if seen[x] {
			t.Fatalf("index %#x scrambles to %#x, already taken", i, x)
		}
		seen[x] = true
		if d := int64(x) - int64(tab.scramble(i+1)); d > -256 && d < 256 {
			near++
		}
	}
	if near > 64 {
		t.Errorf("%d of 65536 consecutive indexes give keys within 256 of each other", near)
	}
}
