package engine

import (
	"bytes"
	"slices"
	"testing"
)

// TestCopyPieces: CopyFrom and CopyInto move every byte once, in order, at
// every length around the small-message path of copyBytes (8 to 16 bytes)
// and across piece boundaries.
func TestCopyPieces(t *testing.T) {
	src := make([]byte, 64)
	for i := range src {
		src[i] = byte(i + 1)
	}
	for n := range 41 {
		for _, cuts := range [][]int{{n}, {n / 2, n - n/2}, {3, max(n-3, 0)}, {0, n, 0}} {
			if cuts[0] > n {
				continue
			}
			// Pieces of the given sizes over one buffer.
			whole := make([]byte, n)
			var pieces [][]byte
			at := 0
			for _, c := range cuts {
				c = min(c, n-at)
				pieces = append(pieces, whole[at:at+c])
				at += c
			}
			if got := CopyInto(pieces, 0, src[:n]); got != n || !bytes.Equal(whole, src[:n]) {
				t.Fatalf("CopyInto %d bytes into %v: %d, %v", n, cuts, got, whole)
			}
			dst := make([]byte, n)
			if got := CopyFrom(dst, pieces, 0); got != n || !bytes.Equal(dst, src[:n]) {
				t.Fatalf("CopyFrom %d bytes from %v: %d, %v", n, cuts, got, dst)
			}
		}
		// A destination shorter than the source takes what fits.
		short := make([]byte, n/2)
		if got := copyBytes(short, src[:n]); got != n/2 || !bytes.Equal(short, src[:n/2]) {
			t.Fatalf("copyBytes %d into %d: %d", n, n/2, got)
		}
	}
}

// AppendRange gives the pieces that hold a byte range of a segment list,
// across segment boundaries, skipping empty segments, short at the end.
func TestAppendRange(t *testing.T) {
	segs := [][]byte{[]byte("abc"), nil, []byte("defg"), []byte("hi")}
	for _, c := range []struct {
		off, n int
		want   []string
	}{
		{0, 9, []string{"abc", "defg", "hi"}},
		{2, 3, []string{"c", "de"}},
		{3, 4, []string{"defg"}},
		{5, 10, []string{"fg", "hi"}},
		{9, 1, nil},
		{1, 0, nil},
	} {
		var got []string
		for _, p := range AppendRange(nil, segs, c.off, c.n) {
			got = append(got, string(p))
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("AppendRange(off %d, n %d) = %q, want %q", c.off, c.n, got, c.want)
		}
	}
}
