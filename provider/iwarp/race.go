//go:build race

package iwarp

import "sync/atomic"

// The race detector does not see the ordering that a TCP connection gives
// (bytes written before a write(2) are visible to the reader after its
// read(2)), so in -race builds every transmit releases, and every received
// FPDU acquires, one process-wide atomic: a peer in the same process is then
// ordered after what the sender did before posting.
var raceClock atomic.Uint64

func raceRelease() { raceClock.Add(1) }
func raceAcquire() { raceClock.Add(0) }
