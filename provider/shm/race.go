//go:build race

package shm

import "sync/atomic"

// The race detector does not see the ordering that atomics in shared
// mappings give (they are outside the Go heap), so in -race builds every
// publication releases, and every observation acquires, one process-wide
// atomic: a peer in the same process is then ordered after what the other
// side did before publishing.
var raceClock atomic.Uint64

func raceRelease() { raceClock.Add(1) }
func raceAcquire() { raceClock.Add(0) }
