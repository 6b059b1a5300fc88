//go:build race

package roce

import "sync/atomic"

// The race detector does not see the ordering a packet gives (the kernel
// carries it), so in -race builds every send releases, and every receive
// acquires, one process-wide atomic: a peer in the same process is then
// ordered after what the sender did before sending.
var raceClock atomic.Uint64

func raceRelease() { raceClock.Add(1) }
func raceAcquire() { raceClock.Add(0) }
