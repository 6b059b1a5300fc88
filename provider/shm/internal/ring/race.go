//go:build race

package ring

import "sync/atomic"

// The race detector does not see the ordering that atomics in shared
// mappings give (they are outside the Go heap), so in -race builds every
// publication releases, and every observation acquires, one process-wide
// atomic: a peer in the same process is then ordered after what the other
// side did before publishing.
var raceClock atomic.Uint64

// RaceRelease marks a publication for the race detector.
func RaceRelease() { raceClock.Add(1) }

// RaceAcquire marks an observation of a publication for the race detector.
func RaceAcquire() { raceClock.Add(0) }
