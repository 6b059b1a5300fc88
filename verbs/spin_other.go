//go:build !linux

package verbs

import "time"

// threadUsage is not known here: SpinWatch relies on SpinResultOf.
type threadUsage struct {
	cpu       time.Duration
	preempted int64
}

func (u *threadUsage) read() bool { return false }
