// Package registry joins package verbs and package verbs/driver without an
// import cycle: driver (which imports verbs for its types) stores providers
// here, and verbs (which cannot import driver) reads them and lends driver
// the provider objects behind its own objects.
package registry

import (
	"sort"
	"sync"
)

var reg struct {
	sync.Mutex
	providers map[string]any
}

// Register stores a provider under name, replacing an earlier one.
func Register(name string, p any) {
	reg.Lock()
	defer reg.Unlock()
	if reg.providers == nil {
		reg.providers = make(map[string]any)
	}
	reg.providers[name] = p
}

// Providers returns the registered providers, ordered by name.
func Providers() []any {
	reg.Lock()
	defer reg.Unlock()
	names := make([]string, 0, len(reg.providers))
	for n := range reg.providers {
		names = append(names, n)
	}
	sort.Strings(names)
	ps := make([]any, len(names))
	for i, n := range names {
		ps[i] = reg.providers[n]
	}
	return ps
}

// Unwrap returns the provider object behind a verbs object (*verbs.QP,
// *verbs.CQ, ...), or nil. Package verbs sets it at init.
var Unwrap func(obj any) any
