package hook

import "testing"

func TestSetGet(t *testing.T) {
	var h Hook[func() int]
	if h.Get() != nil {
		t.Fatal("a zero Hook has a function")
	}
	if old := h.Set(func() int { return 1 }, false); old != nil {
		t.Fatal("Set returned a previous function where there was none")
	}
	if f := h.Get(); f == nil || (*f)() != 1 {
		t.Fatal("Get does not return the function set")
	}
	old := h.Set(func() int { return 2 }, false)
	if old == nil || old() != 1 {
		t.Fatal("Set does not return the function it replaces")
	}
	if old := h.Set(nil, true); old == nil || old() != 2 {
		t.Fatal("removing does not return the function it replaces")
	}
	if h.Get() != nil {
		t.Fatal("Get returns a function after its removal")
	}
}
