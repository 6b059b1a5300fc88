package verbs

import (
	"time"

	"golang.org/x/sys/unix"
)

// threadUsage is what getrusage says of the calling thread.
type threadUsage struct {
	cpu       time.Duration // user and system CPU time
	preempted int64         // involuntary context switches
}

func (u *threadUsage) read() bool {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_THREAD, &ru) != nil {
		return false
	}
	u.cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	u.preempted = ru.Nivcsw
	return true
}
