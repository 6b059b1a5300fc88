// Package errtest is a test helper for packages' error sentinels: each
// matches itself and what it stands for (the layer above's sentinels, an
// errno), matches nothing else, and prints its package's prefix once.
// Only _test files import it.
package errtest

import (
	"errors"
	"strings"
	"testing"
)

// Sentinel is one error and what errors.Is must and must not match it to.
type Sentinel struct {
	Err       error
	Is, IsNot []error
}

// Check checks each sentinel of cases; prefix is the package's ("shm:").
func Check(t testing.TB, prefix string, cases []Sentinel) {
	t.Helper()
	for _, c := range cases {
		if !errors.Is(c.Err, c.Err) {
			t.Errorf("%v does not match itself", c.Err)
		}
		for _, target := range c.Is {
			if !errors.Is(c.Err, target) {
				t.Errorf("errors.Is(%v, %v) is false", c.Err, target)
			}
		}
		for _, target := range c.IsNot {
			if errors.Is(c.Err, target) {
				t.Errorf("errors.Is(%v, %v) is true", c.Err, target)
			}
		}
		if n := strings.Count(c.Err.Error(), prefix); n > 1 {
			t.Errorf("message %q: %d prefixes", c.Err, n)
		}
	}
}
