// Package leakcheck fails a test that leaves goroutines behind.
package leakcheck

import (
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"
)

// Check records the goroutines running now and, when the test ends (after
// its other cleanups, so register it first), fails it if goroutines started
// since are still running after a grace period.
func Check(t testing.TB) {
	t.Helper()
	before := ids()
	t.Cleanup(func() {
		deadline := time.Now().Add(3 * time.Second)
		for {
			extra := leaked(before)
			if len(extra) == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("leakcheck: %d goroutines left running:\n%s", len(extra), strings.Join(extra, "\n\n"))
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

// stacks returns the stack of every goroutine, keyed by its id line.
func stacks() map[string]string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	out := map[string]string{}
	for _, g := range strings.Split(string(buf), "\n\n") {
		head, _, _ := strings.Cut(g, "\n")
		// "goroutine 12 [running]:" -> "goroutine 12"
		if i := strings.Index(head, " ["); i > 0 {
			head = head[:i]
		}
		out[head] = g
	}
	return out
}

func ids() map[string]bool {
	m := map[string]bool{}
	for id := range stacks() {
		m[id] = true
	}
	return m
}

func leaked(before map[string]bool) []string {
	var out []string
	for id, st := range stacks() {
		if before[id] || benign(st) {
			continue
		}
		out = append(out, st)
	}
	sort.Strings(out)
	return out
}

// benign reports goroutines of the runtime and the testing package itself.
func benign(st string) bool {
	for _, s := range []string{
		"testing.(*T).Run", "testing.tRunner.func", "testing.(*M).", "runtime.goexit\n\t" + "/dev/null",
		"created by testing.(*T).Run", "runtime/trace", "signal.signal_recv", "os/signal.loop",
	} {
		if strings.Contains(st, s) {
			return true
		}
	}
	return strings.Contains(st, "[running]") && strings.Contains(st, "leakcheck.stacks")
}
