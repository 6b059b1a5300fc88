//go:build !linux

package conformance

import "time"

// ThreadCPU returns 0 where the thread's CPU time is not read.
func ThreadCPU() time.Duration { return 0 }
